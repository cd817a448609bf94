"""The scheduler's prefill token budget (issue 11, mixed steps), step by step against the fake engine: a step
is one decode for every running request plus at most `max_prefill_tokens` prompt tokens, so a long prompt
never freezes the streams already running; the budget goes to prefilling requests in admission order."""

from __future__ import annotations

import random

from qtui.serve import events as ev
from qtui.serve.request import GenerateParams
from qtui.serve.scheduler import Scheduler

from .fake_engine import BatchPrefillFakeEngine, FakeEngine, FakeTokenizer, solo_reply
from .test_scheduler import dones, rand_prompt


def make(
    max_slots: int, max_context: int, prefill_chunk: int | None = None, mixed: int | None = None, **kw
) -> tuple[Scheduler, FakeEngine]:
    engine = FakeEngine(
        max_slots=max_slots, max_context=max_context, prefill_chunk=prefill_chunk, mixed_prefill_chunk=mixed
    )
    return Scheduler(engine, FakeTokenizer(), **kw), engine


def prefilled(events: list[ev.Event]) -> list[ev.Prefilled]:
    return [e for e in events if isinstance(e, ev.Prefilled)]


def test_the_budget_defaults_to_the_engines_prefill_chunk():
    assert make(4, 64, prefill_chunk=96)[0].max_prefill_tokens == 96
    assert make(4, 64)[0].max_prefill_tokens == 256  # an engine that states no chunk
    assert make(4, 64, prefill_chunk=96, max_prefill_tokens=40)[0].max_prefill_tokens == 40


def test_token_budget_respected_per_step_in_whole_engine_chunks():
    rng = random.Random(5)
    sched, engine = make(max_slots=8, max_context=400, prefill_chunk=16, max_prefill_tokens=64)
    prompts = {f"r{i}": rand_prompt(rng, rng.randrange(1, 300)) for i in range(20)}
    for rid, p in prompts.items():
        sched.submit(rid, p, GenerateParams(max_tokens=6, ignore_eos=True))
    events: list[ev.Event] = []
    offset = {rid: 0 for rid in prompts}
    while sched.has_work:
        out = sched.step()
        sched.check_integrity()
        pieces = prefilled(out)
        total = sum(e.n for e in pieces)
        assert total <= 64
        still_prefilling = any(r.num_prefilled < len(r.prompt) for r in sched._running.values())
        if still_prefilling:  # work left: the step used the budget, but for less than one chunk
            assert total > 64 - 16, f"budget wasted: {total} prompt tokens while prompts wait"
        for e in pieces:
            assert offset[e.rid] % 16 == 0, "a piece starts off an engine chunk boundary"
            offset[e.rid] += e.n
            assert e.n % 16 == 0 or offset[e.rid] == len(prompts[e.rid]), "a partial piece of a partial chunk"
        events += out
    assert offset == {rid: len(p) for rid, p in prompts.items()}
    assert {rid: d.tokens for rid, d in dones(events).items()} == {
        rid: solo_reply(p, 6, eos=None) for rid, p in prompts.items()
    }


def test_a_4096_token_prompt_interleaves_with_63_decoding_requests():
    """Every running request gets a token every step while the long prompt is fed 256 tokens a step."""
    rng = random.Random(1)
    sched, engine = make(max_slots=64, max_context=4200, prefill_chunk=256)
    short = {f"d{i}": rand_prompt(rng, 4) for i in range(63)}
    for rid, p in short.items():
        sched.submit(rid, p, GenerateParams(max_tokens=40, ignore_eos=True))
    first = sched.step()  # 63 x 4 = 252 prompt tokens: one step, then all 63 decode
    assert len(prefilled(first)) == 63 and [e.m for e in first if isinstance(e, ev.Step)] == [63]
    long_prompt = rand_prompt(rng, 4096)
    sched.submit("long", long_prompt, GenerateParams(max_tokens=8, ignore_eos=True))
    steps = 0
    while True:
        out = sched.step()
        if any(isinstance(e, ev.Token) and e.rid == "long" for e in out):
            break
        steps += 1
        assert [(e.rid, e.n) for e in prefilled(out)] == [("long", 256)]
        assert [e.m for e in out if isinstance(e, ev.Step)] == [63]
        assert sorted(e.rid for e in out if isinstance(e, ev.Token)) == sorted(short)  # one token each
    assert steps == 15  # 16 pieces of 256; the 16th step also yields the long prompt's first token
    assert sorted(e.rid for e in out if isinstance(e, ev.Token)) == sorted([*short, "long", "long"])
    assert [e.m for e in out if isinstance(e, ev.Step)] == [64]  # it decodes with them in that same step
    assert [n for slot, n in engine.prefill_calls[63:]] == [256] * 16
    while sched.has_work:
        out += sched.step()
    assert dones(out)["long"].tokens == solo_reply(long_prompt, 8, eos=None)


