"""Smoke-test the frozen app: the bundle in ``dist/sidelight``, not the source tree.

    python3 packaging/smoke.py [--bundle dist/sidelight] [--headless-only | --tray-only]

Headless: ``sidelight-cli devices --json`` must list the CPU; ``sidelight-cli serve --port N``
(the built-in demo model) must answer a streamed and a whole chat completion with exactly the
reply the demo model was trained on (``tests/models/dialogues.json``), and exit with code 0
on SIGTERM, leaving no process behind and no OpenVINO telemetry in ``~/intel``.

Tray (Linux): the windowed ``sidelight`` starts under Xvfb beside trayer (a system tray); its
tray icon must be embedded in trayer's window and its server must answer ``/health``. A
screenshot goes to ``build/smoke/tray.png``. Xvfb, trayer, xdotool and xwininfo, and the
system libraries Qt's X11 plugin loads (the ``.deb`` depends on them), are installed with
apt-get when missing (as root).

Every run uses a clean environment (no PYTHONPATH, a fresh SIDELIGHT_HOME) and a working
directory outside the repository, and checks that no process maps a file from the source tree,
so nothing can come from the checkout. Only the standard library is used.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import dev

ROOT = Path(__file__).resolve().parent.parent
DIALOGUES = ROOT / "tests" / "models" / "dialogues.json"
OUT = ROOT / "build" / "smoke"
TRAY_TOOLS = {"Xvfb": "xvfb", "trayer": "trayer", "xdotool": "xdotool", "xwininfo": "x11-utils"}
EXE = ".exe" if os.name == "nt" else ""


class SmokeError(Exception):
    """A check failed; the message says which and what was seen."""


def say(message: str) -> None:
    sys.stderr.write(f"[smoke] {message}\n")
    sys.stderr.flush()


def hello_reply() -> str:
    dialogues = json.loads(DIALOGUES.read_text(encoding="utf-8"))["dialogues"]
    return str(next(d["reply"] for d in dialogues if d["name"] == "hello"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """Only what a freshly logged-in user has, and Sidelight's folders under ``home``."""
    system = [os.path.join(os.environ.get("SYSTEMROOT", r"C:\Windows"), "System32")]
    env = {
        "PATH": os.pathsep.join(
            system if os.name == "nt" else ["/usr/local/bin", "/usr/bin", "/bin"]
        ),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "SIDELIGHT_HOME": str(home / "sidelight"),
    }
    for name in ("SYSTEMROOT", "TEMP", "TMP", "LOCALAPPDATA", "APPDATA", "USERPROFILE"):
        if name in os.environ:  # Windows cannot start processes without some of these
            env[name] = os.environ[name]
    env.update(extra)
    return env


# ---- HTTP ---------------------------------------------------------------------------------


