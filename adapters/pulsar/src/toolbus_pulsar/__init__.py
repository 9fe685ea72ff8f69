"""toolbus pulsar adapter."""
