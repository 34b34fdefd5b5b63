"""The microphone and the speakers, through Qt Multimedia, for dictation and *Read aloud*.

Qt Multimedia is imported lazily: without it (a PySide6 build lacking the module, or a
system without its audio libraries: PulseAudio's ``libpulse`` on Linux) the chat still
runs, and :func:`audio_missing` says why dictation and *Read aloud* are off. Only the
module's own library is needed for raw capture and playback; its FFmpeg media plugin is
not (the bundle leaves it out).

:class:`Microphone` records from the default input at 16 kHz mono when the device takes
that (PulseAudio, WASAPI and CoreAudio resample for us), else in the device's own format,
converted to 16 kHz mono by the same PyAV path that decodes uploads. :class:`Speaker` plays
mono float pieces one after the other as they arrive (push mode, fed from a timer), so a
reply is heard while its later sentences are still being synthesised.

Threading: GUI thread only (Qt Multimedia objects live there).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from PySide6.QtCore import QObject, QTimer, Signal

from engine.audio.decode import AudioError, decode
from engine.audio.encode import pcm16, wav_header

if TYPE_CHECKING:
    from PySide6.QtCore import QIODevice
    from PySide6.QtMultimedia import QAudioFormat, QAudioSink, QAudioSource

logger = logging.getLogger(__name__)

Samples = np.ndarray[Any, np.dtype[np.float32]]
RATE: Final = 16000  # what the speech recognisers take
MAX_DICTATION_SECONDS: Final = 300.0  # a recording stops by itself after five minutes
_POLL_MS: Final = 30  # how often the level and the playback buffer are looked at


def audio_missing() -> str | None:
    """Why this system cannot record or play (None: it can), in words for a person."""
    try:
        from PySide6 import QtMultimedia  # noqa: F401
    except ImportError as exc:
        logger.info("Qt Multimedia is not available: %s", exc)
        if "libpulse" in str(exc):
            return (
                "the sound system's client library is missing "
                "(on Debian or Ubuntu: sudo apt install libpulse0)"
            )
        return "this Sidelight has no Qt Multimedia (install PySide6-Addons)"
    return None


def _sample_kinds() -> dict[Any, tuple[str, float]]:
    """Qt's sample formats as NumPy dtypes and the full-scale value of each."""
    from PySide6.QtMultimedia import QAudioFormat

    kind = QAudioFormat.SampleFormat
    return {
        kind.UInt8: ("u1", 128.0),
        kind.Int16: ("<i2", 32768.0),
        kind.Int32: ("<i4", 2147483648.0),
        kind.Float: ("<f4", 1.0),
    }


def _values(data: bytes, fmt: QAudioFormat) -> Samples | None:
    """Raw bytes in ``fmt`` as float samples in [-1, 1], channels interleaved (None: a
    sample format Qt does not name)."""
    kinds = _sample_kinds()
    if fmt.sampleFormat() not in kinds:
        return None
    dtype, scale = kinds[fmt.sampleFormat()]
    frame = np.dtype(dtype).itemsize * max(1, fmt.channelCount())
    values = np.frombuffer(data[: len(data) - len(data) % frame], dtype).astype(np.float32)
    if dtype == "u1":
        values -= 128.0
    scaled: Samples = values / np.float32(scale)
    return scaled


def to_samples(data: bytes, fmt: QAudioFormat) -> Samples:
    """Raw captured bytes in ``fmt`` as 16 kHz mono float samples in [-1, 1].

    Raises:
        AudioError: a sample format Qt does not name, or audio PyAV cannot resample.
    """
    values = _values(data, fmt)
    if values is None:
        raise AudioError(f"the microphone's sample format ({fmt.sampleFormat()}) is unknown")
    mono = values.reshape(-1, max(1, fmt.channelCount())).mean(axis=1).astype(np.float32)
    if fmt.sampleRate() == RATE or len(mono) == 0:
        clipped: Samples = np.clip(mono, -1.0, 1.0)
        return clipped
    wav = wav_header(fmt.sampleRate(), len(mono)) + pcm16(mono)
    return decode(wav, MAX_DICTATION_SECONDS + 1)


