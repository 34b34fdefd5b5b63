"""Download a pre-converted model repo into the store: resumable, verifiable, atomic.

Files are fetched with ``huggingface_hub`` (its repo listing, its per-file metadata call and
its ranged ``http_get``) into ``.partial/<id>/`` in the models folder:

* each file grows in ``.incomplete/<path>`` and is moved to its final name only after its size
  and hash match what the hub publishes (sha256 for LFS files, the git blob id otherwise);
* a cancelled, crashed or killed download leaves those files behind, and the next pull of the
  same repo continues each one with an HTTP ``Range`` request; if the repo moved to a new
  commit meanwhile, the old partial files are dropped;
* free disk space is checked before the first byte is written;
* only when every file is verified does :meth:`ModelStore.commit` write the manifest and
  rename the folder into the store, so a model is listed whole or not at all.

``hf_hub_download`` is not used for the files themselves: it writes to a per-process temporary
name and deletes it on failure, so it cannot resume after a kill; and its ``http_get`` reads
10 MB per chunk, too coarse for a prompt cancel. The files are streamed here instead, through
huggingface_hub's HTTP session with its headers and error mapping.

Threading: :func:`pull` blocks; run it on a worker thread and cancel it with the ``cancel``
event from any thread. Progress callbacks arrive on the worker thread.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.models import GENERATIVE_TASKS, ModelError, read_json, spec_from_path
from engine.store.catalog import CatalogEntry
from engine.store.errors import (
    Cancelled,
    NotEnoughSpace,
    StoreError,
    disk_errors,
    is_disk_error,
)
from engine.store.facts import folder_size, ir_facts
from engine.store.hub import RemoteFile, RepoListing, hub_error, list_repo, transport_errors
from engine.store.ids import id_from_name, normalize_id
from engine.store.manifest import Manifest, Source, now_iso
from engine.store.progress import ByteMeter, Progress, ProgressCallback, check_cancel
from engine.store.store import ModelStore, StoredModel

logger = logging.getLogger(__name__)

STATE_FILE = ".sidelight-download.json"
INCOMPLETE = ".incomplete"
# Leave this much free after a download so the system (and the model's compile cache) can work.
DISK_MARGIN = 256 * 1024 * 1024
_HASH_CHUNK = 1024 * 1024
_STREAM_CHUNK = 64 * 1024
_RETRIES = 3

DiskFree = Callable[[Path], int]


def _disk_free(path: Path) -> int:
    return shutil.disk_usage(path).free


@dataclass(frozen=True)
class PullRequest:
    """What to pull: a repo (optionally from the catalog) and the id it gets in the store."""

    repo: str
    revision: str = "main"
    model_id: str | None = None
    catalog: CatalogEntry | None = None

    @property
    def target_id(self) -> str:
        if self.model_id:
            return normalize_id(self.model_id)
        if self.catalog is not None:
            return self.catalog.id
        return id_from_name(self.repo)


def pull(
    store: ModelStore,
    request: PullRequest,
    *,
    endpoint: str | None = None,
    token: str | None = None,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    disk_free: DiskFree = _disk_free,
) -> StoredModel:
    """Download ``request.repo`` into the store (or finish an earlier, interrupted pull).

    Returns the stored model; if the id is already in the store, returns it untouched.

    Raises:
        HubError: the hub refused or cannot be reached (message says which).
        NotEnoughSpace: the disk cannot hold the rest of the download, or filled up during it.
        Cancelled: ``cancel`` was set; partial files are kept for resuming.
        StoreError: a file failed its integrity check, or the repo is not a servable model.
    """
    model_id = request.target_id
    if store.contains(model_id):
        return store.get(model_id)
    with disk_errors(f"downloading {request.repo}", store.root):
        return _pull(store, request, model_id, endpoint, token, progress, cancel, disk_free)


def _pull(
    store: ModelStore,
    request: PullRequest,
    model_id: str,
    endpoint: str | None,
    token: str | None,
    progress: ProgressCallback | None,
    cancel: threading.Event | None,
    disk_free: DiskFree,
) -> StoredModel:
    with store.lock(model_id):
        if store.contains(model_id):  # another process finished it while we waited
            return store.get(model_id)
        _report(progress, Progress(phase="listing", item=request.repo))
        listing = list_repo(request.repo, request.revision, endpoint=endpoint, token=token)
        _check_servable(listing)
        staging = store.partial_folder(model_id)
        meter = _fetch_all(
            staging, listing, request.repo, store.root, endpoint, token, progress, cancel, disk_free
        )
        shutil.rmtree(staging / INCOMPLETE, ignore_errors=True)
        (staging / STATE_FILE).unlink(missing_ok=True)
        manifest = _manifest(model_id, staging, listing, request)
        stored = store.commit(staging, manifest)
        _report(progress, Progress(phase="done", done=meter.done, total=meter.total))
        return stored


def _fetch_all(
    staging: Path,
    listing: RepoListing,
    what: str,
    store_root: Path,
    endpoint: str | None,
    token: str | None,
    progress: ProgressCallback | None,
    cancel: threading.Event | None,
    disk_free: DiskFree,
) -> ByteMeter:
    """Fetch every file of ``listing`` into ``staging`` and verify each (size, sha256).

    Resumes what an earlier attempt left in ``staging``; first checks the disk can hold the
    rest. Shared by :func:`pull` (a repo) and :func:`pull_gguf` (one file of a repo).
    Returns the meter, which has reported ``verifying``.

    Raises:
        NotEnoughSpace: ``what`` needs more than is free (plus :data:`DISK_MARGIN`).
        HubError, Cancelled, StoreError: as :func:`pull`.
    """
    _prepare_staging(staging, listing)
    remaining = _remaining_bytes(staging, listing)
    free = disk_free(staging)
    if remaining + DISK_MARGIN > free:
        raise NotEnoughSpace(
            f"{what} needs {_gb(remaining)} more on disk "
            f"(plus {_gb(DISK_MARGIN)} to spare); only {_gb(free)} is free in {store_root}"
        )
    meter = ByteMeter(listing.total_size, progress, cancel, done=listing.total_size - remaining)
    for remote in listing.files:
        check_cancel(cancel)
        _fetch(staging, listing, remote, meter, endpoint=endpoint, token=token)
    meter.report("verifying")
    return meter


def _check_servable(listing: RepoListing) -> None:
    if listing.has("openvino_model.xml") and listing.has("openvino_model.bin"):
        return
    vlm = ("openvino_language_model", "openvino_vision_embeddings_model")
    if all(listing.has(f"{stem}.xml") and listing.has(f"{stem}.bin") for stem in vlm):
        return  # a vision-language export (image-text-to-text)
    if listing.has("openvino_encoder_model.xml") and listing.has("openvino_decoder_model.xml"):
        return  # a speech recogniser (Whisper): encoder and decoder
    if any(f.path.endswith(".gguf") for f in listing.files):
        raise StoreError(
            f"{listing.repo} holds GGUF files, not an OpenVINO model: download the .gguf you "
            "want and add it with: sidelight import FILE.gguf"
        )
    raise StoreError(
        f"{listing.repo} is not an OpenVINO model (no openvino_model.xml); "
        f"convert it instead with: sidelight convert {listing.repo}"
    )


def _prepare_staging(staging: Path, listing: RepoListing) -> None:
    """Start or continue a download; drop leftovers from a different commit."""
    state_path = staging / STATE_FILE
    if staging.exists():
        state = read_json(state_path)
        if state.get("repo") != listing.repo or state.get("commit") != listing.commit:
            logger.info("discarding a partial download of another revision in %s", staging)
            shutil.rmtree(staging)
        else:
            logger.info("resuming the download of %s@%s", listing.repo, listing.commit[:12])
    staging.mkdir(parents=True, exist_ok=True)
    if not state_path.exists():
        state_path.write_text(
            json.dumps({"repo": listing.repo, "commit": listing.commit, "started_at": now_iso()}),
            encoding="utf-8",
        )


def _remaining_bytes(staging: Path, listing: RepoListing) -> int:
    remaining = 0
    for remote in listing.files:
        final = staging / remote.path
        if final.is_file() and final.stat().st_size == remote.size:
            continue
        part = staging / INCOMPLETE / remote.path
        have = part.stat().st_size if part.is_file() else 0
        remaining += max(0, remote.size - have)
    return remaining


def _fetch(
    staging: Path,
    listing: RepoListing,
    remote: RemoteFile,
    meter: ByteMeter,
    *,
    endpoint: str | None,
    token: str | None,
) -> None:
    """Download (or finish) one file, verify it, and move it to its final name."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    final = staging / remote.path
    if final.is_file() and final.stat().st_size == remote.size:
        return
    part = staging / INCOMPLETE / remote.path
    part.parent.mkdir(parents=True, exist_ok=True)
    have = part.stat().st_size if part.is_file() else 0
    if have > remote.size:
        part.unlink()
        meter.done -= have
        have = 0
    meter.item = remote.path
    url = hf_hub_url(listing.repo, remote.path, revision=listing.commit, endpoint=endpoint)
    try:
        if have < remote.size:
            meta = get_hf_file_metadata(url, token=token, endpoint=endpoint)
            if meta.size is not None and meta.size != remote.size:
                raise StoreError(
                    f"the hub lists {remote.path} as {remote.size} bytes but serves {meta.size}"
                )
            _stream(meta.location, part, have, remote.size, meter, token=token)
    except (Cancelled, StoreError):
        raise
    except Exception as exc:
        if is_disk_error(exc) and not isinstance(exc, transport_errors()):
            raise  # the disk, not the hub: pull() names it
        raise hub_error(exc, listing.repo, listing.commit) from exc
    _verify(part, remote, meter)
    final.parent.mkdir(parents=True, exist_ok=True)
    part.replace(final)


