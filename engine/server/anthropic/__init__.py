"""Anthropic's Messages API (``/v1/messages``), as Claude Code and the ``anthropic`` SDKs call it.

A translator (:mod:`.translate`) from a validated request (:mod:`.protocol`) to the one
:class:`engine.server.pipeline.GenerateRequest`, and a renderer (:mod:`.render`) of the
pipeline's events as Anthropic's named server-sent events or one message. The routes
(:mod:`.routes`) answer every error in Anthropic's shape.
"""
