"""Add a local ``.gguf`` file to the store, optionally with an OpenVINO IR saved beside it.

GenAI loads GGUF files directly (llama, qwen2, qwen3; see ``engine.models``), so importing
is: refuse what GenAI cannot load (architecture, quantization) before copying anything, then
copy the file into a staging folder, record what the copy holds (its content hash,
:mod:`engine.store.content`) and commit it.

The file is copied, never hard-linked: a hard link is the same file under two names, so
anything that wrote the store's copy (a tool, a damaged disk, an attacker) rewrote the
person's original too, and a change to the original reached the store unseen. The copy is a
reflink where the filesystem can make one (``FICLONE`` on btrfs/XFS: instant, and shares no
bytes once either side is written), else ``os.copy_file_range`` (the kernel copies, and may
clone or copy server-side), else a plain streamed copy; each reports progress and can be
cancelled between chunks.

With ``save_ir`` GenAI converts the file once, in a child process (a large GGUF can exhaust
memory; the app must survive that), and writes ``openvino_model.xml``/``.bin`` plus the
tokenizer IRs next to the copy; the stored model is then that IR folder, which loads faster.

Threading: :func:`import_gguf` blocks; cancel it with the ``cancel`` event from any thread.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import multiprocessing
import os
import sys
import threading
from pathlib import Path
from typing import BinaryIO

from engine.gguf import GGUFError
from engine.models import ModelError, ModelSpec, spec_from_path
from engine.store.content import CONTENT, ContentRecord, record_content
from engine.store.errors import Cancelled, StoreError, disk_errors
from engine.store.facts import folder_size, gguf_facts, ir_facts
from engine.store.ids import id_from_name, normalize_id
from engine.store.manifest import Manifest, Source, now_iso
from engine.store.progress import ByteMeter, Progress, ProgressCallback, check_cancel
from engine.store.store import ModelStore, StoredModel

logger = logging.getLogger(__name__)

_COPY_CHUNK = 4 * 1024 * 1024
_RANGE_CHUNK = 64 * 1024 * 1024  # per copy_file_range call: progress and cancel between them
_FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int)
# Errors that mean "this filesystem (pair) cannot do that": fall back to the next way.
_UNSUPPORTED = {errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTTY}
_UNSUPPORTED |= {getattr(errno, "ENOTSUP", errno.EOPNOTSUPP), errno.EPERM, errno.EBADF}


def import_gguf(
    store: ModelStore,
    file: Path,
    *,
    model_id: str | None = None,
    save_ir: bool = False,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
) -> StoredModel:
    """Copy ``file`` into the store as a new model (a copy: the original is never shared).

    Raises:
        ModelError: the file is damaged, or GenAI cannot load it (the reason says which).
        StoreError: the id is taken, the disk is full or read-only, or saving the IR failed
            (the child's error is given).
        Cancelled: ``cancel`` was set; nothing is left behind.
    """
    spec = spec_from_path(file)  # refuses damaged files, architectures and types up front
    target = normalize_id(model_id) if model_id else id_from_name(file.stem)
    if store.contains(target):
        raise StoreError(f"a model '{target}' is already in the store (choose another with --id)")
    with disk_errors(f"importing {file.name}", store.root):
        stored = _import(store, spec, target, save_ir, progress, cancel)
    if progress is not None:
        progress(Progress(phase="done"))
    return stored


def _import(
    store: ModelStore,
    spec: ModelSpec,
    target: str,
    save_ir: bool,
    progress: ProgressCallback | None,
    cancel: threading.Event | None,
) -> StoredModel:
    with store.lock(target):
        store.discard_partial(target)
        staging = store.partial_folder(target)
        staging.mkdir(parents=True)
        try:
            copied = staging / spec.path.name
            copy_file(spec.path, copied, progress, cancel)
            record = _record(copied, progress, cancel)
            if save_ir:
                _save_ir(copied, progress, cancel)
                _write_config(staging, spec)
            manifest = _manifest(target, staging, copied, spec, save_ir)
            if not save_ir:  # an IR folder is loaded instead; the GGUF beside it is a source
                details = {**manifest.details, CONTENT: record.to_dict()}
                manifest = dataclasses.replace(manifest, details=details)
            stored = store.commit(staging, manifest)
        except BaseException:
            store.discard_partial(target)
            raise
    return stored


def copy_file(
    source: Path, dest: Path, progress: ProgressCallback | None, cancel: threading.Event | None
) -> str:
    """Copy ``source`` to the new file ``dest``: a reflink, else ``copy_file_range``, else a
    streamed copy (see the module docstring). Returns which way it went (for tests and the
    log): ``"reflink"``, ``"copy_file_range"`` or ``"stream"``.

    Raises:
        Cancelled: ``cancel`` was set (``dest`` is left for the caller to discard).
        OSError: reading or writing failed.
    """
    meter = ByteMeter(source.stat().st_size, progress, cancel)
    meter.item = source.name
    with source.open("rb") as src, dest.open("wb") as out:
        how = "reflink" if _reflink(src, out) else None
        if how is None and _copy_range(src, out, meter):
            how = "copy_file_range"
        if how is None:
            out.seek(0)
            out.truncate()
            src.seek(0)
            meter.done = 0
            while chunk := src.read(_COPY_CHUNK):
                out.write(chunk)
                meter.advance(len(chunk))
            how = "stream"
        out.flush()
        os.fsync(out.fileno())
    logger.info("copied %s into the store (%s)", source.name, how)
    return how


def _reflink(src: BinaryIO, out: BinaryIO) -> bool:
    """Clone ``src`` into ``out`` (Linux ``FICLONE``); False where it cannot be done."""
    if not sys.platform.startswith("linux"):
        return False
    import fcntl

    try:
        fcntl.ioctl(out.fileno(), _FICLONE, src.fileno())
    except OSError as exc:
        if exc.errno in _UNSUPPORTED:
            return False
        raise
    return True


def _copy_range(src: BinaryIO, out: BinaryIO, meter: ByteMeter) -> bool:
    """Copy with ``os.copy_file_range`` in chunks; False when it is unavailable here (the
    caller then copies from the start)."""
    copy_range = getattr(os, "copy_file_range", None)
    if copy_range is None:
        return False
    remaining = meter.total
    while remaining > 0:
        try:
            n = copy_range(src.fileno(), out.fileno(), min(_RANGE_CHUNK, remaining))
        except OSError as exc:
            if exc.errno in _UNSUPPORTED:
                return False
            raise
        if n == 0:
            break  # the source shrank meanwhile: the content record's check will refuse it
        remaining -= n
        meter.advance(n)
    return True


def _record(
    copied: Path, progress: ProgressCallback | None, cancel: threading.Event | None
) -> ContentRecord:
    """The copy's content record (hashing it whole, with progress)."""
    meter = ByteMeter(copied.stat().st_size, progress, cancel)
    meter.item, meter.phase = copied.name, "verifying"
    try:
        return record_content(copied, meter.advance)
    except GGUFError as exc:  # the source changed while it was copied
        raise ModelError(str(exc)) from exc


def _save_ir(gguf: Path, progress: ProgressCallback | None, cancel: threading.Event | None) -> None:
    """Let GenAI write the IR beside ``gguf`` in a child process we can kill."""
    if progress is not None:
        progress(Progress(phase="converting", item=gguf.name, message="saving OpenVINO IR"))
    ctx = multiprocessing.get_context("spawn")
    child = ctx.Process(target=gguf_to_ir, args=(str(gguf),), daemon=True)
    child.start()
    try:
        while child.is_alive():
            check_cancel(cancel)
            child.join(0.2)
    except Cancelled:
        child.kill()
        child.join(10)
        raise
    if child.exitcode != 0:
        error = gguf.with_suffix(".error")
        reason = error.read_text(encoding="utf-8") if error.is_file() else ""
        raise StoreError(
            f"GenAI could not convert {gguf.name} to IR (exit code {child.exitcode}): "
            f"{reason or 'the converter crashed or ran out of memory'}"
        )
    if not (gguf.parent / "openvino_model.xml").is_file():
        raise StoreError(f"GenAI did not write an IR for {gguf.name}")


def gguf_to_ir(path: str) -> None:
    """Child-process entry point: load the GGUF with GenAI, which saves the IR beside it."""
    try:
        import openvino_genai

        openvino_genai.LLMPipeline(path, "CPU", enable_save_ov_model=True)
    except Exception as exc:  # the parent reads this file for its message
        Path(path).with_suffix(".error").write_text(f"{type(exc).__name__}: {exc}", "utf-8")
        raise SystemExit(1) from exc


def _write_config(folder: Path, spec: ModelSpec) -> None:
    """Give the IR folder the context length and architecture the GGUF header declared."""
    config = folder / "config.json"
    if config.exists():
        return
    data = {"model_type": spec.architecture, "max_position_embeddings": spec.context_length}
    config.write_text(json.dumps({k: v for k, v in data.items() if v}), encoding="utf-8")


def _manifest(
    model_id: str, staging: Path, copied: Path, spec: ModelSpec, save_ir: bool
) -> Manifest:
    facts = gguf_facts(copied)
    details: dict[str, object] = {"gguf_file": copied.name}
    weights, context, devices = facts.weights, spec.context_length, facts.devices
    if save_ir:
        details["ir_saved"] = True
        weights = weights or ir_facts(staging).weights
        context = spec_from_path(staging, model_id=model_id).context_length or context
        devices = ("CPU", "GPU")
    return Manifest(
        id=model_id,
        name=copied.stem,
        format="ir" if save_ir else "gguf",
        entry="." if save_ir else copied.name,
        source=Source(kind="gguf", path=str(spec.path)),
        size_bytes=folder_size(staging),
        weights=weights,
        context_length=context,
        architecture=spec.architecture,
        devices=devices,
        capabilities=facts.capabilities,
        added_at=now_iso(),
        details=details,
    )
