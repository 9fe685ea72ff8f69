"""The bus's tools served to MCP clients (``toolbus mcp serve``): each caller gets a session."""
