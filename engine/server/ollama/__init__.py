"""The Ollama-compatible API (``/api``) on Sidelight's port, for clients that speak only Ollama."""
