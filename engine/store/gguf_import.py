"""Add a local ``.gguf`` file to the store, optionally with an OpenVINO IR saved beside it.

GenAI loads GGUF files directly (llama, qwen2, qwen3; see ``engine.models``), so importing
is: refuse what GenAI cannot load (architecture, quantization) before copying anything, then
hard-link (same disk) or copy the file into a staging folder and commit it.

With ``save_ir`` GenAI converts the file once, in a child process (a large GGUF can exhaust
memory; the app must survive that), and writes ``openvino_model.xml``/``.bin`` plus the
tokenizer IRs next to the copy; the stored model is then that IR folder, which loads faster.

Threading: :func:`import_gguf` blocks; cancel it with the ``cancel`` event from any thread.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import threading
from pathlib import Path

from engine.models import ModelSpec, spec_from_path
from engine.store.errors import Cancelled, StoreError, disk_errors
from engine.store.facts import folder_size, gguf_facts, ir_facts
from engine.store.ids import id_from_name, normalize_id
from engine.store.manifest import Manifest, Source, now_iso
from engine.store.progress import ByteMeter, Progress, ProgressCallback, check_cancel
from engine.store.store import ModelStore, StoredModel

logger = logging.getLogger(__name__)

_COPY_CHUNK = 4 * 1024 * 1024


def import_gguf(
    store: ModelStore,
    file: Path,
    *,
    model_id: str | None = None,
    save_ir: bool = False,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
) -> StoredModel:
    """Copy (or link) ``file`` into the store as a new model.

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
            _link_or_copy(spec.path, copied, progress, cancel)
            if save_ir:
                _save_ir(copied, progress, cancel)
                _write_config(staging, spec)
            manifest = _manifest(target, staging, copied, spec, save_ir)
            stored = store.commit(staging, manifest)
        except BaseException:
            store.discard_partial(target)
            raise
    return stored


def _link_or_copy(
    source: Path, dest: Path, progress: ProgressCallback | None, cancel: threading.Event | None
) -> None:
    try:
        os.link(source, dest)
        return
    except OSError:
        pass  # another disk, or links not allowed: copy
    meter = ByteMeter(source.stat().st_size, progress, cancel)
    meter.item = source.name
    with source.open("rb") as src, dest.open("wb") as out:
        while chunk := src.read(_COPY_CHUNK):
            out.write(chunk)
            meter.advance(len(chunk))


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
