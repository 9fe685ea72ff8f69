"""toolbus A2A bridge: agent services as A2A agents, A2A agents as tool services (docs/a2a.md)."""
