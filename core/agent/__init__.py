"""The DevOps Architect agent: its system prompt, an OpenAI-compatible client, evaluation and a local server."""
