"""toolbus: agent tools behind message brokers."""
