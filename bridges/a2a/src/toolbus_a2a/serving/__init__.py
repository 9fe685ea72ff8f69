"""Agent services on the bus as A2A agents: ``toolbus a2a serve``."""
