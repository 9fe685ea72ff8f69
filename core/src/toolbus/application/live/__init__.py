"""Live configuration: config service, store, client, live registry, announcements, companions."""