def test_admission_and_prefill_are_first_come_first_served():
    """Requests are admitted in arrival order and the budget goes to the oldest prefilling request first, so
    first tokens come in arrival order; a later request that fits in what is left is not held back."""
    rng = random.Random(2)
    sched, _ = make(max_slots=3, max_context=2048, prefill_chunk=64, max_prefill_tokens=256)
    order = [("a", 1000), ("b", 1000), ("tiny", 10), ("c", 300), ("d", 20)]
    for rid, n in order:
        sched.submit(rid, rand_prompt(rng, n), GenerateParams(max_tokens=40, ignore_eos=True))
    events: list[ev.Event] = []
    first_token_step: dict[str, int] = {}
    step = 0
    while sched.has_work:
        out = sched.step()
        for e in out:
            if isinstance(e, ev.Token):
                first_token_step.setdefault(e.rid, step)
        events += out
        step += 1
    admitted = [e.rid for e in events if isinstance(e, ev.Admitted)]
    assert admitted == [rid for rid, _ in order]
    # a's last piece (1000 - 3 * 256 = 232) leaves 24: too little for one of b's 64-token chunks, enough
    # for all of tiny's 10 tokens, so tiny (admitted third) is in before b, which has waited for a
    assert first_token_step["a"] == 3 and first_token_step["tiny"] == 3
    assert first_token_step["a"] < first_token_step["b"] < first_token_step["c"]
    assert all(e.n <= 256 for e in prefilled(events))


def test_the_mixed_budget_defaults_to_the_engines_mixed_chunk_and_never_exceeds_the_budget():
    assert make(4, 64, prefill_chunk=256, mixed=64)[0].max_mixed_prefill_tokens == 64
    assert make(4, 64, prefill_chunk=256)[0].max_mixed_prefill_tokens == 256  # an engine that states none
    assert make(4, 64, prefill_chunk=256, mixed=64, max_mixed_prefill_tokens=32)[0].max_mixed_prefill_tokens == 32
    assert make(4, 64, prefill_chunk=256, mixed=64, max_prefill_tokens=48)[0].max_mixed_prefill_tokens == 48


def test_a_long_prompt_takes_the_mixed_budget_while_others_decode_and_the_full_one_alone():
    """1000 prompt tokens: 64-token pieces while 8 requests decode (each still gets a token every step), back to
    256-token pieces once they are done; the reply is the solo reply either way."""
    rng = random.Random(3)
    sched, engine = make(max_slots=16, max_context=1100, prefill_chunk=256, mixed=64)
    short = {f"d{i}": rand_prompt(rng, 5) for i in range(8)}
    for rid, p in short.items():
        sched.submit(rid, p, GenerateParams(max_tokens=6, ignore_eos=True))
    events = sched.step()  # 40 prompt tokens (no one decodes yet: the full budget), then their first decode
    long_prompt = rand_prompt(rng, 1000)
    sched.submit("long", long_prompt, GenerateParams(max_tokens=4, ignore_eos=True))
    pieces = []
    while sched.has_work:
        out = sched.step()
        decoding = {e.rid for e in out if isinstance(e, ev.Token)} - {"long"}
        for e in prefilled(out):
            pieces.append((e.n, bool(decoding)))
            if decoding:  # a mixed step: every short request still decoding got its token in it
                assert e.n <= 64
        events += out
    # 4 mixed steps while the 8 decode (their first 2 tokens came in the step that prefilled them), then
    # 256-token pieces
    assert pieces == [(64, True)] * 4 + [(256, False)] * 2 + [(1000 - 4 * 64 - 512, False)]
    assert [n for _, n in engine.prefill_calls[8:]] == [n for n, _ in pieces]
    done = dones(events)
    assert done["long"].tokens == solo_reply(long_prompt, 4, eos=None)
    assert all(done[rid].tokens == solo_reply(p, 6, eos=None) for rid, p in short.items())


