"""Remote A2A agents as tool services: ``toolbus serve a2a URL``."""