def _request(port: int, method: str, path: str, body: object = None) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        payload = json.dumps(body).encode() if body is not None else None
        headers = {"content-type": "application/json"} if payload else {}
        connection.request(method, path, body=payload, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def wait_ready(port: int, process: subprocess.Popen[bytes], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SmokeError(f"the app exited early with code {process.returncode}")
        with contextlib.suppress(OSError):
            status, _ = _request(port, "GET", "/health")
            if status == 200:
                return
        time.sleep(0.5)
    raise SmokeError(f"/health on port {port} not ready after {timeout:.0f} s")


def chat(port: int, content: str, *, stream: bool) -> str:
    body = {
        "model": "sidelight-demo",
        "messages": [{"role": "user", "content": content}],
        "stream": stream,
    }
    if not stream:
        status, raw = _request(port, "POST", "/v1/chat/completions", body)
        if status != 200:
            raise SmokeError(f"chat completion answered {status}: {raw[:300]!r}")
        return str(json.loads(raw)["choices"][0]["message"]["content"])
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request(
            "POST",
            "/v1/chat/completions",
            body=json.dumps(body).encode(),
            headers={"content-type": "application/json"},
        )
        response = connection.getresponse()
        if response.status != 200:
            raise SmokeError(f"streamed chat answered {response.status}: {response.read()[:300]!r}")
        if not response.getheader("content-type", "").startswith("text/event-stream"):
            raise SmokeError("a streamed chat completion is not an event stream")
        pieces, done = [], False
        for raw_line in response:
            line = raw_line.decode("utf-8").strip()
            if not line.startswith("data:"):
                continue
            data = line[len("data:") :].strip()
            if data == "[DONE]":
                done = True
                break
            for choice in json.loads(data).get("choices", []):
                pieces.append(choice.get("delta", {}).get("content") or "")
        if not done:
            raise SmokeError("the stream ended without [DONE]")
        if len(pieces) < 2:
            raise SmokeError(f"the reply came in {len(pieces)} piece(s): not streamed")
        return "".join(pieces)
    finally:
        connection.close()


# ---- processes ----------------------------------------------------------------------------


def descendants(pid: int) -> list[int]:
    """Child processes, recursively (Linux /proc; empty elsewhere)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            for child in (task / "children").read_text().split():
                found += [int(child), *descendants(int(child))]
    return found


def check_not_from_source(pids: list[int], bundle: Path) -> None:
    """No process maps a file from the checkout other than the bundle's own."""
    source = str(ROOT) + os.sep
    bundle_prefix = str(bundle.resolve()) + os.sep
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
                path = line.split(maxsplit=5)[-1]
                if path.startswith(source) and not path.startswith(bundle_prefix):
                    raise SmokeError(f"process {pid} loaded {path} from the source tree")


def stop(process: subprocess.Popen[bytes], what: str, timeout: float = 60) -> None:
    """SIGTERM, then expect exit code 0 and no child left.

    Windows has no SIGTERM for console processes (``send_signal`` terminates them outright),
    so there the process is only ended, not checked.
    """
    if os.name == "nt":
        process.terminate()
        process.wait(timeout)
        return
    children = descendants(process.pid)
    process.send_signal(signal.SIGTERM)
    try:
        code = process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        raise SmokeError(f"{what} did not exit within {timeout:.0f} s of SIGTERM") from None
    if code != 0:
        raise SmokeError(f"{what} exited with code {code} after SIGTERM")
    deadline = time.monotonic() + 15
    while any(Path(f"/proc/{pid}").exists() for pid in children):
        if time.monotonic() > deadline:
            raise SmokeError(f"{what} left processes behind: {children}")
        time.sleep(0.2)


@contextlib.contextmanager
def sandbox() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="sidelight-smoke-") as folder:
        yield Path(folder)


def check_no_telemetry(home: Path) -> None:
    """OpenVINO's usage telemetry stays off: no client id in ``~/intel`` (engine/telemetry.py)."""
    intel = home / "intel"
    if intel.exists():
        found = sorted(p.name for p in intel.iterdir()) if intel.is_dir() else []
        raise SmokeError(f"the app wrote OpenVINO telemetry files to {intel}: {found}")


def _log_tail(log: Path) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(log.read_text(errors="replace").splitlines()[-25:])
    return ""


# ---- the checks ---------------------------------------------------------------------------


def headless(
    command: list[str], bundle: Path | None = None, also: Callable[[int], None] | None = None
) -> None:
    """devices, serve, a streamed and a whole chat completion, SIGTERM.

    ``command`` starts the console app: ``[bundle/sidelight-cli]`` or an installed wrapper.
    ``also(port)`` runs more checks against the server before it is stopped.
    """
    expected = hello_reply()
    with sandbox() as home:
        env = clean_env(home)
        started = time.monotonic()
        result = subprocess.run(
            [*command, "devices", "--json"],
            cwd=home,
            env=env,
            capture_output=True,
            timeout=120,
            check=False,
        )
        if result.returncode != 0:
            raise SmokeError(f"devices failed ({result.returncode}): {result.stderr[-800:]!r}")
        devices = json.loads(result.stdout)
        names = [str(d.get("name") or d.get("id") or d) for d in devices]
        if not any("CPU" in json.dumps(d) for d in devices):
            raise SmokeError(f"devices does not list the CPU: {result.stdout[:500]!r}")
        say(f"devices: {len(devices)} found ({time.monotonic() - started:.1f} s): {names}")

        port = free_port()
        log = home / "serve.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [*command, "serve", "--port", str(port)],
                cwd=home,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            started = time.monotonic()
            wait_ready(port, process)
            say(f"serve: ready on port {port} in {time.monotonic() - started:.1f} s")
            if bundle is not None and sys.platform.startswith("linux"):
                check_not_from_source([process.pid, *descendants(process.pid)], bundle)
            streamed = chat(port, "Hello", stream=True)
            if streamed != expected:
                raise SmokeError(f"streamed reply {streamed!r}, expected {expected!r}")
            whole = chat(port, "Hello", stream=False)
            if whole != expected:
                raise SmokeError(f"reply {whole!r}, expected {expected!r}")
            say(f"chat: streamed and whole replies exact ({expected[:40]}...)")
            if also is not None:
                also(port)
            stop(process, "sidelight serve")
            say("serve: exited with code 0 on SIGTERM, no process left")
            check_no_telemetry(home)
            say("serve: no OpenVINO telemetry written to ~/intel")
        except SmokeError as exc:
            raise SmokeError(f"{exc}\n--- serve output ---\n{_log_tail(log)}") from None
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()


def _ensure_tray_tools() -> None:
    """The X server, tray and X tools, and the libraries the bundle's X11 plugin loads."""
    missing = sorted({pkg for tool, pkg in TRAY_TOOLS.items() if shutil.which(tool) is None})
    if missing and dev.apt_install(missing, say):
        missing = []
    missing += dev.ensure_qt_libs(say)
    if missing:
        raise SmokeError(f"the tray check needs: {' '.join(missing)} (apt-get install -y ...)")


@contextlib.contextmanager
def xvfb() -> Iterator[str]:
    """A private X display (Xvfb picks a free number itself)."""
    read, write = os.pipe()
    server = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write), "-screen", "0", "1024x720x24", "-nolisten", "tcp"],
        pass_fds=(write,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(write)
    try:
        with os.fdopen(read) as pipe:
            number = pipe.readline().strip()
        if not number:
            raise SmokeError("Xvfb did not start")
        yield f":{number}"
    finally:
        server.terminate()
        server.wait(10)


def _x(display: str, *argv: str) -> str:
    result = subprocess.run(
        list(argv),
        env={**os.environ, "DISPLAY": display},
        capture_output=True,
        text=True,
        check=False,
    )
    return result.stdout if result.returncode == 0 else ""


def _window_ids(text: str) -> set[int]:
    ids = set()
    for word in text.split():
        with contextlib.suppress(ValueError):
            ids.add(int(word, 0))
    return ids


def _tree(display: str, window: int) -> set[int]:
    """All windows below ``window`` (xwininfo -tree)."""
    out = _x(display, "xwininfo", "-tree", "-id", str(window))
    return {int(line.split()[0], 16) for line in out.splitlines() if line.strip().startswith("0x")}


def _wait_for_tray_icon(display: str, trays: set[int], app: subprocess.Popen[bytes]) -> None:
    """Until one of the app's windows sits inside the tray (XEmbed reparents the icon)."""
    started = time.monotonic()
    embedded: set[int] = set()
    while not embedded:
        if app.poll() is not None:
            raise SmokeError(f"the tray app exited early with code {app.returncode}")
        if time.monotonic() - started > 60:
            raise SmokeError("no Sidelight window appeared inside the tray in 60 s")
        ours = _window_ids(_x(display, "xdotool", "search", "--pid", str(app.pid)))
        in_tray = set().union(*(_tree(display, window) for window in trays))
        embedded = ours & in_tray
        time.sleep(0.5)
    window = min(embedded)
    geometry = _x(display, "xdotool", "getwindowgeometry", str(window)).split("\n")
    say(
        f"tray: icon window {window:#x} embedded in trayer after "
        f"{time.monotonic() - started:.1f} s ({' '.join(geometry[1:]).strip()})"
    )


def tray(bundle: Path) -> None:
    """The windowed app's icon appears in a system tray, and its server answers."""
    _ensure_tray_tools()
    OUT.mkdir(parents=True, exist_ok=True)
    with xvfb() as display, sandbox() as home:
        env = {**os.environ, "DISPLAY": display}
        with (home / "trayer.log").open("wb") as panel_log:  # quoted if trayer fails
            panel = subprocess.Popen(
                [
                    *("trayer", "--edge", "top", "--align", "right", "--widthtype", "request"),
                    *("--height", "32", "--SetDockType", "true", "--transparent", "false"),
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=panel_log,
            )
        port = free_port()
        log = home / "app.log"
        app = None
        try:
            deadline = time.monotonic() + 20
            while not (trays := _window_ids(_x(display, "xdotool", "search", "--class", "trayer"))):
                if panel.poll() is not None or time.monotonic() > deadline:
                    code = panel.returncode
                    state = "none in 20 s" if code is None else f"it exited with code {code}"
                    raise SmokeError(
                        f"trayer opened no tray window ({state}); "
                        f"its output: {_log_tail(home / 'trayer.log') or '(nothing)'}"
                    )
                time.sleep(0.2)
            app_env = clean_env(
                home, DISPLAY=display, QT_QPA_PLATFORM="xcb", SIDELIGHT_PORT=str(port)
            )
            with log.open("wb") as out:
                app = subprocess.Popen(
                    [str(bundle / f"sidelight{EXE}")],
                    cwd=home,
                    env=app_env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            _wait_for_tray_icon(display, trays, app)
            wait_ready(port, app)
            say(f"tray: the app's server answers /health on port {port}")
            check_not_from_source([app.pid, *descendants(app.pid)], bundle)
            if shutil.which("import"):
                time.sleep(1)  # let the icon paint
                picture = OUT / "tray.png"
                _x(display, "import", "-window", "root", "-crop", "260x40+764+0", str(picture))
                say(f"tray: screenshot of the tray in {picture.relative_to(ROOT)}")
            stop(app, "the tray app")
            say("tray: the app quit with code 0 on SIGTERM")
            check_no_telemetry(home)
        except SmokeError as exc:
            raise SmokeError(f"{exc}\n--- app output ---\n{_log_tail(log)}") from None
        finally:
            if app is not None and app.poll() is None:
                app.kill()
                app.wait()
            panel.terminate()
            panel.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, default=ROOT / "dist" / "sidelight")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--headless-only", action="store_true")
    only.add_argument("--tray-only", action="store_true")
    args = parser.parse_args()
    bundle = args.bundle.resolve()
    if not (bundle / f"sidelight-cli{EXE}").is_file():
        say(f"no bundle in {bundle}: run packaging/build.py first")
        return 1
    try:
        if not args.tray_only:
            headless([str(bundle / f"sidelight-cli{EXE}")], bundle)
        if not args.headless_only and sys.platform.startswith("linux"):
            tray(bundle)
    except SmokeError as exc:
        say(f"FAILED: {exc}")
        return 1
    say("all smoke checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
