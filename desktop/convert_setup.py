"""Installing the conversion tools from the app (issue 28, defect 7).

``sidelight convert`` runs optimum-intel in a child interpreter (``convert_python``; see
:mod:`engine.store.convert`) so that torch never enters the app's own environment. The README
set-up has no such interpreter, and *Convert a Hugging Face model…* was only greyed out. This
module makes one: a virtual environment in the data folder (:func:`env_dir`) with the
``convert`` extra's packages and the app's own OpenVINO pins (what ``packaging/dev.py``
gives ``.venv-convert``), without torchvision, which text models never import and which
fails beside the pinned CPU torch. When that cannot work (no network, a frozen build
without a Python of its own), :class:`InstallFailed` says exactly what to run instead.

Qt-free. Threading: :func:`install` blocks for minutes (it downloads about a gigabyte);
run it off the GUI thread. ``report`` is called on that thread, once per line pip prints.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import shlex
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from engine.settings import Paths

logger = logging.getLogger(__name__)

ENV_NAME = "convert-env"
# The convert extra as pyproject.toml lists it, for an app installed without its metadata.
_FALLBACK_EXTRA = ("optimum-intel>=2.2", "nncf>=3.4", "torch==2.13.0")
_TAIL_LINES = 5  # pip's last lines kept for the failure message
CANCELLED = "cancelled"  # the last line of a step the person cancelled


class InstallFailed(Exception):
    """The tools could not be installed; the message says why and what to run instead."""


class InstallCancelled(InstallFailed):
    """The person cancelled the installation (the step running was killed)."""


def env_dir(paths: Paths) -> Path:
    """Where the app keeps its conversion environment."""
    return paths.data_dir / ENV_NAME


def env_python(env: Path) -> Path:
    """The environment's interpreter."""
    return env / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def requirements() -> list[str]:
    """The packages conversion needs: the ``convert`` extra and the app's OpenVINO pins (the
    converted model's tokenizer must match the runtime's), from the installed app's
    metadata."""
    try:
        declared = importlib.metadata.requires("sidelight") or []
    except importlib.metadata.PackageNotFoundError:
        declared = []
    extra: list[str] = []
    pins: list[str] = []
    for line in declared:
        requirement, _, marker = line.partition(";")
        requirement, marker = requirement.strip(), marker.replace("'", '"')
        if 'extra == "convert"' in marker:
            extra.append(requirement)
        elif not marker.strip() and requirement.startswith(("openvino==", "openvino-tokenizers")):
            pins.append(requirement)
    return [*(extra or _FALLBACK_EXTRA), *pins]


def commands(env: Path, wanted: Sequence[str]) -> list[list[str]]:
    """What :func:`install` runs, in order (a frozen app has no Python to make a venv with:
    the commands then name the system's ``python3``)."""
    base = "python3" if getattr(sys, "frozen", False) else sys.executable
    python = str(env_python(env))
    return [
        [base, "-m", "venv", str(env)],
        [python, "-m", "pip", "install", "--disable-pip-version-check", *wanted],
        [python, "-m", "pip", "uninstall", "--yes", "torchvision"],
    ]


def manual_text(env: Path, wanted: Sequence[str]) -> str:
    """The commands to type, for a person installing the tools by hand."""
    return " && ".join(shlex.join(command) for command in commands(env, wanted))


def install(
    env: Path,
    report: Callable[[str], None],
    *,
    wanted: Sequence[str] | None = None,
    pip_options: Sequence[str] = (),
    cancel: threading.Event | None = None,
) -> Path:
    """Make the conversion environment ``env`` and install ``wanted`` (default:
    :func:`requirements`) into it; return its interpreter.

    Raises:
        InstallFailed: a step failed or was cancelled (the message gives pip's last lines and
            the commands to run by hand).
    """
    wanted = list(requirements() if wanted is None else wanted)
    steps = commands(env, wanted)
    steps[1][4:4] = list(pip_options)  # after "install"
    manual = manual_text(env, wanted)
    if getattr(sys, "frozen", False):
        raise InstallFailed(
            "This build has no Python of its own to install the conversion tools with. "
            f"Run: {manual}"
        )
    for number, command in enumerate(steps):
        if cancel is not None and cancel.is_set():
            raise InstallCancelled("Installing the conversion tools was cancelled.")
        report(f"Step {number + 1} of {len(steps)}: {shlex.join(command[:5])}…")
        tail = _run(command, report, cancel)
        if tail is None:
            continue
        if number == len(steps) - 1:
            continue  # torchvision was not there to remove: nothing to undo
        if tail and tail[-1] == CANCELLED:
            raise InstallCancelled(
                f"Installing the conversion tools was cancelled; {env} may hold a partial "
                "environment, which the next installation reuses."
            )
        reason = tail[-1] if tail else "no output"
        raise InstallFailed(
            f"Installing the conversion tools failed ({reason}). Without a network, or to "
            f"install them yourself, run: {manual}"
        )
    logger.info("conversion tools installed in %s", env)
    return env_python(env)


def _run(
    command: list[str], report: Callable[[str], None], cancel: threading.Event | None
) -> list[str] | None:
    """Run one step, reporting each line; None when it succeeded, else its last lines."""
    tail: list[str] = []
    try:
        child = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    except OSError as exc:
        return [str(exc)]
    done = threading.Event()
    if cancel is not None:
        # A watcher kills the step as soon as cancel is set, not at pip's next line (pip
        # prints nothing for a minute while it downloads torch without a terminal).
        threading.Thread(
            target=_kill_on_cancel, args=(child, cancel, done), name="pip-cancel", daemon=True
        ).start()
    try:
        with child:
            assert child.stdout is not None
            for line in child.stdout:
                text = line.strip()
                if text:
                    report(text)
                    tail = [*tail, text][-_TAIL_LINES:]
            code = child.wait()
    finally:
        done.set()
    if cancel is not None and cancel.is_set():
        return [*tail, CANCELLED]
    return None if code == 0 else tail or [f"exit code {code}"]


def _kill_on_cancel(
    child: subprocess.Popen[str], cancel: threading.Event, done: threading.Event
) -> None:
    """Kill ``child`` once ``cancel`` is set, unless the step ended first (its own thread)."""
    while not done.is_set():
        if cancel.wait(0.2):
            if child.poll() is None:
                child.kill()
            return
