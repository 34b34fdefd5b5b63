"""The chat goes through the request pipeline: a reasoning model's thinking arrives apart from
the answer (never as raw ``<think>`` tags), tool calls as calls, Stop as ``cancelled``.

These replies come from the scripted fake engine (it stands in for the worker only in unit
tests), which can hold a reply mid-stream; the real-engine tests of thinking and tool calls
in the window are in test_chat_thinking.py.
"""

from __future__ import annotations

import re

from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from desktop.app import DesktopApp
from desktop.chat import ChatOptions, ReplyDelta, ReplyDone, ReplyJob
from engine.server.errors import APIError
from engine.server.pipeline import Pipeline
from tests.desktop.test_chat_thinking import boxes, click_text
from tests.server.fake_engine import FakeEngine

REASONING_TEMPLATE = "{% if enable_thinking %}<think>{% endif %}{{ messages }}"
HELLO = [{"role": "user", "content": "Hello"}]
LOOKUP = {"type": "function", "function": {"name": "lookup", "parameters": {}}}
CALL = '<tool_call>\n{"name": "lookup", "arguments": {"q": "x"}}\n</tool_call>'


async def _events(job: ReplyJob) -> list[ReplyDelta | ReplyDone]:
    return [event async for event in job.events()]


async def test_thinking_and_answer_arrive_apart() -> None:
    engine = FakeEngine(chat_template=REASONING_TEMPLATE)
    engine.script("<think>\nLet me", " see.</think>\n\n", "Hello", "!")
    job = ReplyJob(Pipeline(engine), "fake-model", HELLO, ChatOptions(thinking=True))
    events = await _events(job)
    deltas = [e for e in events if isinstance(e, ReplyDelta)]
    assert "".join(d.thinking for d in deltas) == "Let me see."
    assert "".join(d.text for d in deltas) == "Hello!"
    assert sum(d.tokens for d in deltas) == 4  # every token counted once, for the live rate
    done = events[-1]
    assert isinstance(done, ReplyDone)
    assert (done.text, done.thinking, done.calls) == ("Hello!", "Let me see.", ())
    assert done.stats.finish_reason == "stop" and done.stats.completion_tokens == 4
    assert engine.submitted[0].chat_template_kwargs == {"enable_thinking": True}


async def test_tool_calls_arrive_as_calls() -> None:
    engine = FakeEngine(chat_template="<tool_call>{{ tools }}</tool_call>")
    engine.script("Looking it up. ", CALL)
    options = ChatOptions(tools=(LOOKUP,))
    events = await _events(ReplyJob(Pipeline(engine), "fake-model", HELLO, options))
    done = events[-1]
    assert isinstance(done, ReplyDone) and done.text == "Looking it up."
    assert [(c.name, c.arguments_object()) for c in done.calls] == [("lookup", {"q": "x"})]
    assert done.stats.finish_reason == "tool_calls"

    engine.script(CALL)  # no tools offered: a call's syntax is just text
    events = await _events(ReplyJob(Pipeline(engine), "fake-model", HELLO, ChatOptions()))
    done = events[-1]
    assert isinstance(done, ReplyDone) and (done.text, done.calls) == (CALL, ())


async def test_stop_ends_with_cancelled_and_no_model_is_refused() -> None:
    engine = FakeEngine()
    engine.script("one", " two", " three", hold_after=1)
    job = ReplyJob(Pipeline(engine), "fake-model", HELLO, ChatOptions())
    events: list[ReplyDelta | ReplyDone] = []
    async for event in job.events():
        events.append(event)
        job.stop()
    done = events[-1]
    assert isinstance(done, ReplyDone) and done.stats.finish_reason == "cancelled"
    assert done.text == "one" and engine.streams[0].cancelled

    job = ReplyJob(Pipeline(FakeEngine(model=None)), None, HELLO, ChatOptions())
    try:
        await _events(job)
    except APIError as exc:
        assert (exc.status, exc.message) == (503, "no model is loaded")
    else:
        raise AssertionError("a chat without a model must be refused")


def test_the_window_shows_the_answer_and_keeps_the_thinking_apart(
    qtbot: QtBot, desktop: DesktopApp
) -> None:
    controller = desktop.controller
    engine = FakeEngine(model=controller.status.model, chat_template=REASONING_TEMPLATE)
    engine.script("<think>Greet them.</think>", "Hello there.")
    controller.pipeline = Pipeline(engine)
    window = desktop.chat
    window.show()
    thoughts: list[str] = []
    window.thinking_received.connect(thoughts.append)

    with qtbot.waitSignal(window.reply_finished, timeout=10000) as finished:
        window.send("Hello")

    assert finished.args[0].finish_reason == "stop"
    assert window.last_reply == "Hello there."
    assert window.reply_thinking == "Greet them." and "".join(thoughts) == "Greet them."
    transcript = window.transcript.toPlainText()
    assert "Hello there." in transcript and "think>" not in transcript


def test_thinking_shows_live_then_closes_when_the_answer_starts(
    qtbot: QtBot, desktop: DesktopApp
) -> None:
    controller = desktop.controller
    engine = FakeEngine(model=controller.status.model, chat_template=REASONING_TEMPLATE)
    engine.script("<think>Greet them.", " Kindly.</think>", "Hello", " there.", hold_after=1)
    engine.script("<think>Greet them.</think>", "Hello", " there.", hold_after=2)
    controller.pipeline = Pipeline(engine)
    window = desktop.chat
    window.show()
    view = window.transcript

    # While it thinks: "Thinking…", the thinking open in its box.
    with qtbot.waitSignal(window.reply_finished, timeout=10000) as finished:
        window.send("Hello")
        qtbot.waitUntil(lambda: boxes(view) == ["Greet them."], timeout=5000)
        assert "▾ Thinking…" in view.toPlainText()
        click_text(qtbot, view, "Thinking…")  # the person may close it meanwhile
        assert boxes(view) == [] and "▸ Thinking…" in view.toPlainText()
        click_text(qtbot, view, "Thinking…")
        assert boxes(view) == ["Greet them."]
        qtbot.mouseClick(window.send_button, Qt.MouseButton.LeftButton)  # Stop

    # Stopped mid-thought: the thinking is kept, its header says for how long.
    assert finished.args[0].finish_reason == "cancelled"
    assert "▾ Thought for" in view.toPlainText() and boxes(view) == ["Greet them."]
    assert "(stopped)" in view.toPlainText()
    stopped = window.conversation.messages[-1]
    assert (stopped["content"], stopped.get("thinking"), stopped.get("stopped")) == (
        "",
        "Greet them.",
        True,
    )

    # Once the answer starts, the thinking closes while the answer streams on.
    with qtbot.waitSignal(window.reply_finished, timeout=10000):
        window.send("Hello again")
        answer_started = re.compile(r"▸ Thought for under a second\nHello$")
        qtbot.waitUntil(lambda: bool(answer_started.search(view.toPlainText())), timeout=5000)
        assert boxes(view) == ["Greet them."]  # only the first reply's, left open
        window.stop()
    assert window.conversation.messages[-1]["content"] == "Hello"