def _stream(
    url: str, part: Path, have: int, size: int, meter: ByteMeter, *, token: str | None
) -> None:
    """Append the rest of one file to ``part`` with ranged GETs, retrying dropped connections.

    huggingface_hub's session, headers and error mapping are used; the body is read here in
    small chunks (its own ``http_get`` buffers 10 MB per chunk, which would make cancelling
    slow and leave nothing on disk to resume from on small files).
    """
    from huggingface_hub import constants
    from huggingface_hub.utils import (  # type: ignore[attr-defined]
        build_hf_headers,
        get_session,
        hf_raise_for_status,
    )

    failures = 0
    while have < size:
        headers = build_hf_headers(token=token)
        if have:
            headers["Range"] = f"bytes={have}-"
        try:
            with get_session().stream(
                "GET", url, headers=headers, timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT
            ) as response:
                hf_raise_for_status(response)
                if have and response.status_code == 200:  # the server ignored Range
                    meter.done -= have
                    have = 0
                with part.open("ab" if have else "wb") as fh:
                    for chunk in response.iter_bytes(_STREAM_CHUNK):
                        meter.advance(len(chunk))  # raises Cancelled before the write
                        fh.write(chunk)
                        have += len(chunk)
                        if have > size:
                            break
        except transport_errors():
            failures += 1
            if failures > _RETRIES:
                raise
            logger.warning("connection lost at byte %d of %s; resuming", have, part.name)
            time.sleep(min(2.0 * failures, 5.0))
            have = part.stat().st_size if part.is_file() else 0
            continue
        if have < size:
            failures += 1
            if failures > _RETRIES:
                raise StoreError(f"the hub sent {have} of {size} bytes of {part.name}")


