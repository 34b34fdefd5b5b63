"""Images in the chat window (issue 23): attached by file, pasted and dropped as thumbnail
chips, checked as the server checks them, greyed out for a model that cannot see, sent with
the message to the real tiny vision model, shown in the transcript and kept on disk beside
the history (never inlined), and sent again from there by Regenerate.

The fixture ``tests/fixtures/tiny-vlm`` is a Qwen2-VL that names the colour of a solid image
("What colour is this?" → "red"; two images: "What colours are these?" → "red and blue"),
exactly under greedy decoding (the desktop fixture's default options).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from PIL import Image
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QGuiApplication, QImage, QTextImageFormat
from PySide6.QtWidgets import QApplication, QFileDialog, QToolButton
from pytestqt.qtbot import QtBot

from desktop.app import DesktopApp
from desktop.chat_images import (
    ImageRefused,
    engine_request,
    prepare_image,
    read_image_file,
    store_image,
)
from desktop.chat_session import EditFailed, Regenerate
from desktop.history import ChatHistory, ChatMessage, Conversation
from desktop.views.chat_window import ChatWindow
from engine.models import DEMO_MODEL_ID
from engine.server.errors import APIError
from engine.server.images import MAX_IMAGES_PER_REQUEST
from engine.supervisor.states import READY
from tests.server.harness import store_ir_copy

TINY_VLM = Path(__file__).resolve().parents[1] / "fixtures" / "tiny-vlm"
VLM = "tiny-vlm"
COLOURS = {"red": (255, 0, 0), "blue": (0, 0, 255), "green": (0, 255, 0)}


def solid(colour: str, fmt: str = "PNG", side: int = 64) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (side, side), COLOURS[colour]).save(buffer, fmt)
    return buffer.getvalue()


def image_file(folder: Path, colour: str, fmt: str = "PNG") -> Path:
    path = folder / f"{colour}.{fmt.lower()}"
    path.write_bytes(solid(colour, fmt))
    return path


def thumbnails(window: ChatWindow) -> list[str]:
    """The names of the images drawn in the transcript, in order."""
    names = []
    block = window.transcript.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fmt = it.fragment().charFormat()
            if fmt.isImageFormat():
                names.append(QTextImageFormat(fmt).name())
            it += 1
        block = block.next()
    return names


def chip_count(window: ChatWindow) -> int:
    return len(window.pending_images.items)


# ---- pure: checking, keeping, sending -----------------------------------------------------


def test_a_png_is_kept_as_it_came_and_a_gif_becomes_a_png_of_its_first_frame() -> None:
    data = solid("red")
    kept = prepare_image(data, "red.png")
    assert (kept.data, kept.suffix, kept.width, kept.height) == (data, ".png", 64, 64)
    gif = prepare_image(solid("blue", "GIF"), "blue.gif")
    assert gif.suffix == ".png" and gif.data.startswith(b"\x89PNG")
    assert Image.open(io.BytesIO(gif.data)).convert("RGB").getpixel((3, 3)) == (0, 0, 255)


def test_a_bad_file_is_refused_with_the_servers_reason_naming_it(tmp_path: Path) -> None:
    truncated = tmp_path / "cut.png"
    truncated.write_bytes(solid("red")[:60])
    with pytest.raises(ImageRefused, match=r"^cut\.png: the image cannot be decoded"):
        read_image_file(truncated)
    text = tmp_path / "notes.png"
    text.write_text("not an image at all")
    with pytest.raises(ImageRefused, match=r"^notes\.png: not an image in a supported format"):
        read_image_file(text)
    thin = io.BytesIO()
    Image.new("RGB", (401, 2)).save(thin, "PNG")
    with pytest.raises(ImageRefused, match=r"^thin\.png: the image is 401x2"):
        prepare_image(thin.getvalue(), "thin.png")


def test_images_are_files_beside_the_history_named_in_it_and_sent_by_index(
    tmp_path: Path,
) -> None:
    history = ChatHistory(tmp_path / "chats")
    chat = Conversation(system_prompt="Be brief.")
    red = store_image(history.folder, chat.id, prepare_image(solid("red"), "red.png"))
    again = store_image(history.folder, chat.id, prepare_image(solid("red"), "again.png"))
    blue = store_image(history.folder, chat.id, prepare_image(solid("blue"), "blue.png"))
    assert red["file"] == again["file"]  # named by content: one file for the same image
    chat.messages += [
        ChatMessage(role="user", content="What colour is this?", images=[red]),
        ChatMessage(role="assistant", content="red"),
        ChatMessage(role="user", content="Dropped", images=[again], dropped=True),
        ChatMessage(role="user", content="And these?", images=[blue, red]),
    ]
    history.save(chat)

    saved = (history.folder / f"{chat.id}.json").read_text()
    assert "iVBOR" not in saved  # no base64 PNG inlined
    assert sorted(p.name for p in history.images_folder(chat.id).iterdir()) == sorted(
        {Path(red["file"]).name, Path(blue["file"]).name}
    )
    assert chat.title == "What colour is this?"
    assert Conversation(messages=[ChatMessage(role="user", content="", images=[red])]).title == (
        "Image: red.png"
    )
    reopened = history.get(chat.id)
    assert reopened is not None and reopened.messages[3].get("images") == [blue, red]

    turns, refs = engine_request(reopened, history.folder)
    assert [t.get("images") for t in turns] == [None, [0], None, [1, 2]]
    assert [ref.field for ref in refs] == ["red.png", "blue.png", "red.png"]

    (history.folder / blue["file"]).unlink()  # gone from the disk: refused, named
    with pytest.raises(APIError, match=r"^blue\.png: the image is no longer kept"):
        engine_request(reopened, history.folder)

    del reopened.messages[3]  # the only message with the blue image
    history.save(reopened)
    assert [p.name for p in history.images_folder(chat.id).iterdir()] == [Path(red["file"]).name]
    history.delete(chat.id)
    assert not history.images_folder(chat.id).exists()


# ---- the window ---------------------------------------------------------------------------


def store_vlm(desktop: DesktopApp) -> None:
    store_ir_copy(desktop.controller.store.root, VLM, TINY_VLM, task="vision", reasoning=False)
    desktop.controller.refresh_models()


def test_attaching_is_greyed_out_with_the_reason_when_the_model_cannot_see(
    qtbot: QtBot, desktop: DesktopApp, tmp_path: Path
) -> None:
    store_vlm(desktop)
    window = desktop.chat
    window.show()
    reason = f"{DEMO_MODEL_ID} cannot see images; models that can: {VLM}"
    images = window.pending_images
    assert not images.button.isEnabled() and not images.attach_action.isEnabled()
    assert images.button.toolTip() == reason
    QGuiApplication.clipboard().setImage(QImage.fromData(solid("red")))
    qtbot.keyClick(window.input, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    assert chip_count(window) == 0
    assert window.notice.text == f"pasted image is not attached: {reason}"


def drop(qtbot: QtBot, window: ChatWindow, paths: list[Path]) -> None:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    target = window.input.viewport()
    point = QPointF(target.rect().center())
    actions = Qt.DropAction.CopyAction
    enter = QDragEnterEvent(
        point.toPoint(), actions, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier(0)
    )
    QApplication.sendEvent(target, enter)
    assert enter.isAccepted()
    dropped = QDropEvent(point, actions, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier(0))
    QApplication.sendEvent(target, dropped)


def test_a_red_image_asked_about_in_the_chat_is_answered_red_and_kept_with_the_chat(
    qtbot: QtBot, desktop: DesktopApp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store_vlm(desktop)
    controller = desktop.controller
    controller.select_model(VLM)
    qtbot.waitUntil(
        lambda: controller.active_model_id == VLM and controller.status.state == READY,
        timeout=60000,
    )
    window = desktop.chat
    window.show()
    images = window.pending_images
    qtbot.waitUntil(images.button.isEnabled)

    # A bad file is refused, named; a good one through the file dialog becomes a chip.
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)
    red = image_file(tmp_path, "red")
    picked = [[str(broken)], [str(red)]]
    monkeypatch.setattr(
        QFileDialog, "getOpenFileNames", lambda *args, **kwargs: (picked.pop(0), "")
    )
    images.attach_action.trigger()
    assert chip_count(window) == 0 and window.notice.text.startswith("broken.png: ")
    images.attach_action.trigger()
    assert chip_count(window) == 1 and images.isVisible()

    with qtbot.waitSignal(window.reply_finished, timeout=60000):
        qtbot.keyClicks(window.input, "What colour is this?")
        qtbot.keyClick(window.input, Qt.Key.Key_Return)
    assert window.last_reply == "red"
    assert chip_count(window) == 0
    user = window.conversation.messages[0]
    record = user["images"][0]  # type: ignore[typeddict-item]
    assert (record["name"], record["width"], record["height"]) == ("red.png", 64, 64)
    assert thumbnails(window) == [f"sidelight-image:{record['file']}"]

    saved = desktop.history.folder / f"{window.conversation.id}.json"
    assert "iVBOR" not in saved.read_text()
    assert json.loads(saved.read_text())["messages"][0]["images"][0]["file"] == record["file"]
    assert (desktop.history.folder / record["file"]).read_bytes() == red.read_bytes()

    # Reopened, the chat shows its image, and Regenerate sends it again from the disk.
    chat_id = window.conversation.id
    window.new_chat()
    assert thumbnails(window) == []
    window.open_conversation(chat_id)
    assert thumbnails(window) == [f"sidelight-image:{record['file']}"]
    window.conversation.messages[1]["content"] = "(replaced)"
    with qtbot.waitSignal(window.reply_finished, timeout=60000):
        window.apply(Regenerate(1))
    assert window.last_reply == "red"

    # A pasted image and a dropped file: two chips; one removed with its x, put back.
    window.new_chat()
    QGuiApplication.clipboard().setImage(QImage.fromData(solid("red")))
    qtbot.keyClick(window.input, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    assert chip_count(window) == 1 and window.input.toPlainText() == ""
    drop(qtbot, window, [image_file(tmp_path, "blue")])
    assert [i.name for i in images.items] == ["pasted image", "blue.png"]
    remove = [b for b in images.findChildren(QToolButton) if b.text() == "\u00d7"]
    qtbot.mouseClick(remove[1], Qt.MouseButton.LeftButton)
    assert [i.name for i in images.items] == ["pasted image"]
    drop(qtbot, window, [image_file(tmp_path, "blue")])
    with qtbot.waitSignal(window.reply_finished, timeout=60000):
        qtbot.keyClicks(window.input, "What colours are these?")
        qtbot.keyClick(window.input, Qt.Key.Key_Return)
    assert window.last_reply == "red and blue"
    assert len(thumbnails(window)) == 2

    # A refused message's images go back into the message box with its text.
    window.new_chat()
    window.conversation.settings.context_limit = 5
    images.add_file(red)
    with qtbot.waitSignal(window.reply_finished, timeout=60000):
        qtbot.keyClicks(window.input, "What colour is this?")
        qtbot.keyClick(window.input, Qt.Key.Key_Return)
    assert window.conversation.messages[0].get("failed") and chip_count(window) == 0
    window.apply(EditFailed())
    assert window.input.toPlainText() == "What colour is this?"
    assert [i.name for i in images.items] == ["red.png"]
    window.conversation.settings.context_limit = None
    with qtbot.waitSignal(window.reply_finished, timeout=60000):
        window.send()
    assert window.last_reply == "red"


def test_a_chat_holds_at_most_the_images_a_request_may_carry(
    qtbot: QtBot, desktop: DesktopApp, tmp_path: Path
) -> None:
    store_vlm(desktop)
    window = desktop.chat
    images = window.pending_images
    images._model = lambda: VLM  # the chat's model sees (it need not be loaded)
    images.sync()
    path = image_file(tmp_path, "green")
    for _ in range(MAX_IMAGES_PER_REQUEST):
        assert images.add_file(path)
    assert not images.add_file(path)
    assert window.notice.text.startswith(
        f"green.png is not attached: a chat can send at most {MAX_IMAGES_PER_REQUEST} images"
    )
