"""``GET /v1/models`` and ``GET /v1/models/{id}``: the loaded models first, then the store;
``status`` says ``loaded``, ``loading`` or ``unloaded`` per model.

Runs on the event loop; reading manifests happens on a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from engine.models import ModelError, ModelSpec
from engine.server.model_info import ModelDirectory, ModelInfo
from engine.server.openai import protocol
from engine.server.pipeline.models import not_found
from engine.store import StoreError
from engine.supervisor.states import load_state


class ModelCards:
    """Model cards in OpenAI's shape, with Sidelight's extra fields (status, context...)."""

    def __init__(self, models: ModelDirectory) -> None:
        self._models = models

    async def all(self) -> list[dict[str, Any]]:
        """The loaded model first, then every stored model, as ``/v1/models`` entries."""
        return await asyncio.to_thread(self._cards)  # reads every manifest

    async def one(self, name: str) -> dict[str, Any]:
        cards = await self.all()
        wanted = self._models.canonical(name)
        for card in cards:
            if card["id"].lower() == wanted.lower():  # a remote's ids keep their capitals
                return card
        raise not_found(name)

    def _cards(self) -> list[dict[str, Any]]:
        models = self._models
        status = models.status()
        cards: dict[str, dict[str, Any]] = {}
        running = [(m.id, m.state, m.context_length) for m in models.engine.loaded()]
        if status.model is not None and status.model.id not in {mid for mid, _, _ in running}:
            running.insert(0, (status.model.id, status.state, status.context_length))
        for model_id, state, context_length in running:
            spec = models.seen.get(model_id) or (
                status.model if status.model and status.model.id == model_id else None
            )
            if spec is None and models.store is not None:
                with contextlib.suppress(StoreError, ModelError):
                    spec = models.store.spec(model_id)
            if spec is None:
                continue
            context = context_length or spec.context_length
            served = {"context_length": context, "max_model_len": context}  # vLLM's name too
            cards[spec.id] = {
                **_spec_card(spec),
                **served,
                "status": load_state(state),
                "state": state,
            }
        for spec in models.seen.values():
            cards.setdefault(spec.id, {**_spec_card(spec), "status": "unloaded"})
        for stored in models.store.list() if models.store else []:
            if stored.id not in cards:
                info = stored.describe()
                cards[stored.id] = {
                    "created": _mtime(stored.path),
                    "context_length": info.get("context_length"),
                    "format": info.get("format"),
                    "task": info.get("task", "chat"),
                    "capabilities": info.get("capabilities"),
                    "status": "unloaded",
                    **({"vision": True} if info.get("task") == "vision" else {}),
                }
        local = [protocol.model_card(mid, **card) for mid, card in cards.items()]
        remote = models.remotes.infos() if models.remotes is not None else []
        return local + [_remote_card(info) for info in remote]


def _mtime(path: Path) -> int:
    try:
        return int(path.stat().st_mtime)
    except OSError:
        return protocol.now()


def _remote_card(info: ModelInfo) -> dict[str, Any]:
    """A remote server's model (``MODEL@NAME``): ``owned_by`` and ``remote`` name it."""
    card = protocol.model_card(
        info.id,
        int(info.modified_at.timestamp()),
        context_length=info.context_length,
        format="remote",
        task=info.task,
        status="remote",
        remote=info.remote,
    )
    card["owned_by"] = f"remote:{info.remote}"
    return card


def _spec_card(spec: ModelSpec) -> dict[str, Any]:
    return {
        "created": _mtime(spec.path),
        "context_length": spec.context_length,
        "format": spec.format,
        "task": spec.task,
        **({"vision": True} if spec.task == "vision" else {}),
    }
