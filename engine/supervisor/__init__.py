"""The engine's supervision, split out of :mod:`engine.client` (issue 11).

``states``: typed engine states, the status snapshot and request errors. The process handle,
restart policy and model scheduler follow; :class:`engine.client.EngineClient` stays the
facade the server and the desktop use.
"""
