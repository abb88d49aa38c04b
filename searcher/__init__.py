"""searcher: a self-hosted Search API for LLMs and agents."""

__version__ = "0.1.0"
