"""The chat transcript, written into a ``QTextDocument`` and shown by :class:`TranscriptView`.

Replies are Markdown (code blocks stay code blocks); what the person typed is plain text with
its line breaks kept, never Markdown. Markers the window adds (*stopped*, *not sent*, the
dropped part) are formatting around the text, so they never end up in a copied or resent reply.

Each turn is a card (a bordered frame on the transcript's tinted page; the person's cards
tinted blue and set in from the left). A message's actions (Copy, Regenerate, Edit,
Delete) are pill links at the foot of its card, drawn only while the pointer is over the
card or the keyboard is in it (Tab reaches them even hidden, and shows them); they keep
their room when hidden, so nothing moves as the pointer passes. A new chat shows the model,
what it can do and starter prompts (:mod:`desktop.views.empty_chat`).

A reasoning model's thinking is a shaded box above its answer, behind a header link
("Thinking…" while it streams, then "Thought for N s") that opens and closes it; a tool call
is a box with the function's name and its arguments, pretty-printed.

Threading: GUI thread only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass

from PySide6.QtCore import QEvent, QPoint, Qt, QUrl, Signal
from PySide6.QtGui import (
    QBrush,
    QColor,
    QDesktopServices,
    QFocusEvent,
    QFont,
    QFontDatabase,
    QGuiApplication,
    QMouseEvent,
    QShowEvent,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextFormat,
    QTextFrame,
    QTextFrameFormat,
    QTextLength,
    QTextTableFormat,
)
from PySide6.QtWidgets import QTextBrowser, QWidget

from desktop import theme
from desktop.history import ChatMessage, ReplyFigures, ToolCallRecord
from desktop.views.empty_chat import STARTER_SCHEME, Intro, write_intro
from desktop.views.image_thumbnails import write_thumbnails
from desktop.views.markdown_blocks import COPY_CODE_SCHEME, align_table_headers, write_markdown

# Live colours of the current light or dark theme (desktop.theme updates them in place).
CODE_BACKGROUND = theme.colour("code_background")
DIM = theme.colour("dim")
ERROR = theme.colour("error")
THINKING_TEXT = theme.colour("thinking_text")
BOX_BACKGROUND = theme.colour("box_background")
BOX_BORDER = theme.colour("box_border")
DROPPED_NOTE = "Turns above are no longer sent to the model (dropped from the context)"
THINKING_SCHEME = "thinking"  # header links: thinking:<message index>
ACTION_SCHEME = "action"  # message actions: action:<copy|regenerate|edit|delete>/<index>
ACTION_LABELS = {
    "copy": "Copy",
    "read": "Read aloud",
    "regenerate": "Regenerate",
    "edit": "Edit",
    "delete": "Delete",
    "previous": "Previous version",
    "next": "Next version",
}
VERSION_STEPS = {"previous": -1, "next": 1}  # a regenerated reply's arrows
_OPEN, _CLOSED = "▾", "▸"
_PILL = "\u2002"  # an en space each side of an action's label: the pill's padding
CARD_PADDING = 10  # inside a card (device-independent pixels: they scale with the screen)
CARD_GAP = 10  # between cards
PAGE_MARGIN = 12  # round the cards
USER_INDENT = 48  # the person's cards stand in from the left
# Marks a turn's card and its header row (not boxes of the reply's own: see boxes_in).
_CARD = QTextFormat.Property.UserProperty + 10
_HEADER_ROW = QTextFormat.Property.UserProperty + 11


@dataclass(frozen=True)
class ActionRun:
    """Where one action link is drawn: its (start, end) positions and its href."""

    start: int
    end: int
    href: str


@dataclass(frozen=True)
class Rendered:
    """What :func:`render_transcript` wrote: each message's (start, end) position in the
    document, and the code of each code block (its *Copy* link names its index)."""

    spans: list[tuple[int, int]]
    code_blocks: list[str]
    actions: dict[int, list[ActionRun]]  # per message index, its action links
    starters: list[tuple[int, int]]  # the empty chat's starter prompt links


@dataclass(frozen=True)
class Pending:
    """A reply still streaming: its text so far, the model writing it and its thinking
    (``thinking_seconds`` is None while the model still thinks)."""

    text: str
    model: str
    thinking: str = ""
    thinking_seconds: float | None = None


def cut_marker(tokens: int) -> str:
    """Under a reply the chat's max tokens cut (finish reason ``length``)."""
    return f"(cut at {tokens} tokens: the chat's max tokens; raise it in Chat settings)"


