"""Prometheus text exposition (format 0.0.4) for `GET /metrics`, folded from scheduler events.

Metric names follow vLLM's (`*_total` counters, `*_seconds` histograms) under the `qtui_` prefix.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from qtui.serve import events as ev

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


@dataclass(slots=True)
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)  # per bucket (not cumulative); last = +Inf
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, value: float) -> None:
        i = next((i for i, b in enumerate(self.buckets) if value <= b), len(self.buckets))
        self.counts[i] += 1
        self.total += value
        self.n += 1

    def render(self, name: str, help_text: str) -> list[str]:
        lines = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
        cumulative = 0
        for bound, count in zip([*map(_fmt, self.buckets), "+Inf"], self.counts):
            cumulative += count
            lines.append(f'{name}_bucket{{le="{bound}"}} {cumulative}')
        lines += [f"{name}_sum {_fmt(self.total)}", f"{name}_count {self.n}"]
        return lines


def _fmt(x: float) -> str:
    return repr(float(x)) if not float(x).is_integer() else str(int(x))


class Metrics:
    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()  # outcome: stop | length | cancelled | <error code>
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.parity: Counter[str] = Counter()  # equal | diverged
        self.batch_size = Histogram(BATCH_BUCKETS)
        self.ttft = Histogram(TTFT_BUCKETS)
        self.step_time = Histogram(STEP_BUCKETS)

    def consume(self, events: list[ev.Event]) -> None:
        for e in events:
            if isinstance(e, ev.Done):
                self.requests[e.finish_reason] += 1
                self.prompt_tokens += e.prompt_tokens
                self.generation_tokens += len(e.tokens)
                if e.ttft_ms is not None:
                    self.ttft.observe(e.ttft_ms / 1e3)
            elif isinstance(e, ev.Error):
                self.requests[e.code] += 1
            elif isinstance(e, ev.Step) and not e.verify:
                self.batch_size.observe(e.m)
                self.step_time.observe(e.ms / 1e3)
            elif isinstance(e, ev.ParityVerdict):
                self.parity[e.verdict] += 1

    def render(self, *, queue: int, active: int, max_slots: int, max_rows: int, is_draining: bool,
               is_failed: bool = False) -> str:
        lines = ["# HELP qtui_requests_total Finished requests by outcome (finish reason or error code).",
                 "# TYPE qtui_requests_total counter"]  # fmt: skip
        for outcome in sorted(set(self.requests) | {"stop", "length", "cancelled"}):
            lines.append(f'qtui_requests_total{{outcome="{outcome}"}} {self.requests[outcome]}')
        lines += _counter("qtui_prompt_tokens_total", "Prompt tokens of finished requests.", self.prompt_tokens)
        lines += _counter("qtui_generation_tokens_total", "Generated tokens of finished requests.",
                          self.generation_tokens)  # fmt: skip
        lines += self.batch_size.render("qtui_batch_size", "Decode batch size m per step.")
        lines += self.ttft.render("qtui_time_to_first_token_seconds", "Time from arrival to first token.")
        lines += self.step_time.render("qtui_step_duration_seconds", "Wall time of one batched decode call.")
        lines += ["# HELP qtui_parity_verdicts_total --verify-parity verdicts (solo re-run vs batched reply).",
                  "# TYPE qtui_parity_verdicts_total counter"]  # fmt: skip
        for verdict in ("equal", "diverged"):
            lines.append(f'qtui_parity_verdicts_total{{verdict="{verdict}"}} {self.parity[verdict]}')
        lines += _gauge("qtui_queue_depth", "Requests waiting for a slot.", queue)
        lines += _gauge("qtui_active_slots", "Slots held by live requests.", active)
        lines += _gauge("qtui_max_slots", "Slots: requests that can hold state at once.", max_slots)
        lines += _gauge("qtui_max_rows", "Rows one engine decode call may hold (more slots: several calls).", max_rows)
        lines += _gauge("qtui_max_batch", "The v1 name of qtui_max_slots.", max_slots)
        lines += _gauge("qtui_draining", "1 while the server drains for shutdown.", int(is_draining))
        lines += _gauge("qtui_engine_failed", "1 after a fatal engine error (new requests fail fast).", int(is_failed))
        return "\n".join(lines) + "\n"


def _counter(name: str, help_text: str, value: int) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} counter", f"{name} {value}"]


def _gauge(name: str, help_text: str, value: int) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name} {value}"]
