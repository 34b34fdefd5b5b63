"""LM Studio's native REST API v1 (``/api/v1``): chat (stateful, streamed or whole), the
model list, load and unload; a translator and a renderer on the shared pipeline."""
