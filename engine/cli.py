"""The ``sidelight`` command: ``serve``, ``devices``, the model store's ``pull``, ``convert``,
``import``, ``list`` and ``rm`` (see ``engine.store.cli``), ``agents``, ``remote`` (see
``engine.remotes.cli``), ``export-ovms`` (``engine.ovms_export``), and (no subcommand) the
tray app.

This module is the CLI's own output; everything else logs.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from engine.agents_cli import add_agents_command, run_agents_command
from engine.remotes.cli import add_remote_command, run_remote_command
from engine.settings import Settings, SettingsError, load_settings
from engine.store.cli import COMMANDS as STORE_COMMANDS
from engine.store.cli import add_commands as add_store_commands
from engine.store.cli import run as run_store_command

if TYPE_CHECKING:  # the runtime imports OpenVINO: loaded only when serving
    from engine.runtime import DefaultModel
    from engine.supervisor.states import EngineStatus

logger = logging.getLogger("sidelight")

LOAD_TIMEOUT_SECONDS = 600.0  # how long start-up waits for the first model before giving up


def main(argv: list[str] | None = None) -> int:
    # A frozen (PyInstaller) build re-runs this entry point for the engine worker process.
    multiprocessing.freeze_support()
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"sidelight: {exc}", file=sys.stderr)
        return 2
    command = args.command or "app"
    if command in STORE_COMMANDS:
        return run_store_command(settings, args)
    if command == "devices":
        return _devices(args)
    settings_commands = {
        "agents": run_agents_command,
        "remote": run_remote_command,
        "export-ovms": _export_ovms,
    }
    if command in settings_commands:
        return settings_commands[command](settings, args)
    if command == "app":
        return _app(settings)
    return _serve(settings, args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sidelight", description="Local LLMs on Intel CPUs, GPUs and NPUs via OpenVINO."
    )
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="serve a model over an OpenAI-compatible API (headless)")
    serve.add_argument(
        "--model",
        help="a model id from the store (sidelight list), an OpenVINO IR folder or a .gguf "
        "file (default: the built-in demo model)",
    )
    serve.add_argument("--device", help="OpenVINO device: CPU, GPU, GPU.1, NPU (default: CPU)")
    serve.add_argument("--host", help="address to bind (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default: 11680; 0 picks a free one)")
    serve.add_argument("--api-key", help="require this key as 'Authorization: Bearer KEY'")
    serve.add_argument(
        "--backend",
        choices=["auto", "batched", "serial"],
        default="auto",
        help="batched = continuous batching (CPU/GPU), serial = one request at a "
        "time (NPU); auto picks by device",
    )
    devices = sub.add_parser("devices", help="list OpenVINO devices")
    devices.add_argument("--json", action="store_true", help="print JSON")
    add_store_commands(sub)
    add_agents_command(sub)
    add_remote_command(sub)
    export = sub.add_parser(
        "export-ovms", help="write an OpenVINO Model Server repository for a model (a cluster)"
    )
    export.add_argument("model", help="a model id from the store, or an OpenVINO IR folder")
    export.add_argument("dir", type=Path, help="the repository folder (created; may hold others)")
    export.add_argument("--name", help="the model's name in OVMS (default: its id)")
    export.add_argument("--device", help="OVMS's device: CPU, GPU, NPU (default: Sidelight's)")
    return parser


def _export_ovms(settings: Settings, args: argparse.Namespace) -> int:
    from engine.models import ModelError
    from engine.ovms_export import (
        OVMS_VERSION,
        ExportError,
        ServingOptions,
        export_ovms,
        spec_for_export,
    )
    from engine.store import ModelStore

    options = ServingOptions(
        device=args.device or settings.device,
        kv_cache_gb=settings.kv_cache_gb,
        kv_cache_precision=settings.cpu.kv_cache_precision,
        npu_max_prompt_len=settings.npu_max_prompt_len,
    )
    try:
        spec = spec_for_export(ModelStore.from_settings(settings).resolve(args.model))
        done = export_ovms(spec, args.dir, options, args.name)
    except (ModelError, ExportError) as exc:
        print(f"sidelight: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"sidelight: cannot write {args.dir}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    how = "hard-linked" if done.linked else "copied"
    print(f"{done.task} model {done.name} {how} into {done.model_dir} (OVMS {OVMS_VERSION})")
    print(f"config: {done.config}\nKubernetes: {done.manifest}\nrun it:\n  {done.docker_run}")
    print(f"then: sidelight remote add NAME http://HOST:8000   (its models: {done.name}@NAME)")
    return 0


def _devices(args: argparse.Namespace) -> int:
    from engine.devices import discover_devices

    devices = discover_devices()
    if args.json:
        print(json.dumps([d.to_dict() for d in devices], indent=2))
    else:
        for device in devices:
            print(device.label)
    return 0


def _app(settings: Settings) -> int:
    """The tray app when the GUI is installed and there is a screen; otherwise serve headless."""
    if not _has_display():
        print(
            "sidelight: no display here (DISPLAY/WAYLAND_DISPLAY unset); serving headless",
            file=sys.stderr,
        )
        return _serve(settings, _parser().parse_args(["serve"]))
    from desktop.platform_libs import gui_installed, xcb_problem  # Qt-free, always shipped

    if not gui_installed():
        print("sidelight: the desktop app is not installed; serving headless", file=sys.stderr)
        return _serve(settings, _parser().parse_args(["serve"]))
    # Before Qt loads: without its system libraries it aborts after a screenful of text.
    problem = xcb_problem()
    if problem is not None:
        print(f"sidelight: {problem}", file=sys.stderr)
        return 1
    try:
        from desktop.app import run as run_desktop
    except ImportError as exc:  # Qt is installed; a system library it links against is not
        print(f"sidelight: Qt cannot load: {exc}", file=sys.stderr)
        return 1
    return int(run_desktop(settings))


def _has_display() -> bool:
    """Whether Qt can open a window: always on Windows/macOS, with X11/Wayland on Linux."""
    if not sys.platform.startswith("linux") or os.environ.get("QT_QPA_PLATFORM"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _wait_until_loaded(
    default: DefaultModel, stop: threading.Event, timeout: float
) -> EngineStatus:
    """The engine's status once the start-up model is ready or failed, ``timeout`` passed, or
    ``stop`` was set (SIGINT/SIGTERM during the self-tune or the load ends the wait at once).
    """
    from engine.supervisor.states import ERROR, READY

    deadline = time.monotonic() + timeout
    status = default.status()
    while status.state not in (READY, ERROR) and not stop.is_set():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        status = default.wait_for({READY, ERROR}, timeout=min(0.5, remaining))
    return status


def _stop_on_signals() -> threading.Event:
    """An event SIGINT and SIGTERM set (the main thread then shuts the server down)."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    return stop


