"""The Sans-I/O scheduler against the fake engine: no threads, no sockets, `step()` called directly."""

from __future__ import annotations

import random

import pytest

from qtui.serve import events as ev
from qtui.serve.request import GenerateParams
from qtui.serve.scheduler import Scheduler

from .fake_engine import EOS, FakeEngine, FakeTokenizer, solo_reply

AHEAD = [False]  # the engine queues greedy decode steps ahead (the `ahead` fixture sets it for every test)


@pytest.fixture(autouse=True, params=[False, True], ids=["sync", "ahead"])
def ahead(request):
    """Every test runs against both decode paths: the replies and events must not depend on which one ran."""
    AHEAD[0] = request.param
    yield request.param
    AHEAD[0] = False


def make(max_slots=4, max_context=64, max_rows=None, **kw) -> tuple[Scheduler, FakeEngine]:
    engine = FakeEngine(max_slots=max_slots, max_context=max_context, max_rows=max_rows, ahead=AHEAD[0])
    return Scheduler(engine, FakeTokenizer(), **kw), engine


def run_all(sched: Scheduler, max_steps: int = 10_000) -> list[ev.Event]:
    """Step until idle, checking slot conservation after every step."""
    out: list[ev.Event] = []
    for _ in range(max_steps):
        if not sched.has_work:
            return out
        out += sched.step()
        sched.check_integrity()
    raise AssertionError("scheduler did not go idle")


def dones(events) -> dict[str, ev.Done]:
    return {e.rid: e for e in events if isinstance(e, ev.Done)}


def rand_prompt(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(2, 50) for _ in range(n)]


@pytest.mark.parametrize("c", [1, 4, 8, 16])
def test_burst_forms_one_batch_and_replies_equal_solo(c):
    rng = random.Random(c)
    sched, engine = make(max_slots=16, max_context=128)
    prompts = {f"r{i}": rand_prompt(rng, rng.randrange(1, 20)) for i in range(c)}
    for rid, p in prompts.items():
        assert sched.submit(rid, p, GenerateParams(max_tokens=12, ignore_eos=True))[-1].__class__ is ev.Arrived
    events = run_all(sched)
    steps = [e for e in events if isinstance(e, ev.Step)]
    assert steps[0].m == c  # all c admitted and decoded in the first step together
    done = dones(events)
    for rid, p in prompts.items():
        assert done[rid].tokens == solo_reply(p, 12, eos=None)
        assert done[rid].max_m == (c if c > 1 else 1)
        assert done[rid].finish_reason == "length"
    assert engine.num_free_slots() == 16


def test_decodes_hold_at_most_max_rows_and_each_engine_call_is_its_own_step():
    """6 slots, 4 rows per engine call: every step decodes 4 then 2, reported as m=4 and m=2 (what the
    engine ran), never one m=6 step; replies are unchanged and max_m is the call's m."""
    rng = random.Random(11)
    sched, engine = make(max_slots=6, max_context=128, max_rows=4)
    prompts = {f"r{i}": rand_prompt(rng, rng.randrange(1, 20)) for i in range(6)}
    for rid, p in prompts.items():
        sched.submit(rid, p, GenerateParams(max_tokens=8, ignore_eos=True))
    events = run_all(sched)
    steps = [e for e in events if isinstance(e, ev.Step)]
    assert [s.slots for s in steps] == engine.decode_calls
    assert [s.m for s in steps] == [4, 2] * 7 and all(s.m == len(s.slots) == len(s.tokens) for s in steps)
    done = dones(events)
    for i, (rid, p) in enumerate(prompts.items()):
        assert done[rid].tokens == solo_reply(p, 8, eos=None)
        assert done[rid].max_m == (4 if i < 4 else 2)


def test_continuous_batching_join_and_leave_keeps_replies():
    """Requests arriving while others decode join at step boundaries; nobody's reply changes."""
    rng = random.Random(7)
    sched, _ = make(max_slots=4, max_context=200, max_prefill_tokens=20)
    expected: dict[str, list[int]] = {}
    events: list[ev.Event] = []
    for i in range(30):
        p = rand_prompt(rng, rng.randrange(1, 40))
        n = rng.randrange(1, 15)
        sched.submit(f"r{i}", p, GenerateParams(max_tokens=n))
        expected[f"r{i}"] = solo_reply(p, n)
        for _ in range(rng.randrange(0, 3)):
            events += sched.step()
            sched.check_integrity()
    events += run_all(sched)
    done = dones(events)
    assert {rid: d.tokens for rid, d in done.items()} == expected
    assert max(e.m for e in events if isinstance(e, ev.Step)) == 4
    # 20 prompt tokens per step in all: a 40-token prompt takes at least 2 prefill pieces
    pre = [e for e in events if isinstance(e, ev.Prefilled)]
    assert all(e.n <= 20 for e in pre) and len(pre) > 30


