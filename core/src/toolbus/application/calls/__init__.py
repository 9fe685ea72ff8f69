"""Making and serving tool calls: client, service host, tool services, calling by name, metrics."""
