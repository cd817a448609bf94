"""`qtui bench --compare A.json B.json ...`: runs of `qtui bench --json` side by side, each against the first.

The A/B table of a kernel change, measured the way that decides it: whole steps, not one kernel alone (a GEMV
that is faster by itself can make the step slower, e.g. by leaving the next kernel's early blocks no room).
One row per figure: single-stream decode, each rung of the ladder, prefill and TTFT, the mixed step, the sampled
share and, where the runs had --profile, each step's kernels by name; one column per run, then for each later run
its ratio to the first (B/A, ...) and a mark where it is better (+) or worse (-) by more than NOISE.

    qtui bench /tmp/4b.gguf --profile --json > base.json
    QTUI_PTX_DIR=.ptxvar/try qtui bench /tmp/4b.gguf --profile --json > try.json
    qtui bench --compare base.json try.json
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qtui.errors import BadRequest

NOISE = 0.02  # run-to-run spread of whole-step figures on the H200 (PERF.md): smaller ratios are not marked


def profile_label(key: str) -> str:
    """A profile's heading: "m=1 step", "prefill chunk of 256" (JSON of older runs: the bare row count "1")."""
    return f"m={key} step" if key.isdigit() else key


@dataclass(frozen=True, slots=True)
class Figure:
    label: str
    unit: str
    higher_is_better: bool

    @property
    def heading(self) -> str:
        return f"{self.label} ({self.unit})"


def column(i: int) -> str:
    """The letter of run i (A = the run the others are held against)."""
    return chr(ord("A") + i)


def load_run(path: str | Path) -> dict[str, Any]:
    """One `qtui bench --json` result; BadRequest naming the file and what is missing otherwise."""
    try:
        run = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise BadRequest(f"{path}: cannot read a bench result ({exc})") from exc
    missing = [k for k in ("decode_tok_s", "ladder", "prefill") if not isinstance(run, dict) or k not in run]
    if missing:
        raise BadRequest(f"{path}: not a `qtui bench --json` result (no {', '.join(missing)})")
    return dict(run)


def figures(run: dict[str, Any]) -> dict[Figure, float]:
    """The figures of one run, by what they measure."""
    out: dict[Figure, float] = {Figure("single-stream decode", "tok/s", True): run["decode_tok_s"]}
    if "pct_of_floor" in run:
        out[Figure("  of the read floor", "%", True)] = run["pct_of_floor"]
    for row in run["ladder"]:
        if row["c"] != 1:  # c = 1 is the single-stream row
            out[Figure(f"aggregate c={row['c']}", "tok/s", True)] = row["aggregate_tok_s"]
    p = run["prefill"]
    out[Figure(f"prefill {p['prompt_tokens']} tokens", "tok/s", True)] = p["prefill_tok_s"]
    out[Figure("  TTFT", "ms", False)] = p["ttft_ms"]
    if run.get("mixed"):
        out[Figure(f"mixed step (c={run['mixed']['c']}) / plain", "x", False)] = run["mixed"]["ratio"]
    burst = run.get("burst") or {}
    for key, how in (("one_call_each_ms", "one prefill call each"), ("prefill_batch_ms", "prefill_batch")):
        if key in burst:  # (absent where the row failed: its "error")
            out[Figure(f"burst of {burst['prompts']} prompts, {how}", "ms", False)] = burst[key]
    sm = run.get("sampling")
    if sm:
        share = 100 * sm["sampled"]["aggregate_tok_s"] / sm["greedy"]["aggregate_tok_s"]
        out[Figure(f"sampled / greedy at c={sm['c']}", "%", True)] = share
    for what, rows in (run.get("profile") or {}).items():
        label = profile_label(what)
        for x in rows:
            out[Figure(f"{label}: {x['name']}", "us", False)] = x["us"]
            if x["name"] == "whole step":
                out[Figure(f"{label}: kernels", "launches", False)] = x["launches"]
    return {k: v for k, v in out.items() if math.isfinite(v)}  # NaN: not measured (e.g. no floor on the CPU)


def compare(runs: list[dict[str, Any]]) -> str:
    """The table: runs A, B, ... as columns, figures in first-seen order, then B/A, C/A, ... with their marks."""
    per_run = [figures(r) for r in runs]
    order = list(dict.fromkeys(k for f in per_run for k in f))
    cols = [column(i) for i in range(len(runs))]
    width = max(len(k.heading) for k in order)
    lines = [f"{'':<{width}}" + "".join(f" {c:>10}" for c in cols) + "".join(f" {c + '/A':>9}  " for c in cols[1:])]
    for k in order:
        vals = [f.get(k) for f in per_run]
        line = f"{k.heading:<{width}}"
        line += "".join(f" {v:10.1f}" if v is not None else f" {'-':>10}" for v in vals)
        base = vals[0]
        for v in vals[1:]:
            if base is None or v is None or base == 0:
                line += f" {'-':>9}  "
                continue
            ratio = v / base
            better = ratio > 1 if k.higher_is_better else ratio < 1
            mark = ("+" if better else "-") if abs(ratio - 1) > NOISE else " "
            line += f" {ratio:8.3f}x{mark} "
        lines.append(line.rstrip())
    return "\n".join(lines)


def run(paths: list[str]) -> int:
    runs = [load_run(p) for p in paths]
    for i, (p, r) in enumerate(zip(paths, runs)):
        print(f"{column(i)} = {p}  ({r.get('engine', {}).get('device', '?')}, {r.get('model', '?')})")
    print(compare(runs))
    return 0
