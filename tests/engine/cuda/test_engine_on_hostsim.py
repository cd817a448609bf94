"""CudaEngine itself on the host simulator (hostsim/fake_driver.py in place of cuda.bindings.driver): the engine's
promises checked without a GPU, on the tiny models: logits against the numpy reference, batched replies equal to
solo replies, graph replay bitwise the eager step, a chunked prefill bitwise the tokens fed one by one. The GPU
runs the full versions (test_engine.py, test_batch_invariance.py, test_prefill.py)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from . import test_batch_invariance as bi
from . import test_engine, test_prefill

pytestmark = [
    pytest.mark.hostsim,
    pytest.mark.skipif(shutil.which("g++") is None, reason="the host simulator needs g++"),
]
N_NEW = 8  # tokens per reply (the GPU tests: 24)


@pytest.fixture(scope="module")
def sim_driver():
    from .hostsim import fake_driver

    with fake_driver.installed() as cu:
        yield cu


@pytest.fixture(scope="module")
def engine(sim_driver, make_model):
    from qtui.engine.cuda.engine import CudaEngine
    from qtui.model.gguf_file import GGUFModel

    eng = CudaEngine(
        GGUFModel.open(make_model("tiny-tiled", "q4_k_m")),
        max_slots=8,
        max_context=128,
        progress=False,
        prefill_chunk=7,
    )
    yield eng
    eng.close()


@pytest.mark.parametrize("preset,quant", [("tiny", "q4_k_m"), ("tiny-tiled", "q6_k"), ("tiny", "f32")])
def test_simulated_engine_matches_reference(sim_driver, make_model, preset, quant):
    report = test_engine.compare_with_reference(make_model(preset, quant), n_decode=6, max_context=128)
    assert report["split"] is not None or report["steps"] == 7


@pytest.mark.parametrize("c", [1, 6])
def test_simulated_steps_queued_ahead_equal_solo_replies(sim_driver, engine, c):
    """decode_submit / decode_collect with the simulator's stream work deferred to the host's synchronizations, as
    a GPU runs behind the host: a pinned image or output reused too early changes the tokens."""
    with sim_driver.deferred():
        bi.check_ahead_replies(engine, c, N_NEW)


@pytest.mark.parametrize("c,kind", [(4, "staggered"), (8, "different")])
def test_simulated_batched_replies_equal_solo_replies(engine, c, kind):
    rng = np.random.default_rng()
    prompts = [rng.integers(0, engine.config.n_vocab, int(rng.integers(1, 20))).tolist() for _ in range(c)]
    joins = [0] * c if kind != "staggered" else sorted(rng.integers(0, N_NEW // 2, c).tolist())
    solo = [bi.solo_reply(engine, p, N_NEW) for p in prompts]
    assert bi.batched_replies(engine, prompts, joins, N_NEW) == solo
    assert engine.num_free_slots() == engine.max_slots


def test_simulated_graph_step_bitwise_equals_eager_step(engine):
    rng = np.random.default_rng()
    for m in (1, 3, 8):
        prompts = [rng.integers(0, engine.config.n_vocab, int(rng.integers(1, 12))).tolist() for _ in range(m)]
        tokens = rng.integers(0, engine.config.n_vocab, m).tolist()
        steps = []
        for use_graphs in (False, True):
            engine.use_graphs = use_graphs
            slots = [engine.alloc_slot() for _ in range(m)]
            for s, p in zip(slots, prompts, strict=True):
                engine.prefill_logits(s, p)
            steps.append(engine.decode_logits(slots, tokens))
            for s in slots:
                engine.free_slot(s)
        engine.use_graphs = True
        assert np.isfinite(steps[0]).all() and np.array_equal(steps[0].view(np.uint32), steps[1].view(np.uint32))


def test_simulated_chunked_prefill_is_bitwise_token_by_token(engine):
    prompt = test_prefill._prompt(engine, 17)  # chunks of 7: 7 + 7 + 3
    a, b = engine.alloc_slot(), engine.alloc_slot()
    chunked = engine.prefill_logits(a, prompt)
    fed = test_prefill._one_by_one(engine, b, prompt)
    engine.free_slot(a), engine.free_slot(b)
    assert np.array_equal(chunked.view(np.uint32), fed.view(np.uint32))


@pytest.fixture(scope="module")
def batch_engine(sim_driver, make_model):
    """Chunks of 32 rows: pieces of 16 run side by side through attn_partial_run (blocks of 16 rows on the tiny
    model's 2-head groups), shorter digits through attn_partial; runs > 1 through the delta rule's pipeline."""
    from qtui.engine.cuda.engine import CudaEngine
    from qtui.model.gguf_file import GGUFModel

    eng = CudaEngine(
        GGUFModel.open(make_model("tiny-tiled", "q4_k_m")), max_slots=5, max_context=96, progress=False,
        prefill_chunk=32,
    )  # fmt: skip
    yield eng
    eng.close()


@pytest.mark.parametrize("lengths,lead", [([16, 16], 0), ([5, 16, 3, 1], 0), ([11, 40], 9)])
def test_simulated_prefill_batch_is_bitwise_each_piece_alone(batch_engine, lengths, lead):
    test_prefill.check_prefill_batch(batch_engine, lengths, lead, n_new=3)


def test_simulated_sampled_prefill_batch_picks_each_piece_alone(batch_engine):
    from qtui.engine.sampling import SamplingParams

    sampling = SamplingParams(temperature=0.9, top_p=0.95, repetition_penalty=1.3, seed=77)
    test_prefill.check_prefill_batch(batch_engine, [6, 3, 2], sampling=sampling, n_new=2)


def test_a_bad_piece_fails_prefill_batch_before_any_state_moves(batch_engine):
    """Every piece is checked first: a piece past the context (PromptTooLong) or a token outside the vocabulary
    (BadRequest) fails the call with its typed error, and no slot of the call has taken a token."""
    from qtui.errors import BadRequest, PromptTooLong

    a, b = batch_engine.alloc_slot(), batch_engine.alloc_slot()
    try:
        ok = test_prefill._prompt(batch_engine, 5)
        with pytest.raises(PromptTooLong):
            batch_engine.prefill_batch([(a, ok), (b, [1] * (batch_engine.max_context + 1))])
        with pytest.raises(BadRequest):
            batch_engine.prefill_batch([(a, ok), (b, [batch_engine.config.n_vocab])])
        assert batch_engine.slot_length(a) == batch_engine.slot_length(b) == 0
    finally:
        batch_engine.free_slot(a), batch_engine.free_slot(b)


def test_simulated_scheduler_with_batched_prefill_gives_every_request_its_solo_reply(batch_engine, monkeypatch):
    """The scheduler over the engine with batch_prefill on (QTUI_BATCH_PREFILL=1): two requests start and decode
    (steps queued ahead), then three arrive at once and are prefilled in one prefill_batch call while a decode step
    is in flight; every reply is the request's solo reply."""
    from qtui.serve import events as ev
    from qtui.serve.request import GenerateParams
    from qtui.serve.scheduler import Scheduler

    from serve.fake_engine import FakeTokenizer

    monkeypatch.setattr(batch_engine, "batch_prefill", True)
    calls: list[int] = []
    real = batch_engine.prefill_batch
    monkeypatch.setattr(
        batch_engine, "prefill_batch", lambda pieces, s=None: calls.append(len(pieces)) or real(pieces, s)
    )
    sched = Scheduler(batch_engine, FakeTokenizer(batch_engine.config.n_vocab))
    # Each group's prompts fit one step's token budget (the mixed one for the three arriving while two decode):
    # a prompt past it is cut to whole engine chunks, here none, and would wait for a later step on its own.
    rng = np.random.default_rng()
    first = rng.integers(2, sched.max_prefill_tokens // 2 + 1, 2)
    later = rng.integers(2, sched.max_mixed_prefill_tokens // 3 + 1, 3)
    prompts = {f"r{i}": test_prefill._prompt(batch_engine, int(n)) for i, n in enumerate([*first, *later])}
    params = GenerateParams(max_tokens=4, ignore_eos=True)
    events: list[ev.Event] = []
    for rid in ("r0", "r1"):
        sched.submit(rid, prompts[rid], params)
    events += sched.step() + sched.step()
    for rid in ("r2", "r3", "r4"):
        sched.submit(rid, prompts[rid], params)
    while sched.has_work:
        events += sched.step()
    got = {e.rid: e.tokens for e in events if isinstance(e, ev.Done)}
    assert calls == [2, 3] and set(got) == set(prompts)
    assert got == {rid: bi.solo_reply(batch_engine, p, 4) for rid, p in prompts.items()}
    assert batch_engine.num_free_slots() == batch_engine.max_slots


@pytest.mark.parametrize("gemm_blocks", [None, 3])
def test_simulated_prefill_through_gemms_staged_by_their_producers(sim_driver, make_model, monkeypatch, gemm_blocks):
    """Prefill chunks of 20 rows through the GEMM (forced here: GEMM_DECODE_MIN_UNITS 0), which reads x as its
    producer staged it (rmsnorm, the delta rule, attn_combine, the SwiGLU GEMM's epilogue): no gemm_stage_x at
    all, and bitwise the tokens fed one by one (m = 1: the GEMVs on the split rows). On 3 GEMM blocks every GEMM's
    units are shared out and its cut tile groups settled by fold launches, the SwiGLU's staging act too. The layers
    with projections of two types run them as GEMM pairs (KernelTable.projections)."""
    from qtui.engine.cuda import kernels
    from qtui.engine.cuda.engine import CudaEngine
    from qtui.model.gguf_file import GGUFModel

    monkeypatch.setattr(kernels, "GEMM_DECODE_MIN_UNITS", 0)
    if gemm_blocks:
        monkeypatch.setattr(kernels, "GEMM_RESIDENT_BLOCKS", gemm_blocks)
        monkeypatch.setattr(kernels, "GEMM_CUT_UNITS", -(10**6))
    gemms: list[tuple[int, bool]] = []  # (rows, staged by its producer) of each GEMM site built
    folds: list[str] = []
    sites = kernels.KernelTable._mma_sites

    paired: list[int] = []  # the pair place of each one-matrix GEMM (the tiny q4_k_m's Q6_K qkv or v beside Q4_K)

    def spy(self, plan, qtype, kind, args, x, pair=0):
        built = sites(self, plan, qtype, kind, args, x, pair)
        if plan.gemm:
            gemms.append((plan.m, bool(x.gx)))
            paired.append(pair)
            folds.extend(k.name for k in built if k.name.startswith("gemm_fold"))
        return built

    monkeypatch.setattr(kernels.KernelTable, "_mma_sites", spy)
    model = GGUFModel.open(make_model("tiny-tiled", "q4_k_m"))
    eng = CudaEngine(model, max_slots=2, max_context=64, progress=False, prefill_chunk=20)
    try:
        prompt = test_prefill._prompt(eng, 41)  # 20 + 20 + 1
        a, b = eng.alloc_slot(), eng.alloc_slot()
        chunked = eng.prefill_logits(a, prompt)
        fed = test_prefill._one_by_one(eng, b, prompt)
    finally:
        eng.close()
    assert np.isfinite(chunked).all() and np.array_equal(chunked.view(np.uint32), fed.view(np.uint32))
    assert bool(folds) == bool(gemm_blocks) and (not folds or {"gemm_fold_n32", "gemm_fold_swiglu_n32"} <= set(folds))
    assert gemms and all(staged for _, staged in gemms), gemms  # every GEMM of the 20-row chunks read x as staged
    assert paired.count(kernels.GEMM_PAIR_FIRST) == paired.count(kernels.GEMM_PAIR_SECOND) > 0  # pairs ran too


@pytest.mark.parametrize("prefill", [False, True])
def test_simulated_profile_times_every_launch_of_the_step_and_frees_its_slots(engine, prefill):
    from qtui.tools.bench import profile_step

    m = 3
    free = engine.num_free_slots()
    rows = profile_step(engine, m, np.random.default_rng(), reps=1, prefill=prefill, pos0=5 if prefill else 0)
    plan = engine._plan(m, "none", m) if prefill else engine._plan(m, "all")
    by_name = {r["name"]: r for r in rows}
    assert by_name["whole step"]["launches"] == len(plan)
    assert sum(r["launches"] for r in rows if r["name"] != "whole step") == len(plan)
    assert all(np.isfinite(r["us"]) and r["us"] >= 0 for r in rows)
    assert engine.num_free_slots() == free


def test_simulated_step_left_uncollected_for_a_whole_ring_is_dropped(sim_driver, engine):
    """A step whose ring entry a later step takes before it is read (the scheduler drops the step in flight after an
    engine error) refuses to be read; the steps after it chain from it and read right."""
    from qtui.engine.cuda.ahead import RING

    prompt = [3, 4, 5]
    solo = bi.solo_reply(engine, prompt, RING + 2)
    slot = engine.alloc_slot()
    first = engine.prefill(slot, prompt)
    with sim_driver.deferred():
        subs = [engine.decode_submit([slot], [first])]
        subs += [engine.decode_submit([slot], [None]) for _ in range(RING)]
        with pytest.raises(AssertionError, match="dropped"):
            engine.decode_collect(subs[0])
        later = [engine.decode_collect(s)[0] for s in subs[1:]]
    engine.free_slot(slot)
    assert [first, *later] == solo[:1] + solo[2:]


def test_simulated_sampled_steps_queued_ahead_pick_what_decode_picks(sim_driver, engine):
    """Sampled rows queued ahead: each entry's parameters staged from its own pinned rows (the copy runs after
    the next entry is written, with the simulator's work deferred); the picks are the synchronous ones."""
    from qtui.engine.sampling import SamplingParams

    from ..sampled_runs import run_sampled, run_sampled_ahead

    rng = np.random.default_rng()
    prompts = [rng.integers(0, engine.config.n_vocab, int(rng.integers(2, 12))).tolist() for _ in range(4)]
    params = [SamplingParams(temperature=0.9, top_p=0.95, seed=int(rng.integers(0, 2**62))) for _ in range(3)]
    params.append(SamplingParams(temperature=0.0))  # a greedy row among them
    sync = run_sampled(engine, prompts, params, [0, 1, 2, 3], 6)
    with sim_driver.deferred():
        ahead = run_sampled_ahead(engine, prompts, params, [0, 1, 2, 3], 6)
    assert ahead == sync


def test_simulated_steps_queued_ahead_are_timed_by_m_once_their_graph_is_captured(engine):
    bi.check_step_times(engine, max_ms=float("inf"))  # the simulator runs a step in seconds
