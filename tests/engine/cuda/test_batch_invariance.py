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
