"""Searching the model hub for OpenVINO models and GGUF repos, and sizing a result.

:func:`search_hub` asks the hub's model listing (``GET /api/models`` with ``search``,
``filter``, ``sort=downloads`` and ``limit``: the request ``HfApi.list_models`` makes) once
per kind, since the hub joins several ``filter`` values with AND. It sends that request
itself, through huggingface_hub's session, headers and error mapping, because
``list_models`` retries a refused connection five times with back-off (about 25 s): a search
box must say "cannot reach the hub" in a second, while the curated catalog keeps working.

:func:`size_result` lists the chosen repo's files with their sizes (``model_info`` with
``files_metadata``): an OpenVINO repo is downloaded whole; a GGUF repo offers its ``.gguf``
files, one of which is picked (Q4_K_M when there is one). The fit check then compares the
download with this machine's memory the way the catalog does (:func:`assess_memory`).

Threading: both calls block on the network; run them off the GUI thread.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Literal

from engine.store.catalog import GB, FitStatus, MachineInfo, assess_memory
from engine.store.errors import HubError
from engine.store.hub import RemoteFile, hub_error, list_repo, transport_errors

logger = logging.getLogger(__name__)

HubKind = Literal["openvino", "gguf"]
KINDS: tuple[HubKind, ...] = ("openvino", "gguf")
DEFAULT_LIMIT = 20
_TIMEOUT = 10.0
# A model loaded for inference needs its weights plus the KV cache, activations and the
# runtime: the catalog's own figures are about 1.3 x the download plus 1 GB.
_MEMORY_FACTOR = 1.3
_MEMORY_OVERHEAD_GB = 1.0
# The quantizations to prefer in a GGUF repo, best first (Q4_K_M: LM Studio's default).
_GGUF_PREFERENCE = ("q4_k_m", "q4_k_s", "q4_0", "q5_k_m", "q8_0")
_SPLIT = re.compile(r"-\d{5}-of-\d{5}\.gguf$", re.IGNORECASE)
UNREACHABLE = "cannot reach the model hub (no network?); the catalog still works"
NO_SEARCH_SHORT = "this hub mirror does not offer search"
NO_SEARCH = f"{NO_SEARCH_SHORT}; type a repository id (owner/name) to open it"
# A repository id as the hub spells them: owner/name, letters, digits and -_. only.
REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
# What a server without the model listing answers its URL with.
_NO_LISTING = frozenset({404, 405, 501})


class SearchUnavailable(HubError):
    """The endpoint serves repos but has no model listing (a mirror): only an id opens one."""

    def __init__(self) -> None:
        super().__init__(NO_SEARCH)


@dataclass(frozen=True)
class HubModel:
    """One search result: a repo of one kind, with the hub's popularity figures."""

    repo: str
    kind: HubKind
    downloads: int
    likes: int
    pipeline_tag: str | None
    direct: bool = False  # opened by its id on a hub without search, not found by one


@dataclass(frozen=True)
class SizedResult:
    """A result with what a download would fetch and whether it fits this machine."""

    model: HubModel
    files: tuple[RemoteFile, ...]  # what the download fetches (a GGUF: the chosen file)
    choices: tuple[RemoteFile, ...]  # a GGUF repo's loadable files (empty for OpenVINO)
    download_bytes: int
    memory_gb: float
    status: FitStatus | None  # None: the machine is not known yet
    reason: str

    @property
    def gguf_file(self) -> str | None:
        return self.files[0].path if self.model.kind == "gguf" and self.files else None


def search_hub(
    query: str,
    *,
    kinds: tuple[HubKind, ...] = KINDS,
    limit: int = DEFAULT_LIMIT,
    endpoint: str | None = None,
    token: str | None = None,
) -> list[HubModel]:
    """Repos whose id contains ``query`` (case-insensitive), most downloaded first.

    On a hub without search (a mirror: its model listing is 404) a ``query`` that is a
    repository id opens that repo directly (one result, ``direct``).

    Raises:
        SearchUnavailable: the hub has no search and ``query`` is no repository id.
        HubError: the hub cannot be reached or refused (the message says which).
    """
    try:
        return _search(query, kinds, limit, endpoint, token)
    except SearchUnavailable:
        if not REPO_ID.fullmatch(query.strip()):
            raise
        return [direct_model(query.strip(), endpoint=endpoint, token=token)]


def direct_model(repo: str, *, endpoint: str | None, token: str | None) -> HubModel:
    """``repo`` as a result, of the kind its files say (``.gguf`` files: GGUF).

    Raises:
        HubError: no such repo, or the hub cannot be reached.
    """
    try:
        listing = list_repo(repo, endpoint=endpoint, token=token)
    except HubError as exc:
        if isinstance(exc.__cause__, transport_errors()):
            raise HubError(UNREACHABLE) from exc
        raise HubError(f"{NO_SEARCH_SHORT}, and {exc}") from exc
    kind: HubKind = "gguf" if loadable_gguf(listing.files) else "openvino"
    return HubModel(repo=repo, kind=kind, downloads=0, likes=0, pipeline_tag=None, direct=True)


