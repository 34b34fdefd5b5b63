"""Set up a development environment and run Sidelight or its tests: the README's two commands.

    python3 packaging/dev.py run [ARGS...]   # create .venv if needed, then start Sidelight
    python3 packaging/dev.py test [PYTEST ARGS...]   # ruff, mypy, the tests, the packages

Only the standard library is used here, so it works on a fresh machine with Python 3.10+.
The virtual environment lives in ``.venv`` next to this repository and is refreshed whenever
``pyproject.toml`` changes. ``test`` also prepares ``.venv-convert``: Sidelight with its
``convert`` extra (torch, optimum-intel), which the conversion tests run as a child
interpreter. It is separate because that stack pins an older huggingface_hub than the app
uses, and the app itself never needs torch.

After the full test suite (``test`` without pytest arguments) on Linux, ``test`` also checks
the packages, about two minutes: it builds the PyInstaller bundle (``build.py``), smoke-tests
it (``smoke.py``), builds the ``.deb``, installs, uses and purges it (``deb.py``, as root),
and compiles the Windows installer script (``nsis.py``). Steps that need root to install
their tools or the package are skipped, with a message, when not run as root.
``SIDELIGHT_SKIP_PACKAGING=1`` skips them all.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import venv
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
STAMP = VENV / ".sidelight-installed"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
CONVERT_VENV = ROOT / ".venv-convert"
APP_EXTRAS = "dev,gui,package"  # the tray app (PySide6), the test tools and PyInstaller
# The system libraries Qt's X11 plugin needs (a superset of what the offscreen GUI tests
# need) and their Debian packages: one list, for this script, deb.py and the app's own check.
PLATFORM_LIBS = ROOT / "desktop" / "platform_libs.py"


def _python(venv_dir: Path = VENV) -> Path:
    bin_dir = venv_dir / ("Scripts" if os.name == "nt" else "bin")
    return bin_dir / ("python.exe" if os.name == "nt" else "python")


def say(message: str) -> None:
    sys.stderr.write(f"[dev] {message}\n")
    sys.stderr.flush()


def version() -> str:
    """Sidelight's version, from ``pyproject.toml``."""
    match = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    if match is None:
        sys.exit("no version in pyproject.toml")
    return match.group(1)