def _verify(part: Path, remote: RemoteFile, meter: ByteMeter) -> None:
    """Check size and hash; a corrupt file is deleted so the next pull fetches it again."""
    size = part.stat().st_size
    problem = None
    if size != remote.size:
        problem = f"is {size} bytes, expected {remote.size}"
    elif remote.sha256 is not None:
        digest = _hash_file(part, hashlib.sha256(), meter)
        if digest != remote.sha256:
            problem = f"has sha256 {digest}, expected {remote.sha256}"
    elif remote.git_oid is not None:
        prefix = b"blob %d\0" % size
        digest = _hash_file(part, hashlib.sha1(prefix), meter)  # noqa: S324 - git's blob id
        if digest != remote.git_oid:
            problem = f"has git blob id {digest}, expected {remote.git_oid}"
    if problem:
        part.unlink(missing_ok=True)
        meter.done -= size
        raise StoreError(
            f"{remote.path} failed its integrity check ({problem}); it was deleted and will be "
            "downloaded again on the next pull"
        )


def _hash_file(path: Path, digest: Any, meter: ByteMeter) -> str:
    meter.item = path.name
    with path.open("rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            digest.update(chunk)
    return str(digest.hexdigest())


def _manifest(model_id: str, staging: Path, listing: RepoListing, request: PullRequest) -> Manifest:
    facts = ir_facts(staging)
    if facts.task in GENERATIVE_TASKS:
        try:
            spec = spec_from_path(staging, model_id=model_id)
        except ModelError as exc:
            raise StoreError(f"{listing.repo} downloaded but is not servable: {exc}") from exc
        context, arch = spec.context_length, spec.architecture
    else:
        context, arch = None, None
    entry = request.catalog
    return Manifest(
        id=model_id,
        name=entry.name if entry else listing.repo.rsplit("/", 1)[-1],
        format="ir",
        entry=".",
        source=Source(kind="hub", repo=listing.repo, revision=listing.commit),
        size_bytes=folder_size(staging),
        weights=facts.weights or (entry.weights if entry else None),
        context_length=context or (entry.context_length if entry else None),
        architecture=arch,
        task=entry.task if entry else facts.task,
        devices=entry.devices if entry else facts.devices,
        capabilities={**(entry.capabilities if entry else {}), **facts.capabilities},
        added_at=now_iso(),
        details={**facts.details, **({"catalog_id": entry.id} if entry else {})},
    )


def _report(callback: ProgressCallback | None, progress: Progress) -> None:
    if callback is not None:
        callback(progress)


def _gb(size: int) -> str:
    return f"{size / 1024**3:.2f} GB" if size >= 1024**3 else f"{size / 1024**2:.1f} MB"


def pull_gguf(
    store: ModelStore,
    repo: str,
    filename: str,
    *,
    model_id: str | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    disk_free: DiskFree = _disk_free,
) -> StoredModel:
    """Download one ``.gguf`` file of a hub repo and import it into the store.

    The file is fetched like a repo's files (resumable in ``.partial/``, size and sha256
    checked), then added with :func:`~engine.store.gguf_import.import_gguf`, which refuses a
    file GenAI cannot load; the downloaded copy is removed once the store holds it.

    Raises:
        HubError, NotEnoughSpace, Cancelled, StoreError: as :func:`pull`.
        ModelError: the file is not a GGUF model GenAI can load.
    """
    from engine.store.gguf_import import import_gguf

    target = normalize_id(model_id) if model_id else id_from_name(Path(filename).stem)
    if store.contains(target):
        return store.get(target)
    download_id = normalize_id(f"{target}.download")
    with disk_errors(f"downloading {repo}/{filename}", store.root), store.lock(download_id):
        _report(progress, Progress(phase="listing", item=repo))
        listing = list_repo(repo, endpoint=endpoint, token=token)
        remote = next((f for f in listing.files if f.path == filename), None)
        if remote is None or not filename.lower().endswith(".gguf"):
            raise StoreError(f"{repo} has no GGUF file named {filename}")
        one = RepoListing(listing.repo, listing.commit, (remote,), listing.gated)
        staging = store.partial_folder(download_id)
        _fetch_all(staging, one, filename, store.root, endpoint, token, progress, cancel, disk_free)
        stored = import_gguf(
            store, staging / remote.path, model_id=target, progress=progress, cancel=cancel
        )
        store.discard_partial(download_id)
        return stored
