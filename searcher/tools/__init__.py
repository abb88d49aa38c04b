"""The tool layer: the MCP server, the tool schemas shared with OpenAI tool calling, and
the page tool."""
