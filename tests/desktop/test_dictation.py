"""Issue 24: dictation into the chat and *Read aloud* on replies, with real sound.

A private PulseAudio server (:mod:`tests.desktop.virtual_audio`) gives the app a virtual
microphone fed from the test clips of ``tests/fixtures/audio`` and a speaker the test
records. The store holds the tiny Whisper (trained until it transcribes those clips exactly)
and the tiny random SpeechT5; the chat window's *Dictate* button records through Qt
Multimedia, transcribes through the transcription endpoint's engine path and puts the words
in the message box; *Read aloud* synthesises a reply and plays it, and the test hears it.

Nothing is mocked: the sound goes through a real sound server. Without ``pulseaudio`` (a
machine ``packaging/dev.py test`` could not install it on) the module is skipped, saying so.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextCursor
from PySide6.QtMultimedia import QAudioFormat
from pytestqt.qtbot import QtBot

from desktop.app import DesktopApp
from desktop.audio_io import to_samples
from desktop.history import ChatMessage, Conversation
from desktop.speech import DICTATION_PICK, READ_ALOUD_PICK, speech_models, spoken_text
from desktop.views.chat_speech import READING
from desktop.views.chat_window import ChatWindow
from engine.audio.decode import decode
from engine.store import ModelStore
from tests.desktop.virtual_audio import VirtualAudio, missing_tools, virtual_audio
from tests.server.harness import store_speech_model, store_text_speech_model

pytestmark = pytest.mark.slow

AUDIO = Path(__file__).resolve().parents[1] / "fixtures" / "audio"
SAID = json.loads((AUDIO / "transcripts.json").read_text(encoding="utf-8"))["transcripts"]


@pytest.fixture(scope="module")
def audio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VirtualAudio]:
    missing = missing_tools()
    if missing:
        pytest.skip(f"no sound server to test with: {', '.join(missing)} not installed")
    with virtual_audio(tmp_path_factory.mktemp("pulse")) as server:
        yield server


@pytest.fixture
def speaking_app(
    audio: VirtualAudio, make_desktop: Callable[..., DesktopApp], sidelight_home: Path
) -> DesktopApp:
    """A started app whose store holds the tiny Whisper and the tiny SpeechT5."""
    app = make_desktop()
    store_speech_model(sidelight_home)
    store_text_speech_model(sidelight_home)
    app.controller.refresh_models()
    return app


def _window(app: DesktopApp) -> ChatWindow:
    window = app.chat
    window.show()
    return window


REPLY = "Hi. **Paris** it is."  # spoken as "Hi. Paris it is." (17 characters)


def _short_chat(window: ChatWindow) -> int:
    """Open a saved chat whose reply is short (the tiny SpeechT5 says 0.32 s a character)."""
    chat = Conversation(
        messages=[
            ChatMessage(role="user", content="Where shall we go?"),
            ChatMessage(role="assistant", content=REPLY),
        ]
    )
    window.history.save(chat)
    window.open_conversation(chat.id)
    return 1


def _sink_inputs(audio: VirtualAudio) -> list[str]:
    """The playback streams the sound server has now (``pactl list short sink-inputs``)."""
    listing = subprocess.run(
        ["pactl", "list", "short", "sink-inputs"],
        check=False,
        env=audio.env,
        capture_output=True,
        text=True,
    )
    return [line for line in listing.stdout.splitlines() if line.strip()]


def _press(qtbot: QtBot, window: ChatWindow) -> None:
    qtbot.mousePress(window.speech.dictation.button, Qt.MouseButton.LeftButton)


def _release(qtbot: QtBot, window: ChatWindow) -> None:
    qtbot.mouseRelease(window.speech.dictation.button, Qt.MouseButton.LeftButton)


def _play(qtbot: QtBot, audio: VirtualAudio, clip: str) -> None:
    """Play a test clip into the microphone, to its end, while the GUI thread runs."""
    player = audio.play(AUDIO / f"{clip}.wav")
    qtbot.waitUntil(lambda: player.poll() is not None, timeout=30000)
    assert player.returncode == 0


def test_hold_to_talk_puts_the_words_in_the_message_box(
    qtbot: QtBot, speaking_app: DesktopApp, audio: VirtualAudio
) -> None:
    window = _window(speaking_app)
    dictation = window.speech.dictation
    assert dictation.available and dictation.model == "tiny-whisper"
    levels: list[int] = []
    dictation.microphone.level.connect(lambda _: levels.append(dictation.meter.value()))
    window.input.setPlainText("Note:")
    window.input.moveCursor(window.input.textCursor().MoveOperation.End)
    _press(qtbot, window)
    assert dictation.state == "recording"
    _play(qtbot, audio, "hello")
    qtbot.waitUntil(lambda: dictation.microphone.seconds > 1.0, timeout=5000)
    _release(qtbot, window)
    assert dictation.state == "transcribing"
    qtbot.waitUntil(lambda: dictation.state == "idle", timeout=60000)
    # Spaced from what was typed, editable, nothing sent.
    assert window.input.toPlainText() == f"Note: {SAID['hello']}"
    assert not window.session.messages
    assert max(levels) > 20, "the level meter never moved"


def test_a_click_starts_and_a_second_click_stops(
    qtbot: QtBot, speaking_app: DesktopApp, audio: VirtualAudio
) -> None:
    window = _window(speaking_app)
    dictation = window.speech.dictation
    qtbot.mouseClick(dictation.button, Qt.MouseButton.LeftButton)
    assert dictation.state == "recording"  # a short click keeps it listening
    assert dictation.meter.isVisible() and dictation.clock.isVisible()
    _play(qtbot, audio, "cat")
    qtbot.waitUntil(lambda: dictation.microphone.seconds > 1.5, timeout=5000)
    qtbot.mouseClick(dictation.button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dictation.state == "idle", timeout=60000)
    assert window.input.toPlainText() == SAID["cat"]
    assert not dictation.meter.isVisible()


def test_the_shortcut_toggles_and_esc_cancels(
    qtbot: QtBot, speaking_app: DesktopApp, audio: VirtualAudio
) -> None:
    window = _window(speaking_app)
    dictation = window.speech.dictation
    window.speech.dictate_action.trigger()
    assert dictation.state == "recording"
    _play(qtbot, audio, "light")
    qtbot.keyClick(window.input, Qt.Key.Key_Escape)
    assert dictation.state == "idle"
    assert window.input.toPlainText() == ""
    assert window.isVisible(), "Esc cancelled the dictation; it must not hide the window"
    # Again, and this time to the end.
    window.speech.dictate_action.trigger()
    _play(qtbot, audio, "light")
    qtbot.waitUntil(lambda: dictation.microphone.seconds > 1.8, timeout=5000)
    window.speech.dictate_action.trigger()
    qtbot.waitUntil(lambda: dictation.state == "idle", timeout=60000)
    assert window.input.toPlainText() == SAID["light"]


def test_silence_says_nothing_was_heard(
    qtbot: QtBot, speaking_app: DesktopApp, audio: VirtualAudio
) -> None:
    window = _window(speaking_app)
    dictation = window.speech.dictation
    window.speech.dictate_action.trigger()
    started = time.monotonic()
    qtbot.waitUntil(lambda: dictation.microphone.seconds > 0.5, timeout=5000)
    assert time.monotonic() - started < 5
    window.speech.dictate_action.trigger()
    assert dictation.state == "idle"
    assert "Nothing was heard" in window.notice.text
    assert window.input.toPlainText() == ""


def test_read_aloud_plays_the_reply(
    qtbot: QtBot, speaking_app: DesktopApp, audio: VirtualAudio
) -> None:
    """The reply is synthesised and played through the sound server to its end. The tiny
    random SpeechT5 speaks near-silence (about 1e-9 full scale) for 5,120 samples a
    character plus two, so what is checked is the stream the server played and its length,
    not the loudness."""
    window = _window(speaking_app)
    reply = _short_chat(window)
    reader = window.speech.reader
    assert reader.model == "tiny-speecht5" and reader.reason is None
    assert "read" not in window.transcript.actions_off
    streams: list[list[str]] = []
    started = time.monotonic()
    window.message_actions.run("read", reply)
    assert reader.reading == reply
    assert window.notice.text == READING
    qtbot.waitUntil(
        lambda: streams.append(_sink_inputs(audio)) or reader.reading is None, timeout=60000
    )
    took = time.monotonic() - started
    expected = 5120 * (len(spoken_text(REPLY)) + 2) / 16000
    assert reader.pieces_heard == 1
    assert abs(reader.speaker.played_seconds - expected) < 0.01
    assert took >= expected * 0.9, "the reading ended before its audio could be heard"
    assert any(streams), "no playback stream reached the sound server"
    assert not _sink_inputs(audio)  # and it was closed at the end
    assert window.notice.text != READING  # the notice went with the reading


def test_esc_stops_reading(qtbot: QtBot, speaking_app: DesktopApp) -> None:
    window = _window(speaking_app)
    reply = _short_chat(window)
    window.message_actions.run("read", reply)
    assert window.speech.reader.reading == reply
    qtbot.keyClick(window.input, Qt.Key.Key_Escape)
    assert window.speech.reader.reading is None
    assert not window.speech.reader.speaker.playing
    assert window.isVisible()


def test_without_speech_models_both_say_why_and_offer_one(
    qtbot: QtBot, audio: VirtualAudio, make_desktop: Callable[..., DesktopApp]
) -> None:
    app = make_desktop()
    window = _window(app)
    dictation = window.speech.dictation
    assert not dictation.available
    assert dictation.button.isEnabled()  # greyed out, still reachable, says why
    assert dictation.button.property("unavailable") is True
    assert "no speech recognition model" in dictation.button.toolTip()
    qtbot.mouseClick(dictation.button, Qt.MouseButton.LeftButton)
    assert dictation.state == "idle"
    assert "Dictation is off" in window.notice.text
    get = window.notice.buttons[f"Get {DICTATION_PICK[1]}…"]
    get.click()
    manager = app._models
    assert manager is not None and manager.isVisible()
    assert manager.selected_entry_id() == DICTATION_PICK[0]
    # Scrolled to it: the catalog lists the chat models first, the speech models last.
    row = manager.catalog_view.currentItem()
    assert row is not None and row.isSelected()
    shown = manager.catalog_view.viewport().rect()
    assert shown.contains(manager.catalog_view.visualItemRect(row))

    reply = _short_chat(window)
    # The reply's pill is drawn greyed out, its tooltip saying why.
    assert "no text-to-speech model" in window.transcript.actions_off["read"]
    run = next(r for r in window.transcript._actions[reply] if r.href.startswith("action:read"))
    cursor = QTextCursor(window.transcript.document())
    cursor.setPosition(run.start + 1)
    assert cursor.charFormat().toolTip().startswith("Read aloud is off: no text-to-speech")
    window.message_actions.run("read", reply)
    assert "Read aloud is off" in window.notice.text
    assert f"Get {READ_ALOUD_PICK[1]}…" in window.notice.buttons


def test_the_context_menu_reads_a_reply(qtbot: QtBot, speaking_app: DesktopApp) -> None:
    window = _window(speaking_app)
    reply = _short_chat(window)
    cursor = window.transcript.textCursor()
    cursor.setPosition(window.transcript._spans[reply][0] + 1)
    window.transcript.setTextCursor(cursor)
    window.message_actions._menu_at_cursor()
    menu = window.message_actions.last_menu
    assert menu is not None
    texts = [action.text() for action in menu.actions()]
    read = next(action for action in menu.actions() if action.text() == "Read aloud")
    menu.close()
    read.trigger()
    assert window.speech.reader.reading == reply
    window.speech.reader.stop()
    assert "Read aloud" in texts


# ---- the parts without sound -------------------------------------------------------------


def test_captured_audio_in_any_device_format_becomes_16_khz_mono() -> None:
    """A 48 kHz stereo float capture (what a device may insist on) is converted as an
    upload would be: same duration, same tone, one channel."""
    rate, seconds, tone = 48000, 0.5, 440.0
    t = np.arange(int(rate * seconds)) / rate
    left = 0.5 * np.sin(2 * np.pi * tone * t)
    stereo = np.stack([left, left], axis=1).astype("<f4").tobytes()
    fmt = QAudioFormat()
    fmt.setSampleRate(rate)
    fmt.setChannelCount(2)
    fmt.setSampleFormat(QAudioFormat.SampleFormat.Float)
    samples = to_samples(stereo, fmt)
    assert abs(len(samples) - 8000) <= 32
    spectrum = np.abs(np.fft.rfft(samples))
    assert abs(np.argmax(spectrum) * 16000 / len(samples) - tone) < 5
    assert 0.45 < float(np.abs(samples).max()) <= 0.51


def test_16_khz_int16_capture_is_taken_as_is() -> None:
    data = (AUDIO / "hello.wav").read_bytes()
    expected = decode(data, 60)
    fmt = QAudioFormat()
    fmt.setSampleRate(16000)
    fmt.setChannelCount(1)
    fmt.setSampleFormat(QAudioFormat.SampleFormat.Int16)
    pcm = (np.clip(expected, -1, 1) * 32767).round().astype("<i2").tobytes()
    assert np.allclose(to_samples(pcm, fmt), expected, atol=1e-4)


def test_a_reply_is_read_as_prose() -> None:
    markdown = (
        "# Weather\n\n**Paris** is *sunny* today; see [the forecast](https://x.test).\n\n"
        "```python\nprint('hi')\n```\n\n- get_weather returns `22°C`\n> quoted"
    )
    assert spoken_text(markdown) == (
        "Weather Paris is sunny today; see the forecast. (code block) "
        "get_weather returns 22°C quoted"
    )


def test_the_chat_uses_the_installed_speech_models(sidelight_home: Path) -> None:
    store_speech_model(sidelight_home, "b-whisper")
    store_speech_model(sidelight_home, "a-whisper")
    store_text_speech_model(sidelight_home)
    from engine.settings import load_settings

    store = ModelStore.from_settings(load_settings())
    models = speech_models(store.list())
    assert models.transcription is not None and models.transcription.startswith("a-")
    assert models.speech == "tiny-speecht5"
    assert speech_models([]).transcription is None
