"""Batch invariance of the CUDA engine: every request decoded together with others produces exactly its
solo reply; a reused slot behaves like a fresh one; graph replay is bitwise the eager step."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
N_NEW = 24


@pytest.fixture(scope="module")
def engine(make_model):
    from qtui.engine.cuda.engine import CudaEngine
    from qtui.model.gguf_file import GGUFModel

    eng = CudaEngine(GGUFModel.open(make_model("tiny-tiled", "q4_k_m")), max_slots=64, max_context=512, progress=False)
    yield eng
    eng.close()


def solo_reply(eng, prompt, n_new=N_NEW):
    slot = eng.alloc_slot()
    out = [eng.prefill(slot, prompt)]
    while len(out) < n_new:
        out += eng.decode([slot], [out[-1]])
    eng.free_slot(slot)
    return out


def batched_replies(eng, prompts, joins, n_new=N_NEW):
    """Request i is prefilled at step joins[i] and then decoded with every other active request."""
    replies: dict[int, list[int]] = {}
    slots: dict[int, int] = {}
    step = 0
    while len(replies) < len(prompts) or any(len(r) < n_new for r in replies.values()):
        for i, j in enumerate(joins):
            if j == step:
                slots[i] = eng.alloc_slot()
                replies[i] = [eng.prefill(slots[i], prompts[i])]
        active = [i for i in replies if len(replies[i]) < n_new]
        if active:
            toks = eng.decode([slots[i] for i in active], [replies[i][-1] for i in active])
            for i, t in zip(active, toks):
                replies[i].append(t)
        for i in active:
            if len(replies[i]) == n_new:
                eng.free_slot(slots[i])
        step += 1
    return [replies[i] for i in range(len(prompts))]


def ahead_replies(eng, prompts, joins, stops, n_new=N_NEW):
    """As batched_replies, with every decode step queued before the host reads the one before it (decode_submit /
    decode_collect, the server's order): a row whose last token is still in flight gets it on the device (None).
    Request i stops after stops[i] tokens, which the host learns only when it reads that token (as an EOS): its
    slot is freed, and may be handed to a joining request, while its next step is still in flight, whose token for
    it is dropped. Rows go in slot order, so the chained rows come in several runs."""
    replies: dict[int, list[int]] = {}
    slots: dict[int, int] = {}
    live: set[int] = set()
    pending = None  # (Submitted, the request of each row)
    step = 0
    while step <= max(joins) or live or pending:
        for i, j in enumerate(joins):
            if j == step:
                slots[i] = eng.alloc_slot()
                replies[i] = [eng.prefill(slots[i], prompts[i])]
                live.add(i) if stops[i] > 1 else eng.free_slot(slots[i])
        in_flight = set(pending[1]) if pending else set()
        rows = sorted((i for i in live if len(replies[i]) + (i in in_flight) < n_new), key=lambda i: slots[i])
        feed = [None if i in in_flight else replies[i][-1] for i in rows]
        sub = eng.decode_submit([slots[i] for i in rows], feed) if rows else None
        if pending:
            for i, t in zip(pending[1], eng.decode_collect(pending[0])):
                if i in live:
                    replies[i].append(t)
                    if len(replies[i]) == stops[i]:
                        live.remove(i)
                        eng.free_slot(slots[i])
        pending = (sub, rows) if sub else None
        step += 1
    return [replies[i] for i in range(len(prompts))]


def check_ahead_replies(eng, c, n_new=N_NEW):
    rng = np.random.default_rng()
    prompts = [rng.integers(0, eng.config.n_vocab, int(rng.integers(1, 40))).tolist() for _ in range(c)]
    joins = sorted(rng.integers(0, n_new // 2, c).tolist())
    stops = rng.integers(1, n_new + 1, c).tolist()
    solo = [solo_reply(eng, p, n_new) for p in prompts]
    ahead = ahead_replies(eng, prompts, joins, stops, n_new)
    for i, (s, a) in enumerate(zip(solo, ahead)):
        assert a == s[: stops[i]], f"c={c}: request {i} (stops at {stops[i]}) differs from its solo reply: {a} {s}"
    assert eng.num_free_slots() == eng.max_slots


@pytest.mark.parametrize("c", [1, 5, 64])
def test_replies_with_steps_queued_ahead_equal_solo_replies(engine, c):
    check_ahead_replies(engine, c)


def check_step_times(engine, m=7, max_ms=1000.0):
    """decode_ms(m): the device time of m-row steps queued ahead (the scheduler's step_rows reads it), from the
    ring's events; the step that captured m's graph is not timed (the stream idled while the host captured)."""
    from qtui.engine.cuda.ahead import StepTimes

    engine.step_times = StepTimes()
    rng = np.random.default_rng()
    new_shape = (m, "all", 1) not in engine.graphs
    slots = [engine.alloc_slot() for _ in range(m)]
    first = [engine.prefill(s, rng.integers(0, engine.config.n_vocab, 5).tolist()) for s in slots]
    engine.decode_collect(engine.decode_submit(slots, first))
    assert (engine.decode_ms(m) is None) == new_shape
    for _ in range(3):
        engine.decode_collect(engine.decode_submit(slots, [None] * m))
    ms = engine.decode_ms(m)
    assert ms is not None and 0 < ms < max_ms, ms  # (a 7-row step of the tiny model: well under a second)
    assert engine.decode_ms(m - 1) is None  # no step of m - 1 rows ran since
    for s in slots:
        engine.free_slot(s)


def test_steps_queued_ahead_are_timed_by_m_once_their_graph_is_captured(engine):
    check_step_times(engine)


def test_chaining_needs_a_step_to_chain_from(engine):
    slot = engine.alloc_slot()
    engine.prefill(slot, [1, 2, 3])
    with pytest.raises(AssertionError, match="no decode step"):
        engine.decode_submit([slot], [None])
    engine.free_slot(slot)


@pytest.mark.parametrize("c", [2, 4, 8, 16, 32, 64])
@pytest.mark.parametrize("kind", ["identical", "different", "staggered"])
def test_batched_replies_equal_solo_replies(engine, c, kind):
    rng = np.random.default_rng()
    n_vocab = engine.config.n_vocab
    if kind == "identical":
        prompts = [rng.integers(0, n_vocab, 9).tolist()] * c
    else:
        prompts = [rng.integers(0, n_vocab, int(rng.integers(1, 40))).tolist() for _ in range(c)]
    joins = [0] * c if kind != "staggered" else sorted(rng.integers(0, N_NEW // 2, c).tolist())
    solo = [solo_reply(engine, p) for p in prompts]
    together = batched_replies(engine, prompts, joins)
    for i, (s, t) in enumerate(zip(solo, together)):
        first = next((k for k, (a, b) in enumerate(zip(s, t)) if a != b), None)
        assert first is None, f"c={c} {kind}: request {i} differs from its solo reply at token {first}"
    assert engine.num_free_slots() == engine.max_slots


def test_reused_slot_behaves_like_fresh(engine):
    rng = np.random.default_rng()
    prompt = rng.integers(0, engine.config.n_vocab, 15).tolist()
    first = solo_reply(engine, prompt)
    other = solo_reply(engine, rng.integers(0, engine.config.n_vocab, 30).tolist())  # dirties the slot
    again = solo_reply(engine, prompt)
    assert first == again and first != [] and other != []


def test_graph_step_bitwise_equals_eager_step(engine):
    rng = np.random.default_rng()
    n_vocab = engine.config.n_vocab
    assert engine.max_rows == 64
    for m in sorted({1, 2, 3, 7, 8, 9, 16, 17, 31, 33, 48, 63, 64}):
        prompts = [rng.integers(0, n_vocab, int(rng.integers(1, 20))).tolist() for _ in range(m)]
        tokens = rng.integers(0, n_vocab, m).tolist()
        results = []
        for use_graphs in (False, True):
            engine.use_graphs = use_graphs
            slots = [engine.alloc_slot() for _ in range(m)]
            pre = [engine.prefill_logits(s, p) for s, p in zip(slots, prompts)]
            step = engine.decode_logits(slots, tokens)
            for s in slots:
                engine.free_slot(s)
            results.append((np.stack(pre), step))
        engine.use_graphs = True
        (pe, se), (pg, sg) = results
        assert np.isfinite(se).all()
        assert np.array_equal(pe.view(np.uint32), pg.view(np.uint32)), f"m={m}: prefill graph != eager"
        assert np.array_equal(se.view(np.uint32), sg.view(np.uint32)), f"m={m}: decode graph != eager"


@pytest.fixture(scope="module")
def wide_engine(make_model):
    """Steps of more than one 64-token GEMM pass: as many slots as the engine's decode step holds rows."""
    from qtui.engine.cuda.engine import MAX_ROWS, CudaEngine
    from qtui.model.gguf_file import GGUFModel

    eng = CudaEngine(GGUFModel.open(make_model("tiny-tiled", "q4_k_m")), max_slots=MAX_ROWS, max_context=256,
                     progress=False)  # fmt: skip
    assert eng.max_rows == MAX_ROWS > 64
    yield eng
    eng.close()


@pytest.mark.parametrize("c", [65, 96, 128])
@pytest.mark.parametrize("kind", ["different", "staggered"])
def test_steps_of_two_passes_equal_solo_replies(wide_engine, c, kind):
    """Decode steps of 65..128 rows (two 64-token passes, the second partly filled or full) give every request its
    solo reply."""
    rng = np.random.default_rng()
    prompts = [rng.integers(0, wide_engine.config.n_vocab, int(rng.integers(1, 40))).tolist() for _ in range(c)]
    joins = [0] * c if kind != "staggered" else sorted(rng.integers(0, N_NEW // 2, c).tolist())
    solo = [solo_reply(wide_engine, p) for p in prompts]
    together = batched_replies(wide_engine, prompts, joins)
    differ = [i for i in range(c) if solo[i] != together[i]]
    assert not differ, f"c={c} {kind}: requests {differ[:8]} differ from their solo replies"


def test_two_pass_graph_step_bitwise_equals_eager_step(wide_engine):
    rng = np.random.default_rng()
    n_vocab = wide_engine.config.n_vocab
    for m in (65, 100, 128):
        prompts = [rng.integers(0, n_vocab, int(rng.integers(1, 20))).tolist() for _ in range(m)]
        tokens = rng.integers(0, n_vocab, m).tolist()
        steps = []
        for use_graphs in (False, True):  # from the same prompts, in fresh slots
            wide_engine.use_graphs = use_graphs
            slots = [wide_engine.alloc_slot() for _ in range(m)]
            for s, p in zip(slots, prompts):
                wide_engine.prefill(s, p)
            steps.append(wide_engine.decode_logits(slots, tokens))
            for s in slots:
                wide_engine.free_slot(s)
        wide_engine.use_graphs = True
        eager, graph = steps
        assert np.isfinite(eager).all()
        assert np.array_equal(eager.view(np.uint32), graph.view(np.uint32)), f"m={m}: decode graph != eager"
