"""``/metrics`` counts tool calls returned after repair (process-wide, read at scrape time)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from engine.parsing import ToolFormat, parse_tool_calls
from engine.server.monitor.metrics import ServerMetrics
from engine.supervisor.states import IDLE, EngineStatus


def repaired(metrics: ServerMetrics) -> float:
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            if sample.name == "sidelight_repaired_tool_calls_total":
                return sample.value
    raise AssertionError("sidelight_repaired_tool_calls_total is not rendered")


def test_a_repaired_call_moves_the_counter_and_a_clean_one_does_not() -> None:
    metrics = ServerMetrics(lambda: EngineStatus(IDLE))
    before = repaired(metrics)
    parse_tool_calls(
        ToolFormat.HERMES, '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>'
    )
    assert repaired(metrics) == before
    parse_tool_calls(
        ToolFormat.GLM,
        "<tool_call>f<arg_key>o</arg_key><arg_value>{'a': 1,}</arg_value></tool_call>",
    )
    parse_tool_calls(ToolFormat.HERMES, "<tool_call>{'name': 'f', 'arguments': {}}</tool_call>")
    assert repaired(metrics) == before + 2
