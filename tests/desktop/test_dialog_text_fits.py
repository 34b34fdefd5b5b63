"""The chat settings and the model settings dialogs draw their labels and hints whole: no
row label loses its last letter ("Temperature" did, at 1x and 2x) and no empty field cuts
its hint short. Checked on the pixels the labels draw, in the app's style and theme."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QLineEdit, QStyle, QStyleOptionFrame
from pytestqt.qtbot import QtBot

from desktop.app import DesktopApp
from desktop.history import ChatSettings
from desktop.views.chat_settings import ChatSettingsDialog
from desktop.views.form_label import FormLabel
from tests.desktop.test_model_settings import MODEL, _open


def inked_to_the_edge(label: QLabel) -> bool:
    """Whether the label's text is drawn into its last pixel column (its ink cut there)."""
    image = label.grab().toImage()
    background = image.pixelColor(0, 0).lightness()
    last = image.width() - 1
    return any(
        abs(image.pixelColor(last, y).lightness() - background) > 60 for y in range(image.height())
    )


def hint_room(edit: QLineEdit) -> int:
    """The pixels the field has for its text (its contents rect less Qt's 2 px a side)."""
    option = QStyleOptionFrame()
    edit.initStyleOption(option)
    rect = edit.style().subElementRect(QStyle.SubElement.SE_LineEditContents, option, edit)
    margins = edit.textMargins()
    return rect.width() - margins.left() - margins.right() - 4


def test_chat_settings_labels_are_drawn_whole(qtbot: QtBot, desktop: DesktopApp) -> None:
    dialog = ChatSettingsDialog(ChatSettings(), "Be brief.", desktop.chat)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    labels = dialog.findChildren(FormLabel)
    assert {label.text() for label in labels} >= {"&Temperature", "&System prompt"}
    assert [label.text() for label in labels if inked_to_the_edge(label)] == []


def test_model_settings_labels_and_hints_are_drawn_whole(qtbot: QtBot, desktop: DesktopApp) -> None:
    manager, dialog = _open(qtbot, desktop, MODEL)
    qtbot.waitExposed(dialog)
    labels = dialog.findChildren(FormLabel)
    assert "Temperature" in {label.text() for label in labels}
    assert [label.text() for label in labels if inked_to_the_edge(label)] == []
    cut = [
        edit.placeholderText()
        for edit in dialog.fields.values()
        if edit.fontMetrics().horizontalAdvance(edit.placeholderText()) > hint_room(edit)
    ]
    assert cut == []
    dialog.close()
    manager.close()
