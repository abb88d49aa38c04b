"""``make demo``: a small local web served as a SearXNG instance, and searcher pointed at
it, so that simple mode, full mode, research and MCP can be tried with no internet."""
