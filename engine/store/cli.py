"""The store's subcommands: ``pull``, ``convert``, ``import``, ``list``, ``rm``.

This module is command-line output (``print``); the jobs themselves log. A job runs on a
worker thread while the main thread waits, so Ctrl+C (or SIGTERM) only sets the job's cancel
event and the job stops cleanly: a download keeps its partial files for resuming, a
conversion kills its child and removes what it wrote.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, TextIO, TypeVar

from engine.model_prefs import PREF_KEYS, PrefsError, parse_value
from engine.models import ModelError, verify_files
from engine.settings import Settings
from engine.store.catalog import Catalog, MachineInfo
from engine.store.errors import Cancelled, StoreError, disk_error
from engine.store.progress import Progress
from engine.store.store import ModelStore, StoredModel

COMMANDS = frozenset({"pull", "convert", "import", "list", "rm", "settings"})
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_CANCELLED = 130

T = TypeVar("T")


def add_commands(sub: Any) -> None:
    """Register the store subcommands on the ``sidelight`` parser's subparsers."""
    pull = sub.add_parser("pull", help="download a model from the catalog or the hub")
    pull.add_argument("model", help="a catalog id (see: sidelight list --catalog) or org/repo")
    pull.add_argument("--revision", default="main", help="branch, tag or commit (default: main)")
    pull.add_argument("--id", dest="model_id", help="the id to store it under")

    convert = sub.add_parser("convert", help="convert a transformers model to OpenVINO IR")
    convert.add_argument("source", help="a hub repo (org/name) or a local model folder")
    convert.add_argument("--weights", choices=["int4", "int8", "fp16"], default="int4")
    convert.add_argument(
        "--npu", action="store_true", help="NPU recipe: symmetric, channel-wise, ratio 1.0"
    )
    convert.add_argument("--revision", default="main", help="hub revision (default: main)")
    convert.add_argument("--id", dest="model_id", help="the id to store it under")
    convert.add_argument(
        "--force", action="store_true", help="convert even if it looks too big for this machine"
    )

    imp = sub.add_parser("import", help="add a local .gguf file or OpenVINO IR folder to the store")
    imp.add_argument(
        "file",
        type=Path,
        help="a .gguf file (llama, qwen2, qwen3) or an OpenVINO IR folder (a copy is stored)",
    )
    imp.add_argument("--id", dest="model_id", help="the id to store it under")
    imp.add_argument(
        "--save-ir", action="store_true", help="also save an OpenVINO IR for faster loads"
    )

    lst = sub.add_parser("list", help="list the models in the store")
    lst.add_argument("--json", action="store_true", help="print JSON")
    lst.add_argument(
        "--catalog", action="store_true", help="list the curated catalog and what fits here"
    )

    rm = sub.add_parser("rm", help="delete a model from the store")
    rm.add_argument("model", help="the model id")

    prefs = sub.add_parser(
        "settings",
        help="show or change a stored model's own settings (context, keep-alive, sampling)",
        description="Show or change a model's settings: " + ", ".join(PREF_KEYS) + ". "
        "KEY=VALUE sets one, KEY= clears it; requests that leave a sampling field out use "
        "the model's; load settings apply from its next load.",
    )
    prefs.add_argument("model", help="the model id")
    prefs.add_argument("changes", nargs="*", metavar="KEY=VALUE", help="a setting to change")
    prefs.add_argument("--reset", action="store_true", help="clear every setting")
    prefs.add_argument("--json", action="store_true", help="print JSON")


