"""Unit tests of the Ollama and LM Studio metadata and option mapping (no server process)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from engine.gguf import read_metadata
from engine.models import spec_from_path
from engine.runtime import Runtime
from engine.server.lmstudio import model_entry
from engine.server.model_info import FIM_TOKENS, ModelInfo, describe
from engine.server.monitor.monitor import bind, unbind
from engine.server.monitor.record import OpenRequest
from engine.server.ollama import protocol, serving
from engine.server.ollama.output import Piece, check_request, format_schema, piece
from engine.server.pipeline import GenerateRequest, Pipeline
from engine.settings import load_settings
from engine.supervisor.states import READY
from tests.conftest import TINY_CODER, TINY_CODER_GGUF
from tests.server.fake_engine import FakeEngine


@pytest.fixture(scope="module")
def demo_info(tiny_model: Path) -> ModelInfo:
    return describe(spec_from_path(tiny_model))


def test_ir_model_is_described_from_its_files(demo_info: ModelInfo) -> None:
    assert demo_info.id == "sidelight-demo"
    assert demo_info.format == "ir"
    assert demo_info.architecture == "qwen2"
    assert demo_info.context_length == 2048
    assert demo_info.tools is True  # the Qwen2.5 template takes tools
    assert demo_info.reasoning is False  # ... but does not mention <think>
    assert demo_info.fim_tokens is None
    assert demo_info.task == "chat"
    assert demo_info.shape["embedding_length"] == 64
    assert demo_info.shape["vocab_size"] == 931
    # 2 layers of (4*64*64 - kv narrowing) attention + 3*64*192 MLP, tied 931x64 embeddings.
    assert demo_info.parameter_count == 158_208
    assert demo_info.parameter_size == "158.21K"
    assert demo_info.stop_strings == ("<|im_end|>",)
    assert demo_info.chat_template and "tool_call" in demo_info.chat_template


def test_gguf_model_is_described_from_its_header(tiny_gguf: Path, demo_info: ModelInfo) -> None:
    info = describe(spec_from_path(tiny_gguf))
    assert info.format == "gguf"
    assert info.architecture == "qwen2"
    assert info.context_length == 2048
    assert info.weights == "F16"
    assert info.tools is True
    assert info.parameter_count == demo_info.parameter_count
    assert protocol.details(info)["format"] == "gguf"
    assert protocol.details(info)["quantization_level"] == "F16"


def test_show_fields_copilot_and_zed_read(demo_info: ModelInfo) -> None:
    assert serving.capabilities(demo_info) == ["completion", "tools"]
    info = serving.model_info(demo_info)
    assert info["general.architecture"] == "qwen2"
    assert info["qwen2.context_length"] == 2048
    assert ".Suffix" not in serving.template(demo_info)


@pytest.mark.parametrize("path", [TINY_CODER, TINY_CODER_GGUF], ids=["ir", "gguf"])
def test_fim_model_advertises_insert_and_suffix(path: Path) -> None:
    info = describe(spec_from_path(path))
    assert info.fim_tokens == FIM_TOKENS[0]
    assert serving.capabilities(info) == ["completion", "tools", "insert"]
    template = serving.template(info)
    assert "{{ .Suffix }}" in template and "<|fim_middle|>" in template


def test_gguf_fim_tokens_are_found_by_their_text() -> None:
    # llama.cpp's converter names no FIM ids for a Qwen2 tokenizer; the vocabulary has them.
    meta = read_metadata(TINY_CODER_GGUF, keep_arrays=("tokenizer.ggml.tokens",))
    assert not [key for key in meta if key.startswith("tokenizer.ggml.fim_")]
    assert set(FIM_TOKENS[0]) <= set(meta["tokenizer.ggml.tokens"])
    skipped = read_metadata(TINY_CODER_GGUF)["tokenizer.ggml.tokens"]
    assert skipped == {"array_of": 8, "length": len(meta["tokenizer.ggml.tokens"])}


def test_embedding_model_capabilities(demo_info: ModelInfo) -> None:
    from dataclasses import replace

    embed = replace(demo_info, task="embeddings")
    assert serving.capabilities(embed) == ["embedding"]
    assert model_entry(embed, set())["type"] == "embeddings"


def test_lmstudio_entry(demo_info: ModelInfo) -> None:
    entry = model_entry(demo_info, {"sidelight-demo"})
    assert entry["type"] == "llm"
    assert entry["state"] == "loaded"
    assert entry["max_context_length"] == entry["loaded_context_length"] == 2048
    assert entry["capabilities"] == ["tool_use"]
    assert entry["compatibility_type"] == "openvino"
    assert model_entry(demo_info, set())["state"] == "not-loaded"


def test_names_accept_latest() -> None:
    assert serving.strip_tag("sidelight-demo:latest") == "sidelight-demo"
    assert serving.strip_tag("sidelight-demo") == "sidelight-demo"
    assert serving.strip_tag("qwen:7b") == "qwen:7b"


def test_options_map_to_sampling() -> None:
    options = protocol.Options.model_validate(
        {
            "num_ctx": 8192,
            "num_predict": 64,
            "temperature": 0.2,
            "top_p": 0.9,
            "top_k": 0,
            "min_p": 0.05,
            "seed": 7,
            "stop": ["\n\n"],
            "repeat_penalty": 1.1,
            "presence_penalty": 0.5,
            "frequency_penalty": 0.25,
            "num_gpu": 99,
        }
    )
    params = serving.sampling(options)
    assert params.temperature == 0.2 and params.top_p == 0.9 and params.min_p == 0.05
    assert params.top_k is None  # 0 turns top-k off in Ollama
    assert params.seed == 7 and params.repetition_penalty == 1.1
    assert params.presence_penalty == 0.5 and params.frequency_penalty == 0.25
    assert serving.max_tokens(options) == 64
    assert serving.stop(options) == ("\n\n",)
    assert options.ignored() == ["num_gpu"]
    for unlimited in (-1, -2):
        assert serving.max_tokens(protocol.Options(num_predict=unlimited)) is None


def test_requests_stream_by_default_and_check_format() -> None:
    chat = protocol.ChatRequest.model_validate({"model": "m", "messages": []})
    assert chat.stream is True
    assert protocol.GenerateRequest.model_validate({"model": "m", "format": ""}).format is None
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert protocol.ChatRequest.model_validate({"model": "m", "format": schema}).format == schema
    with pytest.raises(ValidationError):
        protocol.ChatRequest.model_validate({"model": "m", "format": "yaml"})


def test_pieces_join_into_one_message() -> None:
    call = {"function": {"name": "f", "arguments": {"a": 1}}}
    whole = Piece.join([Piece("a", "t1"), Piece("b", "t2", (call,))])
    assert whole.message() == {
        "role": "assistant",
        "content": "ab",
        "thinking": "t1t2",
        "tool_calls": [call],
    }
    assert Piece("x").message() == {"role": "assistant", "content": "x"}


async def _pieces(info: ModelInfo, *texts: str, **fields: Any) -> list[Piece]:
    """The Ollama pieces of a reply the fake engine writes as ``texts``."""
    engine = FakeEngine(model=info.spec, chat_template=info.chat_template)
    engine.script(*texts)
    request = GenerateRequest(
        info.id, "ollama", messages=[{"role": "user", "content": "Hi"}], **fields
    )
    generation = await Pipeline(engine).start(request)
    return [p async for e in generation if (p := piece(e, None)) is not None]


async def test_plain_replies_keep_their_text_exact(demo_info: ModelInfo) -> None:
    pieces = await _pieces(demo_info, " jumps", " over", split_reasoning=demo_info.reasoning)
    assert [p.content for p in pieces] == [" jumps", " over"]


async def test_tool_calls_arrive_whole(demo_info: ModelInfo) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    pieces = await _pieces(demo_info, text[:15], text[15:40], text[40:], tools=tools)
    whole = Piece.join(pieces).message()
    assert whole["content"] == ""
    (call,) = whole["tool_calls"]
    assert call["function"] == {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}


def test_requests_are_refused_for_what_the_model_lacks(demo_info: ModelInfo) -> None:
    from dataclasses import replace

    from engine.server.errors import APIError

    with pytest.raises(APIError, match="does not support thinking"):
        check_request(demo_info, "m", tools=False, think=True)
    no_tools = replace(demo_info, tools=False)
    with pytest.raises(APIError, match="does not support tools"):
        check_request(no_tools, "m", tools=True, think=None)
    check_request(demo_info, "m", tools=True, think=False)  # off is always possible


def test_format_becomes_a_schema() -> None:
    assert format_schema(None) is None
    assert format_schema("json") == {"type": "object"}
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert format_schema(schema) == schema


async def test_listing_the_running_models_names_no_requested_model(
    sidelight_home: Path, tiny_model: Path
) -> None:
    """/api/ps looks each running model up to describe it: a listing, not a request for
    that model, so the request it serves must not name one (a lookup notes the model a
    request asked for, for the request log). Over HTTP a GET is not recorded today (the
    monitor middleware skips listings); the request is bound here as the middleware binds
    one it records. Real scheduler and worker, the tiny model loaded."""
    settings = load_settings({"SIDELIGHT_HOME": str(sidelight_home)})
    settings.paths.ensure()
    runtime = Runtime(settings)
    runtime.start()
    try:
        runtime.default.load(spec_from_path(tiny_model))
        assert (await asyncio.to_thread(runtime.default.wait_for, {READY}, 120)).state == READY
        request = OpenRequest(dialect="ollama", method="GET", route="/api/ps")
        token = bind(request)
        try:
            listed = await serving.OllamaServing(Pipeline(runtime.engine)).ps()
        finally:
            unbind(token)
        assert [entry["name"] for entry in listed["models"]] == ["sidelight-demo:latest"]
        assert (request.requested_model, request.model) == (None, None)
    finally:
        await asyncio.to_thread(runtime.close)


def test_tool_results_are_paired_with_their_calls() -> None:
    """Ollama sends no call ids: the templates get ``call_<i>`` ids and tool messages that
    answer them in order (Gemma 4 names the function of a result by its call's id)."""
    from engine.server.images import ImageList
    from engine.server.ollama.serving_generate import _template_messages

    messages = [
        protocol.Message(role="user", content="Weather in Paris and Rome?"),
        protocol.Message.model_validate(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                    {"function": {"name": "get_time", "arguments": {"city": "Rome"}}},
                ],
            }
        ),
        protocol.Message(role="tool", content="22°C sunny"),
        protocol.Message(role="tool", content="noon", tool_name="clock"),
        protocol.Message(role="tool", content="an extra result"),
    ]
    out = _template_messages(messages, ImageList())
    assert [c["id"] for c in out[1]["tool_calls"]] == ["call_0", "call_1"]
    assert (out[2]["tool_call_id"], out[2]["name"]) == ("call_0", "get_weather")
    assert (out[3]["tool_call_id"], out[3]["name"]) == ("call_1", "clock")  # tool_name wins
    assert "tool_call_id" not in out[4] and "name" not in out[4]
    assert "tool_call_id" not in out[0]