def thinking_label(seconds: float | None) -> str:
    """The thinking header: "Thinking…" while it streams, then how long it took."""
    if seconds is None:
        return "Thinking…"
    return "Thought for under a second" if seconds < 1 else f"Thought for {seconds:.0f} s"


def render_transcript(
    document: QTextDocument,
    messages: list[ChatMessage],
    pending: Pending | None = None,
    *,
    fallback_model: str = "Assistant",
    open_thinking: Container[int] = (),
    actions: bool = True,
    intro: Intro | None = None,
    shown_actions: Container[int] = (),
    names: Mapping[str, str] | None = None,
    off: Mapping[str, str] | None = None,
) -> Rendered:
    """Replace ``document``'s content with the conversation; return where each message is
    and the code blocks' code.

    ``actions``: write each message's action links (copy, regenerate, edit, delete) at the
    foot of its card; they are drawn for the indexes in ``shown_actions`` only
    (:func:`show_actions` draws or hides them later).

    ``fallback_model`` names replies saved before each reply kept its own model.
    ``open_thinking`` holds the indexes of the replies whose thinking is shown (the pending
    reply's index is ``len(messages)``); the others show only the thinking's header.
    ``intro``: what an empty chat shows (the model, its abilities, starter prompts).
    ``names``: model id -> the name the model picker shows, for the replies' headers (the
    picker and the replies named one model two ways); the figures line keeps the id, the
    name clients use. ``off``: action name -> why it cannot work now (drawn greyed out,
    still a link: running it says why and offers the fix).
    """
    names = names or {}
    document.clear()
    document.setDocumentMargin(PAGE_MARGIN)
    document.setUndoRedoEnabled(False)  # a read-only view: re-colouring its links is no edit
    cursor = QTextCursor(document)
    cursor.beginEditBlock()
    was_dropped = False
    spans: list[tuple[int, int]] = []
    codes: list[str] = []
    runs: dict[int, list[ActionRun]] = {}
    starters: list[tuple[int, int]] = []
    if not messages and pending is None and intro is not None:
        starters = write_intro(cursor, intro)
    for index, message in enumerate(messages):
        dropped = message.get("dropped", False)
        if was_dropped and not dropped:
            _note(cursor, DROPPED_NOTE)
        was_dropped = dropped
        start = cursor.position()  # the card's own line: the message starts there
        card = _open_card(cursor, message["role"])
        message_runs: list[ActionRun] | None = [] if actions else None
        _message(
            cursor,
            message,
            fallback_model,
            index in open_thinking,
            index,
            codes,
            message_runs,
            names,
        )
        if dropped:
            _dim(cursor, start)
        if message_runs is not None:
            runs[index] = message_runs
        spans.append((start, cursor.position()))
        _close_card(cursor, card)
    if pending is not None:
        card = _open_card(cursor, "assistant")
        _header(cursor, names.get(pending.model, pending.model))
        if pending.thinking.strip():
            label = thinking_label(pending.thinking_seconds)
            key = len(messages)
            _thinking(cursor, pending.thinking, label, key in open_thinking, key, codes)
        if pending.text or not pending.thinking.strip():
            _markdown(cursor, pending.text or "…", codes)
        _close_card(cursor, card)
    if cursor.block().length() == 1 and cursor.currentFrame() is document.rootFrame():
        _join_above(cursor)  # the empty line Qt keeps after the last card: no extra scroll
    cursor.endEditBlock()
    _shade_code_blocks(document)
    align_table_headers(document)
    for index, message_runs in runs.items():
        show_actions(document, message_runs, index in shown_actions, off)
    return Rendered(spans, codes, runs, starters)


