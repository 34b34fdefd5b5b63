"""The schema-to-grammar conversion, compiled and run by GenAI's XGrammar for real.

Every grammar is handed to an ``LLMPipeline`` on the tiny model, which compiles it (a bad
grammar is a ``RuntimeError`` there) and samples from it with several seeds. Each finished
sample must be JSON, valid against the schema, with no whitespace outside strings; where the
schema allows only a few documents, sampling must reach exactly those, so the grammar
is not narrower than the schema either (hot sampling reaches every one of them).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from engine.worker.json_grammar import UnsupportedSchema, compact_json_grammar
from engine.worker.messages import GenerationRequest, OutputConstraint
from engine.worker.prepare import prepare

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
        "extra": {"type": "object", "additionalProperties": {"type": "integer"}},
    },
    "required": ["where", "label", "extra"],
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


def _compact(text: str) -> bool:
    """No whitespace outside JSON strings."""
    return not re.search(r"\s", re.sub(r'"(?:[^"\\]|\\.)*"', '""', text))


def _conforms(schema: Any, value: Any, root: Any) -> bool:
    """The JSON Schema subset the converter supports, as a plain validator."""
    if schema is True:
        return True
    if "$ref" in schema:
        target = root
        for part in schema["$ref"][2:].split("/"):
            target = target[part]
        return _conforms(target, value, root)
    if "const" in schema:
        return bool(value == schema["const"] and type(value) is type(schema["const"]))
    if "enum" in schema:
        return any(value == v and type(value) is type(v) for v in schema["enum"])
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            test = all if key == "allOf" else any
            return test(_conforms(s, value, root) for s in schema[key])
    kinds = schema.get("type", "object")
    return any(_conforms_type(schema, kind, value, root) for kind in _listed(kinds))


def _listed(kinds: str | list[str]) -> list[str]:
    return kinds if isinstance(kinds, list) else [kinds]


_SCALARS = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
}


def _conforms_type(schema: dict[str, Any], kind: str, value: Any, root: Any) -> bool:
    if kind in _SCALARS:
        return bool(_SCALARS[kind](value))
    if kind == "string":
        low, high = schema.get("minLength", 0), schema.get("maxLength", 1 << 30)
        return isinstance(value, str) and low <= len(value) <= high
    if kind == "array":
        low, high = schema.get("minItems", 0), schema.get("maxItems", 1 << 30)
        items = schema.get("items", True)
        return (
            isinstance(value, list)
            and low <= len(value) <= high
            and all(_conforms(items, v, root) for v in value)
        )
    return isinstance(value, dict) and _conforms_object(schema, value, root)


def _conforms_object(schema: dict[str, Any], value: dict[str, Any], root: Any) -> bool:
    props = schema.get("properties", {})
    extra = schema.get("additionalProperties", not props)
    if any(key not in value for key in schema.get("required", [])):
        return False
    order = [key for key in props if key in value]
    if [key for key in value if key in props] != order:  # declared order, as documented
        return False
    return all(
        (sub := props.get(key, extra)) is not False and _conforms(sub, item, root)
        for key, item in value.items()
    )


@pytest.mark.parametrize("schema", SUPPORTED, ids=lambda s: json.dumps(s)[:40])
def test_samples_are_compact_and_valid(sample: Any, schema: Any) -> None:
    grammar = compact_json_grammar(schema)
    finished = 0
    for seed in range(8):
        text, done = sample(grammar, seed)
        if not done:
            continue  # cut off by max_tokens: nothing to check but the prefix
        finished += 1
        value = json.loads(text)
        assert _compact(text), text
        assert _conforms(schema, value, schema), text
    assert finished, "no sample finished"


@pytest.mark.parametrize(("schema", "language"), SMALL_LANGUAGES, ids=lambda s: str(s)[:30])
def test_small_languages_are_matched_exactly(sample: Any, schema: Any, language: set[str]) -> None:
    grammar = compact_json_grammar(schema)
    # Hot sampling flattens the model's preferences, so the grammar's own choices show.
    seen = {sample(grammar, seed, 20, 5.0)[0] for seed in range(24)}
    assert seen == language  # nothing outside the schema, and nothing in it out of reach


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": "^a+$"},
        {"type": "string", "format": "date-time"},
        {"type": "integer", "minimum": 0},
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
    schema = json.dumps({"type": "string", "pattern": "^a+$"})
    with caplog.at_level(logging.INFO, logger="engine.worker.prepare"):
        so = _prepared_config(OutputConstraint(schema)).structured_output_config
    assert so.json_schema == schema and so.grammar is None
    assert "'pattern' is not supported" in caplog.text
