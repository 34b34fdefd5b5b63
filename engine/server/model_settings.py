"""``GET``/``POST /api/sidelight/models/{id}/settings``: a stored model's own settings.

The same settings ``sidelight model-settings`` and the model manager edit
(:mod:`engine.model_prefs`): load preferences (context length, keep-alive, device) and the
sampling a request that leaves a field out gets. ``POST`` takes a JSON object of changes
(``null`` clears a field) and answers the settings as saved; every bad field is a 400 naming
it, and nothing is written then. Sampling changes apply to the next request; the load
preferences to the model's next load. Register before the Ollama routes (their last route
catches every other ``/api`` path). The handlers' file work runs on a thread.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from engine.echo import clip
from engine.model_prefs import ModelPrefs, PrefsError
from engine.server.errors import APIError
from engine.server.json_body import read_json_object
from engine.store.errors import InvalidModelId, ModelNotFound
from engine.store.store import ModelStore

SETTINGS_PATH = "/api/sidelight/models/{model_id:str}/settings"


def model_settings_routes(store: ModelStore | None) -> list[Route]:
    async def show(request: Request) -> JSONResponse:
        model_id = request.path_params["model_id"]
        prefs = await asyncio.to_thread(_call, store, model_id, None)
        return JSONResponse(_body(model_id, prefs))

    async def change(request: Request) -> JSONResponse:
        model_id = request.path_params["model_id"]
        changes = read_json_object(await request.body())
        prefs = await asyncio.to_thread(_call, store, model_id, changes)
        return JSONResponse(_body(model_id, prefs))

    return [
        Route(SETTINGS_PATH, show, methods=["GET"]),
        Route(SETTINGS_PATH, change, methods=["POST"]),
    ]


def _call(store: ModelStore | None, model_id: str, changes: dict[str, Any] | None) -> ModelPrefs:
    """Read (``changes`` None) or change a model's settings; refusals as APIErrors."""
    if store is None:
        raise APIError(404, "this server has no model store", param="model", code="model_not_found")
    try:
        if changes is None:
            return store.prefs(model_id)
        return store.set_prefs(model_id, changes)
    except (InvalidModelId, ModelNotFound) as exc:
        raise APIError(
            404,
            f"no model '{clip(model_id)}' in the model store",
            param="model",
            code="model_not_found",
        ) from exc
    except PrefsError as exc:
        code = "invalid_value" if changes is not None else "model_damaged"
        status = 400 if changes is not None else 422
        raise APIError(status, str(exc), param=exc.field, code=code) from exc


def _body(model_id: str, prefs: ModelPrefs) -> dict[str, Any]:
    return {"object": "model.settings", "model": model_id, "settings": prefs.to_dict()}