def _open_card(cursor: QTextCursor, role: str) -> QTextFrame:
    """A card for one turn; the cursor ends inside it."""
    card = QTextFrameFormat()
    user = role == "user"
    card.setBackground(theme.colour("user_card_background" if user else "card_background"))
    card.setBorder(1)
    card.setBorderBrush(theme.colour("card_border"))
    card.setBorderStyle(QTextFrameFormat.BorderStyle.BorderStyle_Solid)
    card.setPadding(CARD_PADDING)
    card.setTopMargin(0)
    card.setBottomMargin(CARD_GAP)
    if user:
        card.setLeftMargin(USER_INDENT)
    card.setProperty(_CARD, role)
    _join_above(cursor)
    return cursor.insertFrame(card)


def boxes_in(document: QTextDocument) -> list[QTextFrame]:
    """The boxes drawn inside the turns (thinking, tool calls, code blocks, quotes,
    tables), in order: every frame but the turns' cards and header rows."""
    found: list[QTextFrame] = []

    def walk(frame: QTextFrame) -> None:
        for child in frame.childFrames():
            layout = child.frameFormat()
            if layout.hasProperty(_CARD):
                walk(child)
            elif not layout.hasProperty(_HEADER_ROW):
                found.append(child)

    walk(document.rootFrame())
    return found


def _close_card(cursor: QTextCursor, card: QTextFrame) -> None:
    """Leave the card: the cursor stands in the (empty) line below it."""
    cursor.setPosition(card.lastPosition() + 1)


def _join_above(cursor: QTextCursor) -> None:
    """A frame about to open on an empty line (the document's first, or one below another
    frame): flatten that line (it cannot merge upwards), so cards keep only their own gap."""
    if cursor.block().length() == 1:
        flat = QTextBlockFormat()
        flat.setLineHeight(0, QTextBlockFormat.LineHeightTypes.FixedHeight.value)
        cursor.setBlockFormat(flat)


def figures_text(model: str, figures: ReplyFigures) -> str:
    """The quiet line under a reply: who wrote it and how fast."""
    parts = [model]
    if figures["tokens_per_second"]:
        parts.append(f"{figures['tokens_per_second']:.1f} tokens/s")
    if figures["ttft_seconds"] is not None:
        parts.append(f"TTFT {figures['ttft_seconds'] * 1000:.0f} ms")
    parts.append(f"{figures['tokens']} token{'' if figures['tokens'] == 1 else 's'}")
    return " · ".join(parts)


def size_text(size: int) -> str:
    """A file size a person reads at a glance (a 347-byte file is not "0 KB")."""
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / 1024 / 1024:.1f} MB"


def chip_text(name: str, size: int, tokens: int) -> str:
    """An attachment as its chip reads (plain text: no emoji font is needed)."""
    return f"Attached: {name} · {size_text(size)} · {tokens} tokens"


def message_actions(message: ChatMessage) -> list[str]:
    """What can be done to a message: copy, read aloud and regenerate (replies), edit
    (what was typed), delete."""
    role = message["role"]
    if role == "assistant":
        return ["copy", "read", "regenerate", "delete"]
    if role == "user":
        return ["copy", "edit", "delete"]
    return ["delete"]


def version_actions(message: ChatMessage) -> list[str]:
    """The version links a regenerated reply has now: "previous", "next" (none at the ends)."""
    count, shown = len(message.get("versions", [])), message.get("version", 0)
    steps = {"previous": shown > 0, "next": shown < count - 1}
    return [name for name, possible in steps.items() if count > 1 and possible]


def _versions(cursor: QTextCursor, message: ChatMessage, index: int) -> None:
    """The arrows and "2/3" before a regenerated reply's links: which version shows, and links to the
    others (the ends' arrows are dim text, not links)."""
    count = len(message.get("versions", []))
    if count < 2:
        return
    shown = message.get("version", 0)
    possible = version_actions(message)
    for name, arrow in (("previous", "\u2039"), ("next", "\u203a")):
        if name == "next":
            cursor.insertText(f" {shown + 1}/{count} ", _char(colour=DIM))
        link = _char(colour=DIM)
        if name in possible:
            link.setAnchor(True)
            link.setAnchorHref(f"{ACTION_SCHEME}:{name}/{index}")
            link.setToolTip(ACTION_LABELS[name])
        cursor.insertText(arrow, link)
    cursor.insertText("   ", _char(colour=DIM))


