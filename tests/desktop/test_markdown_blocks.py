"""Issue 28, defect 9: Markdown in replies as a person reads it: table headers over their
columns, blockquotes with a bar, code blocks with a header bar (language, Copy), syntax
colours from the theme in both schemes, and long code lines that wrap inside their block.

No engine: the transcript renders a conversation given to it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import (
    QGuiApplication,
    QTextBlock,
    QTextCursor,
    QTextDocument,
    QTextFormat,
    QTextFragment,
    QTextTable,
)
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from desktop import theme
from desktop.history import ChatMessage
from desktop.views.markdown_blocks import COPY_CODE_SCHEME, highlight, segments
from desktop.views.transcript import TranscriptView, render_transcript

CODE = 'def hello(name):\n    print(f"hi {name}")  # greet\n\n    return 42'
REPLY = f"""Figures:

| Name | Count | Note |
|------|------:|:----:|
| alpha | 1 | first |
| beta | 22 | second |

> Quoted advice
> on two lines.

```python
{CODE}
```
"""


@pytest.fixture(autouse=True)
def back_to_light() -> Iterator[None]:
    """The QApplication outlives a test: leave it light, as the other tests expect."""
    yield
    theme.ThemeManager("light").apply()


def reply(text: str) -> list[ChatMessage]:
    return [
        ChatMessage(role="user", content="Show me"),
        ChatMessage(role="assistant", content=text, model="demo"),
    ]


def tables(document: QTextDocument) -> list[QTextTable]:
    """Every table, nested ones too (a code block's header bar is one inside its first row)."""
    found = []
    frames = list(document.rootFrame().childFrames())
    while frames:
        frame = frames.pop(0)
        if isinstance(frame, QTextTable):
            found.append(frame)
        frames.extend(frame.childFrames())
    return found


def cell_text(table: QTextTable, row: int, column: int) -> str:
    cell = table.cellAt(row, column)
    cursor = QTextCursor(table.document())
    cursor.setPosition(cell.firstPosition())
    cursor.setPosition(cell.lastPosition(), QTextCursor.MoveMode.KeepAnchor)
    return cursor.selectedText()


def fragments(block: QTextBlock) -> list[QTextFragment]:
    found = []
    it = block.begin()
    while not it.atEnd():
        found.append(it.fragment())
        it += 1
    return found


def test_segments_split_fences_and_quotes_and_keep_code_exact() -> None:
    found = segments("Intro\n\n```py\n> not a quote\n```\n> a quote\nafter\n~~~\nopen")
    assert [(s.kind, s.text, s.language) for s in found] == [
        ("markdown", "Intro\n", ""),
        ("code", "> not a quote", "py"),
        ("quote", "a quote", ""),
        ("markdown", "after", ""),
        ("code", "open", ""),  # still streaming: runs to the end
    ]
    lines = highlight(CODE, "python")
    assert "\n".join("".join(text for text, _ in line) for line in lines) == CODE
    assert ("def", "code_keyword") in lines[0]
    assert all(colour is None for _, colour in highlight(CODE, "no-such-language")[0])


def test_table_headers_are_aligned_like_their_columns(qapp: QApplication) -> None:
    document = QTextDocument()
    render_transcript(document, reply(REPLY))
    table = next(t for t in tables(document) if t.columns() == 3)
    horizontal = Qt.AlignmentFlag.AlignHorizontal_Mask
    for column in range(3):
        header = table.cellAt(0, column).firstCursorPosition().blockFormat().alignment()
        body = table.cellAt(1, column).firstCursorPosition().blockFormat().alignment()
        assert header & horizontal == body & horizontal
    right = table.cellAt(0, 1).firstCursorPosition().blockFormat().alignment()
    assert right & Qt.AlignmentFlag.AlignRight


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_blockquotes_have_a_bar_and_muted_text(qapp: QApplication, scheme: str) -> None:
    theme.ThemeManager(scheme).apply()  # type: ignore[arg-type]
    colours = theme.SCHEMES[scheme]  # type: ignore[index]
    document = QTextDocument()
    render_transcript(document, reply(REPLY))
    quote = next(t for t in tables(document) if "Quoted advice" in cell_text(t, 0, 1))
    bar = quote.cellAt(0, 0).format().background().color().name()
    assert bar == colours.values["quote_bar"]
    text_block = quote.cellAt(0, 1).firstCursorPosition().block()
    runs = fragments(text_block)
    assert runs and all(
        f.charFormat().foreground().color().name() == colours.values["quote_text"] for f in runs
    )
    assert ">" not in cell_text(quote, 0, 1)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_code_blocks_have_a_header_copy_and_theme_colours(qtbot: QtBot, scheme: str) -> None:
    theme.ThemeManager(scheme).apply()  # type: ignore[arg-type]
    colours = theme.SCHEMES[scheme]  # type: ignore[index]
    view = TranscriptView()
    qtbot.addWidget(view)
    view.show_conversation(reply(REPLY), None, fallback_model="demo")
    found = tables(view.document())
    header = next(t for t in found if t.columns() == 2 and cell_text(t, 0, 0) == "python")
    assert cell_text(header, 0, 1) == "Copy"
    copy_format = header.cellAt(0, 1).firstCursorPosition()
    copy_format.movePosition(QTextCursor.MoveOperation.Right)
    assert copy_format.charFormat().anchorHref() == f"{COPY_CODE_SCHEME}:0"
    code = header.parentFrame()  # the bar sits in the code block's first row
    assert isinstance(code, QTextTable) and code.rows() == 2
    assert code.cellAt(0, 0).format().background().color().name() == colours.values["code_header"]

    first_line = code.cellAt(1, 0).firstCursorPosition().block()
    assert first_line.text() == "def hello(name):"
    assert first_line.blockFormat().hasProperty(QTextFormat.Property.BlockCodeFence)
    keyword = fragments(first_line)[0]
    assert keyword.text() == "def"
    assert keyword.charFormat().foreground().color().name() == colours.values["code_keyword"]
    assert keyword.charFormat().fontFixedPitch()

    QGuiApplication.clipboard().clear()
    view.anchorClicked.emit(QUrl(f"{COPY_CODE_SCHEME}:0"))
    assert QGuiApplication.clipboard().text() == CODE  # the code alone, exactly


def test_a_long_code_line_wraps_inside_its_block(qtbot: QtBot) -> None:
    view = TranscriptView()
    qtbot.addWidget(view)
    view.resize(420, 500)
    view.show()
    long_line = "x = " + " + ".join(f"value_{n}" for n in range(60)) + "_" * 80
    unbroken = "```\n" + "y" * 300 + "\n```"
    view.show_conversation(
        reply(f"```python\n{long_line}\n```\n\n{unbroken}"), None, fallback_model="demo"
    )
    qapp = QApplication.instance()
    assert qapp is not None
    qapp.processEvents()
    assert view.horizontalScrollBar().maximum() == 0
    assert view.document().size().width() <= view.viewport().width() + 1
