"""Errors the model store raises; every message is meant to be shown to a person as is."""

from __future__ import annotations


class StoreError(Exception):
    """A store operation failed; the message says why and, where possible, what to do."""


class InvalidModelId(StoreError, ValueError):
    """An id that could name something outside the models folder (or is malformed)."""


class ModelNotFound(StoreError, LookupError):
    """No complete model with this id is in the store."""


class Cancelled(StoreError):
    """The job was cancelled; whatever it wrote is kept for resuming or was removed."""


class NotEnoughSpace(StoreError, OSError):
    """The disk cannot hold what a job is about to write; nothing was written."""


class HubError(StoreError):
    """The model hub refused or could not be reached; the message names the cause."""


class ModelDamaged(StoreError):
    """A model folder whose manifest or files cannot be trusted; ``sidelight rm`` removes it."""

    def __init__(self, model_id: str, reason: str) -> None:
        super().__init__(
            f"model '{model_id}' is damaged: {reason} (remove it with: sidelight rm {model_id})"
        )
        self.model_id = model_id
        self.reason = reason
