"""Light and dark themes: the one place the desktop's colours come from.

:class:`ThemeManager` picks the scheme (the ``theme`` setting: ``system`` follows the
desktop through ``QStyleHints.colorScheme()``; a desktop that gives no hint, such as a bare
X session, gets light), sets the application palette and an application style sheet for the
few widgets styled by name (the notice bar, error and warning lines, Qt's own tray balloon)
and the keyboard's focus ring, and follows the system live through ``colorSchemeChanged``.

Views never write a colour literal: they take :func:`colour` (a ``QColor`` this module
updates in place when the scheme changes, so module-level constants stay right) or the
palette's roles, and repaint on ``QEvent.PaletteChange``. Every foreground/background pair
in :data:`CONTRAST_PAIRS` is kept above WCAG's 4.5:1 for text (tests check it).

Threading: GUI thread only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal, cast, get_args

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QColor, QGuiApplication, QPalette

from engine.settings import ThemeChoice

logger = logging.getLogger(__name__)

Scheme = Literal["light", "dark"]

# Names of the colours views use, beside the standard palette roles.
ColourName = Literal[
    "window",
    "window_text",
    "base",
    "alternate_base",
    "text",
    "button",
    "button_text",
    "highlight",
    "highlighted_text",
    "link",
    "tooltip_base",
    "tooltip_text",
    "placeholder",
    "disabled_text",
    "dim",
    "error",
    "warning",
    "thinking_text",
    "code_background",
    "box_background",
    "box_border",
    "notice_background",
    "notice_border",
    "notice_text",
    "memory_line",
    "rate_line",
    "focus_ring",
    "code_header",
    "code_keyword",
    "code_string",
    "code_comment",
    "code_number",
    "code_function",
    "code_builtin",
    "quote_bar",
    "quote_text",
    "transcript_background",
    "card_background",
    "user_card_background",
    "card_border",
    "action_background",
]


@dataclass(frozen=True)
class ThemeColours:
    """One scheme's colours (``#rrggbb`` or ``#aarrggbb``)."""

    values: dict[str, str]

    def qcolor(self, name: ColourName) -> QColor:
        return QColor(self.values[name])


LIGHT = ThemeColours(
    {
        "window": "#f3f4f6",
        "window_text": "#1d1f23",
        "base": "#ffffff",
        "alternate_base": "#f5f6f8",
        "text": "#1d1f23",
        "button": "#e9ebef",
        "button_text": "#1d1f23",
        "highlight": "#2f64b8",
        "highlighted_text": "#ffffff",
        "link": "#1f56a8",
        "tooltip_base": "#fffbe6",
        "tooltip_text": "#1d1f23",
        "placeholder": "#6b7079",
        "disabled_text": "#8a8f98",
        "dim": "#626771",
        "error": "#b3261e",
        "warning": "#8f4a00",
        "thinking_text": "#555b64",
        "code_background": "#eef1f5",
        "box_background": "#f1f2f4",
        "box_border": "#c4c7cc",
        "notice_background": "#fff6d6",
        "notice_border": "#e3c770",
        "notice_text": "#3b3000",
        "memory_line": "#3d6fb6",
        "rate_line": "#1f7f3f",
        "focus_ring": "#2f64b8",
        # Code blocks: the header bar (language, Copy) and the syntax colours on
        # code_background; a blockquote's left bar and its muted text.
        "code_header": "#e2e6ec",
        "code_keyword": "#8a2f9c",
        "code_string": "#1d6b34",
        "code_comment": "#5f6570",
        "code_number": "#9a4a00",
        "code_function": "#1f56a8",
        "code_builtin": "#0b6e75",
        "quote_bar": "#7d8694",
        "quote_text": "#555b64",
        # The transcript: each turn a card on a tinted page, the person's own tinted blue;
        # a message's action buttons and the starter prompts on a pill.
        "transcript_background": "#eceef2",
        "card_background": "#ffffff",
        "user_card_background": "#e2ebf9",
        "card_border": "#d3d7de",
        "action_background": "#e6e9ee",
    }
)

DARK = ThemeColours(
    {
        "window": "#1e2024",
        "window_text": "#e6e7ea",
        "base": "#282b30",
        "alternate_base": "#2d3035",
        "text": "#e6e7ea",
        "button": "#33363c",
        "button_text": "#e6e7ea",
        "highlight": "#3d74c9",
        "highlighted_text": "#ffffff",
        "link": "#8ab4f8",
        "tooltip_base": "#2c2f34",
        "tooltip_text": "#e6e7ea",
        "placeholder": "#9aa0a9",
        "disabled_text": "#7b8089",
        "dim": "#a2a7b0",
        "error": "#ff8a80",
        "warning": "#ffb86b",
        "thinking_text": "#b4b9c1",
        "code_background": "#33363c",
        "box_background": "#31343a",
        "box_border": "#565b64",
        "notice_background": "#3a3216",
        "notice_border": "#806a26",
        "notice_text": "#f3e6b3",
        "memory_line": "#7fa8e8",
        "rate_line": "#6fcf8f",
        "focus_ring": "#8ab4f8",
        "code_header": "#383b41",
        "code_keyword": "#d2a8ff",
        "code_string": "#9fd8a4",
        "code_comment": "#a9aeb7",
        "code_number": "#f2b36b",
        "code_function": "#8ab4f8",
        "code_builtin": "#7fd1d8",
        "quote_bar": "#8a909b",
        "quote_text": "#b4b9c1",
        "transcript_background": "#1b1d21",
        "card_background": "#272a2f",
        "user_card_background": "#24334a",
        "card_border": "#3b3f46",
        "action_background": "#363a41",
    }
)