def unavailable_reason(model: str | None, no_model: str) -> str | None:
    """Why dictation or *Read aloud* cannot work (None: it can): no audio on this system,
    else ``no_model`` when no model of the kind is installed."""
    missing = audio_missing()
    if missing is not None:
        return missing
    return no_model if model is None else None


class Microphone(QObject):
    """Records from the default input until :meth:`stop` or :meth:`cancel`.

    Signals: ``level(float)`` the loudest sample of the last moment (0 to 1), for the
    meter; ``failed(str)`` the device stopped with an error; ``full()`` the recording reached
    :data:`MAX_DICTATION_SECONDS` and stopped taking sound.
    """

    level = Signal(float)
    failed = Signal(str)
    full = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._source: QAudioSource | None = None
        self._device: QIODevice | None = None
        self._format: QAudioFormat | None = None
        self._chunks: list[bytes] = []
        self._bytes = 0
        self._limit = 0
        self._timer = QTimer(self)
        self._timer.setInterval(_POLL_MS)
        self._timer.timeout.connect(self._read)

    @property
    def recording(self) -> bool:
        return self._source is not None

    @property
    def seconds(self) -> float:
        """How long the recording so far lasts."""
        fmt = self._format
        return fmt.durationForBytes(self._bytes) / 1e6 if fmt is not None else 0.0

    def start(self) -> str | None:
        """Start recording; why it cannot (None: it started)."""
        missing = audio_missing()
        if missing is not None:
            return missing
        from PySide6.QtMultimedia import QAudioFormat, QAudioSource, QMediaDevices

        device = QMediaDevices.defaultAudioInput()
        if device.isNull():
            return "no microphone was found"
        wanted = QAudioFormat()
        wanted.setSampleRate(RATE)
        wanted.setChannelCount(1)
        wanted.setSampleFormat(QAudioFormat.SampleFormat.Int16)
        fmt = wanted if device.isFormatSupported(wanted) else device.preferredFormat()
        source = QAudioSource(device, fmt, self)
        # Two seconds of room: a GUI thread busy with a long layout loses no words.
        source.setBufferSize(fmt.bytesForDuration(2_000_000))
        started = source.start()
        if source.error() != source.error().NoError:
            source.deleteLater()
            return f"the microphone ({device.description()}) could not be opened"
        logger.info(
            "recording from %s at %d Hz, %d channel(s)",
            device.description(),
            fmt.sampleRate(),
            fmt.channelCount(),
        )
        self._source, self._device, self._format = source, started, fmt
        self._chunks, self._bytes = [], 0
        self._limit = fmt.bytesForDuration(int(MAX_DICTATION_SECONDS * 1e6))
        self._timer.start()
        return None

    def stop(self) -> Samples:
        """Stop and return what was recorded, as 16 kHz mono samples.

        Raises:
            AudioError: the recording cannot be converted.
        """
        self._read()
        fmt = self._format
        data = b"".join(self._chunks)
        self._close()
        if fmt is None or not data:
            return np.zeros(0, dtype=np.float32)
        return to_samples(data, fmt)

    def cancel(self) -> None:
        """Stop and forget what was recorded."""
        self._close()

    def _close(self) -> None:
        self._timer.stop()
        if self._source is not None:
            self._source.stop()
            self._source.deleteLater()
        self._source, self._device, self._format = None, None, None
        self._chunks, self._bytes = [], 0

    def _read(self) -> None:
        device, fmt = self._device, self._format
        if device is None or fmt is None or self._source is None:
            return
        if self._source.error() != self._source.error().NoError:
            error = self._source.error()
            self._close()
            self.failed.emit(f"the microphone stopped ({error.name})")
            return
        data = bytes(device.readAll().data())
        if not data:
            return
        room = self._limit - self._bytes
        if room <= 0:
            return
        data = data[:room]
        self._chunks.append(data)
        self._bytes += len(data)
        self.level.emit(_peak(data, fmt))
        if self._bytes >= self._limit:
            self._timer.stop()
            self.full.emit()


