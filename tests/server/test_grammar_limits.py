"""The grammar limits the planner checks before a constrained request reaches the worker.

Pure functions (``engine/server/grammar_limits.py``) and the planner that calls them once
for every dialect (``engine/server/pipeline/plan.py``); no engine needed.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine.server.errors import APIError
from engine.server.grammar_limits import (
    MAX_ALTERNATIVES,
    MAX_LITERAL_CHARS,
    MAX_OPTIONAL_PROPERTIES,
    MAX_PROPERTIES,
    GrammarSize,
    GrammarTooLarge,
    check_grammar,
    measure_grammar,
)
from engine.server.pipeline.plan import plan_request
from engine.server.pipeline.request import GenerateRequest, ToolChoice

HERMES_TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}<tool_call>"
HELLO = [{"role": "user", "content": "Hello"}]


def obj(count: int, *, required: int = 0, prefix: str = "p") -> dict[str, Any]:
    properties = {f"{prefix}{i}": {"type": "string"} for i in range(count)}
    return {"type": "object", "properties": properties, "required": list(properties)[:required]}


def tools(count: int, properties: int) -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": f"t{i}", "parameters": obj(properties)}}
        for i in range(count)
    ]


def test_measure_counts_what_the_compile_time_depends_on() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": obj(3, required=1),
            "b": {"type": "array", "items": obj(5)},
            "c": {"enum": ["x", "yy", 3]},
            "d": {"anyOf": [{"type": "string"}, {"const": "zz"}]},
        },
        "required": ["a", "b", "c", "d"],
        "$defs": {"e": obj(2, required=2)},
        "default": {"ignored": obj(999)},  # data, not a schema
        "description": "properties enum anyOf",
    }
    size = measure_grammar([schema])
    # a, b, c, d; a's 3; b's items' 5; $defs.e's 2
    assert size.properties == 4 + 3 + 5 + 2
    assert size.most_optional == 5
    assert size.alternatives == 3 + 2 + 1  # c's enum, d's branches, d's const
    names = 4 + 3 * 2 + 5 * 2 + 2 * 2
    assert size.literal_chars == names + len("x") + len("yy") + len("3") + len("zz")


def test_tools_are_counted_together() -> None:
    size = measure_grammar(t["function"]["parameters"] for t in tools(64, 15))
    assert size == GrammarSize(
        properties=960, most_optional=15, alternatives=0, literal_chars=size.literal_chars
    )


@pytest.mark.parametrize(
    ("schemas", "words"),
    [
        ([obj(MAX_OPTIONAL_PROPERTIES + 1)], f"at most {MAX_OPTIONAL_PROPERTIES} per object"),
        ([obj(3000)], "3,000 optional properties"),
        ([obj(MAX_PROPERTIES + 1, required=MAX_PROPERTIES + 1)], f"at most {MAX_PROPERTIES:,}"),
        ([obj(100, prefix=f"o{k}_") for k in range(6)], "600 properties"),
        ([{"enum": list(range(MAX_ALTERNATIVES + 1))}], f"at most {MAX_ALTERNATIVES:,}"),
        ([{"enum": ["x" * (MAX_LITERAL_CHARS + 1)]}], f"at most {MAX_LITERAL_CHARS:,}"),
    ],
)
def test_each_limit_is_named_with_its_number(schemas: list[Any], words: str) -> None:
    with pytest.raises(GrammarTooLarge, match=words):
        check_grammar(schemas)


def test_the_largest_allowed_grammars_pass() -> None:
    check_grammar([obj(MAX_OPTIONAL_PROPERTIES)])
    check_grammar([obj(MAX_PROPERTIES, required=MAX_PROPERTIES)])
    check_grammar([{"enum": list(range(MAX_ALTERNATIVES))}])
    check_grammar(t["function"]["parameters"] for t in tools(32, 16))
    check_grammar([True, None, {"type": "object"}])  # json_object, a tool without parameters


def _plan(**fields: Any) -> APIError:
    request = GenerateRequest(model="m", dialect="openai", messages=HELLO, **fields)
    with pytest.raises(APIError) as info:
        plan_request(request, HERMES_TEMPLATE)
    return info.value


@pytest.mark.parametrize("param", ["response_format", "text.format", "format"])
def test_the_planner_refuses_a_huge_response_schema_naming_its_field(param: str) -> None:
    error = _plan(response_schema=obj(3000), schema_param=param)
    assert (error.status, error.param, error.code) == (400, param, "grammar_too_large")
    assert (
        error.message.startswith(f"{param}: ")
        and f"at most {MAX_OPTIONAL_PROPERTIES}" in error.message
    )


def test_the_planner_refuses_a_huge_tool_grammar_naming_tools() -> None:
    error = _plan(tools=tools(64, 15), tool_choice=ToolChoice("required"))
    assert (error.status, error.param) == (400, "tools")
    assert "960 properties" in error.message and f"at most {MAX_PROPERTIES}" in error.message


def test_only_the_named_tool_counts_and_auto_over_the_limits_builds_no_grammar() -> None:
    """``tool_choice: "auto"`` asks for no constraint: tools over the limits run without the
    lazy call grammar rather than being refused."""
    many = tools(64, 15)
    plan = plan_request(
        GenerateRequest(
            model="m",
            dialect="openai",
            messages=HELLO,
            tools=many,
            tool_choice=ToolChoice(name="t3"),
        ),
        HERMES_TEMPLATE,
    )
    assert plan.constraint is not None and plan.constraint.param == "tools"
    auto = plan_request(
        GenerateRequest(model="m", dialect="openai", messages=HELLO, tools=many), HERMES_TEMPLATE
    )
    assert auto.constraint is None


def test_auto_holds_calls_with_a_lazy_grammar_that_opens_at_the_trigger() -> None:
    few = tools(2, 3)
    auto = plan_request(
        GenerateRequest(model="m", dialect="openai", messages=HELLO, tools=few), HERMES_TEMPLATE
    )
    lazy = auto.constraint
    assert lazy is not None and lazy.lazy and not lazy.single
    assert (lazy.trigger, lazy.begin, lazy.end) == (
        "<tool_call>",
        "<tool_call>\n",
        "\n</tool_call>",
    )
    names = [
        option["properties"]["name"]["const"] for option in json.loads(lazy.json_schema)["anyOf"]
    ]
    assert names == ["t0", "t1"]
    one = plan_request(
        GenerateRequest(
            model="m", dialect="openai", messages=HELLO, tools=few, parallel_tool_calls=False
        ),
        HERMES_TEMPLATE,
    )
    assert one.constraint is not None and one.constraint.single  # the reply ends after one call


def test_families_whose_calls_are_lists_get_no_lazy_grammar() -> None:
    mistral = "{{ messages }}[TOOL_CALLS][AVAILABLE_TOOLS]"
    plan = plan_request(
        GenerateRequest(model="m", dialect="openai", messages=HELLO, tools=tools(1, 2)), mistral
    )
    assert plan.tool_format is not None and plan.constraint is None