SCHEMES: dict[Scheme, ThemeColours] = {"light": LIGHT, "dark": DARK}

# (text, background, minimum ratio): text needs 4.5:1 (WCAG AA); the chart lines 3:1.
CONTRAST_PAIRS: tuple[tuple[ColourName, ColourName, float], ...] = (
    ("text", "base", 4.5),
    ("window_text", "window", 4.5),
    ("text", "alternate_base", 4.5),
    ("button_text", "button", 4.5),
    ("highlighted_text", "highlight", 4.5),
    ("link", "base", 4.5),
    ("tooltip_text", "tooltip_base", 4.5),
    ("placeholder", "base", 4.5),
    ("dim", "base", 4.5),
    ("error", "base", 4.5),
    ("error", "window", 4.5),
    ("warning", "window", 4.5),
    ("thinking_text", "box_background", 4.5),
    ("text", "box_background", 4.5),
    ("dim", "box_background", 4.5),
    ("text", "code_background", 4.5),
    ("notice_text", "notice_background", 4.5),
    ("dim", "code_header", 4.5),
    ("link", "code_header", 4.5),
    ("code_keyword", "code_background", 4.5),
    ("code_string", "code_background", 4.5),
    ("code_comment", "code_background", 4.5),
    ("code_number", "code_background", 4.5),
    ("code_function", "code_background", 4.5),
    ("code_builtin", "code_background", 4.5),
    ("quote_text", "base", 4.5),
    ("text", "card_background", 4.5),
    ("dim", "card_background", 4.5),
    ("link", "card_background", 4.5),
    ("text", "user_card_background", 4.5),
    ("dim", "user_card_background", 4.5),
    ("thinking_text", "user_card_background", 4.5),
    ("text", "transcript_background", 4.5),
    ("dim", "transcript_background", 4.5),
    ("link", "transcript_background", 4.5),
    ("text", "action_background", 4.5),
    ("link", "action_background", 4.5),
    ("quote_bar", "base", 3.0),
    ("memory_line", "base", 3.0),
    ("rate_line", "base", 3.0),
    # The keyboard's focus ring, a non-text mark: 3:1 (WCAG 1.4.11) on what it sits on.
    ("focus_ring", "window", 3.0),
    ("focus_ring", "base", 3.0),
    ("focus_ring", "button", 3.0),
)

# The live colours views hold; updated in place by ThemeManager.apply().
_LIVE: dict[str, QColor] = {name: LIGHT.qcolor(name) for name in LIGHT.values}  # type: ignore[arg-type]


def colour(name: ColourName) -> QColor:
    """The current scheme's colour ``name``: the same object across scheme changes."""
    return _LIVE[name]


def relative_luminance(value: QColor) -> float:
    """WCAG 2 relative luminance of an opaque colour."""

    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    return (
        0.2126 * channel(value.redF())
        + 0.7152 * channel(value.greenF())
        + 0.0722 * channel(value.blueF())
    )


def contrast_ratio(foreground: QColor, background: QColor) -> float:
    """WCAG 2 contrast ratio (1 to 21) of two opaque colours."""
    a, b = relative_luminance(foreground), relative_luminance(background)
    return (max(a, b) + 0.05) / (min(a, b) + 0.05)


def palette_for(colours: ThemeColours) -> QPalette:
    """A full QPalette (active, inactive and disabled groups) for one scheme."""
    palette = QPalette()
    role = QPalette.ColorRole
    roles = {
        role.Window: "window",
        role.WindowText: "window_text",
        role.Base: "base",
        role.AlternateBase: "alternate_base",
        role.Text: "text",
        role.Button: "button",
        role.ButtonText: "button_text",
        role.Highlight: "highlight",
        role.HighlightedText: "highlighted_text",
        role.Link: "link",
        role.LinkVisited: "link",
        role.ToolTipBase: "tooltip_base",
        role.ToolTipText: "tooltip_text",
        role.PlaceholderText: "placeholder",
        role.BrightText: "error",
    }
    for palette_role, name in roles.items():
        palette.setColor(palette_role, colours.qcolor(name))  # type: ignore[arg-type]
    disabled = QPalette.ColorGroup.Disabled
    for palette_role in (role.WindowText, role.Text, role.ButtonText):
        palette.setColor(disabled, palette_role, colours.qcolor("disabled_text"))
    # Fusion draws frames and bevels from these.
    button = colours.qcolor("button")
    palette.setColor(role.Light, button.lighter(130))
    palette.setColor(role.Midlight, button.lighter(115))
    palette.setColor(role.Mid, colours.qcolor("box_border"))
    palette.setColor(role.Dark, button.darker(150))
    palette.setColor(role.Shadow, QColor("#000000"))
    return palette


