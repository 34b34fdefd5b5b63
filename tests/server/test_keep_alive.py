"""parse_keep_alive: Ollama's keep_alive values (seconds or Go durations) to seconds."""

from __future__ import annotations

import math

import pytest

from engine.server.keep_alive import FOREVER, MAX_SECONDS, parse_keep_alive


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (0, 0.0),
        (300, 300.0),
        (2.5, 2.5),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("300ms", 0.3),
        ("2m30s", 150.0),
        ("10", 10.0),  # a bare number string is seconds, as OLLAMA_KEEP_ALIVE takes it
        (" 5m ", 300.0),
        ("0", 0.0),
    ],
)
def test_durations_become_seconds(value: float | str, seconds: float) -> None:
    assert parse_keep_alive(value) == pytest.approx(seconds)


@pytest.mark.parametrize("value", [-1, -0.5, "-1m", "-1"])
def test_negative_means_forever(value: float | str) -> None:
    assert parse_keep_alive(value) == FOREVER
    assert math.isinf(FOREVER)


@pytest.mark.parametrize(
    "value", ["", "abc", "5x", "m5", "5 m", "--5m", "5m3", True, math.nan, MAX_SECONDS + 1]
)
def test_anything_else_is_refused_with_a_reason(value: float | str) -> None:
    with pytest.raises(ValueError, match=r"duration|at most"):
        parse_keep_alive(value)
