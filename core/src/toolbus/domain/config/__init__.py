"""Tool-service descriptors: models, loading, validation, the registry, tool lists for LLMs."""
