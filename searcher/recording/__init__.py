"""Recorded searches: a request's tape (what it got from backends, pages and the LLM),
kept in the state store, run again offline (``searcher replay``) and frozen into
evaluation sets (``searcher freeze``)."""