def _search(
    query: str, kinds: tuple[HubKind, ...], limit: int, endpoint: str | None, token: str | None
) -> list[HubModel]:
    results: list[HubModel] = []
    for kind in kinds:
        for item in _list_models(query, kind, limit, endpoint, token):
            results.append(
                HubModel(
                    repo=str(item["id"]),
                    kind=kind,
                    downloads=int(item.get("downloads") or 0),
                    likes=int(item.get("likes") or 0),
                    pipeline_tag=item.get("pipeline_tag"),
                )
            )
    results.sort(key=lambda m: m.downloads, reverse=True)
    return results[:limit]


def _list_models(
    query: str, kind: HubKind, limit: int, endpoint: str | None, token: str | None
) -> list[dict[str, Any]]:
    from huggingface_hub import constants, errors
    from huggingface_hub.utils import (  # type: ignore[attr-defined]
        build_hf_headers,
        get_session,
        hf_raise_for_status,
    )

    base = (endpoint or constants.ENDPOINT).rstrip("/")
    params: dict[str, Any] = {"filter": [kind], "sort": "downloads", "limit": limit}
    if query.strip():
        params["search"] = query.strip()
    try:
        response = get_session().get(
            f"{base}/api/models",
            params=params,
            headers=build_hf_headers(token=token),
            timeout=_TIMEOUT,
        )
        hf_raise_for_status(response)
        items = response.json()
    except transport_errors() as exc:
        raise HubError(UNREACHABLE) from exc
    except errors.HfHubHTTPError as exc:
        if exc.response is not None and exc.response.status_code in _NO_LISTING:
            raise SearchUnavailable() from exc  # not "a file listed ... is missing"
        raise hub_error(exc, f"the search for {query!r}") from exc
    except Exception as exc:
        raise hub_error(exc, f"the search for {query!r}") from exc
    if not isinstance(items, list):
        raise HubError("the hub answered the search with something that is not a list")
    return [item for item in items if isinstance(item, dict) and "id" in item]


def size_result(
    model: HubModel,
    machine: MachineInfo | None,
    *,
    gguf_file: str | None = None,
    endpoint: str | None = None,
    token: str | None = None,
) -> SizedResult:
    """List ``model``'s files and judge whether it fits ``machine``.

    ``gguf_file`` picks a GGUF repo's file (default: :func:`preferred_gguf`).

    Raises:
        HubError: the hub cannot be reached, or the repo holds nothing Sidelight can load.
    """
    try:
        listing = list_repo(model.repo, endpoint=endpoint, token=token)
    except HubError as exc:
        if isinstance(exc.__cause__, transport_errors()):
            raise HubError(UNREACHABLE) from exc
        raise
    if model.kind == "gguf":
        choices = loadable_gguf(listing.files)
        if not choices:
            raise HubError(f"{model.repo} has no single-file GGUF model to download")
        chosen = next((f for f in choices if f.path == gguf_file), None)
        return judge(model, (chosen or preferred_gguf(choices),), choices, machine)
    speech = listing.has("openvino_encoder_model.xml") and listing.has("openvino_decoder_model.xml")
    vlm = listing.has("openvino_language_model.xml")
    if not listing.has("openvino_model.xml") and not speech and not vlm:
        raise HubError(f"{model.repo} has no openvino_model.xml: it is not an OpenVINO model")
    return judge(model, listing.files, (), machine)


def choose_gguf(sized: SizedResult, filename: str, machine: MachineInfo | None) -> SizedResult:
    """The same GGUF result with another of its files picked (no network needed)."""
    chosen = next((f for f in sized.choices if f.path == filename), None)
    if chosen is None:
        raise HubError(f"{sized.model.repo} has no GGUF file named {filename}")
    return judge(sized.model, (chosen,), sized.choices, machine)


def judge(
    model: HubModel,
    files: tuple[RemoteFile, ...],
    choices: tuple[RemoteFile, ...],
    machine: MachineInfo | None,
) -> SizedResult:
    """Estimate the memory ``files`` need loaded and compare it with ``machine``."""
    size = sum(f.size for f in files)
    memory_gb = round(size / GB * _MEMORY_FACTOR + _MEMORY_OVERHEAD_GB, 1)
    status: FitStatus | None
    if machine is None:
        status, reason = None, f"needs about {memory_gb:g} GB"
    else:
        status, _, reason = assess_memory(memory_gb, ("CPU", "GPU"), machine)
    return SizedResult(model, files, choices, size, memory_gb, status, reason)


def loadable_gguf(files: tuple[RemoteFile, ...]) -> tuple[RemoteFile, ...]:
    """A repo's ``.gguf`` model files: not split parts, not vision projectors."""
    return tuple(
        f
        for f in files
        if f.path.lower().endswith(".gguf")
        and not _SPLIT.search(f.path)
        and "mmproj" not in f.path.lower()
    )


def preferred_gguf(files: tuple[RemoteFile, ...]) -> RemoteFile:
    """Q4_K_M if there is one, else the next best of :data:`_GGUF_PREFERENCE`, else the
    smallest file."""
    for quant in _GGUF_PREFERENCE:
        for remote in files:
            if quant in remote.path.lower():
                return remote
    return min(files, key=lambda f: f.size)