def run(settings: Settings, args: argparse.Namespace) -> int:
    """Run one store subcommand; returns the exit code."""
    store = ModelStore.from_settings(settings)
    commands: dict[str, Callable[[ModelStore, Settings, argparse.Namespace], int]] = {
        "list": _list,
        "rm": _rm,
        "pull": _pull,
        "convert": _convert,
        "import": _import,
        "settings": _settings,
    }
    try:
        return commands[args.command](store, settings, args)
    except Cancelled:
        print("sidelight: cancelled", file=sys.stderr)
        return EXIT_CANCELLED
    except (StoreError, ModelError, PrefsError) as exc:
        print(f"sidelight: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, ValueError) else EXIT_FAILED
    except OSError as exc:  # a disk failure no job named: still one sentence
        print(f"sidelight: {disk_error(exc, _doing(args), store.root)}", file=sys.stderr)
        return EXIT_FAILED


def _doing(args: argparse.Namespace) -> str:
    """``importing model.gguf``: what a command was doing, for an error message."""
    what = {"pull": "downloading", "convert": "converting", "import": "importing"}
    target = {"pull": "model", "convert": "source", "import": "file", "rm": "model"}
    if args.command == "list":
        return "listing the models"
    if args.command in ("rm", "settings"):
        return f"{'removing' if args.command == 'rm' else 'saving the settings of'} {args.model}"
    subject = getattr(args, target[args.command])
    return f"{what[args.command]} {subject.name if isinstance(subject, Path) else subject}"


def _rm(store: ModelStore, settings: Settings, args: argparse.Namespace) -> int:
    store.remove(args.model)
    print(f"removed {args.model}")
    return 0


def _settings(store: ModelStore, settings: Settings, args: argparse.Namespace) -> int:
    changes: dict[str, Any] = dict.fromkeys(PREF_KEYS) if args.reset else {}
    for item in args.changes:
        key, equals, text = item.partition("=")
        if not equals:
            raise PrefsError(f"{item!r}: expected KEY=VALUE (KEY= clears it)")
        changes[key.strip()] = parse_value(text)
    prefs = store.set_prefs(args.model, changes) if changes else store.prefs(args.model)
    if args.json:
        print(json.dumps({"model": args.model, "settings": prefs.to_dict()}, indent=2))
        return 0
    values = prefs.to_dict()
    if not values:
        print(f"{args.model}: Sidelight's defaults (nothing set)")
    for key, value in values.items():
        print(f"{key} = {value}")
    return 0


def _list(store: ModelStore, settings: Settings, args: argparse.Namespace) -> int:
    if args.catalog:
        return _catalog(args)
    models, damaged = store.scan()
    problems = _unservable(models)
    if args.json:
        rows = [m.describe() | _damaged_field(problems.get(m.id)) for m in models]
        rows += [d.describe() for d in damaged]
        print(json.dumps(sorted(rows, key=lambda r: str(r["id"])), indent=2))
        return 0
    if not models and not damaged:
        print("no models yet; try: sidelight list --catalog, then sidelight pull ID")
        return 0
    print(f"{'ID':40} {'FORMAT':6} {'WEIGHTS':8} {'SIZE':>9}  DEVICES")
    for model in models:
        m = model.manifest
        if m.id in problems:
            print(f"{m.id:40} damaged: {problems[m.id]}")
            continue
        devices = ",".join(m.devices)
        print(f"{m.id:40} {m.format:6} {m.weights or '?':8} {_size(m.size_bytes):>9}  {devices}")
    for entry in damaged:
        print(f"{entry.id:40} damaged: {entry.reason}")
    if problems or damaged:
        print("remove a damaged model with: sidelight rm ID")
    return 0


def _unservable(models: list[StoredModel]) -> dict[str, str]:
    """Why each stored model whose files no longer load cannot be served (a GGUF cut short,
    an IR file damaged: the checks a load runs, :func:`engine.models.verify_files`)."""
    problems = {}
    for model in models:
        try:
            verify_files(model.spec())
        except ModelError as exc:
            problems[model.id] = str(exc)
    return problems


def _damaged_field(reason: str | None) -> dict[str, str]:
    return {"damaged": reason} if reason else {}


def _catalog(args: argparse.Namespace) -> int:
    catalog = Catalog.load()
    machine = MachineInfo.detect()
    fits = catalog.assess_all(machine)
    recommended = catalog.recommend(machine)
    if args.json:
        print(
            json.dumps(
                {
                    "recommended": recommended.id if recommended else None,
                    "approximate": catalog.approximate,
                    "models": [f.to_dict() for f in fits],
                },
                indent=2,
            )
        )
        return 0
    marks = {"fits": "ok", "tight": "tight", "too-big": "too big", "no-device": "no device"}
    print(f"{'ID':40} {'DOWNLOAD':>9} {'MEMORY':>7}  {'FIT':9} {'SOURCE':8} {'TRIED':5} DEVICES")
    for fit in fits:
        e = fit.entry
        star = " *" if recommended and e.id == recommended.id else ""
        print(
            f"{e.id:40} {e.download_gb:>7.2f}GB {e.memory_gb:>5.1f}GB  "
            f"{marks[fit.status]:9} {e.source:8} {'yes' if e.verified else 'no':5} "
            f"{','.join(e.devices)}{star}"
        )
    if recommended:
        print(f"\n* recommended to start with: sidelight pull {recommended.id}")
    print("sizes are approximate; downloads check the exact sizes the hub publishes")
    print("SOURCE convert: no pre-converted build; `sidelight pull ID` prints the convert command")
    untried = sum(1 for f in fits if not f.entry.verified)
    if untried:
        print(
            f"TRIED no: {untried} of {len(fits)} entries were never downloaded and served where "
            "the catalog was written (see --json: verified_note)"
        )
    return 0


def _pull(store: ModelStore, settings: Settings, args: argparse.Namespace) -> int:
    from engine.store.download import PullRequest, pull

    entry = Catalog.load().find(args.model)
    repo = entry.repo if entry else args.model
    if entry is None and "/" not in repo:
        print(
            f"sidelight: '{args.model}' is not in the catalog (see: sidelight list --catalog) "
            "and not a hub repo (org/name)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if entry is not None and entry.needs_conversion:
        print(
            f"sidelight: '{entry.id}' has no pre-converted OpenVINO build; convert it from "
            f"{entry.repo}: {entry.convert_command()}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    request = PullRequest(repo=repo, revision=args.revision, model_id=args.model_id, catalog=entry)
    if store.contains(request.target_id):
        print(f"{request.target_id} is already in the store")
        return 0
    model = _run_with_progress(
        f"pulling {repo}",
        lambda progress, cancel: pull(
            store, request, token=settings.hf_token, progress=progress, cancel=cancel
        ),
    )
    print(f"added {model.id} ({_size(model.manifest.size_bytes)})")
    return 0


def _convert(store: ModelStore, settings: Settings, args: argparse.Namespace) -> int:
    from engine.store.convert import ConvertRequest, convert

    request = ConvertRequest(
        source=args.source,
        weights=args.weights,
        npu=args.npu,
        model_id=args.model_id,
        revision=args.revision,
        force=args.force,
    )
    model = _run_with_progress(
        f"converting {args.source}",
        lambda progress, cancel: convert(
            store,
            request,
            python=settings.convert_python,
            token=settings.hf_token,
            progress=progress,
            cancel=cancel,
        ),
    )
    print(f"added {model.id} ({model.manifest.weights}, {_size(model.manifest.size_bytes)})")
    return 0


def _import(store: ModelStore, settings: Settings, args: argparse.Namespace) -> int:
    from engine.store.gguf_import import import_gguf
    from engine.store.ir_import import import_ir_folder

    if args.file.is_dir():
        folder = _run_with_progress(
            f"importing {args.file.name}",
            lambda progress, cancel: import_ir_folder(
                store, args.file, model_id=args.model_id, progress=progress, cancel=cancel
            ),
        )
        print(f"added {folder.id} (ir, {_size(folder.manifest.size_bytes)})")
        return 0
    model = _run_with_progress(
        f"importing {args.file.name}",
        lambda progress, cancel: import_gguf(
            store,
            args.file,
            model_id=args.model_id,
            save_ir=args.save_ir,
            progress=progress,
            cancel=cancel,
        ),
    )
    print(f"added {model.id} ({model.manifest.format}, {_size(model.manifest.size_bytes)})")
    return 0


def _run_with_progress(title: str, job: Callable[[ProgressPrinter, threading.Event], T]) -> T:
    """``run_job`` with a :class:`ProgressPrinter` titled ``title`` on stderr."""
    printer = ProgressPrinter(sys.stderr, title)
    result = run_job(lambda cancel: job(printer, cancel))
    printer.finish()
    return result


def run_job(job: Callable[[threading.Event], T]) -> T:
    """Run ``job(cancel)`` on a worker thread; Ctrl+C and SIGTERM set ``cancel``.

    Signal handlers can only be installed from the main thread, which is why the job moves.
    """
    cancel = threading.Event()
    result: list[T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(job(cancel))
        except BaseException as exc:
            error.append(exc)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        cancel.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    worker = threading.Thread(target=target, name="sidelight-job", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.2)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if error:
        raise error[0]
    return result[0]


class ProgressPrinter:
    """Progress on stderr: a redrawn bar on a terminal, a plain line every few seconds otherwise.

    Threading: called from the job's thread only.
    """

    def __init__(self, stream: TextIO, title: str, *, interval: float = 5.0) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._interval = interval
        self._last_line = 0.0
        self._last_phase = ""
        self._drawn = False
        print(title, file=stream, flush=True)

    def __call__(self, progress: Progress) -> None:
        if progress.phase == "warning":
            self._line(f"warning: {progress.message}")
            return
        if self._tty:
            self._draw(progress)
            return
        now = time.monotonic()
        if progress.phase != self._last_phase or now - self._last_line >= self._interval:
            self._last_phase = progress.phase
            self._last_line = now
            self._line(_describe(progress))

    def finish(self) -> None:
        if self._drawn:
            self._stream.write("\n")
            self._stream.flush()
            self._drawn = False

    def _draw(self, progress: Progress) -> None:
        width = 24
        fraction = progress.fraction
        bar = ""
        if fraction is not None:
            filled = int(fraction * width)
            bar = "[" + "#" * filled + "-" * (width - filled) + "] "
        text = f"\r{bar}{_describe(progress)}"
        self._stream.write(text[:120].ljust(100))
        self._stream.flush()
        self._drawn = True

    def _line(self, text: str) -> None:
        self.finish()
        print(text, file=self._stream, flush=True)


def _describe(progress: Progress) -> str:
    parts = [progress.phase]
    if progress.total:
        fraction = progress.fraction or 0.0
        parts.append(f"{fraction:4.0%} {_size(progress.done)}/{_size(progress.total)}")
    elif progress.done:
        parts.append(_size(progress.done))
    if progress.speed > 0:
        parts.append(f"{_size(int(progress.speed))}/s")
    if progress.eta_seconds is not None and progress.phase == "downloading":
        parts.append(f"ETA {progress.eta_seconds:.0f}s")
    if progress.item:
        parts.append(progress.item)
    if progress.message:
        parts.append(progress.message)
    return "  ".join(parts)


def _size(size: int) -> str:
    for unit, scale in (("GB", 1024**3), ("MB", 1024**2), ("KB", 1024)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"
