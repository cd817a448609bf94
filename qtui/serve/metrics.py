"""`GET /metrics`: scheduler events folded into prometheus-client metrics (text exposition format 0.0.4).

Metric names follow vLLM's (`*_total` counters, `*_seconds` histograms) under the `qtui_` prefix. Each server
owns its own `CollectorRegistry` (tests run many servers in one process; the global registry would mix them).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

from qtui.serve import events as ev

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
# no `*_created` series: a scrape shows only what docs/protocol.md lists (prometheus_client leaves it unannotated)
disable_created_metrics()  # type: ignore[no-untyped-call]


class Metrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.requests = Counter("qtui_requests", "Finished requests by outcome (finish reason or error code).",
                                ["outcome"], registry=r)  # fmt: skip
        for outcome in ("stop", "length", "cancelled"):
            self.requests.labels(outcome)  # present at 0 from the start
        self.prompt_tokens = Counter("qtui_prompt_tokens", "Prompt tokens of finished requests.", registry=r)
        self.generation_tokens = Counter("qtui_generation_tokens", "Generated tokens of finished requests.",
                                         registry=r)  # fmt: skip
        self.batch_size = Histogram("qtui_batch_size", "Decode batch size m per step.", buckets=BATCH_BUCKETS,
                                    registry=r)  # fmt: skip
        self.ttft = Histogram("qtui_time_to_first_token_seconds", "Time from arrival to first token.",
                              buckets=TTFT_BUCKETS, registry=r)  # fmt: skip
        self.step_time = Histogram("qtui_step_duration_seconds", "Wall time of one batched decode call.",
                                   buckets=STEP_BUCKETS, registry=r)  # fmt: skip
        self.parity = Counter("qtui_parity_verdicts", "--verify-parity verdicts (solo re-run vs batched reply).",
                              ["verdict"], registry=r)  # fmt: skip
        for verdict in ("equal", "diverged"):
            self.parity.labels(verdict)
        self.queue = Gauge("qtui_queue_depth", "Requests waiting for a slot.", registry=r)
        self.active = Gauge("qtui_active_slots", "Slots held by live requests.", registry=r)
        self.max_slots = Gauge("qtui_max_slots", "Slots: requests that can hold state at once.", registry=r)
        self.max_rows = Gauge("qtui_max_rows", "Rows one engine decode call may hold.", registry=r)
        self.max_batch = Gauge("qtui_max_batch", "The v1 name of qtui_max_slots.", registry=r)
        self.draining = Gauge("qtui_draining", "1 while the server drains for shutdown.", registry=r)
        self.engine_failed = Gauge("qtui_engine_failed", "1 after a fatal engine error (new requests fail fast).",
                                   registry=r)  # fmt: skip
        self.dropped = Counter("qtui_dropped_connections", "WebSocket connections dropped because the client "
                               "stopped reading (outbound queue over its bound).", registry=r)  # fmt: skip

    def consume(self, events: list[ev.Event]) -> None:
        for e in events:
            if isinstance(e, ev.Done):
                self.requests.labels(e.finish_reason).inc()
                self.prompt_tokens.inc(e.prompt_tokens)
                self.generation_tokens.inc(len(e.tokens))
                if e.ttft_ms is not None:
                    self.ttft.observe(e.ttft_ms / 1e3)
            elif isinstance(e, ev.Error):
                self.requests.labels(e.code).inc()
            elif isinstance(e, ev.Step) and not e.verify:
                self.batch_size.observe(e.m)
                self.step_time.observe(e.ms / 1e3)
            elif isinstance(e, ev.ParityVerdict):
                self.parity.labels(e.verdict).inc()

    def render(
        self, *, queue: int, active: int, max_slots: int, max_rows: int, is_draining: bool, is_failed: bool = False
    ) -> str:
        self.queue.set(queue)
        self.active.set(active)
        self.max_slots.set(max_slots)
        self.max_rows.set(max_rows)
        self.max_batch.set(max_slots)
        self.draining.set(int(is_draining))
        self.engine_failed.set(int(is_failed))
        return generate_latest(self.registry).decode()
