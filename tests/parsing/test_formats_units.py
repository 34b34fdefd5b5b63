"""The pieces under the families: harmony's channel router, schema typing of XML values,
Gemma 4's argument notation and the fallback parser on plain text."""

from __future__ import annotations

from typing import Any

import pytest

from engine.parsing import ReasoningFormat, ToolFormat, new_reasoning_parser, parse_tool_calls
from engine.parsing.tool_parsers.gemma4 import gemma_to_json
from engine.parsing.tool_parsers.values import parameter_types, tool_schemas, typed_value
from tests.parsing.family_check import splits


def split_reasoning(fmt: ReasoningFormat, pieces: list[str]) -> tuple[str, str]:
    parser = new_reasoning_parser(fmt)
    reasoning = content = ""
    for piece in pieces:
        delta = parser.feed(piece)
        reasoning, content = reasoning + delta.reasoning, content + delta.content
    delta = parser.finish()
    return reasoning + delta.reasoning, content + delta.content


def test_harmony_preamble_is_content_and_calls_pass_on_canonically() -> None:
    text = (
        "<|channel|>analysis<|message|>Think.<|end|>"
        "<|start|>assistant<|channel|>commentary<|message|>Checking the weather.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json"
        '<|message|>{"a": 1}<|call|>'
    )
    for pieces in splits(text):
        assert split_reasoning(ReasoningFormat.HARMONY, pieces) == (
            "Think.",
            'Checking the weather.to=functions.f<|message|>{"a": 1}<|call|>',
        )


@pytest.mark.parametrize("text", ["Plain answer, no channels.", "a < b", "<b>bold</b>", "<"])
def test_harmony_text_without_markup_is_kept_as_written(text: str) -> None:
    for pieces in splits(text):
        assert split_reasoning(ReasoningFormat.HARMONY, pieces) == ("", text)


def test_tag_reasoning_formats() -> None:
    cases = {
        ReasoningFormat.MISTRAL: "[THINK]Hmm.[/THINK]Yes.",
        ReasoningFormat.SEED_OSS: "<seed:think>Hmm.</seed:think>Yes.",
        ReasoningFormat.GEMMA4: "<|channel>thought\nHmm.<channel|>Yes.",
        ReasoningFormat.THINK: "<think>\nHmm.\n</think>\n\nYes.",
    }
    for fmt, text in cases.items():
        for pieces in splits(text):
            assert split_reasoning(fmt, pieces) == ("Hmm.", "Yes."), fmt
    # A Gemma reply that does not think keeps its text.
    assert split_reasoning(ReasoningFormat.GEMMA4, ["thought is free"]) == ("", "thought is free")


SCHEMAS = tool_schemas(
    [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {
                    "properties": {
                        "n": {"type": "integer"},
                        "x": {"type": "number"},
                        "b": {"type": "boolean"},
                        "o": {"type": "object"},
                        "l": {"type": "array"},
                        "s": {"type": "string"},
                        "u": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                        "e": {"enum": ["a", "b"]},
                    }
                },
            },
        },
        {"type": "function"},  # malformed: skipped
    ]
)


@pytest.mark.parametrize(
    ("name", "text", "value"),
    [
        ("n", "42", 42),
        ("n", " 7 ", 7),
        ("x", "2.5", 2.5),
        ("x", "3", 3),
        ("b", "True", True),
        ("o", '{"k": [1, 2]}', {"k": [1, 2]}),
        ("o", "{'k': 1,}", {"k": 1}),
        ("l", "[1, 'two']", [1, "two"]),
        ("s", "42", "42"),
        ("s", "{not json}", "{not json}"),
        ("u", "null", None),
        ("u", "5", 5),
        ("e", "a", "a"),
        ("missing", "12", "12"),
        ("missing", '{"k": 1}', {"k": 1}),
        ("n", "many", "many"),  # does not fit: kept as text for the client to refuse
    ],
)
def test_values_typed_by_schema(name: str, text: str, value: Any) -> None:
    typed, _ = typed_value(text, parameter_types(SCHEMAS, "f", name))
    assert typed == value and type(typed) is type(value)


def test_gemma_notation_to_json() -> None:
    text = '{a:<|"|>x, y: {z}<|"|>,b:[1,true,<|"|>q<|"|>],c:{<|"|>d<|"|>:null}}'
    assert gemma_to_json(text) == '{"a":"x, y: {z}","b":[1,true,"q"],"c":{"d":null}}'


@pytest.mark.parametrize(
    "text", ["Hello there.  ", "  indented\n", "a <tool_ b", "ends with <|tool", "[TOOL_X] not"]
)
def test_fallback_parser_keeps_plain_text_exactly(text: str) -> None:
    assert parse_tool_calls(ToolFormat.AUTO, text) == (text, [])