def _peak(data: bytes, fmt: QAudioFormat) -> float:
    """The loudest sample in ``data``, 0 to 1 (the level meter's reading)."""
    values = _values(data, fmt)
    return float(min(1.0, np.abs(values).max())) if values is not None and len(values) else 0.0


class Speaker(QObject):
    """Plays mono float pieces in order on the default output.

    :meth:`add` queues a piece (the first one opens the output at its rate); :meth:`close`
    says no more pieces will come, and ``finished`` fires once the last one is heard.
    :meth:`stop` cuts it short (``finished`` does not fire then). ``failed(str)`` fires when
    the output cannot be opened or stops with an error.
    """

    finished = Signal()
    failed = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._sink: QAudioSink | None = None
        self._device: QIODevice | None = None
        self._rate = 0
        self._pending = bytearray()
        self._closed = False
        self.played_seconds = 0.0  # of audio written to the output (tests read it)
        self._timer = QTimer(self)
        self._timer.setInterval(_POLL_MS)
        self._timer.timeout.connect(self._feed)

    @property
    def playing(self) -> bool:
        return self._sink is not None

    def add(self, samples: Samples, sample_rate: int) -> str | None:
        """Queue ``samples`` to play; why they cannot be (None: queued)."""
        if self._sink is None:
            problem = self._open(sample_rate)
            if problem is not None:
                return problem
        if sample_rate != self._rate:  # one model speaks at one rate; be safe anyway
            count = max(1, round(len(samples) * self._rate / sample_rate))
            positions = np.linspace(0.0, len(samples) - 1, count)
            samples = np.interp(positions, np.arange(len(samples)), samples).astype(np.float32)
        self._pending += pcm16(samples)
        self._feed()
        return None

    def close(self) -> None:
        """No more pieces: ``finished`` fires when the queued audio has been heard."""
        self._closed = True
        self._feed()

    def stop(self) -> None:
        """Stop playing now and drop what is queued."""
        self._timer.stop()
        if self._sink is not None:
            self._sink.stop()
            self._sink.deleteLater()
        self._sink, self._device = None, None
        self._pending.clear()
        self._closed = False

    def _open(self, sample_rate: int) -> str | None:
        missing = audio_missing()
        if missing is not None:
            return missing
        from PySide6.QtMultimedia import QAudioFormat, QAudioSink, QMediaDevices

        device = QMediaDevices.defaultAudioOutput()
        if device.isNull():
            return "no speakers or headphones were found"
        fmt = QAudioFormat()
        fmt.setSampleRate(sample_rate)
        fmt.setChannelCount(1)
        fmt.setSampleFormat(QAudioFormat.SampleFormat.Int16)
        if not device.isFormatSupported(fmt):
            preferred = device.preferredFormat()
            fmt.setSampleRate(preferred.sampleRate())
        sink = QAudioSink(device, fmt, self)
        sink.setBufferSize(fmt.bytesForDuration(500_000))  # half a second ahead
        started = sink.start()
        if sink.error() != sink.error().NoError:
            sink.deleteLater()
            return f"the audio output ({device.description()}) could not be opened"
        logger.info("playing on %s at %d Hz", device.description(), fmt.sampleRate())
        self._sink, self._device, self._rate = sink, started, fmt.sampleRate()
        self.played_seconds = 0.0
        self._timer.start()
        return None

    def _feed(self) -> None:
        sink, device = self._sink, self._device
        if sink is None or device is None:
            return
        if sink.error() not in (sink.error().NoError, sink.error().UnderrunError):
            error = sink.error()
            self.stop()
            self.failed.emit(f"the audio output stopped ({error.name})")
            return
        free = sink.bytesFree()
        if self._pending and free > 0:
            chunk = bytes(self._pending[: free - free % 2])
            written = device.write(chunk)
            if written > 0:
                del self._pending[:written]
                self.played_seconds += written / 2 / self._rate
        if self._closed and not self._pending:
            queued = sink.bufferSize() - sink.bytesFree()
            if queued <= 0:
                self.stop()
                self.finished.emit()
