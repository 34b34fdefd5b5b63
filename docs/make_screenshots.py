"""Take the README's screenshots of the real tray app on a private X display.

    python docs/make_screenshots.py [--out docs/screenshots] [--scale 1.25] [--screen 1366x768]
    python docs/make_screenshots.py --scale 2 --screen 2732x1536   # the -2x pictures

Starts Xvfb, openbox (window frames) and trayer (a system tray), then the app itself with its
engine on the demo model, in a fresh Sidelight home with one installed model (the tests' tiny
coder). It right-clicks the tray icon with xdotool and grabs the open menu, grabs a new chat
(the model, what it can do, starter prompts), sends three messages in the chat window and grabs
it while the third reply streams, sends a message with an
attachment and starts editing it (the pointer over a reply shows its action pills), reopens a
saved chat with a code block (the demo model writes no code), asks the demo model its thinking
question and opens the thinking with a click, then opens the model manager (catalog and
installed list), its hub search and the settings; then switches to the dark theme and takes
the thinking reply, the code block, the new chat, the model manager, the hub search and the
settings again (the hub is the
local stand-in of the tests, serving the search fixture repos). The screen is a 1366x768
laptop at 125 % unless told otherwise (``QT_SCALE_FACTOR``); at another scale the file names
end in ``-2x`` (or ``-1.5x``...). Pictures are taken with ImageMagick's
``import -window root`` and cropped to the interesting part.

Needs (Debian/Ubuntu): xvfb openbox trayer xdotool imagemagick fonts-dejavu-core and the
libraries Qt's X11 plugin loads; run as root on Debian/Ubuntu, it installs whatever is missing
itself with apt-get (through ``packaging/dev.py``, as the smoke test does for Xvfb).
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from engine.settings import default_paths, save_config

if TYPE_CHECKING:
    from PySide6.QtCore import QRect
    from PySide6.QtWidgets import QWidget

    from desktop.app import DesktopApp
    from engine.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PORT = 11680
SCREEN = [1366, 768]  # physical pixels; --screen changes it
SCALE = [1.25]  # QT_SCALE_FACTOR; Qt's geometry is in logical pixels
DEFAULT_SCALE = 1.25  # pictures at this scale have no suffix; others end in -2x etc.
BACKGROUND = "#4a5568"
# Each tool and the Debian package that has it; the font makes the pictures the same
# everywhere (Qt falls back to whatever fontconfig has, or draws no text at all).
TOOLS = {
    "Xvfb": "xvfb",
    "openbox": "openbox",
    "trayer": "trayer",
    "xdotool": "xdotool",
    "import": "imagemagick",
    "display": "imagemagick",
}
FONT_PACKAGE = "fonts-dejavu-core"

logger = logging.getLogger("screenshots")

Step = tuple[Callable[[], bool], float]  # wait until this is true, for at most so many seconds


def grab(path: Path, x: int, y: int, width: int, height: int) -> None:
    """Save a screen region as a PNG (blocks for the fraction of a second ``import`` takes).

    ``path`` is named for the default scale; at another scale ``-2x`` (etc.) is added.
    """
    if SCALE[0] != DEFAULT_SCALE:
        path = path.with_name(f"{path.stem}-{SCALE[0]:g}x{path.suffix}")
    x, y, width, height = (round(v * SCALE[0]) for v in (x, y, width, height))
    x, y = max(0, x), max(0, y)
    width, height = min(width, SCREEN[0] - x), min(height, SCREEN[1] - y)
    crop = f"{width}x{height}+{x}+{y}"
    subprocess.run(["import", "-window", "root", "-crop", crop, "+repage", str(path)], check=True)
    logger.info("saved %s (%dx%d, %d bytes)", path, width, height, path.stat().st_size)


def px(logical: int) -> str:
    """A logical (Qt) coordinate as the screen pixel xdotool wants."""
    return str(round(logical * SCALE[0]))


def place(window: QWidget, width: int, height: int) -> None:
    """Size a window for a picture, but never beyond the screen (at 2x it is small)."""
    area = window.screen().availableGeometry()
    window.resize(min(width, area.width() - 48), min(height, area.height() - 72))


def after(seconds: float) -> Callable[[], bool]:
    deadline = time.monotonic() + seconds
    return lambda: time.monotonic() >= deadline


def region(*items: QWidget | QRect, margin: int = 12) -> tuple[int, int, int, int]:
    from PySide6.QtCore import QRect

    rect = QRect()
    for item in items:
        rect = rect.united(item if isinstance(item, QRect) else item.frameGeometry())
    rect = rect.adjusted(-margin, -margin, margin, margin)
    return rect.x(), rect.y(), rect.width(), rect.height()


class Tour:
    """Drives the running app through the pictures, one step per event-loop tick."""

    def __init__(self, desktop: DesktopApp, out: Path) -> None:
        self.desktop = desktop
        self.out = out
        self.failures: list[str] = []

    def steps(self) -> Iterator[Step]:
        yield from self.wait_until_ready()
        yield from self.tray_menu()
        yield from self.chat_empty("chat-empty.png")
        yield from self.chat_mid_reply()
        yield from self.chat_message_actions()
        yield from self.chat_code("chat-code.png")
        yield from self.chat_thinking()
        yield from self.chat_versions("chat-versions.png")
        yield from self.chat_search("chat-search.png")
        yield from self.chat_settings("chat-settings.png")
        yield from self.model_manager("model-manager.png", "model-search.png")
        yield from self.model_settings("model-settings.png")
        yield from self.server_view("requests-server.png")
        yield from self.settings("settings.png")
        yield from self.dark()

    def wait_until_ready(self) -> Iterator[Step]:
        from engine.supervisor.states import READY

        controller, tray = self.desktop.controller, self.desktop.tray
        yield (
            lambda: (
                controller.status.state == READY
                and controller.server_url is not None
                and controller.devices is not None
                and tray.geometry().width() > 0
            ),
            60,
        )

    def tray_menu(self) -> Iterator[Step]:
        """Right-click the icon, hover Models, grab."""
        icon = self.desktop.tray.geometry()
        # Click near the icon's lower left corner: the menu opens there and leaves it in view.
        x, y = icon.left() + 2, icon.bottom() - 2
        subprocess.Popen(["xdotool", "mousemove", px(x), px(y), "click", "3"])
        menu = self.desktop.tray.menu
        yield (menu.isVisible, 10)
        yield (after(0.3), 2)
        models = menu.models_menu
        point = menu.mapToGlobal(menu.actionGeometry(models.menuAction()).center())
        subprocess.Popen(["xdotool", "mousemove", px(point.x()), px(point.y())])
        yield (models.isVisible, 10)
        yield (after(0.6), 2)
        panel = icon.adjusted(-72, -icon.top(), 16, 4)  # the tray strip around the icon
        grab(self.out / "tray-menu.png", *region(menu, models, panel))
        menu.hide()

    def chat_empty(self, name: str) -> Iterator[Step]:
        """A new chat: the model, what it can do and the starter prompts."""
        window = self.desktop.chat
        window.new_chat()
        window.move(24, 48)
        place(window, 600, 480)
        window.show_and_raise()
        subprocess.Popen(["xdotool", "mousemove", "1300", "700"])  # the pointer out of the way
        yield (after(0.8), 2)
        grab(self.out / name, *region(window, margin=0))
        window.hide()

    def chat_code(self, name: str) -> Iterator[Step]:
        """A reply with a code block (its header bar: language, Copy), the pointer over it
        so its action pills show. The demo model cannot write code: this conversation is a
        saved one written for the picture, shown as a person reopens a chat."""
        from desktop.history import Conversation

        window = self.desktop.chat
        code = (
            "Slicing with a step of -1 walks the string backwards:\n\n"
            "```python\ndef reverse(text: str) -> str:\n"
            '    """The text, last character first."""\n'
            "    return text[::-1]\n\n\n"
            'print(reverse("Sidelight"))  # thgiledis\n```\n\n'
            "It makes one copy of the string, so it takes **O(n)** time and memory."
        )
        conversation = Conversation(
            messages=[
                {"role": "user", "content": "How do I reverse a string in Python?"},
                {
                    "role": "assistant",
                    "content": code,
                    "model": "tiny-coder",
                    "figures": {"tokens": 61, "tokens_per_second": 38.4, "ttft_seconds": 0.18},
                },
            ],
            model="tiny-coder",
        )
        window.move(24, 48)
        place(window, 640, 560)
        window.show_and_raise()
        window._show(conversation)
        yield (after(0.6), 2)
        view = window.transcript
        view.verticalScrollBar().setValue(0)  # the whole exchange, from the question
        start = view._spans[1][0]
        cursor = view.textCursor()
        cursor.setPosition(start + 3)
        point = view.viewport().mapToGlobal(view.cursorRect(cursor).center())
        subprocess.Popen(["xdotool", "mousemove", px(point.x() + 60), px(point.y() + 40)])
        yield (lambda: view.actions_shown == 1, 10)
        yield (after(0.4), 2)
        grab(self.out / name, *region(window, margin=0))
        window.hide()

    def chat_mid_reply(self) -> Iterator[Step]:
        """Two finished replies (a greeting, then the demo model's answer to a thank-you),
        then a grab while the third one streams."""
        from PySide6.QtWidgets import QApplication

        window = self.desktop.chat
        window.move(24, 48)
        place(window, 600, 540)
        window.show_and_raise()
        window.send("Hello")
        yield (lambda: not window.busy and window.last_stats is not None, 30)
        window.send("Thanks!")
        yield (lambda: not window.busy and len(window.conversation.messages) == 4, 30)
        yield (after(1.2), 3)  # a memory sample and a sparkline point
        captured: list[bool] = []

        def capture(_: object) -> None:
            if captured or window.chunks_received < 9:
                return
            captured.append(True)
            window._render()  # what the next render tick would show
            window.repaint()
            QApplication.sync()
            grab(self.out / "chat-mid-reply.png", *region(window, margin=0))

        window.send("Count to twenty")
        assert window._worker is not None
        window._worker.yielded.connect(capture)
        yield (lambda: not window.busy, 30)
        if not captured:
            self.failures.append("the reply finished before it could be captured")
        window.hide()

    def chat_message_actions(self) -> Iterator[Step]:
        """Two exchanges, then *Edit* on the first message and a file attached to it.

        The messages are ones the demo model was trained on (tests/models/dialogues.json):
        anything else gets its "I am only a tiny demo model" reply.
        """
        window = self.desktop.chat
        window.new_chat()
        window.move(24, 48)
        place(window, 700, 560)
        window.show_and_raise()
        window.send("Hello")
        yield (lambda: not window.busy and window.last_stats is not None, 30)
        window.send("Count to twenty")
        yield (lambda: not window.busy, 30)
        window.message_actions.edit(0)
        window.pending_attachments.add_text("notes.txt", "Ship the release on Friday.\n")
        yield (lambda: all(a["tokens"] >= 0 for a in window.pending_attachments.items), 15)
        view = window.transcript
        cursor = view.textCursor()
        cursor.setPosition(view._spans[1][0] + 3)  # over the first reply: its pills show
        point = view.viewport().mapToGlobal(view.cursorRect(cursor).center())
        subprocess.Popen(["xdotool", "mousemove", px(point.x() + 60), px(point.y() + 20)])
        yield (lambda: view.actions_shown == 1, 10)
        yield (after(0.8), 2)
        grab(self.out / "chat-message-actions.png", *region(window, margin=0))
        window.message_actions.cancel_edit()
        window.hide()

    def chat_thinking(self) -> Iterator[Step]:
        """A reply with thinking: click its "Thought for" header open, grab."""
        window = self.desktop.chat
        window.new_chat()
        window.move(24, 48)
        place(window, 600, 440)
        window.show_and_raise()
        window.send("Think first: what is 2+2?")  # the demo model's thinking dialogue
        yield (lambda: not window.busy and window.last_stats is not None, 30)
        view = window.transcript
        header = view.document().find("Thought for")
        if header.isNull():
            self.failures.append("the reply shows no thinking header")
            return
        header.setPosition(header.selectionStart() + 3)
        point = view.viewport().mapToGlobal(view.cursorRect(header).center())
        subprocess.Popen(["xdotool", "mousemove", px(point.x()), px(point.y()), "click", "1"])
        yield (lambda: "2 plus 2 is 4." in view.toPlainText(), 10)
        subprocess.Popen(["xdotool", "mousemove", "900", "600"])  # the pointer out of the way
        yield (after(0.6), 2)
        grab(self.out / "chat-thinking.png", *region(window, margin=0))
        window.hide()

    def chat_versions(self, name: str) -> Iterator[Step]:
        """A regenerated reply (its "< 2/2 >" switcher) in a chat with a system prompt (the
        chip above the message box). Written for the picture, as a reopened chat is."""
        from desktop.history import ChatMessage, Conversation, with_new_version

        first = ChatMessage(
            role="assistant",
            content="Hello! I am the Sidelight demo model.",
            model="sidelight-demo",
            figures={"tokens": 12, "tokens_per_second": 1480.0, "ttft_seconds": 0.01},
        )
        second = ChatMessage(
            role="assistant",
            content="Hi there! I am the Sidelight demo model, a tiny test model.",
            model="sidelight-demo",
            figures={"tokens": 16, "tokens_per_second": 1512.0, "ttft_seconds": 0.01},
        )
        conversation = Conversation(
            messages=[ChatMessage(role="user", content="Hello"), with_new_version(first, second)],
            system_prompt="You are a helpful assistant. Answer clearly and accurately.",
            model="sidelight-demo",
        )
        window = self.desktop.chat
        window.move(24, 48)
        place(window, 600, 440)
        window.show_and_raise()
        window._show(conversation)
        subprocess.Popen(["xdotool", "mousemove", "1300", "700"])
        yield (after(0.8), 2)
        grab(self.out / name, *region(window, margin=0))
        window.hide()

    def chat_search(self, name: str) -> Iterator[Step]:
        """The chat list open beside the chat, searching the saved chats for a word."""
        window = self.desktop.chat
        window.move(24, 48)
        place(window, 760, 460)
        window.show_and_raise()
        window.chats_button.setChecked(True)
        window.chat_list.search.setText("twenty")
        yield (lambda: bool(window.chat_list.titles()), 5)
        yield (after(0.6), 2)
        grab(self.out / name, *region(window, margin=0))
        window.chat_list.search.clear()
        window.chats_button.setChecked(False)
        window.hide()

    def chat_settings(self, name: str) -> Iterator[Step]:
        """The chat settings dialog (shown, not run modally: the tour keeps ticking)."""
        from desktop.views.chat_settings import ChatSettingsDialog

        window = self.desktop.chat
        dialog = ChatSettingsDialog(
            window.conversation.settings, "Answer in as few words as the question allows.", window
        )
        dialog.move(24, 48)
        dialog.show()
        yield (dialog.isVisible, 10)
        yield (after(0.6), 2)
        grab(self.out / name, *region(dialog, margin=0))
        dialog.close()
        dialog.deleteLater()

    def model_settings(self, name: str) -> Iterator[Step]:
        """The installed tiny coder's own load settings and sampling defaults."""
        manager = self.desktop.models_dialog()
        manager.move(24, 48)
        manager.show()
        dialog = manager.open_model_settings("tiny-coder")
        if dialog is None:
            self.failures.append("the model settings dialog did not open")
            return
        dialog.move(48, 72)
        yield (dialog.isVisible, 10)
        yield (after(0.6), 2)
        grab(self.out / name, *region(dialog, margin=0))
        dialog.close()
        manager.hide()

    def server_view(self, name: str) -> Iterator[Step]:
        """The Requests window: the server strip, the requests the tour made, the live log."""
        window = self.desktop.requests_window
        window.move(24, 48)
        place(window, 1000, 520)
        window.show()
        window.raise_()
        yield (lambda: window.isVisible() and window.table.rowCount() > 0, 10)
        yield (after(1.2), 3)  # a refresh of the log beside it
        grab(self.out / name, *region(window, margin=0))
        window.hide()

    def model_manager(self, catalog_name: str, search_name: str) -> Iterator[Step]:
        """The catalog with the installed list below it, then the hub search with a result."""
        dialog = self.desktop.models_dialog()
        dialog.move(24, 48)
        dialog.tabs.setCurrentIndex(0)
        dialog.show()
        yield (lambda: dialog.machine is not None, 30)
        recommended = dialog.catalog.recommend(dialog.machine) if dialog.machine else None
        if recommended is not None:
            dialog.select_entry(recommended.id)
        dialog.installed.select("tiny-coder")  # its Use and Delete buttons come alive
        yield (after(0.5), 2)
        grab(self.out / catalog_name, *region(dialog, margin=0))
        dialog.tabs.setCurrentWidget(dialog.search)
        search = dialog.search
        search.results, search.current = [], None  # wait for this search's own results
        search.box.setText("tiny")
        search.search_now()
        yield (lambda: bool(search.results), 15)
        search.select(search.results[0].repo)
        yield (lambda: search.current is not None, 15)
        yield (after(0.5), 2)
        grab(self.out / search_name, *region(dialog, margin=0))
        dialog.tabs.setCurrentIndex(0)
        dialog.hide()

    def settings(self, name: str) -> Iterator[Step]:
        self.desktop.show_settings()
        dialog = self.desktop._settings
        assert dialog is not None
        dialog.move(24, 48)
        yield (dialog.isVisible, 10)
        yield (after(0.6), 2)
        grab(self.out / name, *region(dialog, margin=0))
        dialog.close()

    def dark(self) -> Iterator[Step]:
        """The dark theme: the thinking reply, the model manager and the settings again."""
        self.desktop.theme.set_choice("dark")
        window = self.desktop.chat
        window.move(24, 48)
        place(window, 600, 440)
        window.show_and_raise()
        yield (after(0.6), 2)
        grab(self.out / "chat-thinking-dark.png", *region(window, margin=0))
        window.hide()
        yield from self.chat_code("chat-code-dark.png")
        yield from self.chat_empty("chat-empty-dark.png")
        yield from self.chat_versions("chat-versions-dark.png")
        yield from self.chat_search("chat-search-dark.png")
        yield from self.chat_settings("chat-settings-dark.png")
        yield from self.model_manager("model-manager-dark.png", "model-search-dark.png")
        yield from self.model_settings("model-settings-dark.png")
        yield from self.server_view("requests-server-dark.png")
        yield from self.settings("settings-dark.png")


def _search_hub(folder: Path) -> str:
    """The tests' hub stand-in with the search fixture repos; returns its address."""
    from tests.store.hub_server import HubConfig, HubServer
    from tests.store.search_fixtures import add_search_repos

    add_search_repos(folder)
    return HubServer(HubConfig(root=folder)).start().url


def _install_tiny_model(settings: Settings) -> None:
    """One installed model beside the demo, so the installed list shows a real row."""
    from engine.store import ModelStore
    from engine.store.manifest import Manifest, Source

    source = ROOT / "tests" / "fixtures" / "tiny-coder"
    store = ModelStore.from_settings(settings)
    staged = store.partial_folder("tiny-coder")
    shutil.copytree(source, staged)
    size = sum(f.stat().st_size for f in staged.rglob("*") if f.is_file())
    manifest = Manifest(
        id="tiny-coder",
        name="Tiny coder",
        format="ir",
        entry=".",
        source=Source(kind="hub", repo="OpenVINO/tiny-coder", revision="0" * 40),
        size_bytes=size,
        weights="fp16",
    )
    store.commit(staged, manifest)


def run_app(out: Path) -> int:
    """The child process: the app on the display :func:`main` prepared, and the tour."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from desktop.app import DesktopApp
    from desktop.chat import ChatOptions
    from engine.settings import load_settings
    from engine.worker.messages import SamplingParams

    app = QApplication(sys.argv[:1])
    app.setApplicationName("Sidelight")
    app.setQuitOnLastWindowClosed(False)
    settings = load_settings()
    settings.paths.ensure()
    _install_tiny_model(settings)
    greedy = ChatOptions(sampling=SamplingParams(temperature=0))
    hub = _search_hub(settings.paths.cache_dir / "hub")
    desktop = DesktopApp(settings, chat_options=greedy, hub_endpoint=hub)
    desktop.controller.state.welcomed = True  # the welcome is a first-run dialog; skip it
    desktop.start()
    tour = Tour(desktop, out)
    steps = tour.steps()
    current: list[tuple[Step, float]] = []

    def tick() -> None:
        if not current:
            try:
                current.append((next(steps), time.monotonic()))
            except StopIteration:
                app.quit()
                return
        (condition, timeout), since = current[0]
        if condition():
            current.clear()
        elif time.monotonic() - since > timeout:
            tour.failures.append(f"a step timed out after {timeout} s")
            app.quit()
            return
        QTimer.singleShot(50, tick)

    QTimer.singleShot(0, tick)
    app.exec()
    desktop.shutdown()
    for failure in tour.failures:
        logger.error("%s", failure)
    return 1 if tour.failures else 0


def _has_dejavu() -> bool:
    """Whether fontconfig knows DejaVu Sans (no fc-list: assume the font is there)."""
    if shutil.which("fc-list") is None:
        return True
    listed = subprocess.run(
        ["fc-list", "DejaVu Sans"], capture_output=True, text=True, check=False
    ).stdout
    return bool(listed.strip())


def ensure_tools() -> list[str]:
    """Install the missing tools, font and Qt libraries with apt-get (as root).

    Returns the Debian packages still missing (not root, or no apt-get): the caller says
    what to install by hand.
    """
    # packaging/dev.py is a script, not a package: load it by path (it needs only the
    # standard library, so this works before any environment exists).
    spec = importlib.util.spec_from_file_location("_sidelight_dev", ROOT / "packaging" / "dev.py")
    if spec is None or spec.loader is None:
        raise RuntimeError("cannot read packaging/dev.py")
    dev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev)

    def say(message: str) -> None:
        logger.info("%s", message)

    missing = sorted({pkg for tool, pkg in TOOLS.items() if shutil.which(tool) is None})
    if not _has_dejavu():
        missing.append(FONT_PACKAGE)
    if missing and dev.apt_install(missing, say):
        missing = []
    still: list[str] = dev.ensure_qt_libs(say)
    return missing + still


def _free_display() -> str:
    for number in range(57, 99):
        if not Path(f"/tmp/.X11-unix/X{number}").exists():  # noqa: S108 - X's socket path
            return f":{number}"
    raise RuntimeError("no free X display number")


def _port() -> int:
    """The default port when it is free (it shows in the menu), else any free one."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", DEFAULT_PORT))
        except OSError:
            sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_x(env: dict[str, str], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        probe = ["xdotool", "getdisplaygeometry"]
        if subprocess.run(probe, env=env, capture_output=True, check=False).returncode == 0:
            return
        time.sleep(0.1)
    raise RuntimeError("Xvfb did not start")


def _desktop_session(env: dict[str, str], processes: list[subprocess.Popen[bytes]]) -> None:
    """Xvfb with a plain background, a window manager and a tray at the top right."""
    width, height = SCREEN
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    xvfb = ["Xvfb", env["DISPLAY"], "-screen", "0", f"{width}x{height}x24", "-nolisten", "tcp"]
    processes.append(subprocess.Popen(xvfb, **quiet))  # type: ignore[call-overload]
    _wait_for_x(env)
    # display sets the root background and then exits with 1, which is fine here.
    background = ["display", "-window", "root", "-size", f"{width}x{height}", f"xc:{BACKGROUND}"]
    subprocess.run(background, env=env, check=False, **quiet)  # type: ignore[call-overload]
    processes.append(subprocess.Popen(["openbox"], env=env, **quiet))  # type: ignore[call-overload]
    time.sleep(0.5)
    tray = [
        "trayer", "--edge", "top", "--align", "right", "--margin", "16",
        "--widthtype", "pixel", "--width", "96", "--height", "30", "--tint", "0x1f2430",
        "--transparent", "true", "--alpha", "0", "--SetDockType", "true",
    ]  # fmt: skip
    processes.append(subprocess.Popen(tray, env=env, **quiet))  # type: ignore[call-overload]
    time.sleep(0.5)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--scale", type=float, default=SCALE[0], help="QT_SCALE_FACTOR")
    parser.add_argument("--screen", default="x".join(map(str, SCREEN)), help="WIDTHxHEIGHT")
    parser.add_argument("--app", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    SCREEN[:] = [int(v) for v in args.screen.lower().split("x")]
    SCALE[0] = args.scale
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.app:
        sys.path.insert(0, str(ROOT))  # run from a checkout, installed or not
        return run_app(args.out.resolve())

    missing = ensure_tools()
    if missing:
        logger.error(
            "missing: %s (apt-get install -y %s, as root)", ", ".join(missing), " ".join(missing)
        )
        return 2
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIDELIGHT_")}
    env["DISPLAY"] = _free_display()
    processes: list[subprocess.Popen[bytes]] = []
    try:
        _desktop_session(env, processes)
        with tempfile.TemporaryDirectory(prefix="sidelight-shots-") as home:
            # The port goes to config.json, as a user's would: set in the environment, the
            # settings window would show it greyed out ("set in the environment").
            save_config(default_paths({"SIDELIGHT_HOME": home}), {"port": _port()})
            child = {
                **env,
                "SIDELIGHT_HOME": home,
                # The demo model makes ~1,500 tokens/s; the default stream interval would
                # deliver its reply in two chunks, too fast to catch it mid-reply.
                "SIDELIGHT_STREAM_INTERVAL_MS": "0",
                # The first-start CPU self-tune would measure while the tour chats.
                "SIDELIGHT_CPU_SELF_TUNE": "0",
                "QT_QPA_PLATFORM": "xcb",
                "XDG_CONFIG_HOME": str(Path(home) / "xdg"),
                "QT_SCALE_FACTOR": str(args.scale),
                "QT_AUTO_SCREEN_SCALE_FACTOR": "0",
            }
            command = [sys.executable, __file__, "--app", "--out", str(args.out)]
            command += ["--scale", str(args.scale), "--screen", args.screen]
            return subprocess.call(command, env=child, cwd=ROOT, timeout=300)
    finally:
        for process in reversed(processes):
            process.terminate()
            process.wait(10)


if __name__ == "__main__":
    sys.exit(main())