def apt_install(
    packages: Sequence[str], log: Callable[[str], None], message: str | None = None
) -> bool:
    """Install Debian packages with apt-get, refreshing the package lists once if that fails.

    Returns False, having done nothing, when there is no apt-get or this is not root; the
    caller then says what to install by hand. ``message`` (default "installing PACKAGES") is
    logged before installing.
    """
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        return False
    log(message or f"installing {' '.join(packages)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [apt, "install", "-y", "-qq", *packages]
    if subprocess.run(install, env=env, check=False).returncode != 0:
        subprocess.run([apt, "update", "-qq"], env=env, check=True)
        subprocess.run(install, env=env, check=True)
    return True


def _ensure_env(extras: str, venv_dir: Path = VENV) -> None:
    if sys.version_info < (3, 10):  # noqa: UP036 - this script runs before any check
        sys.exit("Sidelight needs Python 3.10 or newer")
    python = _python(venv_dir)
    if not python.exists():
        say(f"creating virtual environment in {venv_dir}")
        venv.EnvBuilder(with_pip=True).create(venv_dir)
    stamp = venv_dir / STAMP.name
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + extras.encode()).hexdigest()
    if stamp.exists() and stamp.read_text() == digest:
        return
    say(f"installing Sidelight and its dependencies ({extras}) into {venv_dir.name}")
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check"]
    subprocess.run([*pip, "--quiet", "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "--quiet", "-e", f"{ROOT}[{extras}]"], check=True)
    if "convert" in extras:
        # optimum-intel lists torchvision; text models never import it, and it fails to
        # import beside the pinned CPU torch.
        subprocess.run(
            [str(python), "-m", "pip", "uninstall", "--quiet", "--yes", "torchvision"],
            check=True,
        )
    stamp.write_text(digest)


def _platform_libs() -> Any:
    """``desktop/platform_libs.py``, read by path: it is standard-library only, and this
    script runs before any environment has Sidelight installed."""
    spec = importlib.util.spec_from_file_location("_sidelight_platform_libs", PLATFORM_LIBS)
    if spec is None or spec.loader is None:
        sys.exit(f"[dev] cannot read {PLATFORM_LIBS}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def qt_system_libraries() -> dict[str, str]:
    """Library file name -> Debian/Ubuntu package, for everything Qt's X11 plugin loads and
    Qt Multimedia's PulseAudio client."""
    module = _platform_libs()
    return {**module.QT_SYSTEM_LIBRARIES, **module.QT_AUDIO_LIBRARIES}


def audio_test_packages() -> dict[str, str]:
    """Command -> Debian package, for the sound server the dictation tests run."""
    return dict(_platform_libs().AUDIO_TEST_PACKAGES)


def ensure_audio_test_tools() -> None:
    """Install PulseAudio and its tools (Linux, as root) for the dictation tests; without
    them those tests are skipped, and this says so."""
    if not sys.platform.startswith("linux"):
        return
    needed = audio_test_packages()
    missing = sorted({pkg for tool, pkg in needed.items() if shutil.which(tool) is None})
    if not missing:
        return
    if not apt_install(
        missing, say, f"installing a sound server for the dictation tests: {' '.join(missing)}"
    ):
        say(
            f"{' '.join(missing)} not installed: the dictation and Read aloud tests will be skipped"
        )


def loadable(library: str) -> bool:
    """Whether the dynamic loader finds ``library`` (a file name such as libGL.so.1)."""
    try:
        ctypes.CDLL(library)
    except OSError:
        return False
    return True


def ensure_qt_libs(log: Callable[[str], None] = say) -> list[str]:
    """Install the system libraries Qt needs with apt-get (as root) when any is missing.

    ``run`` needs them for the X11 plugin, the GUI tests for Qt itself (offscreen) and the
    smoke test for the bundle's X11 plugin under Xvfb. Returns the Debian packages still
    missing (not root, or no apt-get); the caller says what to install.
    """
    if not sys.platform.startswith("linux"):
        return []
    needed = qt_system_libraries()
    missing = sorted({pkg for lib, pkg in needed.items() if not loadable(lib)})
    if missing and apt_install(
        missing, log, f"installing system libraries Qt needs: {' '.join(missing)}"
    ):
        return []
    return missing


def _require_qt_libs() -> None:
    missing = ensure_qt_libs()
    if missing:
        sys.exit(
            f"[dev] Qt (the tray app and its tests) needs these system libraries: "
            f"{' '.join(missing)}. Install them, e.g. sudo apt-get install -y {' '.join(missing)}"
        )


def ensure_app_env() -> Path:
    """The project's ``.venv`` with Sidelight, its test tools and PyInstaller; its Python."""
    _ensure_env(APP_EXTRAS)
    return _python()


def run(args: list[str]) -> int:
    _ensure_env(APP_EXTRAS)
    _require_qt_libs()
    command = [str(BIN / "sidelight"), *args]
    if os.name != "nt":
        # Become Sidelight, so a SIGTERM to this process reaches it instead of orphaning it.
        os.execv(command[0], command)  # noqa: S606 - the venv's own executable
    return subprocess.call(command)


# Node.js clients the tests drive, each installed with ``npm ci`` in its own folder: the
# folder, what it is, and the packages whose install script must be run here (npm 11 skips
# install scripts it was not told to allow; Claude Code's puts its native binary in place).
JS_CLIENTS = (
    ("tests/js", "the openai npm package", ()),
    ("tests/agents/claude", "Claude Code", ("@anthropic-ai/claude-code",)),
    ("tests/agents/codex", "Codex CLI (@openai/codex)", ()),
)


def _ensure_js_clients() -> None:
    """``npm ci`` in each of :data:`JS_CLIENTS` when Node.js is present."""
    npm, node = shutil.which("npm"), shutil.which("node")
    if (npm is None or node is None) and apt_install(
        ["nodejs", "npm"], say, "installing Node.js and npm (the JS clients and agent CLIs)"
    ):
        npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        names = " and ".join(what for _, what, _ in JS_CLIENTS)
        say(f"node not found: the tests of {names} will be skipped")
        return
    for folder, what, scripted in JS_CLIENTS:
        js_dir = ROOT / folder
        lock = js_dir / "package-lock.json"
        stamp = js_dir / "node_modules" / ".package-lock.json"
        if stamp.is_file() and stamp.stat().st_mtime >= lock.stat().st_mtime:
            continue
        say(f"installing {what} for tests (npm ci in {folder})")
        subprocess.check_call([npm, "ci", "--no-audit", "--no-fund"], cwd=js_dir)
        for package in scripted:
            _run_install_script(js_dir / "node_modules" / package)


def _run_install_script(package_dir: Path) -> None:
    """Run a package's ``postinstall`` (a ``node SCRIPT`` command) as npm would have."""
    scripts = json.loads((package_dir / "package.json").read_text(encoding="utf-8"))["scripts"]
    command = shlex.split(scripts["postinstall"])
    found = shutil.which(command[0])
    if found is None:
        sys.exit(f"[dev] {package_dir.name}: {command[0]} not found for its install script")
    subprocess.check_call([found, *command[1:]], cwd=package_dir)


def test(args: list[str]) -> int:
    _ensure_env(APP_EXTRAS)
    _require_qt_libs()
    _ensure_env("convert", CONVERT_VENV)
    _ensure_js_clients()
    ensure_audio_test_tools()
    if shutil.which("curl") is None:  # tests run `curl -d`, as Ollama's docs do
        apt_install(["curl"], say)
    steps = [
        ("ruff", [str(BIN / "ruff"), "check", "."]),
        ("ruff format", [str(BIN / "ruff"), "format", "--check", "."]),
        ("mypy", [str(BIN / "mypy")]),
        ("pytest", [str(_python()), "-m", "pytest", *args]),
    ]
    if not args and sys.platform.startswith("linux"):
        if os.environ.get("SIDELIGHT_SKIP_PACKAGING"):
            say("packaging checks skipped (SIDELIGHT_SKIP_PACKAGING is set)")
        else:
            steps += _packaging_steps()
    for name, command in steps:
        say(f"running {name}")
        started = time.monotonic()
        code = subprocess.call(command, cwd=ROOT)
        if code != 0:
            say(f"{name} failed (exit code {code})")
            return code
        if name.startswith("package"):
            say(f"{name}: {time.monotonic() - started:.0f} s")
    say("all checks passed")
    return 0


def _packaging_steps() -> list[tuple[str, list[str]]]:
    """Bundle, smoke test, .deb cycle and installer script (see the module docstring)."""
    here = ROOT / "packaging"
    python = sys.executable
    root = os.geteuid() == 0
    steps = [
        ("package: bundle", [python, str(here / "build.py")]),
        ("package: smoke test", [python, str(here / "smoke.py")]),
    ]
    if not root and shutil.which("trayer") is None:
        say("not root and no trayer: the tray part of the smoke test is skipped")
        steps[-1][1].append("--headless-only")
    if root or shutil.which("dpkg-deb"):
        steps.append(("package: .deb", [python, str(here / "deb.py"), "build", "--fast"]))
    if root:
        steps.append(("package: .deb install", [python, str(here / "deb.py"), "check"]))
    else:
        say("not root: the .deb install check (dpkg -i) is skipped")
    if root or shutil.which("makensis"):
        steps.append(("package: Windows installer script", [python, str(here / "nsis.py")]))
    else:
        say("no makensis: the Windows installer script check is skipped")
    return steps


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in {"run", "test"}:
        sys.stderr.write(__doc__ or "")
        return 2
    command, rest = sys.argv[1], sys.argv[2:]
    return run(rest) if command == "run" else test(rest)


if __name__ == "__main__":
    sys.exit(main())