def _actions(cursor: QTextCursor, message: ChatMessage, index: int) -> list[ActionRun]:
    """The message's action pills on a line of their own at the foot of its card (Tab
    reaches them, Enter runs them); returns where each is."""
    line = QTextBlockFormat()
    line.setTopMargin(6)
    if cursor.block().length() > 1:
        cursor.insertBlock(line, QTextCharFormat())
    else:
        cursor.setBlockFormat(line)
    return _pills(cursor, message, index)


def _pills(cursor: QTextCursor, message: ChatMessage, index: int) -> list[ActionRun]:
    """The message's action pills at ``cursor``; returns where each is."""
    runs: list[ActionRun] = []
    _versions(cursor, message, index)
    for number, name in enumerate(message_actions(message)):
        if number:
            cursor.insertText("  ", QTextCharFormat())
        href = f"{ACTION_SCHEME}:{name}/{index}"
        start = cursor.position()
        cursor.insertText(f"{_PILL}{ACTION_LABELS[name]}{_PILL}", _action_format(href, True))
        runs.append(ActionRun(start, cursor.position(), href))
    cursor.setCharFormat(QTextCharFormat())
    return runs


def _action_format(href: str, shown: bool, off: Mapping[str, str] | None = None) -> QTextCharFormat:
    """An action link: a pill (link colour on a tint) when shown, greyed out when ``off``
    names it (with the reason in its tooltip), else invisible (its room kept, its link
    still there for Tab)."""
    name, _, _ = href.partition(":")[2].partition("/")
    label = ACTION_LABELS.get(name, name)
    why = (off or {}).get(name)
    link = QTextCharFormat()
    link.setAnchor(True)
    link.setAnchorHref(href)
    if why is not None:
        link.setToolTip(f"{label} is off: {why}")
    elif name == "read":
        link.setToolTip("Read this reply aloud (again: stop)")
    else:
        link.setToolTip(f"{label} this message")
    link.setFontPointSize(max(QFont().pointSizeF() - 1, 6))
    if shown:
        link.setForeground(theme.colour("dim" if why is not None else "link"))
        link.setBackground(theme.colour("action_background"))
    else:
        link.setForeground(QBrush(Qt.GlobalColor.transparent))
    return link


def show_actions(
    document: QTextDocument,
    runs: list[ActionRun],
    shown: bool,
    off: Mapping[str, str] | None = None,
) -> None:
    """Draw (``shown``) or hide one message's action pills, in place (nothing moves)."""
    for run in runs:
        cursor = QTextCursor(document)
        cursor.setPosition(run.start)
        cursor.setPosition(run.end, QTextCursor.MoveMode.KeepAnchor)
        cursor.setCharFormat(_action_format(run.href, shown, off))


def _message(
    cursor: QTextCursor,
    message: ChatMessage,
    fallback_model: str,
    thinking_open: bool,
    index: int,
    codes: list[str],
    runs: list[ActionRun] | None = None,
    names: Mapping[str, str] | None = None,
) -> None:
    """One message in its card; its action pills go into ``runs`` (None: no actions)."""
    role, text = message["role"], message["content"]
    actions = None if runs is None else (message, index, runs)
    if role == "error":
        _text(cursor, f"Error: {text}", colour=ERROR)
        if runs is not None:
            runs.extend(_actions(cursor, message, index))
    elif role == "user":
        _header(cursor, "You", "not sent" if message.get("failed", False) else None, actions)
        for attached in message.get("attachments", []):
            chip = chip_text(attached["name"], attached["size"], attached["tokens"])
            cursor.insertText(chip, _char(colour=THINKING_TEXT, bold=True))
            cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
        write_thumbnails(cursor, message.get("images", []))
        _text(cursor, text)
    else:
        model = message.get("model") or fallback_model
        _header(cursor, (names or {}).get(model, model), None, actions)
        thinking, calls = message.get("thinking", "").strip(), message.get("calls", [])
        if thinking:  # a model that thought nothing (an empty think block) shows no box
            label = thinking_label(message.get("thinking_seconds", 0.0))
            _thinking(cursor, thinking, label, thinking_open, index, codes)
        answer = bool(text) or not (thinking or calls)
        if answer:
            _markdown(cursor, text, codes)
        for call in calls:
            _tool_call(cursor, call)
        _markers(cursor, message, fallback_model)


