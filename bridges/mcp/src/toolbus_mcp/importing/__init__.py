"""MCP servers imported as tool services on the bus (``toolbus serve mcp``).

``toolsets`` runs a toolset (a connection to its server, kept up, its tools
served and announced), ``addresses`` says where a server is and what secrets it
is given, ``translation`` turns MCP tools and results into descriptors and
observations.
"""
