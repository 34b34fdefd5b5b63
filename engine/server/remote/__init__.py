"""Serving remote servers' models as ``MODEL@NAME`` through the one pipeline.

``wire`` (a GenerateRequest as an OpenAI body; SSE chunks as reply events), ``backend``
(one remote model: the streamed request, its failures as APIErrors naming the remote) and
``catalog`` (the registry watched, each remote's ``/v1/models`` refreshed in the
background). No dialect module imports this package: the pipeline reaches a remote through
its ``RemoteModels`` protocol, the listings through ``ModelDirectory``.
"""

from engine.server.remote.backend import RemoteModel, RemoteStream, Timeouts
from engine.server.remote.catalog import REMOTE_FORMAT, RemoteCatalog

__all__ = ["REMOTE_FORMAT", "RemoteCatalog", "RemoteModel", "RemoteStream", "Timeouts"]
