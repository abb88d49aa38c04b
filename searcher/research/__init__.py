"""Research mode: a multi-step loop over the search pipeline's stages (plan sub-questions,
search them at once, read the best pages, judge coverage, refine, verify, report), run as
a job whose typed events are stored and streamed.

``presets.py`` the budgets; ``planning.py`` sub-questions (LLM, templates, bridge
entities); ``evidence.py`` passages, coverage and conflicts; ``report.py`` the cited
report; ``loop.py`` the loop itself; ``jobs.py`` jobs, their events and their runner.
"""
