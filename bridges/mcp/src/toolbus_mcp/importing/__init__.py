"""MCP servers imported as tool services on the bus (``toolbus serve mcp``)."""
