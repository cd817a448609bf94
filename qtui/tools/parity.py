"""`qtui parity`: the concurrency ladder against a running server — every batched reply must equal its solo reply.

For N seeded prompts (text and token-id prompts), get each solo reply (one request at a time), then at each rung
c send c requests at once (distinct prompts, plus one identical pair: request c-1 repeats request 0's prompt),
one socket per request, every frame sent before any reply is awaited. Checks: each `done.max_m == c` (the burst
formed one batch of c; behind N replicas, each replica's share of the burst formed one batch of that size) and each
reply equals its solo reply token for token (else the first divergent index). A server whose steps may run only
their whole passes (`--step-rows fastest`, the default: 65 - 127 requests may decode in 64-row steps on CUDA) may
form any batch from c's whole passes up to c; `qtui serve --step-rows all` checks the batch of c exactly.
Writes a witness JSON (model sha256, commit, engine, device, settings, per-rung results); exit 1 on any failure.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import random
import statistics
import sys
from pathlib import Path
from typing import Any

from qtui.serve.reply import first_divergence

WORDS = ("the quick brown fox jumps over a lazy dog while seven tiny models count tokens under bright "
         "green lamps and every batch keeps its promise to the single reply").split()  # fmt: skip


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default="ws://127.0.0.1:8765/", help="server URL (default ws://127.0.0.1:8765/)")
    p.add_argument("--ladder", default="1,4,8,16", help="concurrency rungs, comma-separated (default 1,4,8,16)")
    p.add_argument("--prompts", type=int, default=16, help="distinct prompts N (default 16)")
    p.add_argument("--max-tokens", type=int, default=32, help="reply length T, >= 2 (default 32; EOS ignored)")
    p.add_argument("--out", type=Path, default=Path("witness.json"), help="witness JSON path (default witness.json)")
    p.add_argument("--seed", type=int, default=0, help="prompt seed (default 0)")
    p.add_argument("--api-key", help="API key, if the server requires one")
    p.add_argument(
        "--sampled",
        action="store_true",
        help="seeded sampling instead of greedy: temperature 0.8, "
        "top_p 0.95, prompt j with seed 1000 * seed + j (its solo and batched runs share the seed)",
    )


def make_prompts(n: int, seed: int, n_vocab: int) -> list[dict[str, Any]]:
    """N varied prompts: even ones text of 3..40 words, odd ones 1..64 random token ids. Deterministic in seed."""
    rng = random.Random(seed)
    prompts: list[dict[str, Any]] = []
    for i in range(n):
        if i % 2 == 0:
            prompts.append({"prompt": " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 40)))})
        else:
            prompts.append({"tokens": [rng.randrange(n_vocab) for _ in range(rng.randint(1, 64))]})
    return prompts


async def _burst(url: str, requests: list[dict[str, Any]], api_key: str | None) -> tuple[list[Any], float, list[Any]]:
    """One socket per request; all frames sent back to back; returns (replies, wall seconds send→last done,
    the replica each socket reached: `hello.replica`, None from a single server)."""
    from qtui.tools.client import Client

    clients = [await Client.connect(url, api_key=api_key) for _ in requests]
    try:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        futures = [f for c, r in zip(clients, requests) for f in await c.submit_many([r])]
        replies = await asyncio.gather(*futures)
        return replies, loop.time() - t0, [(c.hello or {}).get("replica") for c in clients]
    finally:
        await asyncio.gather(*(c.close() for c in clients))


def least_m(c: int, settings: dict[str, Any]) -> int:
    """The smallest batch a burst of c may form on a server of these settings (`info`'s): c, or c's whole decode
    passes where the server's steps may leave a part-filled pass out (`step_rows` "fastest")."""
    from qtui.serve.scheduler import whole_passes

    if settings.get("step_rows") != "fastest":
        return c
    return whole_passes(c, int(settings.get("decode_pass_rows") or 0), int(settings.get("max_rows") or c))


def _check_reply(reply: Any, expected_m: int, least: int, solo: list[int]) -> dict[str, Any]:
    if reply.done is None:
        err = reply.error or {}
        return {"ok": False, "expected_m": expected_m, "error": f"{err.get('code')}: {err.get('message')}"}
    index = first_divergence(reply.done["tokens"], solo)
    m = reply.done["max_m"]
    m_ok = least <= m <= expected_m
    return {"ok": index is None and m_ok, "m": m, "m_ok": m_ok, "expected_m": expected_m, "least_m": least,
            "divergent_index": index, "tokens": len(reply.done["tokens"]),
            "tok_s": reply.done["decode_tok_s"]}  # fmt: skip


def _rung_result(c: int, which: list[int], checks: list[dict[str, Any]], wall: float) -> dict[str, Any]:
    total_tokens = sum(ch.get("tokens", 0) for ch in checks)
    rates = [ch["tok_s"] for ch in checks if "tok_s" in ch]
    diverged = [
        {"request": i, "prompt": j, "index": ch.get("divergent_index"), "error": ch.get("error")}
        for i, (ch, j) in enumerate(zip(checks, which))
        if ch.get("divergent_index") is not None or "error" in ch
    ]
    return {
        "c": c, "prompts": which, "m_formed": [ch.get("m") for ch in checks],
        "m_ok": all(ch.get("m_ok", False) for ch in checks),  # (a failed reply formed no batch)
        "equal": sum("m" in ch and ch["divergent_index"] is None for ch in checks),
        "diverged": diverged,
        "agg_tok_s": round(total_tokens / wall, 2) if wall > 0 else 0.0,
        "per_request_tok_s": {"mean": round(statistics.fmean(rates), 2) if rates else 0.0,
                              "min": min(rates, default=0.0), "max": max(rates, default=0.0)},
        "wall_s": round(wall, 4), "passed": all(ch["ok"] for ch in checks),
    }  # fmt: skip


SAMPLING = {"temperature": 0.8, "top_p": 0.95}


def request_for(prompt: dict[str, Any], j: int, max_tokens: int, seed: int, sampled: bool) -> dict[str, Any]:
    """The generate fields of prompt j (the same in its solo run and at every rung)."""
    req = {**prompt, "max_tokens": max_tokens, "ignore_eos": True}
    return {**req, **SAMPLING, "seed": 1000 * seed + j} if sampled else req


async def run_ladder(url: str, ladder: list[int], n_prompts: int, max_tokens: int, seed: int = 0,
                     api_key: str | None = None, sampled: bool = False) -> dict[str, Any]:  # fmt: skip
    """Run the ladder against `url` and return the witness dict (`passed` says whether every check held)."""
    from qtui.serve.recorder import git_commit
    from qtui.tools.client import Client

    async with await Client.connect(url, api_key=api_key) as client:
        info = await client.info()
    prompts = make_prompts(n_prompts, seed, int(info["n_vocab"]))
    solo: list[list[int]] = []
    solo_rows = []
    for i, p in enumerate(prompts):
        (reply,), _, _ = await _burst(url, [request_for(p, i, max_tokens, seed, sampled)], api_key)
        if reply.done is None:
            raise RuntimeError(f"solo request {i} failed: {reply.error}")
        solo.append(reply.done["tokens"])
        kind = "text" if "prompt" in p else "tokens"
        solo_rows.append({"prompt": i, "kind": kind, "prompt_tokens": reply.done["prompt_tokens"],
                          "tok_s": reply.done["decode_tok_s"]})  # fmt: skip
    rungs = []
    for k, c in enumerate(ladder):
        which = [(k + i) % n_prompts for i in range(c)]
        if c >= 2:
            which[-1] = which[0]  # an identical pair inside the batch
        replies, wall, replicas = await _burst(url, [request_for(prompts[j], j, max_tokens, seed, sampled)
                                                     for j in which], api_key)  # fmt: skip
        # behind N replicas (qtui/deploy/) the burst splits: each replica's share must form one batch of its size
        expected = [replicas.count(r) for r in replicas]
        served = info.get("settings") or {}
        checks = [_check_reply(r, m, least_m(m, served), solo[j]) for r, m, j in zip(replies, expected, which)]
        rungs.append(_rung_result(c, which, checks, wall))
    settings = {"ladder": ladder, "prompts": n_prompts, "max_tokens": max_tokens, "seed": seed, "ignore_eos": True,
                "sampling": {**SAMPLING, "seeds": "1000 * seed + prompt"} if sampled else None}  # fmt: skip
    return {
        "format": "qtui-parity-witness", "version": 1,
        "created": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "url": url,
        "model": info.get("model"), "sha256": info.get("sha256"), "commit": info.get("commit"),
        "client_commit": git_commit(), "engine": info.get("engine"), "device": info.get("device"),
        "server_settings": info.get("settings"), "settings": settings,
        "solo": solo_rows, "rungs": rungs, "passed": all(r["passed"] for r in rungs),
    }  # fmt: skip


def format_table(witness: dict[str, Any]) -> str:
    settings = witness["settings"]
    lines = [
        f"parity ladder: {witness['model']} on {witness['engine']} ({witness['device']}), "
        f"T={settings['max_tokens']}, {settings['prompts']} prompts"
        + (f", sampled {settings['sampling']}" if settings.get("sampling") else ", greedy"),
        f"{'c':>4} {'m formed':>10} {'equal':>7} {'agg tok/s':>10} {'req tok/s':>10} {'wall s':>8}  result",
    ]
    for r in witness["rungs"]:
        formed = sorted({m for m in r["m_formed"] if m is not None})
        m_text = ",".join(map(str, formed)) or "-"
        verdict = "PASS" if r["passed"] else "FAIL"
        lines.append(f"{r['c']:>4} {m_text:>10} {r['equal']:>3}/{r['c']:<3} {r['agg_tok_s']:>10.1f} "
                     f"{r['per_request_tok_s']['mean']:>10.1f} {r['wall_s']:>8.3f}  {verdict}")  # fmt: skip
        for d in r["diverged"]:
            lines.append(f"       request {d['request']} (prompt {d['prompt']}): "
                         + (d["error"] or f"diverged at token {d['index']}"))  # fmt: skip
    lines.append("PASSED: every batched reply equals its solo reply" if witness["passed"] else "FAILED")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from qtui.errors import BadRequest

    try:
        ladder = [int(x) for x in args.ladder.split(",") if x.strip()]
    except ValueError:
        raise BadRequest(f"--ladder must be comma-separated integers, got {args.ladder!r}") from None
    if not ladder or min(ladder) < 1 or args.prompts < 1 or args.max_tokens < 2:
        raise BadRequest("--ladder rungs >= 1, --prompts >= 1 and --max-tokens >= 2 are required")
    witness = asyncio.run(run_ladder(args.url, ladder, args.prompts, args.max_tokens, args.seed, args.api_key,
                                     args.sampled))  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(witness, indent=2) + "\n")
    print(format_table(witness))
    print(f"witness: {args.out}", file=sys.stderr)
    return 0 if witness["passed"] else 1
