"""toolbus LLM adapter: the Anthropic Messages API through the official ``anthropic`` SDK."""
