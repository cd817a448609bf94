"""`qtui bench --compare`: earlier bench results side by side, each later run as a ratio to the first, marked
where it is better or worse than the noise; bad files named."""

from __future__ import annotations

import json

import pytest

from qtui import cli
from qtui.errors import BadRequest
from qtui.tools import bench_compare


def bench_result(c1: float, ttft: float, kernels: dict[str, tuple[int, float]]) -> dict:
    """The fields `qtui bench --json` writes that the comparison reads (random-ish values per test)."""
    return {
        "model": "/tmp/4b.gguf",
        "engine": {"device": "NVIDIA H200"},
        "decode_tok_s": c1,
        "pct_of_floor": c1 / 16.0,
        "ladder": [
            {"c": 1, "aggregate_tok_s": c1},
            {"c": 16, "aggregate_tok_s": 9.0 * c1},
        ],
        "prefill": {"prompt_tokens": 512, "prefill_tok_s": 512 / ttft * 1e3, "ttft_ms": ttft},
        "mixed": {"c": 64, "ratio": 2.2},
        "sampling": {"c": 16, "greedy": {"aggregate_tok_s": 100.0}, "sampled": {"aggregate_tok_s": 90.0}},
        "profile": {"1": [{"name": n, "launches": k, "us": us} for n, (k, us) in kernels.items()]},
    }


def row(table: str, label: str) -> list[str]:
    line = next(ln for ln in table.splitlines() if ln.startswith(label))
    return line[len(label) :].split()


def test_ratios_and_marks_follow_each_figures_direction():
    a = bench_result(300.0, 120.0, {"whole step": (284, 3000.0), "rmsnorm": (65, 220.0)})
    b = bench_result(330.0, 132.0, {"whole step": (220, 2970.0)})  # faster decode, slower TTFT, no rmsnorm
    table = bench_compare.compare([a, b])
    assert row(table, "single-stream decode (tok/s)") == ["300.0", "330.0", "1.100x+"]
    assert row(table, "  TTFT (ms)") == ["120.0", "132.0", "1.100x-"]  # lower is better
    assert row(table, "m=1 step: whole step (us)") == ["3000.0", "2970.0", "0.990x"]  # within the noise: no mark
    assert row(table, "m=1 step: kernels (launches)") == ["284.0", "220.0", "0.775x+"]
    assert row(table, "m=1 step: rmsnorm (us)") == ["220.0", "-", "-"]  # a kernel only one run has
    assert row(table, "aggregate c=16 (tok/s)") == ["2700.0", "2970.0", "1.100x+"]
    assert not any(ln.startswith("aggregate c=1 ") for ln in table.splitlines())  # c=1 is the single-stream row


def test_old_and_new_profile_keys_read_as_the_same_headings():
    """Runs before the prefill profile keyed profiles by the bare row count ("1"); newer runs by their heading
    ("m=1 step", "prefill chunk of 256"): both compare row by row."""
    old = bench_result(300.0, 120.0, {"whole step": (284, 3000.0)})
    new = bench_result(310.0, 120.0, {})
    new["profile"] = {
        "m=1 step": [{"name": "whole step", "launches": 284, "us": 2900.0}],
        "prefill chunk of 256": [{"name": "mma_gemv_q4_k_n4", "launches": 80, "us": 9000.0}],
    }
    table = bench_compare.compare([old, new])
    assert row(table, "m=1 step: whole step (us)") == ["3000.0", "2900.0", "0.967x+"]
    assert row(table, "prefill chunk of 256: mma_gemv_q4_k_n4 (us)") == ["-", "9000.0", "-"]


def test_cli_prints_the_runs_and_the_table(tmp_path, capsys):
    paths = []
    for i, c1 in enumerate((250.0, 200.0, 500.0)):
        paths.append(tmp_path / f"run{i}.json")
        paths[-1].write_text(json.dumps(bench_result(c1, 100.0, {"whole step": (284, 1e6 / c1)})))
    assert cli.main(["bench", "--compare", *map(str, paths)]) == 0
    out = capsys.readouterr().out
    assert f"A = {paths[0]}" in out and f"C = {paths[2]}" in out
    assert row(out, "single-stream decode (tok/s)") == ["250.0", "200.0", "500.0", "0.800x-", "2.000x+"]


def test_bad_files_are_named(tmp_path, capsys):
    notjson, partial = tmp_path / "notjson.json", tmp_path / "partial.json"
    notjson.write_text("{ nope")
    partial.write_text(json.dumps({"decode_tok_s": 1.0}))
    with pytest.raises(BadRequest, match="notjson.json: cannot read"):
        bench_compare.load_run(notjson)
    with pytest.raises(BadRequest, match=r"partial.json: not a `qtui bench --json` result \(no ladder, prefill\)"):
        bench_compare.load_run(partial)
    assert cli.main(["bench", "--compare", str(partial)]) == 2
    assert cli.main(["bench"]) == 2  # neither a model nor --compare
    assert "needs a MODEL" in capsys.readouterr().err


def test_help_shows_the_percent_sign_once(capsys):
    """The command's description is printed as written (its help line is %-formatted by argparse, it is not)."""
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    out = capsys.readouterr().out
    assert "% of the bandwidth floor" in out and "%%" not in out