def test_eos_stops_and_is_kept_in_tokens():
    sched, _ = make()
    rng = random.Random(3)
    # find a prompt whose solo reply hits EOS
    for _ in range(2000):
        p = rand_prompt(rng, 5)
        r = solo_reply(p, 40)
        if r[-1] == EOS and len(r) < 40:
            break
    else:
        pytest.skip("no EOS prompt found")
    sched.submit("a", p, GenerateParams(max_tokens=40))
    sched.submit("b", p, GenerateParams(max_tokens=40, ignore_eos=True))
    done = dones(run_all(sched))
    assert done["a"].tokens == r and done["a"].finish_reason == "stop"
    assert done["b"].tokens == solo_reply(p, 40, eos=None) and done["b"].finish_reason == "length"


def test_stop_string_trimmed_and_stream_equals_text():
    tok = FakeTokenizer()
    rng = random.Random(11)
    p = rand_prompt(rng, 6)
    full = tok.decode(solo_reply(p, 30, eos=None))
    stop = full[10:13]  # occurs in the reply: generation must stop there
    sched, _ = make()
    sched.submit("s", p, GenerateParams(max_tokens=30, stop=(stop,), ignore_eos=True))
    events = run_all(sched)
    done = dones(events)["s"]
    assert done.finish_reason == "stop"
    assert done.text == full[: full.index(stop)]
    assert "".join(e.text for e in events if isinstance(e, ev.Token)) == done.text
    assert [e.index for e in events if isinstance(e, ev.Token)] == list(range(len(done.tokens)))


def test_context_caps_max_tokens_and_long_prompt_rejected():
    sched, engine = make(max_context=32)
    rng = random.Random(5)
    out = sched.submit("long", rand_prompt(rng, 32), GenerateParams(max_tokens=4))
    assert isinstance(out[-1], ev.Error) and out[-1].code == "prompt_too_long"
    p = rand_prompt(rng, 31)  # max_context - 1: exactly one token fits
    sched.submit("edge", p, GenerateParams(max_tokens=100, ignore_eos=True))
    q = rand_prompt(rng, 20)
    sched.submit("capped", q, GenerateParams(max_tokens=100, ignore_eos=True))
    done = dones(run_all(sched))
    assert done["edge"].tokens == solo_reply(p, 1, eos=None) and done["edge"].finish_reason == "length"
    assert len(done["capped"].tokens) == 12  # 20 prompt + 12 = 32 = max_context


def test_queue_full_is_overloaded():
    sched, _ = make(max_slots=2, queue_size=3)
    codes = []
    for i in range(6):
        out = sched.submit(f"r{i}", [5, 6, 7], GenerateParams(max_tokens=3))
        codes.append(out[-1].code if isinstance(out[-1], ev.Error) else None)
    assert codes == [None] * 5 + ["overloaded"]  # 2 take the free slots at the next step, 3 wait
    assert len(dones(run_all(sched))) == 5


def test_cancel_waiting_and_running_free_slots():
    sched, engine = make(max_slots=2)
    for i in range(4):
        sched.submit(f"r{i}", [3, 4, 5 + i], GenerateParams(max_tokens=50, ignore_eos=True))
    sched.step()
    sched.check_integrity()
    assert engine.num_free_slots() == 0
    out = sched.cancel("r0") + sched.cancel("r3")  # one running, one waiting
    assert [type(e) for e in out] == [ev.Cancelled, ev.Done, ev.Cancelled, ev.Done]
    assert out[1].finish_reason == "cancelled" and out[3].slot is None
    assert sched.cancel("r0") == [] and sched.cancel("nope") == []
    sched.step()
    sched.check_integrity()
    assert sched.num_active == 2 and sched.num_waiting == 0
    run_all(sched)
    assert engine.num_free_slots() == 2


def test_no_slot_leak_over_many_cancel_cycles():
    sched, engine = make(max_slots=2)
    rng = random.Random(1)
    for i in range(200):
        sched.submit(f"x{i}", rand_prompt(rng, 4), GenerateParams(max_tokens=20, ignore_eos=True))
        for _ in range(rng.randrange(0, 3)):
            sched.step()
            sched.check_integrity()
        sched.cancel(f"x{i}")
        sched.check_integrity()
    assert engine.num_free_slots() == 2
    p = rand_prompt(rng, 4)
    sched.submit("last", p, GenerateParams(max_tokens=5, ignore_eos=True))
    assert dones(run_all(sched))["last"].tokens == solo_reply(p, 5, eos=None)


def test_abort_all_errors_every_live_request():
    sched, engine = make(max_slots=2)
    for i in range(4):
        sched.submit(f"r{i}", [3, 4, 5 + i], GenerateParams(max_tokens=50, ignore_eos=True))
    sched.step()
    sched.is_draining = True
    assert sched.submit("late", [3], GenerateParams())[-1].code == "shutting_down"
    out = sched.abort_all("shutting_down", "drain timeout")
    assert sorted(e.rid for e in out) == ["r0", "r1", "r2", "r3"]
    assert all(isinstance(e, ev.Error) and e.code == "shutting_down" for e in out)
    sched.check_integrity()
    assert engine.num_free_slots() == 2 and not sched.has_work