def _markers(cursor: QTextCursor, message: ChatMessage, fallback_model: str) -> None:
    """Under a reply: stopped, interrupted or cut, then its figures. A marker stands on a
    line of its own, never glued to the answer's last word (after a thinking header or a
    box the cursor already stands on a new line)."""
    if message.get("stopped", False):
        _text(cursor, "(stopped)", colour=DIM, italic=True, new_block=_on_text(cursor))
    if message.get("interrupted", False):
        _text(
            cursor,
            "(interrupted: the engine stopped part way)",
            colour=DIM,
            italic=True,
            new_block=_on_text(cursor),
        )
    cut_at = message.get("cut_at")
    if cut_at:
        _text(cursor, cut_marker(cut_at), colour=DIM, italic=True, new_block=_on_text(cursor))
    figures = message.get("figures")
    if figures is not None:
        quiet = _char(colour=DIM)
        quiet.setFontPointSize(max(QFont().pointSizeF() - 1, 6))
        if cursor.block().length() > 1:
            cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
        cursor.insertText(figures_text(message.get("model") or fallback_model, figures), quiet)


def _on_text(cursor: QTextCursor) -> bool:
    """Whether the cursor's line already holds text (a marker then starts a new line)."""
    return cursor.block().length() > 1


def _thinking(
    cursor: QTextCursor, text: str, label: str, is_open: bool, index: int, codes: list[str]
) -> None:
    """The thinking's header link and, when open, the thinking in a shaded box."""
    link = _char(colour=DIM)
    link.setAnchor(True)
    link.setAnchorHref(f"{THINKING_SCHEME}:{index}")
    link.setToolTip("Hide the thinking" if is_open else "Show the thinking")
    cursor.insertText(f"{_OPEN if is_open else _CLOSED} {label}", link)
    if is_open:
        start = cursor.position()
        _box(cursor, lambda: _markdown(cursor, text, codes))
        _dim(cursor, start, THINKING_TEXT)
    else:
        cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())


def _tool_call(cursor: QTextCursor, call: ToolCallRecord) -> None:
    """A box naming the function, with its arguments as indented JSON."""

    def write() -> None:
        cursor.insertText("Tool call  ", _char(colour=DIM))
        cursor.insertText(call["name"], _char(bold=True, fixed=True))
        cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
        cursor.insertText(_pretty_arguments(call["arguments"]), _char(fixed=True))

    _box(cursor, write)


def _box(cursor: QTextCursor, write: Callable[[], None]) -> None:
    """Run ``write`` inside a shaded, bordered frame; the cursor ends below the frame."""
    frame_format = QTextFrameFormat()
    frame_format.setBackground(BOX_BACKGROUND)
    frame_format.setBorder(1)
    frame_format.setBorderBrush(BOX_BORDER)
    frame_format.setBorderStyle(QTextFrameFormat.BorderStyle.BorderStyle_Solid)
    frame_format.setPadding(6)
    frame_format.setTopMargin(3)
    frame_format.setBottomMargin(6)
    if cursor.block().length() == 1 and cursor.block().previous().isValid():
        # The frame opens its own block: no empty line above it. Below another box the
        # empty line cannot merge upwards, so it is flattened instead.
        before = cursor.position()
        cursor.deletePreviousChar()
        if cursor.position() == before:
            flat = QTextBlockFormat()
            flat.setLineHeight(0, QTextBlockFormat.LineHeightTypes.FixedHeight.value)
            cursor.setBlockFormat(flat)
    frame = cursor.insertFrame(frame_format)
    write()
    cursor.setPosition(frame.lastPosition() + 1)


def _pretty_arguments(arguments: str) -> str:
    """The arguments as indented JSON, or as the model wrote them when they are not JSON."""
    try:
        return json.dumps(json.loads(arguments or "{}"), indent=2, ensure_ascii=False)
    except json.JSONDecodeError:
        return arguments


