"""`qtui bench MODEL --engine cuda`: decode speed against the memory-bandwidth floor, the concurrency ladder,
prefill TTFT, and the decode latency of running slots while a long prompt is admitted, printed as a table
(`--json` for the record).

    floor (tok/s) = measured streaming-read bandwidth of the device (bytes read per second, one kernel reading
                    2 GiB with 16-byte loads; the copy bandwidth, read + write, is printed beside it)
                    / weight bytes read per decode token (qtui.model.info.weight_bytes_per_token)

Each ladder rung's "% floor" holds its step time against the bytes a step of c slots must move at the least
(qtui.model.info.step_bytes: the weights once, every slot's recurrent state read and written, its K and V read) at
the same bandwidth: a rung far below it is bound by something other than memory (at large c, the tensor cores).

Timing claims live here, not in tests. Numbers are wall-clock around whole engine calls (what a client sees),
after warm-up (graph capture and module JIT happen in the warm-up).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from qtui.errors import BadRequest
from qtui.tools import bench_compare
from qtui.tools.bench_compare import profile_label

if TYPE_CHECKING:
    from qtui.engine.cuda.engine import CudaEngine
    from qtui.engine.cuda.step import Head


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL", nargs="?", help="GGUF file (not with --compare)")
    parser.add_argument("--engine", choices=["cuda", "cpu"], default="cuda", help="engine to measure (default cuda)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--steps", type=int, default=64, help="timed decode steps per rung (default 64)")
    parser.add_argument("--ladder", default="1,4,8,16,32,64", help="concurrency rungs (default 1,4,8,16,32,64)")
    parser.add_argument("--prompt-len", type=int, default=512, help="prefill prompt length (default 512)")
    parser.add_argument("--max-context", type=int, default=2048, help="engine context per slot (default 2048)")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also time each kernel of the m=1 and largest steps and of a prefill chunk",
    )
    parser.add_argument(
        "--long-prompt",
        type=int,
        default=4096,
        help="mixed-step row: tokens of the prompt admitted while slots decode (0: skip)",
    )
    parser.add_argument(
        "--mixed-chunk",
        type=int,
        default=0,
        metavar="N",
        help="prompt tokens fed between two decode steps in the mixed-step row (default: the engine's own)",
    )
    parser.add_argument(
        "--compare",
        nargs="+",
        metavar="JSON",
        help="print earlier `--json` results side by side, each later one as a ratio to the first (no MODEL)",
    )


def _median_seconds(launch: Callable[[Any], None], reps: int) -> float:
    """GPU time of launch(stream) between two events, median of reps after 2 warm-ups."""
    from qtui.engine.cuda import driver as drv

    stream = drv.new_stream()
    e0, e1 = drv.Event(), drv.Event()
    times = []
    for _ in range(reps + 2):
        e0.record(stream)
        launch(stream)
        e1.record(stream)
        e1.synchronize()
        times.append(e1.elapsed_ms(e0) / 1e3)
    return statistics.median(times[2:])


def copy_bandwidth(nbytes: int = 1 << 31, reps: int = 10) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus bytes written (median of reps)."""
    from qtui.engine.cuda import driver as drv

    drv.primary_context()
    cu = drv._cu()
    src, dst = drv.DeviceBuffer(nbytes), drv.DeviceBuffer(nbytes)
    drv.check(cu.cuMemsetD32(int(src), 0, nbytes // 4), "cuMemsetD32")  # a copy's speed ignores contents

    def copy(stream: Any) -> None:
        drv.check(cu.cuMemcpyDtoDAsync(int(dst), int(src), nbytes, stream), "cuMemcpyDtoDAsync")

    seconds = _median_seconds(copy, reps)
    src.free()
    dst.free()
    return 2 * nbytes / seconds


def read_bandwidth(kernels: Any = None, nbytes: int = 1 << 31, reps: int = 10) -> float:
    """Device streaming-read bandwidth in bytes/s (one kernel reading nbytes, median of reps). `kernels`: a
    KernelTable to launch from (the engine's; a new one, with its own GEMV scratch, if None)."""
    from qtui.engine.cuda import driver as drv
    from qtui.engine.cuda.kernels import KernelTable

    drv.primary_context()
    kt = kernels if kernels is not None else KernelTable()
    buf, out = drv.DeviceBuffer(nbytes), drv.DeviceBuffer(4)
    drv.check(drv._cu().cuMemsetD32(int(buf), 0, nbytes // 4), "cuMemsetD32")
    sms = drv.device_attribute("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT")
    k = kt.read_stream(buf=int(buf), nbytes=nbytes, out=int(out), blocks=4 * sms)
    seconds = _median_seconds(k.launch, reps)
    buf.free()
    out.free()
    return nbytes / seconds


def _prompt(rng: np.random.Generator, n_vocab: int, n: int) -> list[int]:
    return cast(list[int], rng.integers(0, n_vocab, n).tolist())  # tolist() of int64: Python ints


LADDER_PROMPT = 16  # tokens of each running slot's prompt (ladder and mixed rungs)
LADDER_WARMUP = 4  # untimed decode steps before a rung's timed ones (graph capture for m = c)


def ladder_rung(
    engine: Any,
    c: int,
    steps: int,
    rng: np.random.Generator,
    sampled: bool = False,
) -> dict[str, float]:
    """c slots decoded together for `steps` steps after warm-up; aggregate and per-request speed. sampled: every
    row samples (temperature 0.8, top_p 0.95, its own seed) instead of the greedy argmax."""
    from qtui.engine.sampling import SamplingParams

    n_vocab = engine.config.n_vocab
    slots = [engine.alloc_slot() for _ in range(c)]
    toks = [engine.prefill(s, _prompt(rng, n_vocab, LADDER_PROMPT)) for s in slots]
    sampling = [SamplingParams(temperature=0.8, top_p=0.95, seed=i) for i in range(c)] if sampled else None

    def step(toks: list[int]) -> list[int]:
        out: list[int] = engine.decode(slots, toks, sampling) if sampled else engine.decode(slots, toks)
        return out

    for _ in range(LADDER_WARMUP):
        toks = step(toks)
    host = []
    # each step queued before the last one is read, where one call holds the rung (as the scheduler does)
    ahead = bool(getattr(engine, "decode_ahead", False)) and c <= engine.max_rows
    t0 = time.perf_counter()
    if ahead:  # as the server runs: the host reads step N's tokens while step N + 1 runs
        pending = engine.decode_submit(slots, toks, sampling)
        for i in range(steps):
            nxt = engine.decode_submit(slots, [None] * c, sampling) if i + 1 < steps else None
            host.append(getattr(engine, "last_host_us", float("nan")))
            toks = engine.decode_collect(pending)
            pending = nxt
    else:
        for _ in range(steps):
            toks = step(toks)
            host.append(getattr(engine, "last_host_us", float("nan")))
    dt = time.perf_counter() - t0
    for s in slots:
        engine.free_slot(s)
    return {
        "c": c,
        "aggregate_tok_s": c * steps / dt,
        "per_request_tok_s": steps / dt,
        "step_ms": 1e3 * dt / steps,
        "host_us_per_step": statistics.median(host),
        "queued_ahead": ahead,
    }


def prefill_rung(engine: Any, n: int, rng: np.random.Generator) -> dict[str, float]:
    """TTFT of one n-token prompt on a fresh slot, after a warm-up prompt that runs every step shape the timed
    one runs (a full non-final chunk and the final chunk of the same length), so no graph capture is timed."""
    n_vocab = engine.config.n_vocab
    chunk = int(engine.describe().get("prefill_chunk", 1))
    slot = engine.alloc_slot()
    engine.prefill(slot, _prompt(rng, n_vocab, min(n, chunk + (n - 1) % chunk + 1)))
    engine.free_slot(slot)
    slot = engine.alloc_slot()
    t0 = time.perf_counter()
    engine.prefill(slot, _prompt(rng, n_vocab, n))
    ttft = time.perf_counter() - t0
    engine.free_slot(slot)
    return {"prompt_tokens": n, "ttft_ms": 1e3 * ttft, "prefill_tok_s": n / ttft}


def burst_rung(engine: Any, c: int, rng: np.random.Generator, shortest: int = 8, longest: int = 40) -> dict[str, Any]:
    """c prompts of shortest..longest tokens arriving at once, fed one prefill call each and then, where the
    engine has it, all in one `prefill_batch` (the scheduler's path): ms until every first token, each way. Both
    run once untimed first on prompts of the same lengths (graph captures, launch lists). Prompts fit the context."""
    n_vocab = engine.config.n_vocab
    longest = max(1, min(longest, engine.max_context - 1))
    shortest = min(shortest, longest)
    lengths = [int(n) for n in rng.integers(shortest, longest + 1, c)]
    batch = getattr(engine, "prefill_batch", None)

    def timed(feed: Callable[[list[tuple[int, list[int]]]], Any]) -> float:
        """ms of feed(pieces) on fresh slots: the second of two passes (the first warms up)."""
        for _ in range(2):
            slots = [engine.alloc_slot() for _ in lengths]
            pieces = [(s, _prompt(rng, n_vocab, n)) for s, n in zip(slots, lengths)]
            t0 = time.perf_counter()
            feed(pieces)
            ms = 1e3 * (time.perf_counter() - t0)
            for s in slots:
                engine.free_slot(s)
        return ms

    out: dict[str, Any] = {"prompts": c, "prompt_tokens": sum(lengths), "shortest": shortest, "longest": longest}
    out["one_call_each_ms"] = timed(lambda pieces: [engine.prefill(s, p) for s, p in pieces])
    if batch is not None:
        out["prefill_batch_ms"] = timed(batch)
    return out


def mixed_rung(
    engine: Any, c: int, long_prompt: int, steps: int, rng: np.random.Generator, chunk: int = 0
) -> dict[str, float]:
    """Decode latency of c running slots while a long prompt is admitted in pieces between their steps (what the
    scheduler does: pieces of `chunk` tokens, default the engine's mixed prefill chunk): each running slot's
    inter-token time is a decode step plus one piece."""
    described = engine.describe()
    n_vocab = engine.config.n_vocab
    chunk = chunk or int(described.get("mixed_prefill_chunk") or described.get("prefill_chunk", 1))
    slots = [engine.alloc_slot() for _ in range(c)]
    toks = [engine.prefill(s, _prompt(rng, n_vocab, LADDER_PROMPT)) for s in slots]
    for _ in range(LADDER_WARMUP):
        toks = engine.decode(slots, toks)
    t0 = time.perf_counter()
    for _ in range(steps):
        toks = engine.decode(slots, toks)
    plain = (time.perf_counter() - t0) / steps
    newcomer = engine.alloc_slot()
    prompt = _prompt(rng, n_vocab, long_prompt)
    engine.prefill(newcomer, prompt[:chunk])  # warm the chunk graphs
    engine.free_slot(newcomer)
    newcomer = engine.alloc_slot()
    gaps, t_prev = [], time.perf_counter()
    for i in range(0, long_prompt, chunk):
        engine.prefill(newcomer, prompt[i : i + chunk])
        toks = engine.decode(slots, toks)
        now = time.perf_counter()
        gaps.append(now - t_prev)
        t_prev = now
    for s in [*slots, newcomer]:
        engine.free_slot(s)
    return {
        "c": c,
        "prompt_tokens": long_prompt,
        "chunk": chunk,
        "plain_step_ms": 1e3 * plain,
        "mixed_step_ms": 1e3 * statistics.median(gaps),
        "worst_step_ms": 1e3 * max(gaps),
        "ratio": statistics.median(gaps) / plain,
    }


def profile_step(
    engine: CudaEngine,
    m: int,
    rng: np.random.Generator,
    reps: int = 5,
    prefill: bool = False,
    pos0: int = 0,
    head: Head = "none",
) -> list[dict[str, Any]]:
    """GPU time of the m-row step split by kernel name: the launches of one name, in step order, captured as
    their own graph and replayed (median of reps). The weights stream from memory as in the real step, so
    the parts add up to about the whole step. [{name, launches, us}], slowest first, plus a "whole step" row.
    prefill: a prefill chunk of m rows of one slot at positions pos0..pos0+m-1 instead of m decoding slots, with
    the LM head `head` ("none": a long prompt's inner chunk; "last": a mixed step's piece, as the engine runs it on
    every prefill call). The data are a real step's: random tokens, and a decode step's slots hold a ladder rung's
    prompt first (token 0 at position 0 in empty slots timed the 4b m = 64 step 4 % under the ladder's own steps:
    ptx/PERF.md, session 13)."""
    from qtui.engine.cuda import driver as drv
    from qtui.engine.cuda.graphs import GraphCache

    n_vocab = engine.config.n_vocab
    slots = [engine.alloc_slot() for _ in range(1 if prefill else m)]
    tokens = [int(t) for t in rng.integers(0, n_vocab, m)]
    if prefill:
        engine._stage(0, slots * m, tokens, range(pos0, pos0 + m))
    else:
        for s in slots:
            engine.prefill(s, _prompt(rng, n_vocab, LADDER_PROMPT))
        engine._stage(0, slots, tokens)
    engine.acts.step.upload(engine._staging.array[0], engine.stream)
    plan = engine._plan(m, head, m) if prefill else engine._plan(m, "all")
    groups: dict[str, list[drv.Site]] = {"whole step": plan}
    for k in plan:
        groups.setdefault(k.name, []).append(k)
    cache, e0, e1 = GraphCache(engine.stream), drv.Event(), drv.Event()
    rows = []
    for i, (name, kernels) in enumerate(groups.items()):
        cache.capture((i, name), kernels)  # type: ignore[arg-type]  # this cache is private: any key will do
        times = []
        for _ in range(reps + 2):
            e0.record(engine.stream)
            cache.replay((i, name))  # type: ignore[arg-type]  # (see capture)
            e1.record(engine.stream)
            e1.synchronize()
            times.append(e1.elapsed_ms(e0) * 1e3)
        rows.append({"name": name, "launches": len(kernels), "us": statistics.median(times[2:])})
    cache.clear()
    for s in slots:
        engine.free_slot(s)
    return sorted(rows, key=lambda r: -r["us"])


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    from qtui.engine.load import load_engine
    from qtui.model.gguf_file import GGUFModel
    from qtui.model.info import step_bytes, weight_bytes_per_token

    model = GGUFModel.open(args.model)
    rungs = [int(c) for c in args.ladder.split(",")]
    long_prompt = min(args.long_prompt, args.max_context - 64)
    max_context = args.max_context
    engine = load_engine(model, kind=args.engine, max_slots=max(rungs) + 1, max_context=max_context)
    rng = np.random.default_rng(0)
    cuda = args.engine == "cuda"
    read_bw = read_bandwidth(getattr(engine, "kernels", None)) if cuda else float("nan")
    copy_bw = copy_bandwidth() if cuda else float("nan")
    per_token = weight_bytes_per_token(model)
    floor_tok_s = read_bw / per_token
    ladder = [ladder_rung(engine, c, args.steps, rng) for c in rungs]
    context = LADDER_PROMPT + LADDER_WARMUP + args.steps // 2  # a rung's mean context over its timed steps
    for row in ladder:  # the rung's memory floor
        row["floor_step_ms"] = 1e3 * step_bytes(model, int(row["c"]), context) / read_bw
        row["pct_of_floor"] = 100 * row["floor_step_ms"] / row["step_ms"]
    single = ladder[0] if rungs[0] == 1 else ladder_rung(engine, 1, args.steps, rng)
    prefill = prefill_rung(engine, args.prompt_len, rng)
    mixed = mixed_rung(engine, max(rungs), long_prompt, args.steps, rng, args.mixed_chunk) if long_prompt > 0 else None
    c_sampled = min(16, max(rungs))
    sampled = {
        "c": c_sampled,
        "greedy": next((r for r in ladder if r["c"] == c_sampled), None)
        or ladder_rung(engine, c_sampled, args.steps, rng),
        "sampled": ladder_rung(engine, c_sampled, args.steps, rng, sampled=True),
    }
    if args.profile and cuda:  # engine "cuda": load_engine built a CudaEngine (or raised)
        cuda_engine = cast("CudaEngine", engine)
        profile = {f"m={m} step": profile_step(cuda_engine, m, rng) for m in (1, max(rungs))}
        chunk = min(int(engine.describe().get("prefill_chunk", 1)), args.prompt_len)
        profile[f"prefill chunk of {chunk}"] = profile_step(cuda_engine, chunk, rng, prefill=True)
        if mixed is not None:  # the mixed step's piece at the long prompt's end (its slowest: the most context)
            piece = int(mixed["chunk"])
            pos0 = long_prompt - piece
            profile[f"mixed piece of {piece} at {pos0}"] = profile_step(
                cuda_engine, piece, rng, prefill=True, pos0=pos0, head="last"
            )
    else:
        profile = {}
    try:  # last, and kept apart: prefill_batch is new on the GPU (a failure leaves the other figures, named here)
        burst: dict[str, Any] = burst_rung(engine, max(rungs), rng)
    except Exception as exc:  # (reported in the result, not hidden)
        burst = {"error": f"{type(exc).__name__}: {exc}"}
    return {
        "profile": profile,
        "model": str(args.model),
        "engine": engine.describe(),
        "read_bandwidth_B_s": read_bw,
        "copy_bandwidth_B_s": copy_bw,
        "weight_bytes_per_token": per_token,
        "floor_tok_s": floor_tok_s,
        "decode_tok_s": single["aggregate_tok_s"],
        "pct_of_floor": 100 * single["aggregate_tok_s"] / floor_tok_s,
        "ladder": ladder,
        "prefill": prefill,
        "mixed": mixed,
        "burst": burst,
        "sampling": sampled,
    }


def format_table(r: dict[str, Any]) -> str:
    lines = [
        f"model {r['model']}  on {r['engine'].get('device')}",
        f"device streaming read bandwidth     {r.get('read_bandwidth_B_s', float('nan')) / 1e12:8.2f} TB/s",
        f"device copy bandwidth (read+write)  {r['copy_bandwidth_B_s'] / 1e12:8.2f} TB/s",
        f"weight bytes per decode token       {r['weight_bytes_per_token'] / 1e9:8.3f} GB",
        f"bandwidth floor (read)              {r['floor_tok_s']:8.1f} tok/s",
        f"single-stream decode                {r['decode_tok_s']:8.1f} tok/s  ({r['pct_of_floor']:.1f}% of floor)",
        "",
        f"{'c':>3} {'aggregate tok/s':>16} {'per-request tok/s':>18} {'step ms':>9} {'host us/step':>13} {'x c=1':>6}"
        f" {'% floor':>8}",
    ]
    base = r["ladder"][0]["aggregate_tok_s"]
    for row in r["ladder"]:
        pct = row.get("pct_of_floor", float("nan"))  # (absent from results written before it existed)
        lines.append(
            f"{row['c']:>3} {row['aggregate_tok_s']:16.1f} {row['per_request_tok_s']:18.1f} "
            f"{row['step_ms']:9.3f} {row['host_us_per_step']:13.1f} {row['aggregate_tok_s'] / base:6.2f}"
            + (f" {pct:7.1f}%" if math.isfinite(pct) else f" {'-':>8}")
        )
    p = r["prefill"]
    lines += ["", f"prefill {p['prompt_tokens']} tokens: TTFT {p['ttft_ms']:.1f} ms, {p['prefill_tok_s']:.1f} tok/s"]
    sm = r.get("sampling")
    if sm:
        g, s_ = sm["greedy"]["aggregate_tok_s"], sm["sampled"]["aggregate_tok_s"]
        lines.append(
            f"c={sm['c']} sampled (temperature 0.8, top_p 0.95): {s_:.1f} tok/s vs greedy {g:.1f} = {100 * s_ / g:.0f}%"
        )
    mx = r.get("mixed")
    if mx:
        lines.append(
            f"{mx['c']} slots decoding while a {mx['prompt_tokens']}-token prompt is admitted "
            f"({mx['chunk']}-token chunks): step {mx['mixed_step_ms']:.2f} ms (worst {mx['worst_step_ms']:.2f})"
            f" vs {mx['plain_step_ms']:.2f} ms plain = {mx['ratio']:.2f}x"
        )
    b = r.get("burst")
    if b and "error" in b:
        lines.append(f"burst row failed: {b['error']}")
    elif b:
        line = (
            f"{b['prompts']} prompts of {b['shortest']}-{b['longest']} tokens at once ({b['prompt_tokens']} in all):"
            f" one prefill call each {b['one_call_each_ms']:.1f} ms"
        )
        if "prefill_batch_ms" in b:
            line += (
                f", prefill_batch {b['prefill_batch_ms']:.1f} ms = {b['one_call_each_ms'] / b['prefill_batch_ms']:.2f}x"
            )
        lines.append(line)
    for what, rows in r.get("profile", {}).items():
        lines += ["", f"one {profile_label(what)} by kernel (each group replayed as its own graph, GPU us):"]
        lines += [f"  {x['name']:<24} x{x['launches']:<4} {x['us']:9.1f} us" for x in rows[:14]]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.compare:
        return bench_compare.run(args.compare)
    if args.model is None:
        raise BadRequest("qtui bench needs a MODEL (a GGUF file), or --compare with bench JSON files")
    result = run_bench(args)
    print(json.dumps(result, indent=1) if args.json else format_table(result))
    return 0
