"""Per-message actions of the chat: copy, regenerate, edit-and-resend, delete.

Each is reachable three ways: the quiet links under a message (mouse, or Tab then Enter in
the transcript), the transcript's context menu (right click, or the Menu key / Shift+F10 on
the message the text cursor is in), and window shortcuts that act on the last reply or the
last message typed.

Regenerating or editing a message in the middle of a chat continues the chat from there: the
later turns stay on screen, greyed out under a note, and are no longer sent to the model.

Threading: GUI thread only.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence, QShortcut
from PySide6.QtWidgets import QMenu

from desktop.history import ChatMessage
from desktop.views.notice import NoticeAction
from desktop.views.transcript import ACTION_LABELS, message_actions

if TYPE_CHECKING:
    from desktop.views.chat_window import ChatWindow

REGENERATE_KEYS = QKeySequence("Ctrl+R")
EDIT_KEYS = QKeySequence("Ctrl+E")
MENU_KEYS = QKeySequence(Qt.Key.Key_Menu)


class MessageActions:
    """The actions on one chat window's messages.

    ``editing`` is the index of the message being edited (its text is in the message box);
    the next send replaces it and drops what came after it from the context.
    """

    def __init__(self, window: ChatWindow) -> None:
        self.window = window
        self.editing: int | None = None
        self.last_menu: QMenu | None = None  # the context menu open last (tests read it)
        transcript = window.transcript
        transcript.action_handler = self.run
        transcript.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        transcript.customContextMenuRequested.connect(self._context_menu)
        for keys in (MENU_KEYS, QKeySequence("Shift+F10")):
            # The keyboard's menu on the message the text cursor is in (platforms differ in
            # whether the Menu key alone opens a context menu).
            shortcut = QShortcut(keys, transcript)
            shortcut.setContext(Qt.ShortcutContext.WidgetShortcut)
            shortcut.activated.connect(self._menu_at_cursor)
        self.regenerate_action = self._shortcut(
            "Regenerate the last reply", REGENERATE_KEYS, self.regenerate_last
        )
        self.edit_action = self._shortcut("Edit your last message", EDIT_KEYS, self.edit_last)

    def _shortcut(self, text: str, keys: QKeySequence, slot: object) -> QAction:
        made = QAction(text, self.window)
        made.setShortcut(keys)
        made.triggered.connect(slot)
        self.window.addAction(made)
        return made

    @property
    def messages(self) -> list[ChatMessage]:
        return self.window.conversation.messages

    def run(self, name: str, index: int) -> None:
        """Run action ``name`` ("copy", "regenerate", "edit", "delete") on message ``index``."""
        if not 0 <= index < len(self.messages):
            return
        if name == "copy":
            self.copy(index)
        elif name == "regenerate":
            self.regenerate(index)
        elif name == "edit":
            self.edit(index)
        elif name == "delete":
            self.delete(index)

    # ---- the actions -------------------------------------------------------------------

    def copy(self, index: int) -> None:
        """Copy the message's text alone (no marker, no thinking, no attachment)."""
        QGuiApplication.clipboard().setText(self.messages[index]["content"])

    def regenerate(self, index: int) -> None:
        """Answer again the user message before reply ``index``. The last reply is replaced;
        an earlier one is kept greyed with everything after it, and the question is asked
        again at the end."""
        window = self.window
        if window.busy or self.messages[index]["role"] != "assistant":
            return
        asked = next(
            (i for i in range(index - 1, -1, -1) if self.messages[i]["role"] == "user"), None
        )
        if asked is None:
            return
        if index == len(self.messages) - 1:
            del self.messages[index]
        else:
            question = copy.deepcopy(self.messages[asked])
            question.pop("dropped", None)
            self._drop_from(asked)
            self.messages.append(question)
        window.notice.dismiss()
        window.start_reply()

    def edit(self, index: int) -> None:
        """Take a message typed earlier back into the message box; sending it continues the
        chat from there."""
        window = self.window
        message = self.messages[index]
        if window.busy or message["role"] != "user":
            return
        self.editing = index
        window.input.setPlainText(message["content"])
        window.pending_attachments.set(list(message.get("attachments", [])))
        later = len(self.messages) - index - 1
        what = (
            "Sending it replaces the message"
            if later == 0
            else f"Sending it replaces the message; the {later} message{'s' * (later > 1)} "
            "after it stay here, greyed out, and are no longer sent to the model"
        )
        window.notice.show_notice(
            f"Editing a message. {what}.",
            [NoticeAction("Cancel edit", self.cancel_edit, "Keep the message as it was")],
        )
        window.focus_input()

    def cancel_edit(self) -> None:
        if self.editing is not None:
            self.editing = None
            self.window.input.clear()
            self.window.pending_attachments.set([])
            self.window.notice.dismiss()

    def take_edit(self) -> None:
        """Called as the edited message is sent: the original and everything after it leave
        the context (the last message alone is simply replaced)."""
        index, self.editing = self.editing, None
        if index is None or index >= len(self.messages):
            return
        if index == len(self.messages) - 1 or all(
            m["role"] == "error" for m in self.messages[index + 1 :]
        ):
            del self.messages[index:]
        else:
            self._drop_from(index)

    def delete(self, index: int) -> None:
        """Delete a message (a refused message takes its error with it)."""
        window = self.window
        if window.busy:
            return
        end = index + 1
        if self.messages[index]["role"] == "user":
            while end < len(self.messages) and self.messages[end]["role"] == "error":
                end += 1
        del self.messages[index:end]
        if self.editing is not None:
            self.cancel_edit()
        window.after_messages_changed()

    def regenerate_last(self) -> None:
        last = self._last("assistant")
        if last is not None:
            self.regenerate(last)

    def edit_last(self) -> None:
        last = self._last("user")
        if last is not None:
            self.edit(last)

    def _last(self, role: str) -> int | None:
        return next(
            (i for i in range(len(self.messages) - 1, -1, -1) if self.messages[i]["role"] == role),
            None,
        )

    def _drop_from(self, index: int) -> None:
        for message in self.messages[index:]:
            if message["role"] == "error":
                continue
            message["dropped"] = True

    # ---- the context menu --------------------------------------------------------------

    def _menu_at_cursor(self) -> None:
        transcript = self.window.transcript
        self._context_menu(transcript.cursorRect().center())

    def _context_menu(self, point: QPoint) -> None:
        """The standard menu (copy, select all) plus the actions of the message at ``point``
        (viewport coordinates: the mouse, or the text cursor for the Menu key)."""
        transcript = self.window.transcript
        index = transcript.message_under(point)
        if index is None:
            index = transcript.focused_message()
        menu = transcript.createStandardContextMenu(point)
        if index is not None and index < len(self.messages):
            menu.addSeparator()
            for name in message_actions(self.messages[index]):
                action = menu.addAction(f"{ACTION_LABELS[name]} this message")
                action.triggered.connect(lambda _=False, n=name, i=index: self.run(n, i))
                action.setEnabled(name == "copy" or not self.window.busy)
        self._open(menu, transcript.viewport().mapToGlobal(point))

    def _open(self, menu: QMenu, at: QPoint) -> None:
        menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        menu.popup(at)
        self.last_menu = menu