def _header(
    cursor: QTextCursor,
    who: str,
    note: str | None = None,
    actions: tuple[ChatMessage, int, list[ActionRun]] | None = None,
) -> None:
    """The card's first line: who wrote it (and a note), with the message's action pills
    at its right end when ``actions`` gives (message, index, runs to fill)."""
    bold = QTextCharFormat()
    bold.setFontWeight(QFont.Weight.Bold)
    if actions is None:
        cursor.insertText(who, bold)
        if note:
            cursor.insertText(f"  ({note})", _char(colour=DIM, italic=True))
        cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
        return
    message, index, runs = actions
    row = QTextTableFormat()
    row.setWidth(QTextLength(QTextLength.Type.PercentageLength, 100))
    row.setColumnWidthConstraints(
        [
            QTextLength(QTextLength.Type.PercentageLength, 45),
            QTextLength(QTextLength.Type.PercentageLength, 55),
        ]
    )
    row.setBorder(0)
    row.setCellPadding(0)
    row.setCellSpacing(0)
    row.setBottomMargin(2)
    row.setProperty(_HEADER_ROW, True)
    table = cursor.insertTable(1, 2, row)
    name = table.cellAt(0, 0).firstCursorPosition()
    name.insertText(who, bold)
    if note:
        name.insertText(f"  ({note})", _char(colour=DIM, italic=True))
    right = table.cellAt(0, 1).firstCursorPosition()
    end = QTextBlockFormat()
    end.setAlignment(Qt.AlignmentFlag.AlignRight)
    right.setBlockFormat(end)
    runs.extend(_pills(right, message, index))
    cursor.setPosition(table.lastPosition() + 1)


def _text(
    cursor: QTextCursor,
    text: str,
    *,
    colour: QColor | None = None,
    italic: bool = False,
    new_block: bool = False,
) -> None:
    """Plain text: every line break is a line break, ``**`` is two asterisks."""
    if new_block:
        cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
    cursor.insertText(text, _char(colour=colour, italic=italic))


def _markdown(cursor: QTextCursor, text: str, codes: list[str]) -> None:
    write_markdown(cursor, text, codes)
    cursor.setCharFormat(QTextCharFormat())


def _note(cursor: QTextCursor, text: str) -> None:
    """A line between cards (the cursor stands on the empty line below a card)."""
    note = QTextBlockFormat()
    note.setBottomMargin(CARD_GAP)
    note.setAlignment(Qt.AlignmentFlag.AlignHCenter)
    cursor.setBlockFormat(note)
    cursor.insertText(text, _char(colour=DIM, italic=True))
    cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())


def _dim(cursor: QTextCursor, start: int, colour: QColor = DIM) -> None:
    """Grey out what was written since ``start`` (a dropped turn, thinking)."""
    selection = QTextCursor(cursor)
    selection.setPosition(start)
    selection.setPosition(cursor.position(), QTextCursor.MoveMode.KeepAnchor)
    selection.mergeCharFormat(_char(colour=colour))


def _char(
    *, colour: QColor | None = None, italic: bool = False, bold: bool = False, fixed: bool = False
) -> QTextCharFormat:
    char = QTextCharFormat()
    if colour is not None:
        char.setForeground(colour)
    if italic:
        char.setFontItalic(True)
    if bold:
        char.setFontWeight(QFont.Weight.Bold)
    if fixed:
        char.setFontFamilies(
            [QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont).family()]
        )
        char.setFontFixedPitch(True)
    return char


def _shade_code_blocks(document: QTextDocument) -> None:
    """Give code Qt's Markdown import wrote (a fence inside a list, a quote) a background
    (it sets only a monospace font) and let its lines wrap, never widen the transcript."""
    block = document.begin()
    while block.isValid():
        layout = block.blockFormat()
        if layout.hasProperty(QTextFormat.Property.BlockCodeFence):
            layout.setBackground(CODE_BACKGROUND)
            layout.setNonBreakableLines(False)
            QTextCursor(block).setBlockFormat(layout)
        block = block.next()


