"""OpenAI's Responses API (``/v1/responses``), the dialect Codex CLI speaks: a translator into
the request pipeline, a renderer of its events, and a store for ``previous_response_id``."""
