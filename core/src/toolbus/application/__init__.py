"""The application layer: async, and talks to the outside through ports only."""
