"""Tool-service descriptors: models, loading and validation, the registry, tool lists for LLM APIs."""
