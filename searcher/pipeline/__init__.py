"""The stages of one search request, in order, and the context they share.

1. ``plan.make_plan``       rewrite (optional), route, plan the backends
2. ``retrieve.retrieve``    search the query, or its perspectives at once
3. ``rank.rank``            fuse, merge near-duplicates, score
4. ``correct.correct``      corrective re-search when the evidence is weak (optional)
5. ``select.select``        domain filters, LLM snippet ranking, pick_ids, the cap
6. ``read.read``            fetch and extract the chosen pages (full mode)
7. ``assemble``             the items and the context pack
8. ``answer.answer``        a cited answer and its self-check (optional)

Each stage takes the ``RequestContext`` (``context.py``), the long-lived ``Parts``
(``parts.py``) and the data of the stages before it, and returns data. A research loop can
call ``retrieve.searcher_for``, ``rank.rank_results`` and ``read.read_urls`` on their own,
in a context ``derived`` from its own (``context.py``).
"""
