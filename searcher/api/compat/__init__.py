"""Drop-in endpoints for clients that speak another search API (SearXNG, Open WebUI,
Tavily): one router module per contract, each translating to and from ``SearchService``."""
