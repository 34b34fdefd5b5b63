"""The chat window's status strip: memory (app + every engine worker), tokens/s, TTFT, how many of the
reply's tokens speculative decoding guessed right, and a sparkline.

Threading: GUI thread only. Memory is sampled once a second on the GUI thread while the strip
is visible; psutil needs tens of microseconds for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from PySide6.QtCore import QPointF, QSize, Qt, QTimer
from PySide6.QtGui import (
    QColor,
    QHideEvent,
    QPainter,
    QPaintEvent,
    QPen,
    QPolygonF,
    QShowEvent,
)
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

from desktop import theme
from desktop.metrics import History, MemorySample, format_bytes, sample_memory

# Live colours of the light/dark theme (desktop.theme updates them in place).
MEMORY_COLOUR = theme.colour("memory_line")
RATE_COLOUR = theme.colour("rate_line")


class Sparkline(QWidget):
    """Two small line charts (memory, tokens/s) over the last minutes, each scaled to fit."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.series: list[tuple[History, QColor]] = []
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.setToolTip("Memory (blue) and tokens/s (green) over the last 5 minutes")

    def sizeHint(self) -> QSize:
        return QSize(120, 22)

    def minimumSizeHint(self) -> QSize:
        return self.sizeHint()

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        rect = self.rect().adjusted(1, 2, -1, -2)
        painter.fillRect(self.rect(), self.palette().base())
        for history, colour in self.series:
            values = history.values()
            if len(values) < 2:
                continue
            top = max(values) or 1.0
            step = rect.width() / (len(values) - 1)
            points = QPolygonF(
                [
                    QPointF(rect.left() + i * step, rect.bottom() - rect.height() * v / top)
                    for i, v in enumerate(values)
                ]
            )
            painter.setPen(QPen(colour, 1.5))
            painter.drawPolyline(points)
        painter.end()


def speculation_text(kind: str, share: float) -> str:
    """The strip's words for speculative decoding's share of a reply ("N % guessed" read as
    jargon): where the accepted tokens came from."""
    source = "the prompt" if kind == "prompt_lookup" else "the draft model"
    return f"{share:.0%} from {source}"


class StatusStrip(QWidget):
    """Live figures under the chat. ``worker_pids`` tells it which engine processes to
    measure: every loaded model's worker."""

    def __init__(
        self, worker_pids: Callable[[], Iterable[int]], parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self._worker_pids = worker_pids
        self.memory_history = History()
        self.rate_history = History()
        self.memory: MemorySample | None = None
        self.tokens_per_second: float | None = None
        self.ttft_seconds: float | None = None
        self.accepted_share: float | None = None  # of the last reply, when speculation ran
        self.speculation = "off"
        self._generating = False

        self.memory_label = QLabel()
        self.rate_label = QLabel()
        self.ttft_label = QLabel()
        self.speculation_label = QLabel()
        # What the app does in the background at start (moving models, tuning for the CPU):
        # a line of its own under the figures, there only while it runs, wrapped rather than
        # clipped in a narrow window.
        self.chore_label = QLabel()
        self.chore_label.setWordWrap(True)
        self.chore_label.hide()
        self.sparkline = Sparkline()
        self.sparkline.series = [
            (self.memory_history, MEMORY_COLOUR),
            (self.rate_history, RATE_COLOUR),
        ]
        outer = QVBoxLayout(self)
        outer.setContentsMargins(6, 2, 6, 2)
        layout = QHBoxLayout()
        outer.addLayout(layout)
        outer.addWidget(self.chore_label)
        for label in (
            self.memory_label,
            self.rate_label,
            self.ttft_label,
            self.speculation_label,
        ):
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            layout.addWidget(label)
        layout.addStretch(1)
        layout.addWidget(self.sparkline)

        self._timer = QTimer(self)
        self._timer.setInterval(1000)
        self._timer.timeout.connect(self.sample)
        self.sample()

    def showEvent(self, event: QShowEvent) -> None:
        self._timer.start()  # sample only while the strip can be seen
        super().showEvent(event)

    def hideEvent(self, event: QHideEvent) -> None:
        self._timer.stop()
        super().hideEvent(event)

    def sample(self) -> None:
        """Measure memory now and push one point to each sparkline."""
        self.memory = sample_memory(self._worker_pids())
        self.memory_history.add(self.memory.total_bytes)
        rate = self.tokens_per_second if self._generating else 0.0
        self.rate_history.add(rate or 0.0)
        self._render()

    def set_generating(self, generating: bool) -> None:
        self._generating = generating

    def set_rate(self, tokens_per_second: float | None, ttft_seconds: float | None) -> None:
        """Show a reply's tokens/s and time to first token (live while it streams)."""
        if tokens_per_second is not None:
            self.tokens_per_second = tokens_per_second
        if ttft_seconds is not None:
            self.ttft_seconds = ttft_seconds
        self._render()

    def set_speculation(self, speculation: str, accepted_tokens: int, tokens: int) -> None:
        """Show how many of a finished reply's ``tokens`` were accepted guesses."""
        self.speculation = speculation
        self.accepted_share = accepted_tokens / tokens if speculation != "off" and tokens else None
        self._render()

    def set_chore(self, text: str | None) -> None:
        """Show (``None``: clear) what the app is doing in the background."""
        self.chore_label.setText(text or "")
        self.chore_label.setVisible(bool(text))

    def reset_reply(self) -> None:
        """Forget the last reply's figures (a new or another chat has none yet)."""
        self.tokens_per_second = self.ttft_seconds = self.accepted_share = None
        self._render()

    def _render(self) -> None:
        memory = self.memory
        if memory is not None:
            self.memory_label.setText(f"Memory {format_bytes(memory.total_bytes)}")
            workers = memory.workers
            self.memory_label.setToolTip(
                f"App {format_bytes(memory.app_bytes)} + engine "
                f"{format_bytes(memory.engine_bytes)} ({workers} worker"
                f"{'' if workers == 1 else 's'}: one per loaded model)"
            )
        rate = self.tokens_per_second
        self.rate_label.setText(f"{rate:.1f} tokens/s" if rate else "— tokens/s")
        ttft = self.ttft_seconds
        self.ttft_label.setText(f"TTFT {ttft * 1000:.0f} ms" if ttft is not None else "TTFT —")
        share = self.accepted_share
        self.speculation_label.setVisible(share is not None)
        if share is not None:
            self.speculation_label.setText(speculation_text(self.speculation, share))
            source = (
                "looked up in the prompt"
                if self.speculation == "prompt_lookup"
                else "written ahead by the draft model"
            )
            self.speculation_label.setToolTip(
                f"Speculative decoding: {share:.0%} of the last reply's tokens were {source} "
                "and accepted by the model, which makes replies faster (the text is the same)"
            )
        self.sparkline.update()