# The controls Tab reaches; each draws the focus ring while the keyboard is on it, from the
# style sheet. Spin boxes are reached too, but their ring comes from
# :class:`desktop.focus_style.FocusRingStyle` (the style sheet's would flatten their arrows).
FOCUSABLE = (
    "QPushButton",
    "QToolButton",
    "QComboBox",
    "QLineEdit",
    "QPlainTextEdit",
    "QTextEdit",
    "QListView",
    "QTreeView",
    "QTableView",
    "QCheckBox",
    "QRadioButton",
)


# The class name of the balloon QSystemTrayIcon.showMessage draws itself when the platform
# shows no notifications of its own (a private Qt widget, reached by style sheet only).
BALLOON = "QBalloonTip"


def style_sheet_for(colours: ThemeColours) -> str:
    """The application style sheet: widgets styled by name or role property, and the focus
    ring. Fusion's own focus mark (the highlight colour, darkened) is all but invisible on
    the dark theme's buttons, so every focusable control gets a 2 px outline of
    ``focus_ring`` while it has the focus, in both themes."""
    v = colours.values
    focused = ", ".join(f"{name}:focus" for name in FOCUSABLE)
    tip_base, tip_text = v["tooltip_base"], v["tooltip_text"]
    return (
        f"{focused} {{ border: 2px solid {v['focus_ring']}; border-radius: 3px; }}\n"
        # Qt's own tray balloon (QBalloonTip: X11 without a notification daemon) paints a
        # fixed pale yellow while its labels take the theme's text colour: near-white on
        # yellow in the dark theme. It takes the tooltip colours instead, in both themes.
        f"{BALLOON} {{ background-color: {tip_base}; color: {tip_text}; }}\n"
        f"{BALLOON} QLabel {{ color: {tip_text}; background: transparent; }}\n"
        f"#notice {{ background: {v['notice_background']}; border: 1px solid "
        f"{v['notice_border']}; }}\n"
        f"#notice QLabel {{ color: {v['notice_text']}; }}\n"
        f'QLabel[role="error"] {{ color: {v["error"]}; }}\n'
        f'QLabel[role="warning"] {{ color: {v["warning"]}; }}\n'
        # A control that cannot work yet but says why when pressed (dictation without a
        # speech model): greyed out, not disabled, so the keyboard still reaches it.
        f'QPushButton[unavailable="true"] {{ color: {v["dim"]}; }}\n'
        # The transcript's page, under its cards (desktop.views.transcript).
        f"QTextBrowser#transcript {{ background-color: {v['transcript_background']}; }}\n"
    )


def theme_choice(text: str) -> ThemeChoice:
    """``text`` as a theme choice (anything unknown follows the system)."""
    return cast(ThemeChoice, text) if text in get_args(ThemeChoice) else "system"


def system_scheme() -> Scheme:
    """The desktop's scheme; light when it gives no hint (e.g. Linux without a desktop)."""
    hints = QGuiApplication.styleHints()
    return "dark" if hints.colorScheme() == Qt.ColorScheme.Dark else "light"


class ThemeManager(QObject):
    """Applies the chosen scheme to the application and follows the system's changes.

    ``changed(scheme)`` is emitted after the palette and the live colours changed.
    """

    changed = Signal(str)

    def __init__(self, choice: ThemeChoice = "system", parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.choice: ThemeChoice = choice
        self.scheme: Scheme | None = None
        QGuiApplication.styleHints().colorSchemeChanged.connect(self._on_system_changed)

    def set_choice(self, choice: ThemeChoice) -> None:
        self.choice = choice
        self.apply()

    def wanted(self) -> Scheme:
        return system_scheme() if self.choice == "system" else self.choice

    def apply(self, scheme: Scheme | None = None) -> Scheme:
        """Switch to ``scheme`` (default: what the choice says now); returns it."""
        scheme = scheme or self.wanted()
        colours = SCHEMES[scheme]
        for name, value in colours.values.items():
            _LIVE[name].setRgba(QColor(value).rgba())
        app = QGuiApplication.instance()
        if isinstance(app, QGuiApplication):
            from PySide6.QtWidgets import QApplication

            from desktop import focus_style

            QGuiApplication.setPalette(palette_for(colours))
            if isinstance(app, QApplication):
                # Native Windows and macOS styles ignore parts of a custom palette: Fusion,
                # with the spin boxes' focus ring.
                focus_style.install(app, colour("focus_ring"))
                app.setStyleSheet(style_sheet_for(colours))
        changed = scheme != self.scheme
        self.scheme = scheme
        logger.info("theme: %s (%s)", scheme, self.choice)
        if changed:
            self.changed.emit(scheme)
        return scheme

    def _on_system_changed(self, scheme: Qt.ColorScheme) -> None:
        if self.choice == "system":
            self.apply("dark" if scheme == Qt.ColorScheme.Dark else "light")
