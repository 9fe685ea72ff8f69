"""AsyncAPI 3.0 documents of a deployment: its tool services' queues, messages and broker."""
