"""The cluster view: each replica's latest stats frame and `/metrics` text, merged into one of each.

Pure bookkeeping (no Ray, no I/O), so it is tested without a cluster. The stats hub deployment (app.py) holds
one `ClusterView`; every replica reports to it once per stats interval and gets the merged frame back.

Merged stats frame (docs/protocol.md's `stats` frame, for the whole deployment):
- counts add up: `max_slots`, `max_rows`, `active`, `queue`, `agg_tok_s`, `requests_done`, `errors`,
  `batch_hist` and `parity` are sums over the replicas;
- `slots` lists every replica's busy slots, each row tagged with its `replica`; slot numbers are offset so
  they stay distinct (replica k's slot s is `s + sum(max_slots of the replicas before k)`, replicas sorted);
- `steps` and `verdicts` concatenate what each replica reported since its previous report;
- `ttft_ms.last` is the newest replica's, `ttft_ms.p50` the median of the replicas' p50s (an approximation:
  a frame keeps no per-request TTFTs);
- `replicas` adds one row per replica: id, slots, active, queue, tok/s, requests, errors, batch sizes, parity.

Merged `/metrics`: every replica's series with a `replica="ID"` label added (Prometheus sums them with
`sum without (replica)`), plus `qtui_replicas`, the replicas reporting.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

STALE_S = 3.0  # a replica that has not reported for this long is gone (killed, restarting, drained)
SUMMED = ("max_slots", "max_rows", "max_batch", "active", "queue", "requests_done", "errors")
PER_REPLICA = ("max_slots", "active", "queue", "agg_tok_s", "requests_done", "errors", "batch_hist", "parity")


@dataclass(slots=True)
class _Report:
    frame: dict[str, Any]
    metrics: str
    t: float  # hub clock (monotonic seconds) of the report


class ClusterView:
    """The latest report of each replica; replicas silent for `stale_s` drop out."""

    def __init__(self, stale_s: float = STALE_S) -> None:
        self.stale_s = stale_s
        self.is_draining = False  # set on shutdown: merged frames then say `"draining": true` and replicas drain
        self._reports: dict[str, _Report] = {}

    def report(self, replica: str, frame: dict[str, Any], metrics: str, now: float) -> None:
        self._reports[replica] = _Report(frame, metrics, now)

    def live(self, now: float) -> dict[str, _Report]:
        for replica in [r for r, rep in self._reports.items() if now - rep.t > self.stale_s]:
            del self._reports[replica]
        return dict(sorted(self._reports.items()))

    def frame(self, now: float) -> dict[str, Any]:
        frame = merge_frames({r: rep.frame for r, rep in self.live(now).items()})
        if self.is_draining:
            frame["draining"] = True
        return frame

    def metrics(self, now: float) -> str:
        return merge_metrics({r: rep.metrics for r, rep in self.live(now).items()})


def _add(into: dict[str, int], counts: dict[str, int]) -> None:
    for key, n in counts.items():
        into[key] = into.get(key, 0) + n


def merge_frames(frames: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One stats frame for the deployment from each replica's latest frame (replica id -> frame)."""
    ordered = sorted(frames.items())
    first = ordered[0][1] if ordered else {}
    merged: dict[str, Any] = {k: first.get(k) for k in ("model", "engine", "device")}
    merged.update({"op": "stats", "t": max((f.get("t", 0.0) for _, f in ordered), default=0.0)})
    merged.update({k: sum(f.get(k) or 0 for _, f in ordered) for k in SUMMED})
    merged["agg_tok_s"] = round(sum(f.get("agg_tok_s", 0.0) for _, f in ordered), 2)
    slots, offset = [], 0
    for replica, f in ordered:
        slots += [{**row, "slot": row["slot"] + offset, "replica": replica} for row in f.get("slots", [])]
        offset += f.get("max_slots") or 0
    merged["slots"] = slots
    merged["steps"] = sorted((s for _, f in ordered for s in f.get("steps", [])), key=lambda s: s[0])
    merged["verdicts"] = [{**v, "replica": r} for r, f in ordered for v in f.get("verdicts", [])]
    batch_hist: dict[str, int] = {}
    parity = {"equal": 0, "diverged": 0, "pending": 0}
    for _, f in ordered:
        _add(batch_hist, f.get("batch_hist", {}))
        _add(parity, f.get("parity", {}))
    merged["batch_hist"] = dict(sorted(batch_hist.items(), key=lambda kv: int(kv[0])))
    merged["parity"] = parity
    merged["ttft_ms"] = _merge_ttft([f for _, f in ordered])
    merged["replicas"] = [{"replica": r, **{k: f.get(k) for k in PER_REPLICA}} for r, f in ordered]
    return merged


def _merge_ttft(frames: list[dict[str, Any]]) -> dict[str, float | None]:
    newest = sorted((f for f in frames if (f.get("ttft_ms") or {}).get("last") is not None), key=lambda f: f["t"])
    p50s = [f["ttft_ms"]["p50"] for f in frames if (f.get("ttft_ms") or {}).get("p50") is not None]
    return {
        "last": newest[-1]["ttft_ms"]["last"] if newest else None,
        "p50": round(statistics.median(p50s), 3) if p50s else None,
    }


def merge_metrics(texts: dict[str, str]) -> str:
    """Prometheus text (format 0.0.4): each replica's samples with `replica="ID"` added, one HELP/TYPE per
    metric, then `qtui_replicas`."""
    families: dict[str, tuple[str, str, list[str]]] = {}  # name -> (help, type, sample lines)
    for replica, text in sorted(texts.items()):
        for family in text_string_to_metric_families(text):
            _, _, lines = families.setdefault(family.name, (family.documentation, family.type, []))
            lines += (_sample_line(s.name, {**s.labels, "replica": replica}, s.value) for s in family.samples)
    out: list[str] = []
    for name, (doc, kind, lines) in families.items():
        out += [f"# HELP {name} {_escape_help(doc)}", f"# TYPE {name} {kind}", *lines]
    out += ["# HELP qtui_replicas Replicas reporting to the stats hub.", "# TYPE qtui_replicas gauge"]
    out.append(f"qtui_replicas {len(texts)}.0")
    return "\n".join(out) + "\n"


def _sample_line(name: str, labels: dict[str, str], value: float) -> str:
    pairs = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels.items())
    return f"{name}{{{pairs}}} {_float_text(value)}"


def _float_text(value: float) -> str:
    """A sample value as the exposition format writes it (Go's float text: +Inf, -Inf, NaN, else repr)."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return "NaN" if math.isnan(value) else repr(float(value))


def _escape_label(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _escape_help(doc: str) -> str:
    return doc.replace("\\", r"\\").replace("\n", r"\n")


def metric_total(text: str, sample: str, **labels: str) -> float:
    """The sum of `sample`'s values whose labels include `labels` (tests and the README's numbers)."""
    return sum(_matching(text, sample, labels))


def _matching(text: str, sample: str, labels: dict[str, str]) -> Iterable[float]:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
                yield s.value
