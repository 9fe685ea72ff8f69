"""Live configuration, pure: stored items, layers over the files, settings, announcements."""
