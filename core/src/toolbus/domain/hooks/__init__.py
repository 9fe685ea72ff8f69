"""Configured hooks: their configuration, and injecting results into a chat history."""
