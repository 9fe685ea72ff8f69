"""toolbus kafka adapter."""
