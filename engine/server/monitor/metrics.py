"""Prometheus metrics of one server: requests, tokens, latencies, the engine and its model.

Each :class:`ServerMetrics` has its own :class:`CollectorRegistry` (never the library's
global one), so two apps in one process (tests, the desktop restarting its server) keep
separate counts. Request metrics are recorded once per request from its log entry;
the engine's (model, memory, restarts) are read from :class:`EngineStatus` at each scrape.
Every metric is described in ``docs/metrics.md``.

Threading: prometheus_client's metrics are thread-safe; :meth:`render` runs anywhere.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import get_args

import psutil
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from engine.parsing import repaired_calls
from engine.server.monitor.record import RequestEntry
from engine.supervisor.states import READY, EngineStatus, HealthState

logger = logging.getLogger(__name__)

_TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
_QUEUE_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0)
_DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
_BY_MODEL = ("dialect", "model")


class ServerMetrics:
    """The registry and its metrics; ``status`` reads the engine's state at scrape time."""

    def __init__(self, status: Callable[[], EngineStatus]) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "sidelight_requests",
            "Requests that asked for work, by route, dialect, model and outcome",
            ("route", "dialect", "model", "outcome"),
            registry=r,
        )
        self.prompt_tokens = Counter(
            "sidelight_prompt_tokens", "Prompt tokens processed", _BY_MODEL, registry=r
        )
        self.cached_prompt_tokens = Counter(
            "sidelight_cached_prompt_tokens",
            "Prompt tokens found in the prefix cache (not computed again)",
            _BY_MODEL,
            registry=r,
        )
        self.generated_tokens = Counter(
            "sidelight_generated_tokens", "Tokens generated", _BY_MODEL, registry=r
        )
        self.ttft = Histogram(
            "sidelight_time_to_first_token_seconds",
            "Time from the engine receiving a request to its first generated token",
            _BY_MODEL,
            buckets=_TTFT_BUCKETS,
            registry=r,
        )
        self.time_per_output_token = Histogram(
            "sidelight_time_per_output_token_seconds",
            "Mean time between generated tokens after the first, one sample per request",
            _BY_MODEL,
            buckets=_TPOT_BUCKETS,
            registry=r,
        )
        self.queue_wait = Histogram(
            "sidelight_queue_wait_seconds",
            "Time from submitting a request to the engine until it accepted it",
            _BY_MODEL,
            buckets=_QUEUE_BUCKETS,
            registry=r,
        )
        self.duration = Histogram(
            "sidelight_request_duration_seconds",
            "Time from a request's arrival to the last byte of its answer",
            _BY_MODEL,
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(
            "sidelight_requests_in_flight", "Requests being served now", registry=r
        )
        self.queued = Gauge(
            "sidelight_requests_queued",
            "Generations submitted to the engine and not yet accepted",
            registry=r,
        )
        r.register(EngineCollector(status))

    def observe(self, entry: RequestEntry) -> None:
        """Count one finished request."""
        model = entry.model or ""
        self.requests.labels(entry.route, entry.dialect, model, entry.outcome).inc()
        labels = (entry.dialect, model)
        if entry.prompt_tokens:
            self.prompt_tokens.labels(*labels).inc(entry.prompt_tokens)
        if entry.cached_tokens:
            self.cached_prompt_tokens.labels(*labels).inc(entry.cached_tokens)
        if entry.generated_tokens:
            self.generated_tokens.labels(*labels).inc(entry.generated_tokens)
        if entry.ttft_seconds is not None:
            self.ttft.labels(*labels).observe(entry.ttft_seconds)
        if entry.tokens_per_second:
            self.time_per_output_token.labels(*labels).observe(1 / entry.tokens_per_second)
        if entry.queue_seconds is not None:
            self.queue_wait.labels(*labels).observe(entry.queue_seconds)
        if entry.duration_seconds is not None:
            self.duration.labels(*labels).observe(entry.duration_seconds)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)


class EngineCollector(Collector):
    """The engine as it is at scrape time: its state (``stalled`` over ``ready`` while its
    worker leaves a ping unanswered), the loaded model, the worker's memory, the model's
    load time and the worker's restarts."""

    def __init__(self, status: Callable[[], EngineStatus]) -> None:
        self._status = status

    def collect(self) -> Iterator[Metric]:
        status = self._status()
        state = GaugeMetricFamily(
            "sidelight_engine_state",
            "1 for the engine's current state (stalled: a ping unanswered past stall_seconds)",
            labels=["state"],
        )
        for name in get_args(HealthState):
            state.add_metric([name], 1.0 if status.health == name else 0.0)
        yield state
        yield CounterMetricFamily(
            "sidelight_engine_restarts",
            "Times the engine worker was restarted after it died or hung",
            value=status.restarts,
        )
        yield CounterMetricFamily(
            "sidelight_repaired_tool_calls",
            "Tool calls returned after repairing the model's markup (process-wide)",
            value=repaired_calls(),
        )
        labels = ["model", "device"]
        loaded = GaugeMetricFamily("sidelight_model_loaded", "The model loaded", labels=labels)
        memory = GaugeMetricFamily(
            "sidelight_model_memory_bytes",
            "Resident memory of the engine worker holding the model",
            labels=labels,
        )
        load = GaugeMetricFamily(
            "sidelight_model_load_seconds", "How long loading the model took", labels=labels
        )
        if status.state == READY and status.model is not None:
            values = [status.model.id, status.device or ""]
            loaded.add_metric(values, 1.0)
            rss = _rss(status.worker_pid)
            if rss is not None:
                memory.add_metric(values, float(rss))
            if status.load_seconds is not None:
                load.add_metric(values, status.load_seconds)
        yield from (loaded, memory, load)


def _rss(pid: int | None) -> int | None:
    if pid is None:
        return None
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
