"""Light and dark themes: readable colour pairs, every colour from one module, and open
windows recoloured when the system switches or the person picks a theme in Settings.

The offscreen platform has no desktop to switch, so the system's switch is the signal the
platform itself sends (``QStyleHints.colorSchemeChanged``), emitted here; all the rest is
real (the windows, the engine, the settings file)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette, QTextCursor
from PySide6.QtWidgets import QApplication, QGridLayout, QLabel, QPushButton, QWidget
from pytestqt.qtbot import QtBot

from desktop import theme
from desktop.app import DesktopApp
from desktop.history import ChatMessage
from desktop.theme import CONTRAST_PAIRS, DARK, LIGHT, SCHEMES, contrast_ratio, palette_for

DESKTOP = Path(__file__).parents[2] / "desktop"
THOUGHT = "The person asks about tea; answer briefly."


@pytest.fixture(autouse=True)
def back_to_light() -> Iterator[None]:
    """The QApplication outlives a test: leave it light, as the other tests expect."""
    yield
    theme.ThemeManager("light").apply()


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_every_text_colour_is_readable_on_its_background(scheme: str) -> None:
    colours = SCHEMES[scheme]  # type: ignore[index]
    too_faint = [
        (fg, bg, round(contrast_ratio(colours.qcolor(fg), colours.qcolor(bg)), 2))
        for fg, bg, minimum in CONTRAST_PAIRS
        if contrast_ratio(colours.qcolor(fg), colours.qcolor(bg)) < minimum
    ]
    assert too_faint == []
    palette = palette_for(colours)
    role = QPalette.ColorRole
    for fg, bg in ((role.Text, role.Base), (role.WindowText, role.Window)):
        assert contrast_ratio(palette.color(fg), palette.color(bg)) >= 7.0


class QBalloonTip(QWidget):
    """A stand-in for Qt's private tray balloon (``QBalloonTip`` in qsystemtrayicon.cpp),
    built as Qt builds it: a tooltip window, a bold title, a close button and the message,
    then its fixed palette (window ``#ffffe1``, text black). Qt cannot be made to show the
    real one offscreen (no tray); style sheets match it by this class name, as they match
    Qt's own."""

    def __init__(self, title: str, message: str) -> None:
        super().__init__(None, Qt.WindowType.ToolTip)
        self.title = QLabel(title)
        bold = self.title.font()
        bold.setBold(True)
        self.title.setFont(bold)
        self.message = QLabel(message)
        layout = QGridLayout(self)
        layout.addWidget(self.title, 0, 0, 1, 2)
        layout.addWidget(QPushButton(), 0, 2)
        layout.addWidget(self.message, 1, 0, 1, 3)
        palette = self.palette()
        palette.setColor(QPalette.ColorRole.Window, QColor(0xFF, 0xFF, 0xE1))
        palette.setColor(QPalette.ColorRole.WindowText, QColor("black"))
        self.setPalette(palette)


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_the_tray_balloon_is_readable_in_both_themes(qtbot: QtBot, scheme: str) -> None:
    """Issue 28: in the dark theme the tray's notifications were near-white text on a pale
    yellow balloon (1.2:1). The balloon takes the tooltip colours of the theme."""
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    theme.ThemeManager(scheme).apply()  # type: ignore[arg-type]
    colours = SCHEMES[scheme]  # type: ignore[index]
    palette = app.palette()
    role = QPalette.ColorRole
    assert palette.color(role.ToolTipBase) == colours.qcolor("tooltip_base")
    assert palette.color(role.ToolTipText) == colours.qcolor("tooltip_text")

    balloon = QBalloonTip("Model loaded", "qwen2.5 is ready on CPU")
    qtbot.addWidget(balloon)
    balloon.sizeHint()  # what Qt's balloon() does before it paints its background
    balloon.show()
    background = balloon.palette().color(role.Window)
    assert background == palette.color(role.ToolTipBase)
    for label in (balloon.title, balloon.message):
        text = label.palette().color(role.WindowText)
        assert text == palette.color(role.ToolTipText)
        assert contrast_ratio(text, background) >= 4.5


def test_wcag_contrast_matches_the_reference_values() -> None:
    assert contrast_ratio(QColor("#000000"), QColor("#ffffff")) == pytest.approx(21.0)
    assert contrast_ratio(QColor("#777777"), QColor("#ffffff")) == pytest.approx(4.48, abs=0.01)


def test_no_colour_is_written_outside_the_theme_module() -> None:
    literal = re.compile(r"#[0-9a-fA-F]{6}\b|QColor\(\s*[\"'\d]|setStyleSheet\(")
    found = [
        f"{path.relative_to(DESKTOP)}:{number}"
        for path in DESKTOP.rglob("*.py")
        if path.name != "theme.py"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if literal.search(line)
    ]
    assert found == []


def thinking_colour(desktop: DesktopApp) -> QColor:
    """The colour the transcript draws the thinking text in."""
    document = desktop.chat.transcript.document()
    at = document.toPlainText().index(THOUGHT)
    cursor = QTextCursor(document)
    cursor.setPosition(at + 1)
    return cursor.charFormat().foreground().color()


def test_windows_follow_the_system_and_the_setting(qtbot: QtBot, desktop: DesktopApp) -> None:
    hints = QGuiApplication.styleHints()
    desktop.show_chat()
    desktop.show_models()
    chat, models = desktop.chat, desktop.models_dialog()
    messages: list[ChatMessage] = [
        {"role": "user", "content": "Tea?"},
        {"role": "assistant", "content": "Yes.", "thinking": THOUGHT, "thinking_seconds": 2.0},
    ]
    chat.transcript.toggle_thinking(1)  # open, as a click on its header does
    chat.transcript.show_conversation(messages, None, fallback_model="demo")
    chat.notice.show_notice("A notice")
    assert desktop.theme.scheme == "light"  # this platform gives no hint: light
    assert thinking_colour(desktop) == LIGHT.qcolor("thinking_text")

    hints.colorSchemeChanged.emit(Qt.ColorScheme.Dark)
    assert desktop.theme.scheme == "dark"
    for window in (chat, models):
        assert window.palette().color(QPalette.ColorRole.Base) == DARK.qcolor("base")
        assert window.palette().color(QPalette.ColorRole.Window) == DARK.qcolor("window")
    # The transcript's page under its cards (the theme's style sheet names it).
    page = chat.transcript.palette().color(QPalette.ColorRole.Base)
    assert page == DARK.qcolor("transcript_background")
    assert thinking_colour(desktop) == DARK.qcolor("thinking_text")
    assert "#3a3216" in QGuiApplication.instance().styleSheet()  # type: ignore[union-attr]
    chat.notice.label.ensurePolished()
    label = chat.notice.label.palette().color(QPalette.ColorRole.WindowText)
    assert label == DARK.qcolor("notice_text")

    hints.colorSchemeChanged.emit(Qt.ColorScheme.Light)
    assert thinking_colour(desktop) == LIGHT.qcolor("thinking_text")
    assert chat.palette().color(QPalette.ColorRole.Base) == LIGHT.qcolor("base")

    # Settings: Appearance → Dark, Save: dark at once, saved, and no longer following.
    desktop.show_settings()
    dialog = desktop._settings
    assert dialog is not None and dialog.theme.currentData() == "system"
    dialog.theme.setCurrentIndex(dialog.theme.findData("dark"))
    dialog.buttons.button(dialog.buttons.StandardButton.Save).click()
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=15000)
    assert desktop.theme.scheme == "dark" and thinking_colour(desktop) == DARK.qcolor(
        "thinking_text"
    )
    config = json.loads(desktop.controller.settings.paths.config_file.read_text())
    assert config["theme"] == "dark"
    hints.colorSchemeChanged.emit(Qt.ColorScheme.Light)
    assert desktop.theme.scheme == "dark"
