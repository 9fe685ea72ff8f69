"""toolbus LLM adapter: OpenAI-compatible Chat Completions through the official ``openai`` SDK."""
