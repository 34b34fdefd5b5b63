"""The chat transcript, written into a ``QTextDocument``.

Replies are Markdown (code blocks stay code blocks); what the person typed is plain text with
its line breaks kept, never Markdown. Markers the window adds (*stopped*, *not sent*, the
dropped part) are formatting around the text, so they never end up in a copied or resent reply.

Threading: GUI thread only.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import (
    QColor,
    QFont,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextFormat,
)

from desktop.history import ChatMessage

CODE_BACKGROUND = QColor("#eef1f5")
DIM = QColor("#8a8f98")
ERROR = QColor("#c93434")
DROPPED_NOTE = "Turns above are no longer sent to the model (dropped from the context)"


@dataclass(frozen=True)
class Pending:
    """A reply still streaming: its text so far and the model writing it."""

    text: str
    model: str


def render_transcript(
    document: QTextDocument,
    messages: list[ChatMessage],
    pending: Pending | None = None,
    *,
    fallback_model: str = "Assistant",
) -> None:
    """Replace ``document``'s content with the conversation.

    ``fallback_model`` names replies saved before each reply kept its own model.
    """
    document.clear()
    cursor = QTextCursor(document)
    cursor.beginEditBlock()
    first = True
    was_dropped = False
    for message in messages:
        dropped = message.get("dropped", False)
        if not first:
            _rule(cursor)
        if was_dropped and not dropped:
            _note(cursor, DROPPED_NOTE)
            _rule(cursor)
        first, was_dropped = False, dropped
        start = cursor.position()
        _message(cursor, message, fallback_model)
        if dropped:
            _dim(cursor, start)
    if pending is not None:
        if not first:
            _rule(cursor)
        _header(cursor, pending.model)
        _markdown(cursor, pending.text or "…")
    cursor.endEditBlock()
    _shade_code_blocks(document)


def _message(cursor: QTextCursor, message: ChatMessage, fallback_model: str) -> None:
    role, text = message["role"], message["content"]
    if role == "error":
        _text(cursor, f"Error: {text}", colour=ERROR)
    elif role == "user":
        _header(cursor, "You", "not sent" if message.get("failed", False) else None)
        _text(cursor, text)
    else:
        _header(cursor, message.get("model") or fallback_model)
        _markdown(cursor, text)
        if message.get("stopped", False):
            _text(cursor, "(stopped)", colour=DIM, italic=True, new_block=not text)


def _header(cursor: QTextCursor, who: str, note: str | None = None) -> None:
    bold = QTextCharFormat()
    bold.setFontWeight(QFont.Weight.Bold)
    cursor.insertText(who, bold)
    if note:
        cursor.insertText(f"  ({note})", _char(colour=DIM, italic=True))
    cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())


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


def _markdown(cursor: QTextCursor, text: str) -> None:
    cursor.insertMarkdown(_closed_fences(text))
    cursor.setCharFormat(QTextCharFormat())


def _note(cursor: QTextCursor, text: str) -> None:
    cursor.insertText(text, _char(colour=DIM, italic=True))


def _rule(cursor: QTextCursor) -> None:
    """A horizontal line between messages (what Markdown's ``---`` gives)."""
    rule = QTextBlockFormat()
    rule.setProperty(QTextFormat.Property.BlockTrailingHorizontalRulerWidth, 1)
    cursor.insertBlock(rule, QTextCharFormat())
    after = QTextBlockFormat()
    after.setTopMargin(4)
    cursor.insertBlock(after, QTextCharFormat())


def _dim(cursor: QTextCursor, start: int) -> None:
    """Grey out what was written since ``start`` (a dropped turn)."""
    selection = QTextCursor(cursor)
    selection.setPosition(start)
    selection.setPosition(cursor.position(), QTextCursor.MoveMode.KeepAnchor)
    selection.mergeCharFormat(_char(colour=DIM))


def _char(*, colour: QColor | None = None, italic: bool = False) -> QTextCharFormat:
    char = QTextCharFormat()
    if colour is not None:
        char.setForeground(colour)
    if italic:
        char.setFontItalic(True)
    return char


def _shade_code_blocks(document: QTextDocument) -> None:
    """Give fenced code a background (Qt's Markdown import sets only a monospace font)."""
    block = document.begin()
    while block.isValid():
        layout = block.blockFormat()
        if layout.hasProperty(QTextFormat.Property.BlockCodeFence):
            layout.setBackground(CODE_BACKGROUND)
            QTextCursor(block).setBlockFormat(layout)
        block = block.next()


def _closed_fences(text: str) -> str:
    """Close a code fence that is still streaming so the rest does not render as code."""
    fences = sum(1 for line in text.splitlines() if line.lstrip().startswith("```"))
    return text + "\n```" if fences % 2 else text