class TranscriptView(QTextBrowser):
    """The transcript widget: shows a conversation and opens or closes a reply's thinking
    when its header is clicked (a streaming reply's thinking is open until its answer
    starts; then closed, unless the person opened or closed it). Other links in replies open
    in the browser.

    Threading: GUI thread only.
    """

    starter_chosen = Signal(str)  # a starter prompt of the empty chat was clicked

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("transcript")  # the theme's style sheet gives it its page colour
        self.setOpenLinks(False)  # links are handled here: thinking headers, web pages
        self.anchorClicked.connect(self._on_anchor)
        self.viewport().setMouseTracking(True)  # hovering a card shows its actions
        self.cursorPositionChanged.connect(self._sync_actions)
        self.selectionChanged.connect(self._sync_actions)  # Tab selects the next link
        self._intro: Intro | None = None
        self._names: dict[str, str] = {}  # model id -> the picker's name for it
        self._off: dict[str, str] = {}  # action name -> why it cannot work now
        self._actions: dict[int, list[ActionRun]] = {}
        self._hovered: int | None = None  # the message under the pointer
        self._shown: int | None = None  # the message whose actions are drawn
        self._messages: list[ChatMessage] = []
        self._pending: Pending | None = None
        self._fallback_model = "Assistant"
        self._toggled: dict[int, bool] = {}  # reply index -> open, as the person left it
        self._spans: list[tuple[int, int]] = []
        self._code_blocks: list[str] = []
        self._stale = False  # the theme changed while hidden: render when shown
        self.action_handler: Callable[[str, int], None] | None = None

    def show_conversation(
        self,
        messages: list[ChatMessage],
        pending: Pending | None,
        *,
        fallback_model: str,
        to_end: bool = False,
    ) -> None:
        """Render the conversation; stay at the bottom if it was there (or ``to_end``)."""
        bar = self.verticalScrollBar()
        at_bottom = to_end or bar.value() >= bar.maximum() - 4
        self._messages, self._pending, self._fallback_model = messages, pending, fallback_model
        self._render()
        if at_bottom:
            self.scroll_to_end()

    def set_intro(self, intro: Intro | None) -> None:
        """What the chat shows while it is empty (redrawn now if it is empty)."""
        if intro == self._intro:
            return
        self._intro = intro
        if not self._messages and self._pending is None:
            self._render()

    def set_model_names(self, names: dict[str, str]) -> None:
        """The model picker's names, for the replies' headers (redrawn when they change)."""
        if names != self._names:
            self._names = dict(names)
            self._rerender()

    def set_action_off(self, name: str, why: str | None) -> None:
        """Draw action ``name`` greyed out with ``why`` in its tooltip (None: as usual)."""
        wanted = dict(self._off)
        if why is None:
            wanted.pop(name, None)
        else:
            wanted[name] = why
        if wanted != self._off:
            self._off = wanted
            self._rerender()

    @property
    def actions_off(self) -> dict[str, str]:
        return dict(self._off)

    @property
    def intro(self) -> Intro | None:
        return self._intro

    @property
    def actions_shown(self) -> int | None:
        """The message whose action pills are drawn (hovered, or the keyboard in it)."""
        return self._shown

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        super().mouseMoveEvent(event)
        self._hovered = self.message_under(event.position().toPoint())
        self._sync_actions()

    def leaveEvent(self, event: QEvent) -> None:
        super().leaveEvent(event)
        self._hovered = None
        self._sync_actions()

    def focusNextPrevChild(self, next: bool) -> bool:
        """Tab walks the links without a cursor signal: draw the pills of the link's
        message."""
        moved = super().focusNextPrevChild(next)
        self._sync_actions()
        return moved

    def focusInEvent(self, event: QFocusEvent) -> None:
        super().focusInEvent(event)
        self._sync_actions()

    def focusOutEvent(self, event: QFocusEvent) -> None:
        super().focusOutEvent(event)
        self._sync_actions()

    def _wanted_actions(self) -> int | None:
        """Whose actions to draw: the hovered message's, else (the keyboard in the
        transcript, or a link picked by Tab) the text cursor's message's."""
        if self._hovered is not None:
            return self._hovered
        cursor = self.textCursor()
        if self.hasFocus() or cursor.hasSelection():
            return self.message_at(cursor.selectionStart())
        return None

    def _sync_actions(self) -> None:
        wanted = self._wanted_actions()
        if wanted == self._shown:
            return
        document, was = self.document(), self._shown
        self._shown = wanted  # first: re-colouring may come back here through a signal
        if was is not None and was in self._actions:
            show_actions(document, self._actions[was], False, self._off)
        if wanted is not None and wanted in self._actions:
            show_actions(document, self._actions[wanted], True, self._off)

    def forget_toggles(self) -> None:
        """Another conversation is shown: every thinking section starts closed."""
        self._toggled.clear()

    def thinking_is_open(self, index: int) -> bool:
        pending = self._pending
        still_thinking = (
            pending is not None
            and index == len(self._messages)
            and pending.thinking_seconds is None
        )
        return self._toggled.get(index, still_thinking)

    def toggle_thinking(self, index: int) -> None:
        self._toggled[index] = not self.thinking_is_open(index)
        bar = self.verticalScrollBar()
        keep = bar.value()
        self._render()
        bar.setValue(keep)

    def message_at(self, position: int) -> int | None:
        """The index of the message at a document position (None: none there)."""
        for index, (start, end) in enumerate(self._spans):
            if start <= position <= end:
                return index
        return None

    def message_under(self, point: QPoint) -> int | None:
        """The message under a viewport point."""
        return self.message_at(self.cursorForPosition(point).position())

    def focused_message(self) -> int | None:
        """The message the keyboard is on: the text cursor's (a focused link, a selection),
        else the last one."""
        cursor = self.textCursor()
        if cursor.hasSelection() or self.hasFocus():
            found = self.message_at(cursor.selectionStart())
            if found is not None:
                return found
        return len(self._messages) - 1 if self._messages else None

    def scroll_to_end(self) -> None:
        self.moveCursor(QTextCursor.MoveOperation.End)
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    def changeEvent(self, event: QEvent) -> None:
        """The light/dark theme changed: draw the conversation in the new colours, now if
        it can be seen, else when it is shown (every closed chat window re-rendering its
        code blocks on each switch made a theme change take seconds)."""
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            if self.isVisible():
                self._rerender()
            else:
                self._stale = True

    def showEvent(self, event: QShowEvent) -> None:
        if self._stale:
            self._rerender()
        super().showEvent(event)

    def _rerender(self) -> None:
        """Render again where the person is (the scroll position kept)."""
        self._stale = False
        bar = self.verticalScrollBar()
        keep = bar.value()
        self._render()
        bar.setValue(keep)

    def _render(self) -> None:
        self._stale = False
        count = len(self._messages) + 1  # the pending reply's index is len(messages)
        shown = self._shown
        rendered = render_transcript(
            self.document(),
            self._messages,
            self._pending,
            fallback_model=self._fallback_model,
            open_thinking={i for i in range(count) if self.thinking_is_open(i)},
            intro=self._intro,
            shown_actions=() if shown is None else (shown,),
            names=self._names,
            off=self._off,
        )
        self._spans, self._code_blocks = rendered.spans, rendered.code_blocks
        self._actions = rendered.actions
        if shown not in self._actions:
            self._shown = None
        self._sync_actions()

    def copy_code(self, index: int) -> bool:
        """Put code block ``index``'s code on the clipboard, exactly as the reply wrote it
        (no header, no Markdown fence); False when there is no such block."""
        if not 0 <= index < len(self._code_blocks):
            return False
        QGuiApplication.clipboard().setText(self._code_blocks[index])
        return True

    def _on_anchor(self, url: QUrl) -> None:
        if url.scheme() == THINKING_SCHEME and url.path().isdigit():
            self.toggle_thinking(int(url.path()))
        elif url.scheme() == COPY_CODE_SCHEME and url.path().isdigit():
            self.copy_code(int(url.path()))
        elif url.scheme() == STARTER_SCHEME and url.path().isdigit():
            intro = self._intro
            if intro is not None and int(url.path()) < len(intro.starters):
                self.starter_chosen.emit(intro.starters[int(url.path())])
        elif url.scheme() == ACTION_SCHEME:
            name, _, index = url.path().partition("/")
            if name in ACTION_LABELS and index.isdigit() and self.action_handler is not None:
                self.action_handler(name, int(index))
        elif url.scheme() in ("http", "https", "mailto"):
            QDesktopServices.openUrl(url)