def test_verify_parity_reruns_when_idle_and_yields_to_clients():
    rng = random.Random(9)
    sched, engine = make(max_slots=4, verify_parity=True)
    for i in range(3):
        sched.submit(f"r{i}", rand_prompt(rng, 5), GenerateParams(max_tokens=8, ignore_eos=True))
    events = []
    while not any(isinstance(e, ev.Step) and e.verify for e in events):
        events += sched.step()
    assert all(d.parity == "pending" for d in dones(events).values())
    # a client request arrives mid re-run: the re-run is dropped, the client batch runs without it
    p = rand_prompt(rng, 5)
    sched.submit("late", p, GenerateParams(max_tokens=8, ignore_eos=True))
    late = sched.step()  # (queued ahead: its first step is read in the next one)
    while not any(isinstance(e, ev.Step) for e in late):
        late += sched.step()
    assert [e.m for e in late if isinstance(e, ev.Step)] == [1] and not any(
        e.verify for e in late if isinstance(e, ev.Step)
    )
    events += late + run_all(sched)
    verdicts = [e for e in events if isinstance(e, ev.ParityVerdict)]
    assert sorted(v.rid for v in verdicts) == ["late", "r0", "r1", "r2"]
    assert all(v.index is None and v.label == "equal" for v in verdicts)
    assert engine.num_free_slots() == 4


def test_verify_parity_detects_divergence():
    """An engine whose batched rows differ from solo rows must be caught with the first divergent index."""
    sched, engine = make(max_slots=4, verify_parity=True)
    real_decode = engine._decode  # both decode paths' (decode, decode_submit)

    def batch_dependent_decode(slots, tokens, sampling=None):
        out = real_decode(slots, tokens, sampling)
        return [(t + 1) % engine.n_vocab if len(slots) > 1 and t != EOS else t for t in out]

    engine._decode = batch_dependent_decode
    sched.submit("a", [5, 6], GenerateParams(max_tokens=6, ignore_eos=True))
    sched.submit("b", [7, 8], GenerateParams(max_tokens=6, ignore_eos=True))
    verdicts = {e.rid: e for e in run_all(sched) if isinstance(e, ev.ParityVerdict)}
    # token 0 comes from prefill (batch-free), token 1 is the first batched decode
    assert verdicts["a"].index == 1 and verdicts["a"].label == "diverged@1"


def test_steps_queued_ahead_drop_a_stopped_rows_token_and_run_no_row_past_max_tokens(ahead):
    """Queued ahead, a request that stops on EOS while its next step is in flight is freed at once (its slot goes to
    a waiting request) and that step's token for it is dropped: one wasted row per such stop, none for a request
    whose in-flight token is its max_tokens-th. Replies stay the solo ones; at most one step is ever in flight."""
    rng = random.Random(5)
    prompts = {}
    while sum(len(solo_reply(p, 16)) < 16 for p in prompts.values()) < 3 or len(prompts) < 8:
        p = rand_prompt(rng, rng.randrange(1, 8))
        prompts[f"r{len(prompts)}"] = p
    sched, engine = make(max_slots=3, max_context=64)
    for rid, p in prompts.items():
        sched.submit(rid, p, GenerateParams(max_tokens=16))
    events: list[ev.Event] = []
    while sched.has_work:
        events += sched.step()
        sched.check_integrity()
        assert engine.uncollected <= 1
    done = dones(events)
    eos_in_decode = 0
    for rid, p in prompts.items():
        want = solo_reply(p, 16)
        assert done[rid].tokens == want
        eos_in_decode += 1 < len(want) < 16
    rows = sum(len(call) for call in engine.decode_calls)
    assert rows == sum(len(d.tokens) - 1 for d in done.values()) + (eos_in_decode if ahead else 0)
    assert engine.num_free_slots() == 3


def test_sampled_and_greedy_requests_decode_together_and_equal_solo(ahead):
    """Sampled rows go ahead too (only logprobs make a step synchronous); each reply is its solo one."""
    from qtui.engine.sampling import SamplingParams

    rng = random.Random(8)
    sched, engine = make(max_slots=4, max_context=64)
    reqs = {}
    for i in range(4):
        p = rand_prompt(rng, rng.randrange(1, 9))
        sampling = SamplingParams(temperature=0.8, top_p=0.95, seed=i) if i % 2 else None
        params = GenerateParams(max_tokens=10, ignore_eos=True, **({"sampling": sampling} if sampling else {}))
        reqs[f"r{i}"] = (p, sampling)
        sched.submit(f"r{i}", p, params)
    done = dones(run_all(sched))
    for rid, (p, sampling) in reqs.items():
        assert done[rid].tokens == solo_reply(p, 10, eos=None, sampling=sampling)
    rows = sum(len(call) for call in engine.decode_calls)
    assert rows == 4 * 9  # each request 9 decode rows, none dropped (all stop at max_tokens)
    assert bool(engine._last_out) == ahead  # (only decode_submit records a slot's last output)