def test_pieces_of_a_step_go_to_the_engine_in_one_batch_call_with_their_sampling():
    """An engine with prefill_batch gets a step's pieces in one call (64 prompts of one token: one call, where
    the token budget alone would have left 64 prefill calls in that step); a request that wants logprobs still
    goes alone; every reply, greedy and seeded sampled, is its solo reply."""
    from qtui.engine.sampling import GREEDY, SamplingParams

    rng = random.Random(7)
    engine = BatchPrefillFakeEngine(max_slots=70, max_context=300, prefill_chunk=256, mixed_prefill_chunk=64)
    sched = Scheduler(engine, FakeTokenizer())
    sampled = SamplingParams(temperature=0.8, seed=99)
    prompts = {f"r{i}": rand_prompt(rng, 1) for i in range(64)}
    for i, (rid, p) in enumerate(prompts.items()):
        params = GenerateParams(max_tokens=5, ignore_eos=True, sampling=sampled if i % 3 == 0 else GREEDY)
        sched.submit(rid, p, params)
    first = sched.step()
    assert engine.batch_calls == [[(slot, 1) for slot in range(64)]] and engine.prefill_calls == []
    assert [e.m for e in first if isinstance(e, ev.Step)] == [64]  # all of them decode in that same step
    late = {"lp": rand_prompt(rng, 9), "x": rand_prompt(rng, 20), "y": rand_prompt(rng, 30)}
    sched.submit("lp", late["lp"], GenerateParams(max_tokens=5, ignore_eos=True, sampling=SamplingParams(logprobs=2)))
    sched.submit("x", late["x"], GenerateParams(max_tokens=5, ignore_eos=True))
    sched.submit("y", late["y"], GenerateParams(max_tokens=5, ignore_eos=True))
    events = first + sched.step()  # the mixed budget (64): lp alone (logprobs), x and y together
    assert engine.batch_calls[1:] == [[(65, 20), (66, 30)]] and engine.prefill_calls == [(64, 9)]
    assert [e.rid for e in prefilled(events)[64:]] == ["lp", "x", "y"]  # events in admission order
    while sched.has_work:
        events += sched.step()
    got = {rid: d.tokens for rid, d in dones(events).items()}
    for i, (rid, p) in enumerate(prompts.items()):
        assert got[rid] == solo_reply(p, 5, eos=None, sampling=sampled if i % 3 == 0 else None), rid
    assert all(got[rid] == solo_reply(p, 5, eos=None) for rid, p in late.items())


def test_an_engine_that_turns_batch_prefill_off_gets_one_prefill_call_a_piece():
    rng = random.Random(8)
    engine = BatchPrefillFakeEngine(max_slots=8, max_context=64, prefill_chunk=256)
    engine.batch_prefill = False  # (the CUDA engine's QTUI_BATCH_PREFILL=0)
    sched = Scheduler(engine, FakeTokenizer())
    prompts = {f"r{i}": rand_prompt(rng, 3) for i in range(5)}
    for rid, p in prompts.items():
        sched.submit(rid, p, GenerateParams(max_tokens=3, ignore_eos=True))
    events = []
    while sched.has_work:
        events += sched.step()
    assert engine.batch_calls == [] and [n for _, n in engine.prefill_calls] == [3] * 5
    assert {rid: d.tokens for rid, d in dones(events).items()} == {
        rid: solo_reply(p, 3, eos=None) for rid, p in prompts.items()
    }


def test_the_default_mixed_budget_grows_with_the_decode_passes_a_given_one_does_not():
    """An engine that decodes in passes of 4 rows with a mixed chunk of 4: a step with 1..4 rows decoding carries 4
    prompt tokens, with 5..8 rows 8 (two passes cost about twice one); never more than max_prefill_tokens; a
    --max-mixed-prefill-tokens given by hand stays a fixed bound."""
    engine = FakeEngine(max_slots=12, max_context=200, prefill_chunk=2, mixed_prefill_chunk=4, decode_pass_rows=4)
    sched = Scheduler(engine, FakeTokenizer(), max_prefill_tokens=10)
    assert sched.mixed_scales
    assert [sched.mixed_budget(n) for n in (1, 4, 5, 8, 9, 12)] == [4, 4, 8, 8, 10, 10]
    fixed = Scheduler(engine, FakeTokenizer(), max_prefill_tokens=10, max_mixed_prefill_tokens=4)
    assert not fixed.mixed_scales and fixed.mixed_budget(12) == 4
    rng = random.Random(11)
    running = {f"r{i}": rand_prompt(rng, 1) for i in range(6)}  # 6 rows decode after the first step
    for rid, p in running.items():
        sched.submit(rid, p, GenerateParams(max_tokens=40, ignore_eos=True))
    events = sched.step()
    late = rand_prompt(rng, 30)
    sched.submit("late", late, GenerateParams(max_tokens=3, ignore_eos=True))
    before = sum(n for _, n in engine.prefill_calls)
    events += sched.step()  # 6 rows decode: two passes, 8 prompt tokens (whole chunks of 2)
    assert sum(n for _, n in engine.prefill_calls) - before == 8
    while sched.has_work:
        events += sched.step()
    got = {rid: d.tokens for rid, d in dones(events).items()}
    assert got["late"] == solo_reply(late, 3, eos=None)
    assert all(got[rid] == solo_reply(p, 40, eos=None) for rid, p in running.items())
