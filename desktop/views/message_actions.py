"""Per-message actions of the chat: copy, read aloud, regenerate, edit-and-resend, delete, and the
previous / next version of a regenerated reply ("1/3" between two arrows).

Each is reachable three ways: the quiet links under a message (mouse, or Tab then Enter in
the transcript), the transcript's context menu (right click, or the Menu key / Shift+F10 on
the message the text cursor is in), and window shortcuts that act on the last reply or the
last message typed.

Regenerating or editing a message in the middle of a chat continues the chat from there: the
later turns stay on screen, greyed out under a note, and are no longer sent to the model.

Copying is done here (the clipboard is no one's state); *Read aloud* is emitted as
``read_aloud`` for the window's reader; every other action is emitted as an
intent (:mod:`desktop.chat_session`) that the chat window applies through its session.

Threading: GUI thread only.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, QPoint, Qt, Signal
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence, QShortcut
from PySide6.QtWidgets import QMenu, QWidget

from desktop.chat_session import (
    CancelEdit,
    ChatSession,
    Delete,
    Edit,
    EditStarted,
    Regenerate,
    ShowVersion,
)
from desktop.history import ChatMessage
from desktop.views.notice import NoticeAction
from desktop.views.transcript import (
    ACTION_LABELS,
    VERSION_STEPS,
    TranscriptView,
    message_actions,
    version_actions,
)

REGENERATE_KEYS = QKeySequence("Ctrl+R")
EDIT_KEYS = QKeySequence("Ctrl+E")
MENU_KEYS = QKeySequence(Qt.Key.Key_Menu)


def editing_notice(started: EditStarted) -> str:
    """What the notice says while a message is being edited: what sending will do to it
    and to the messages after it (with the right plural)."""
    later = started.later
    if later == 0:
        return "Editing your last message. Sending it replaces the message."
    after = "the message after it" if later == 1 else f"the {later} messages after it"
    verb = "stays" if later == 1 else "stay"
    return (
        "Editing a message. Sending it continues the chat from there with the new text: "
        f"the message and {after} {verb} here, greyed out, and are no longer sent to the "
        "model."
    )


class MessageActions(QObject):
    """The actions on one chat window's messages: the transcript's links and context menu,
    and the window-wide shortcuts (added to ``host``). ``intent`` carries each action but
    copy (:class:`Regenerate`, :class:`Edit`, :class:`CancelEdit`, :class:`Delete`).

    The session is only read: which messages there are, and whether a reply runs.
    """

    intent = Signal(object)
    read_aloud = Signal(int)  # read reply ``index`` aloud (the window's reader does it)

    def __init__(self, session: ChatSession, transcript: TranscriptView, host: QWidget) -> None:
        super().__init__(host)
        self.session = session
        self.transcript = transcript
        self.last_menu: QMenu | None = None  # the context menu open last (tests read it)
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
            host, "Regenerate the last reply", REGENERATE_KEYS, self.regenerate_last
        )
        self.edit_action = self._shortcut(host, "Edit your last message", EDIT_KEYS, self.edit_last)

    @staticmethod
    def _shortcut(host: QWidget, text: str, keys: QKeySequence, slot: object) -> QAction:
        made = QAction(text, host)
        made.setShortcut(keys)
        made.triggered.connect(slot)
        host.addAction(made)  # window-wide, whichever child has the focus
        return made

    @property
    def messages(self) -> list[ChatMessage]:
        return self.session.messages

    @property
    def editing(self) -> int | None:
        """The index of the message being edited (its text is in the message box)."""
        return self.session.editing

    def run(self, name: str, index: int) -> None:
        """Run action ``name`` ("copy", "read", "regenerate", "edit", "delete", "previous", "next")
        on message ``index``."""
        if not 0 <= index < len(self.messages):
            return
        if name == "copy":
            self.copy(index)
        elif name == "read":
            self.read_aloud.emit(index)
        elif name == "regenerate":
            self.regenerate(index)
        elif name == "edit":
            self.edit(index)
        elif name == "delete":
            self.delete(index)
        elif name in VERSION_STEPS:
            self.intent.emit(ShowVersion(index, VERSION_STEPS[name]))

    # ---- the actions -------------------------------------------------------------------

    def copy(self, index: int) -> None:
        """Copy the message's text alone (no marker, no thinking, no attachment)."""
        QGuiApplication.clipboard().setText(self.messages[index]["content"])

    def regenerate(self, index: int) -> None:
        """Answer again the user message before reply ``index``."""
        self.intent.emit(Regenerate(index))

    def edit(self, index: int) -> None:
        """Take a message typed earlier back into the message box; sending it continues the
        chat from there."""
        self.intent.emit(Edit(index))

    def cancel_edit(self) -> None:
        self.intent.emit(CancelEdit())

    def delete(self, index: int) -> None:
        """Delete a message (a refused message takes its error with it)."""
        self.intent.emit(Delete(index))

    def edit_notice(self, started: EditStarted) -> tuple[str, list[NoticeAction]]:
        """The notice shown while ``started`` is being edited (its Cancel emits an intent)."""
        cancel = NoticeAction("Cancel edit", self.cancel_edit, "Keep the message as it was")
        return editing_notice(started), [cancel]

    def regenerate_last(self) -> None:
        last = self.session.last_index("assistant")
        if last is not None:
            self.regenerate(last)

    def edit_last(self) -> None:
        last = self.session.last_index("user")
        if last is not None:
            self.edit(last)

    # ---- the context menu --------------------------------------------------------------

    def _menu_at_cursor(self) -> None:
        self._context_menu(self.transcript.cursorRect().center())

    def _context_menu(self, point: QPoint) -> None:
        """The standard menu (copy, select all) plus the actions of the message at ``point``
        (viewport coordinates: the mouse, or the text cursor for the Menu key)."""
        transcript = self.transcript
        index = transcript.message_under(point)
        if index is None:
            index = transcript.focused_message()
        menu = transcript.createStandardContextMenu(point)
        for standard in menu.actions():
            # A browser's "Copy Link Location": the links here are the window's own actions.
            if standard.objectName() == "link-copy" or "Link Location" in standard.text():
                menu.removeAction(standard)
        if index is not None and index < len(self.messages):
            menu.addSeparator()
            for name in [
                *version_actions(self.messages[index]),
                *message_actions(self.messages[index]),
            ]:
                label = ACTION_LABELS[name]
                plain = name in VERSION_STEPS or name == "read"
                action = menu.addAction(label if plain else f"{label} this message")
                action.triggered.connect(lambda _=False, n=name, i=index: self.run(n, i))
                action.setEnabled(name in ("copy", "read") or not self.session.busy)
        self._open(menu, transcript.viewport().mapToGlobal(point))

    def _open(self, menu: QMenu, at: QPoint) -> None:
        menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        menu.popup(at)
        self.last_menu = menu
