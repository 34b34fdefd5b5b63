"""The request pipeline on a scripted fake engine: model resolution, planning, parsing,
counting, refusals before any byte, failures mid-stream and cancellation.

The fake stands in for the worker only here; the same paths run on real inference in the
dialects' end-to-end tests.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine.parsing import ContentDelta, ReasoningText, ToolCallDelta, ToolCallEnd, ToolCallStart
from engine.server.errors import APIError
from engine.server.pipeline import (
    Done,
    GenerateRequest,
    Logprobs,
    Pipeline,
    PipelineEvent,
    Started,
    Timings,
    ToolChoice,
    Usage,
)
from tests.server.fake_engine import FakeEngine, fake_spec

HELLO = [{"role": "user", "content": "Hello"}]
REASONING_TEMPLATE = "{% if enable_thinking %}<think>{% endif %}{{ messages }}"
HERMES_TEMPLATE = "{{ tools }} <tool_call>{{ messages }}</tool_call>"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def chat(**fields: Any) -> GenerateRequest:
    return GenerateRequest(
        **{"model": "fake-model", "dialect": "openai", "messages": HELLO, **fields}
    )


async def events_of(pipeline: Pipeline, request: GenerateRequest) -> list[PipelineEvent]:
    generation = await pipeline.start(request)
    return [generation.started, *[event async for event in generation]]


def text_of(events: list[PipelineEvent], kind: type[ContentDelta | ReasoningText]) -> str:
    return "".join(e.text for e in events if isinstance(e, kind))


async def test_plain_text_passes_through_exactly_with_usage_and_timings() -> None:
    engine = FakeEngine()
    engine.script(" jumps", " over", finish="length")
    events = await events_of(Pipeline(engine), chat(model="  FAKE-Model ", split_reasoning=False))
    assert events == [
        Started("fake-model", 7),
        ContentDelta(" jumps"),
        ContentDelta(" over"),
        Done("length", Usage(7, 2), Timings(0.05, 0.1)),
    ]
    done = events[-1]
    assert isinstance(done, Done) and done.tokens_per_second == pytest.approx(10.0)
    assert engine.loads == []  # the loaded model, named in another case, is not reloaded


async def test_reasoning_is_split_off_and_thinking_reaches_the_template() -> None:
    engine = FakeEngine(chat_template=REASONING_TEMPLATE)
    engine.script("<think>\nPlan", " it.</think>", "\n\nHi there.")
    events = await events_of(Pipeline(engine), chat(thinking=True))
    assert text_of(events, ReasoningText) == "Plan it."
    assert text_of(events, ContentDelta) == "Hi there."
    assert engine.submitted[0].chat_template_kwargs == {"enable_thinking": True}

    # A template that opened the block itself: the reply starts inside it.
    engine.script("Plan.</think>Done.", opens_reasoning=True)
    events = await events_of(Pipeline(engine), chat(thinking=False))
    assert (text_of(events, ReasoningText), text_of(events, ContentDelta)) == ("Plan.", "Done.")
    assert engine.submitted[1].chat_template_kwargs == {"enable_thinking": False}

    # An explicit chat_template_kwargs entry wins over thinking.
    engine.script("ok")
    request = chat(thinking=False, chat_template_kwargs={"enable_thinking": True, "x": 1})
    await events_of(Pipeline(engine), request)
    assert engine.submitted[2].chat_template_kwargs == {"enable_thinking": True, "x": 1}


async def test_split_reasoning_overrides_the_template() -> None:
    engine = FakeEngine()  # a template that knows nothing of thinking
    engine.script("<think>a</think>b")
    events = await events_of(Pipeline(engine), chat())
    assert text_of(events, ContentDelta) == "<think>a</think>b"  # None: the template decides
    engine.script("<think>a</think>b")
    events = await events_of(Pipeline(engine), chat(split_reasoning=True))
    assert (text_of(events, ReasoningText), text_of(events, ContentDelta)) == ("a", "b")


async def test_tool_calls_stream_as_calls_and_finish_with_tool_calls() -> None:
    engine = FakeEngine(chat_template=HERMES_TEMPLATE)
    engine.script(CALL[:15], CALL[15:50], CALL[50:])
    events = await events_of(Pipeline(engine), chat(tools=[WEATHER]))
    start = next(e for e in events if isinstance(e, ToolCallStart))
    assert (start.index, start.name) == (0, "get_weather")
    arguments = "".join(e.arguments for e in events if isinstance(e, ToolCallDelta))
    assert json.loads(arguments) == {"city": "Paris"}
    (end,) = [e for e in events if isinstance(e, ToolCallEnd)]
    assert end.call.arguments_object() == {"city": "Paris"}
    assert isinstance(events[-1], Done) and events[-1].finish_reason == "tool_calls"
    assert engine.submitted[0].tools == [WEATHER]
    lazy = engine.submitted[0].constraint  # tool_choice auto: the call is held once it opens
    assert lazy is not None and (lazy.trigger, lazy.begin) == ("<tool_call>", "<tool_call>\n")

    # tool_choice "none": the template gets no tools and the text stays text.
    engine.script(CALL)
    events = await events_of(
        Pipeline(engine), chat(tools=[WEATHER], tool_choice=ToolChoice("none"))
    )
    assert text_of(events, ContentDelta) == CALL
    assert engine.submitted[1].tools is None
    assert isinstance(events[-1], Done) and events[-1].finish_reason == "stop"


@pytest.mark.parametrize(
    ("template", "pieces"),
    [
        # Mistral's calls complete only when the reply ends: the reason must still say so.
        ("[AVAILABLE_TOOLS] [TOOL_CALLS]", ['[TOOL_CALLS]get_weather[ARGS]{"city": "Par', 'is"}']),
        (
            "[AVAILABLE_TOOLS] [TOOL_CALLS]",
            ['[TOOL_CALLS][{"name": "get_weather", ', '"arguments": {"city": "Paris"}}]'],
        ),
        # gpt-oss: the engine strips the stop token <|call|>, so the call closes at the end.
        (
            "<|start|>assistant<|channel|>final<|message|>",
            [
                "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>",
                '{"city": "Paris"}',
            ],
        ),
        # Qwen3-Coder XML, left unclosed at the end.
        (
            "<tool_call><function=x><parameter=y>",
            ["<tool_call>\n<function=get_weather>\n", "<parameter=city>\nParis\n"],
        ),
    ],
)
@pytest.mark.parametrize("streamed", [True, False])
async def test_calls_completed_at_the_end_finish_with_tool_calls(
    template: str, pieces: list[str], streamed: bool
) -> None:
    engine = FakeEngine(chat_template=template)
    engine.script(*pieces)
    if streamed:
        events = await events_of(Pipeline(engine), chat(tools=[WEATHER]))
        (end,) = [e for e in events if isinstance(e, ToolCallEnd)]
        assert end.call.arguments_object() == {"city": "Paris"}
        assert text_of(events, ContentDelta) == ""
        assert isinstance(events[-1], Done) and events[-1].finish_reason == "tool_calls"
    else:
        reply = await Pipeline(engine).collect(chat(tools=[WEATHER]))
        assert [c.arguments_object() for c in reply.calls] == [{"city": "Paris"}]
        assert reply.done.finish_reason == "tool_calls"


async def test_gpt_oss_plain_answer_comes_back_without_channel_markup() -> None:
    engine = FakeEngine(chat_template="<|start|>assistant<|channel|>final<|message|>")
    for request in (chat(), chat(split_reasoning=False)):
        engine.script(
            "<|channel|>analysis<|message|>Easy.<|end|>",
            "<|start|>assistant<|channel|>final<|message|>The capital is Paris.",
        )
        events = await events_of(Pipeline(engine), request)
        assert text_of(events, ContentDelta) == "The capital is Paris."
        assert text_of(events, ReasoningText) == "Easy."
        assert isinstance(events[-1], Done) and events[-1].finish_reason == "stop"


async def test_required_and_named_tools_and_schemas_constrain_decoding() -> None:
    engine = FakeEngine(chat_template=HERMES_TEMPLATE)
    pipeline = Pipeline(engine)
    two_calls = CALL + CALL
    engine.script(two_calls)
    reply = await pipeline.collect(chat(tools=[WEATHER], tool_choice=ToolChoice("required")))
    constraint = engine.submitted[0].constraint
    assert constraint is not None and constraint.param == "tools"
    assert (constraint.begin, constraint.end) == ("<tool_call>\n", "\n</tool_call>")
    assert json.loads(constraint.json_schema)["properties"]["name"] == {"const": "get_weather"}
    assert len(reply.calls) == 2  # parallel calls allowed

    engine.script(two_calls)
    named = ToolChoice("required", name="get_weather")
    reply = await pipeline.collect(chat(tools=[WEATHER], tool_choice=named))
    assert len(reply.calls) == 1 and reply.done.finish_reason == "tool_calls"

    with pytest.raises(APIError) as info:
        await pipeline.start(chat(tools=[WEATHER], tool_choice=ToolChoice("required", "nope")))
    assert (info.value.status, info.value.param) == (400, "tool_choice")
    assert len(engine.submitted) == 2

    engine.script('{"a": 1}')
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    await pipeline.collect(chat(response_schema=schema, schema_param="format"))
    constraint = engine.submitted[2].constraint
    assert constraint is not None and json.loads(constraint.json_schema) == schema
    assert (constraint.param, constraint.begin) == ("format", "")


async def test_collect_gives_the_whole_parsed_answer() -> None:
    engine = FakeEngine(chat_template=HERMES_TEMPLATE + REASONING_TEMPLATE)
    engine.script("<think>Weather?</think>", "Let me look.", CALL, final_text="")
    reply = await Pipeline(engine).collect(chat(tools=[WEATHER], logprobs=True))
    assert reply.started == Started("fake-model", 7)
    assert (reply.reasoning, reply.content) == ("Weather?", "Let me look.")
    assert [c.name for c in reply.calls] == ["get_weather"]
    assert reply.logprobs == [(p, -0.25) for p in ("<think>Weather?</think>", "Let me look.", CALL)]
    assert reply.done.usage == Usage(7, 3)


async def test_logprobs_come_once_per_engine_step_before_its_text() -> None:
    engine = FakeEngine()
    engine.script("a", "b", final_text="c")
    events = await events_of(Pipeline(engine), chat(split_reasoning=False, logprobs=True))
    assert events[1:] == [
        Logprobs((("a", -0.25),)),
        ContentDelta("a"),
        Logprobs((("b", -0.25),)),
        ContentDelta("b"),
        Logprobs(()),  # the last step held text back but had no tokens of its own
        ContentDelta("c"),
        Done("stop", Usage(7, 2), Timings(0.05, 0.1)),
    ]


async def test_the_stop_sequence_the_engine_matched_is_reported() -> None:
    engine = FakeEngine()
    engine.script("one two", stop_sequence="three")
    reply = await Pipeline(engine).collect(chat(stop=("three",)))
    assert (reply.done.finish_reason, reply.done.stop_sequence) == ("stop", "three")
    assert engine.submitted[0].stop == ("three",)


async def test_raw_prompts_and_fill_in_the_middle() -> None:
    engine = FakeEngine()
    request = GenerateRequest("fake-model", "openai", prompt="def f(", suffix=")")
    with pytest.raises(APIError) as info:
        await Pipeline(engine).start(request)
    assert (info.value.status, info.value.code, info.value.param) == (
        400,
        "fim_not_supported",
        "suffix",
    )
    assert engine.submitted == []

    engine.fim_tokens = ("<pre>", "<suf>", "<mid>")
    engine.script("x):")
    reply = await Pipeline(engine).collect(request)
    assert reply.content == "x):"
    sent = engine.submitted[0]
    assert (sent.prompt, sent.suffix, sent.messages) == ("def f(", ")", None)


@pytest.mark.parametrize(
    ("engine_options", "model", "expected"),
    [
        ({}, "no-such-model", (404, "model_not_found", "model", None)),
        ({"state": "restarting"}, "fake-model", (503, "model_loading", None, "5")),
        ({"state": "idle", "model": None}, "fake-model", (404, "model_not_found", "model", None)),
    ],
)
async def test_refusals_come_before_anything_is_submitted(
    engine_options: dict[str, Any], model: str, expected: tuple[Any, ...]
) -> None:
    engine = FakeEngine(**engine_options)
    with pytest.raises(APIError) as info:
        await Pipeline(engine).start(chat(model=model))
    error = info.value
    assert (error.status, error.code, error.param, error.headers.get("Retry-After")) == expected
    assert engine.submitted == []


async def test_engine_refusals_map_to_typed_errors() -> None:
    engine = FakeEngine()
    engine.script(reject=("context_length_exceeded", "the prompt is 3000 tokens", "messages"))
    with pytest.raises(APIError) as info:
        await Pipeline(engine).start(chat())
    assert (info.value.status, info.value.code, info.value.param) == (
        400,
        "context_length_exceeded",
        "messages",
    )
    engine.script(reject=("engine_restarting", "the worker died", None))
    with pytest.raises(APIError) as info:
        await Pipeline(engine).start(chat())
    assert (info.value.status, info.value.headers) == (503, {"Retry-After": "2"})


async def test_models_load_on_demand_and_load_failures_are_errors() -> None:
    engine = FakeEngine()
    pipeline = Pipeline(engine)
    other, embedder = fake_spec("other-model"), fake_spec("embedder", task="embeddings")
    pipeline.models.seen.update({other.id: other, embedder.id: embedder})
    engine.script("hi")
    reply = await pipeline.collect(chat(model="Other-Model"))
    assert engine.loads == [other] and reply.started.model == "other-model"

    with pytest.raises(APIError) as info:
        await pipeline.start(chat(model="embedder"))
    assert (info.value.status, info.value.code) == (400, "model_not_generative")

    engine.load_outcome = "error"
    with pytest.raises(APIError) as info:
        await pipeline.start(chat(model="fake-model"))
    assert (info.value.status, info.value.code) == (500, "model_load_failed")
    assert "bad weights" in info.value.message


async def test_an_engine_failure_mid_stream_is_a_503_after_the_text_so_far() -> None:
    engine = FakeEngine()
    engine.script("partial", error="the engine worker stopped unexpectedly")
    generation = await Pipeline(engine).start(chat(split_reasoning=False))
    seen: list[PipelineEvent] = []
    with pytest.raises(APIError) as info:
        async for event in generation:
            seen.append(event)
    assert seen == [ContentDelta("partial")]
    error = info.value
    assert (error.status, error.code, error.headers) == (503, "engine_error", {"Retry-After": "2"})
    assert error.message == "the engine worker stopped unexpectedly"

    engine.script("partial", error="boom")
    with pytest.raises(APIError, match="boom"):
        await Pipeline(engine).collect(chat())


async def test_cancel_ends_with_cancelled_and_leaving_early_cancels() -> None:
    engine = FakeEngine()
    engine.script("one", " two", " three", hold_after=2)
    generation = await Pipeline(engine).start(chat(split_reasoning=False))
    seen: list[PipelineEvent] = []
    async for event in generation:
        seen.append(event)
        if len(seen) == 2:
            generation.cancel()
    assert seen[:2] == [ContentDelta("one"), ContentDelta(" two")]
    assert seen[2:] == [Done("cancelled", Usage(7, 2), Timings(0.05, 0.1))]
    assert generation.tokens == 2

    engine.script("one", " two", hold_after=1)
    generation = await Pipeline(engine).start(chat(split_reasoning=False))
    iterator = aiter(generation)
    assert await anext(iterator) == ContentDelta("one")
    await iterator.aclose()  # what a disconnected client's response does
    assert engine.streams[-1].cancelled


async def test_an_engine_side_cancel_is_a_retryable_error() -> None:
    """The worker cancels queued requests when the model is switched or unloaded."""
    engine = FakeEngine()
    engine.script("one", hold_after=0)
    generation = await Pipeline(engine).start(chat())
    engine.streams[-1].cancel()  # not asked for by the consumer
    with pytest.raises(APIError) as info:
        async for _ in generation:
            pass
    assert (info.value.status, info.value.code) == (503, "engine_error")
    assert "switched or unloaded" in info.value.message


def test_tool_call_arguments_reach_the_template_as_objects_from_every_dialect() -> None:
    """OpenAI and Responses carry arguments as JSON text, Anthropic as an object; a template
    writing ``arguments | tojson`` must get the object either way, or it quotes twice."""
    from engine.server.pipeline.plan import template_messages

    def turn(arguments: object) -> dict[str, Any]:
        call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
        return {"role": "assistant", "content": "", "tool_calls": [call]}

    messages = [{"role": "user", "content": "hi"}, turn('{"a": 1}'), turn({"a": 1}), turn("")]
    messages.append(turn("not json"))
    ready = template_messages(messages)
    assert ready is not None
    arguments = [m["tool_calls"][0]["function"]["arguments"] for m in ready[1:]]
    assert arguments == [{"a": 1}, {"a": 1}, {}, "not json"]
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == '{"a": 1}'  # not mutated


async def test_a_count_ends_finished_and_an_unread_generation_ends_when_closed() -> None:
    """Issue 28: an attachment's token count stayed "running" in the request log for good
    (started, cancelled, never read to its end). Every tracked request ends."""
    engine = FakeEngine()
    pipeline = Pipeline(engine)
    log = pipeline.monitor.log
    engine.script()  # a count_only request: accepted, then finished with nothing generated
    assert await pipeline.count(chat(dialect="desktop")) == 7
    assert engine.submitted[-1].count_only and log.running() == []
    counted = log.entries()[-1]
    assert (counted.outcome, counted.status, counted.prompt_tokens) == ("ok", 200, 7)
    assert counted.generated_tokens == 0

    engine.script("one", " two", hold_after=1)
    generation = await pipeline.start(chat(dialect="desktop"))
    assert len(log.running()) == 1  # started, not read yet
    generation.close()
    generation.close()  # harmless twice
    assert log.running() == [] and engine.streams[-1].cancelled
    assert [e.outcome for e in log.entries()] == ["ok", "cancelled"]
