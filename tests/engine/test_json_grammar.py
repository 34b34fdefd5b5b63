"""The schema-to-grammar conversion, compiled and run by GenAI's XGrammar for real.

Every grammar is handed to an ``LLMPipeline`` on the tiny model, which compiles it (a bad
grammar is a ``RuntimeError`` there) and samples from it with several seeds. Each finished
sample must be JSON, valid against the schema, with no whitespace outside strings but one
optional space after a ``,`` or ``:``; where the
schema allows only a few documents, sampling must reach exactly those, so the grammar
is not narrower than the schema either (hot sampling reaches every one of them).
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from engine.worker.json_grammar import UnsupportedSchema, compact_json_grammar
from engine.worker.messages import GenerationRequest, OutputConstraint
from engine.worker.prepare import prepare
from tests.schema_check import conforms, is_compact

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer"},
        "score": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        "kind": {"enum": ["a", "b", 1, None]},
        "nick": {"type": ["string", "null"], "maxLength": 4},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "age", "kind", "ok"],
    "additionalProperties": False,
}
# What pydantic (and the openai SDK's .parse) emit: $defs, $ref, anyOf with null, titles.
PYDANTIC_STYLE = {
    "$defs": {
        "Point": {
            "properties": {"x": {"title": "X", "type": "integer"}, "y": {"type": "integer"}},
            "required": ["x", "y"],
            "title": "Point",
            "type": "object",
            "additionalProperties": False,
        }
    },
    "properties": {
        "where": {"$ref": "#/$defs/Point"},
        "label": {"anyOf": [{"type": "string", "maxLength": 6}, {"type": "null"}]},
    },
    "required": ["where", "label"],
    "title": "Placed",
    "type": "object",
    "additionalProperties": False,
}
RECURSIVE = {
    "$defs": {
        "Node": {
            "type": "object",
            "properties": {
                "v": {"type": "integer"},
                "next": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]},
            },
            "required": ["v", "next"],
        }
    },
    "$ref": "#/$defs/Node",
}
SUPPORTED = [
    PERSON,
    PYDANTIC_STYLE,
    RECURSIVE,
    {"type": "object"},  # json_object: any object
    {"type": "object", "properties": {}, "additionalProperties": False},
    {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3},
    {"oneOf": [{"type": "integer"}, {"type": "string", "maxLength": 3}]},
    {"allOf": [{"type": "boolean"}]},
    {"const": {"a": [1, 'x\n"y"']}},
    {"type": "string", "enum": ["caf\u00e9", "tab\there", "back\\slash"]},
    True,
    # Bounds and patterns as agents' tools carry them (Claude Code's Read, Workflow).
    {
        "type": "object",
        "properties": {
            "offset": {"type": "integer", "minimum": 0, "maximum": 9007199254740991},
            "limit": {"type": "integer", "exclusiveMinimum": 0, "maximum": 9007199254740991},
            "scale": {"type": "number", "minimum": -2, "exclusiveMaximum": 3},
        },
        "required": ["offset", "limit", "scale"],
        "additionalProperties": False,
    },
    {"type": "string", "pattern": "^wf_[a-z0-9-]{6,10}$"},
    {"type": "string", "pattern": '^[^"\\\\]{1,3}$'},
    {"type": "string", "pattern": "^[A-Z]{2}-\\d{2}$"},
    # The formats pydantic writes (datetime, UUID, EmailStr, AnyUrl) and a few more.
    *({"type": "string", "format": key} for key in ("date-time", "date", "time", "uuid", "ipv4")),
    {"type": "string", "format": "email"},
    {"type": "string", "format": "uri"},
    {"type": "string", "format": "hostname"},
]
# Free-form keys: the tiny model runs on inside a key string (grammatical, so it can), so
# these are only compiled and started, not sampled to the end.
FREE_KEYS = [
    {"type": "object", "additionalProperties": {"type": "integer"}},
    {
        "type": "object",
        "properties": {"a": {"type": "boolean"}, "b": {"type": "null"}},
        "required": ["b"],
        "additionalProperties": {"type": "array", "items": {"type": "number"}},
    },
]
# Documents a grammar allows when the schema allows only a handful.
SMALL_LANGUAGES: list[tuple[Any, set[str]]] = [
    (
        {
            "type": "object",
            "properties": {"a": {"type": "boolean"}, "b": {"const": None}},
            "additionalProperties": False,
        },
        {'{}', '{"a":true}', '{"a":false}', '{"b":null}', '{"a":true,"b":null}', '{"a":false,"b":null}'},
    ),
    ({"enum": ["x", 2, None, True]}, {'"x"', "2", "null", "true"}),
    ({"type": "integer", "minimum": -2, "exclusiveMaximum": 4}, {"-2", "-1", "0", "1", "2", "3"}),
    ({"type": "string", "pattern": "^(ab|c)d?$"}, {'"ab"', '"abd"', '"c"', '"cd"'}),
    ({"type": ["boolean", "null"]}, {"true", "false", "null"}),
    (
        {"type": "array", "items": {"type": "boolean"}, "maxItems": 2},
        {"[]", "[true]", "[false]"} | {f"[{a},{b}]" for a in ("true", "false") for b in ("true", "false")},
    ),
]  # fmt: skip


@pytest.fixture(scope="module")
def sample(tiny_model: Path) -> Iterator[Any]:
    """``sample(grammar, seed, max_tokens, temperature)`` -> (text, finished), tiny model."""
    import openvino_genai as ov_genai

    pipe = ov_genai.LLMPipeline(str(tiny_model), "CPU")
    prompt = pipe.get_tokenizer().apply_chat_template(
        [{"role": "user", "content": "Describe the sea."}], add_generation_prompt=True
    )

    def run(
        grammar: str, seed: int, max_tokens: int = 60, temperature: float = 1.5
    ) -> tuple[str, bool]:
        config = pipe.get_generation_config()
        config.max_new_tokens = max_tokens
        config.do_sample = True
        config.temperature = temperature
        config.rng_seed = seed
        config.structured_output_config = ov_genai.StructuredOutputConfig(grammar=grammar)
        result = pipe.generate([prompt], config)
        generated = result.perf_metrics.get_num_generated_tokens()
        return str(result.texts[0]), generated < max_tokens

    yield run


@pytest.mark.parametrize("schema", SUPPORTED, ids=lambda s: json.dumps(s)[:40])
def test_samples_are_compact_and_valid(sample: Any, schema: Any) -> None:
    grammar = compact_json_grammar(schema)
    finished = 0
    # Hot sampling reaches odd corners; at 1.5 the demo model runs on inside a free-form
    # object's strings past max_tokens, so cooler samples give a finished one too.
    for seed, temperature in itertools.product(range(8), (1.5, 1.0)):
        text, done = sample(grammar, seed, temperature=temperature)
        if not done:
            continue  # cut off by max_tokens: nothing to check but the prefix
        finished += 1
        value = json.loads(text)
        assert is_compact(text), text
        assert conforms(schema, value), text
    assert finished, "no sample finished"


@pytest.mark.parametrize("schema", FREE_KEYS, ids=lambda s: json.dumps(s)[:40])
def test_free_key_grammars_compile_and_start_compact(sample: Any, schema: Any) -> None:
    text, _ = sample(compact_json_grammar(schema), seed=0, max_tokens=4)
    assert text.startswith("{") and is_compact(text[:2]), text


@pytest.mark.parametrize(("schema", "language"), SMALL_LANGUAGES, ids=lambda s: str(s)[:30])
def test_small_languages_are_matched_exactly(sample: Any, schema: Any, language: set[str]) -> None:
    grammar = compact_json_grammar(schema)
    # Hot sampling flattens the model's preferences, so the grammar's own choices show.
    runs = [sample(grammar, seed, 40, 5.0) for seed in range(40)]
    texts = [text for text, finished in runs if finished]
    assert all(is_compact(text) for text in texts), texts
    seen = {json.dumps(json.loads(text), separators=(",", ":")) for text in texts}
    assert seen == language  # nothing outside the schema, and nothing in it out of reach


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": "a(?=b)"},
        {"type": "string", "pattern": "^a+$", "maxLength": 3},
        {"type": "string", "format": "duration"},
        {"type": "string", "format": "uuid", "maxLength": 40},
        {"type": "number", "maximum": 0.5},
        {"type": "integer", "minimum": 3, "maximum": 2},
        {"type": "array", "prefixItems": [{"type": "string"}]},
        {"not": {"type": "string"}},
        {"allOf": [{"type": "object"}, {"required": ["a"]}]},
        {"$ref": "https://example.com/schema.json"},
        {"$ref": "#/$defs/Missing"},
        {"type": "thing"},
        {"type": "object", "properties": {"a": {}}, "required": ["b"]},
        {"type": "object", "patternProperties": {"^x": {}}},
        False,
    ],
    ids=lambda s: json.dumps(s)[:40],
)
def test_unsupported_schemas_are_named(schema: Any) -> None:
    with pytest.raises(UnsupportedSchema):
        compact_json_grammar(schema)


class _Tokenizer:
    """Enough of a GenAI tokenizer for ``prepare`` on a raw prompt."""

    def encode(self, text: str, add_special_tokens: bool = True) -> Any:
        return SimpleNamespace(input_ids=SimpleNamespace(data=[[1, 2, 3]]))


def _prepared_config(constraint: OutputConstraint) -> Any:
    import openvino_genai as ov_genai

    request = GenerationRequest(request_id=1, prompt="hi", max_tokens=8, constraint=constraint)
    return prepare(request, _Tokenizer(), ov_genai.GenerationConfig(), None).config


def test_prepare_uses_the_compact_grammar() -> None:
    so = _prepared_config(OutputConstraint(json.dumps(PERSON))).structured_output_config
    assert so.grammar == compact_json_grammar(PERSON) and so.json_schema is None
    tagged = OutputConstraint(json.dumps(PERSON), "<tool_call>\n", "\n</tool_call>", "tools")
    so = _prepared_config(tagged).structured_output_config
    assert "EBNF" in repr(so.structural_tags_config) and so.json_schema is None


def test_prepare_falls_back_to_genai_json_schema_with_a_note(
    caplog: pytest.LogCaptureFixture,
) -> None:
    schema = json.dumps({"type": "string", "format": "ipv6"})
    with caplog.at_level(logging.INFO, logger="engine.worker.prepare"):
        so = _prepared_config(OutputConstraint(schema)).structured_output_config
    assert so.json_schema == schema and so.grammar is None
    assert "format 'ipv6' is not supported" in caplog.text


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"name": {"const": name}, "arguments": arguments},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def test_a_tool_outside_the_subset_leaves_the_others_compact(tiny_model: Path) -> None:
    """A call schema over several tools, one outside the compact subset (``format: ipv6``):
    that tool goes to XGrammar's JSON schema alone, the rest stay compact EBNF (before,
    the whole union went to XGrammar, whose compile takes seconds per tool set on a real
    vocabulary). The mixed grammar compiles, and every sampled call is valid."""
    import openvino_genai as ov_genai

    bounded = {"type": "integer", "minimum": 1, "maximum": 5}
    fetch = {"type": "object", "properties": {"url": {"type": "string", "format": "ipv6"}}}
    read = {"type": "object", "properties": {"n": bounded}, "required": ["n"]}
    schema = {"anyOf": [_call("read", read), _call("fetch", fetch)]}
    constraint = OutputConstraint(json.dumps(schema), "<tool_call>\n", "\n</tool_call>", "tools")
    so = _prepared_config(constraint).structured_output_config
    text = repr(so.structural_tags_config)
    assert "Union" in text and "EBNF" in text and "JSONSchema" in text, text

    pipe = ov_genai.LLMPipeline(str(tiny_model), "CPU")
    config = pipe.get_generation_config()
    config.max_new_tokens = 60
    config.do_sample = True
    config.temperature = 1.5
    config.structured_output_config = so
    finished = 0
    for seed in range(12):
        config.rng_seed = seed
        result = pipe.generate(["Call a tool."], config)
        if result.perf_metrics.get_num_generated_tokens() >= 60:
            continue
        finished += 1
        reply = str(result.texts[0])
        assert reply.startswith("<tool_call>\n") and reply.endswith("\n</tool_call>"), reply
        call = reply.removeprefix("<tool_call>\n").removesuffix("\n</tool_call>")
        value = json.loads(call)
        assert conforms(schema, value), reply
        if value["name"] == "read":
            assert is_compact(call), reply
    assert finished, "no sample finished"


def test_the_captured_agents_tools_are_in_the_compact_subset() -> None:
    """Every tool schema the recorded agents send (Claude Code, Codex, Continue, Copilot,
    Zed) converts to compact EBNF. Before bounds, patterns and formats were written, every
    Claude Code request sent its whole tool set to XGrammar's JSON schema: 27 s per tool set
    on a 151k vocabulary (docs/benchmarks.md "Grammar compile")."""
    captures = Path(__file__).resolve().parents[1] / "fixtures" / "plugin_requests"
    converted, refused = 0, []
    for file in sorted(captures.glob("*.json")):
        for recorded in json.loads(file.read_text(encoding="utf-8"))["requests"]:
            body = json.loads(recorded["body"]) if recorded.get("body") else {}
            for tool in body.get("tools") or []:
                function = tool.get("function") or {}
                schema = tool.get("input_schema") or tool.get("parameters")
                schema = schema or function.get("parameters")
                if schema is None:
                    continue
                try:
                    compact_json_grammar(schema)
                    converted += 1
                except UnsupportedSchema as exc:
                    refused.append(str(exc))
    assert converted > 50 and not refused, refused
