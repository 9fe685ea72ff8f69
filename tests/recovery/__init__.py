"""Brokers that go away and come back under running services and clients."""
