"""searcher as a chat model: ``POST /v1/chat/completions`` in OpenAI's shape.

``wire`` holds the request's boundary models, ``conversation`` reads the messages (the
questions asked, the sources already shown), ``condense`` turns a follow-up into a
standalone query, ``search_model`` and ``research_model`` are the two models, and
``render`` writes their answers as OpenAI's completion and its stream of chunks.
"""
