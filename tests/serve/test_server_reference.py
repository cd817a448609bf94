"""Serving the tiny synthetic model with the numpy reference engine: batch formation and batch invariance
at the scheduler level and over real sockets, against solo replies computed directly on a fresh engine."""

from __future__ import annotations

import asyncio
import random

import pytest

from qtui.serve import events as ev
from qtui.serve.main import open_stack, start_server
from qtui.serve.request import GenerateParams
from qtui.serve.scheduler import Scheduler
from qtui.serve.server import _Codec
from qtui.tools.client import Client

MAX_CONTEXT = 256


@pytest.fixture(scope="module")
def stack(tiny_gguf):
    model, tokenizer, engine = open_stack(tiny_gguf, "cpu", 16, MAX_CONTEXT)
    yield model, tokenizer, engine
    model.close()


def solo_generate(engine, prompt: list[int], max_tokens: int, eos: frozenset[int]) -> list[int]:
    """The oracle: the request alone in a fresh slot, straight on the engine (no scheduler)."""
    slot = engine.alloc_slot()
    try:
        out = [engine.prefill(slot, prompt)]
        while len(out) < max_tokens and out[-1] not in eos:
            out += engine.decode([slot], [out[-1]])
        return out
    finally:
        engine.free_slot(slot)


def make_prompts(tokenizer, n: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    words = "alpha beta gamma delta slot batch token reply model server parity".split()
    prompts = []
    for i in range(n):
        if i % 2:
            prompts.append([rng.randrange(tokenizer.n_vocab) for _ in range(rng.randint(1, 40))])
        else:
            prompts.append(tokenizer.encode(" ".join(rng.choice(words) for _ in range(rng.randint(2, 30)))))
    prompts[-1] = prompts[0]  # an identical pair in every batch
    return prompts


@pytest.mark.parametrize("c", [4, 8, 16])
def test_scheduler_batch_of_c_equals_solo(stack, c):
    _, tokenizer, engine = stack
    prompts = make_prompts(tokenizer, c, seed=c)
    sched = Scheduler(engine, _Codec(tokenizer), max_prefill_tokens=16 * c)
    for i, p in enumerate(prompts):
        sched.submit(f"r{i}", p, GenerateParams(max_tokens=8, ignore_eos=i % 2 == 1))
    events = []
    while sched.has_work:
        events += sched.step()
        sched.check_integrity()
    # prompts of up to 40 tokens, 16c prompt tokens per step: every prompt is in within 3 steps (some cut
    # mid-prompt at the budget's edge, so chunked prefill is exercised); then all c decode together
    assert max(e.m for e in events if isinstance(e, ev.Step)) == c
    done = {e.rid: e for e in events if isinstance(e, ev.Done)}
    for i, p in enumerate(prompts):
        eos = frozenset() if i % 2 else tokenizer.eos_token_ids
        assert done[f"r{i}"].tokens == solo_generate(engine, p, 8, eos), f"request {i}"
        if i % 2:
            assert done[f"r{i}"].max_m == c


async def test_socket_bursts_form_batches_and_equal_solo(stack, tiny_gguf):
    _, tokenizer, engine = stack
    async with start_server(tiny_gguf, engine="cpu", port=0, max_context=MAX_CONTEXT, window_ms=150) as srv:
        for c in (4, 8, 16):
            prompts = make_prompts(tokenizer, c, seed=100 + c)
            clients = [await Client.connect(srv.url) for _ in range(c)]
            futures = [
                f
                for cl, p in zip(clients, prompts)
                for f in await cl.submit_many([dict(tokens=p, max_tokens=6, ignore_eos=True)])
            ]
            replies = await asyncio.gather(*futures)
            for cl in clients:
                await cl.close()
            for i, (p, r) in enumerate(zip(prompts, replies)):
                assert r.done["max_m"] == c, f"c={c} request {i}: decoded at m={r.done['max_m']}"
                assert r.tokens == r.done["tokens"] == solo_generate(engine, p, 6, frozenset()), f"c={c} request {i}"
                assert r.text == r.done["text"] == tokenizer.decode(r.done["tokens"])


async def test_real_load_replies_equal_solo(stack, tiny_gguf):
    """A smaller real-engine load: 48 requests from 12 clients over 4 slots, staggered, short replies."""
    _, tokenizer, engine = stack
    prompts = make_prompts(tokenizer, 48, seed=7)
    async with start_server(tiny_gguf, engine="cpu", port=0, max_slots=4, max_context=MAX_CONTEXT, window_ms=2) as srv:
        clients = [await Client.connect(srv.url) for _ in range(12)]

        async def client_loop(k: int):
            return [(p, await clients[k].generate(tokens=p, max_tokens=4)) for p in prompts[k::12]]

        results = [r for rs in await asyncio.gather(*(client_loop(k) for k in range(12))) for r in rs]
        for cl in clients:
            await cl.close()
    assert len(results) == 48
    for p, reply in results:
        assert reply.done is not None, reply.error
        assert reply.tokens == solo_generate(engine, p, 4, tokenizer.eos_token_ids)
    assert max(r.done["max_m"] for _, r in results) > 1


def test_serve_flags_name_slots_and_keep_the_old_max_batch():
    from qtui.cli import build_parser

    parse = build_parser().parse_args
    assert parse(["serve", "m.gguf", "--max-batch", "3"]).max_slots == 3  # the old name still sets slots
    assert parse(["serve", "m.gguf", "--max-slots", "5", "--max-per-connection", "2"]).max_slots == 5
    assert parse(["serve", "m.gguf"]).max_per_connection is None