def _serve(settings: Settings, args: argparse.Namespace) -> int:
    from engine.logs import setup_logging
    from engine.models import ModelError, spec_from_path
    from engine.resources import demo_model_path
    from engine.runtime import Runtime, finish_tune
    from engine.server.runner import PortInUseError
    from engine.store import ModelStore
    from engine.store.errors import disk_error
    from engine.supervisor.states import READY

    settings = settings.with_overrides(
        host=args.host, port=args.port, api_key=args.api_key, device=args.device
    )
    try:
        settings.validate()
        settings.paths.ensure()
        spec = (
            ModelStore.from_settings(settings).resolve(args.model)
            if args.model
            else spec_from_path(demo_model_path())
        )
    except (SettingsError, ModelError) as exc:
        print(f"sidelight: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a folder Sidelight needs cannot be created or read
        remedy = "point SIDELIGHT_HOME at a writable folder"
        print(f"sidelight: {disk_error(exc, 'preparing to serve', None, remedy)}", file=sys.stderr)
        return 2
    log_file = setup_logging(settings.paths.log_dir, settings.log_level)
    runtime = Runtime(settings, backend=args.backend)  # one worker per loaded model
    runtime.chores.move_store()  # headless: the store moves before anything is served
    if spec.is_demo:
        logger.warning(
            "serving the built-in demo model: a tiny model for trying Sidelight out, "
            "not for real answers"
        )

    stop = _stop_on_signals()

    runtime.start()
    tuner = runtime.chores.load_at_start(spec, settings.device, stop)
    try:
        runtime.start_server()
    except (PortInUseError, RuntimeError, OSError) as exc:
        stop.set()
        finish_tune(tuner)
        runtime.close()
        message = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        print(f"sidelight: {message}", file=sys.stderr)
        return 1
    logger.info(
        "listening on %s (log: %s); loading %s on %s",
        runtime.bind_url,
        log_file,
        spec.id,
        settings.device,
    )
    status = _wait_until_loaded(runtime.default, stop, LOAD_TIMEOUT_SECONDS)
    failed = status.state != READY and not stop.is_set()  # a signal while loading is no failure
    if status.state == READY:
        logger.info(
            "ready: %s on %s. OpenAI base URL: %s/v1", spec.id, status.device, runtime.server_url
        )
    elif failed:
        logger.error("%s", status.message or "the model did not load")
        stop.set()
    while not stop.wait(0.5):
        pass
    logger.info("shutting down")
    runtime.stop_server()
    finish_tune(tuner)
    runtime.close()
    return 1 if failed else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
