"""The agent loop's pure parts: model turns, what to do with them, agent requests and events."""
