"""The status strip shows how much of a reply speculative decoding guessed right.

The figures come from a real reply: the tiny demo model through a prompt-lookup pipeline
(engine.worker in this process), its ``Finished`` turned into the pipeline's ``Done`` and
the desktop's ``ReplyStats``, as the chat window does.
"""

from __future__ import annotations

from pytestqt.qtbot import QtBot

from desktop.chat import ReplyStats
from desktop.views.status_strip import StatusStrip, speculation_text
from engine.server.pipeline.run import _done
from engine.worker.messages import SamplingParams
from tests.engine.test_speculation import _load, _run


def test_the_strip_shows_the_share_of_speculated_tokens(qtbot: QtBot) -> None:
    backend = _load(prompt_lookup=True)
    try:
        reply, _ = _run(backend, messages=[{"role": "user", "content": "Hello"}], max_tokens=40)
        quoted = [{"role": "user", "content": reply}]
        _, finished = _run(
            backend, messages=quoted, max_tokens=40, sampling=SamplingParams(temperature=0)
        )
    finally:
        backend.close()
    stats = ReplyStats.from_done(_done(finished, finished.finish_reason))
    assert stats.speculation == "prompt_lookup" and stats.accepted_tokens > 0

    strip = StatusStrip(lambda: ())
    qtbot.addWidget(strip)
    strip.set_speculation(stats.speculation, stats.accepted_tokens, stats.completion_tokens)
    share = stats.accepted_tokens / stats.completion_tokens
    # Where the tokens came from, in plain words ("N % guessed" read as jargon).
    assert strip.speculation_label.text() == f"{share:.0%} from the prompt"
    assert "guessed" not in strip.speculation_label.text()
    assert "looked up in the prompt" in strip.speculation_label.toolTip()
    assert not strip.speculation_label.isHidden()

    strip.set_speculation("off", 0, 40)  # a pipeline without speculation: nothing to show
    assert strip.speculation_label.isHidden()
    strip.set_speculation(stats.speculation, stats.accepted_tokens, stats.completion_tokens)
    strip.reset_reply()
    assert strip.speculation_label.isHidden()


def test_the_draft_models_share_is_named() -> None:
    assert speculation_text("draft", 0.25) == "25% from the draft model"
