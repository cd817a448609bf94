"""Chunked prefill (prefill_chunk prompt tokens per step: 1, 7, 64, 256) is bitwise the prompt fed one token
per step: logits, split calls, greedy continuation, graph vs eager. The token-by-token path is the public one:
prefill of the first token, then one decode step per token (m = 1)."""

from __future__ import annotations

import numpy as np
import pytest

from .test_engine import compare_with_reference

pytestmark = pytest.mark.gpu
LENGTHS = [1, 15, 64, 65, 100, 300]  # inside one chunk, exactly one, one past, several with tails
N_NEW = 16


@pytest.fixture(
    scope="module",
    params=[
        ("tiny", "f32", 7),
        ("tiny-tiled", "q4_k_m", 1),
        ("tiny-tiled", "q4_k_m", 7),
        ("tiny-tiled", "q4_k_m", 64),
        ("tiny-tiled", "q6_k", 256),
    ],
    ids=lambda p: f"{p[0]}-{p[1]}-chunk{p[2]}",
)
def engine(request, make_model):
    """max_slots = 4 < the chunk: the activations still hold a full chunk."""
    from qtui.engine.cuda.engine import CudaEngine
    from qtui.model.gguf_file import GGUFModel

    preset, quant, chunk = request.param
    eng = CudaEngine(
        GGUFModel.open(make_model(preset, quant)), max_slots=4, max_context=512, progress=False, prefill_chunk=chunk
    )
    yield eng
    eng.close()


def _bits(x: np.ndarray) -> np.ndarray:
    return x.view(np.uint32)


def _prompt(eng, n: int) -> list[int]:
    return np.random.default_rng().integers(0, eng.config.n_vocab, n).tolist()


def _one_by_one(eng, slot: int, prompt: list[int]) -> np.ndarray:
    logits = eng.prefill_logits(slot, prompt[:1])
    for tok in prompt[1:]:
        logits = eng.decode_logits([slot], [tok])[0]
    return logits


def _greedy(eng, slot: int, logits: np.ndarray, n: int = N_NEW) -> list[int]:
    return _greedy_from(eng, slot, int(np.argmax(logits)), n)


def _greedy_from(eng, slot: int, first: int, n: int) -> list[int]:
    out = [first]
    while len(out) < n:
        out += eng.decode([slot], [out[-1]])
    return out


def _with_dirty_neighbour(eng, fn):
    """Run fn() while another slot holds a random prompt's state (and so do the freed slots fn reuses)."""
    other = eng.alloc_slot()
    eng.prefill(other, _prompt(eng, int(np.random.default_rng().integers(1, 60))))
    try:
        return fn()
    finally:
        eng.free_slot(other)


@pytest.mark.parametrize("n", LENGTHS)
def test_chunked_prefill_is_bitwise_token_by_token(engine, n):
    prompt = _prompt(engine, n)

    def both():
        a, b = engine.alloc_slot(), engine.alloc_slot()
        chunked, single = engine.prefill_logits(a, prompt), _one_by_one(engine, b, prompt)
        assert np.isfinite(chunked).all()
        assert np.array_equal(_bits(chunked), _bits(single)), f"n={n}: chunked prefill logits != token by token"
        # the greedy continuations, each slot decoding alone from the state its prefill left
        assert _greedy(engine, a, chunked) == _greedy(engine, b, single), f"n={n}: continuations differ"
        engine.free_slot(a)
        engine.free_slot(b)

    _with_dirty_neighbour(engine, both)


def test_prefill_next_token_is_argmax_of_last_row(engine):
    for n in (5, 16, 37):
        prompt = _prompt(engine, n)
        a, b = engine.alloc_slot(), engine.alloc_slot()
        assert engine.prefill(a, prompt) == int(np.argmax(engine.prefill_logits(b, prompt)))
        engine.free_slot(a)
        engine.free_slot(b)


@pytest.mark.parametrize("n", [2, 17, 40, 100])
def test_prompt_split_across_calls_equals_one_call(engine, n):
    prompt = _prompt(engine, n)
    rng = np.random.default_rng()
    cuts = sorted({1, n - 1, int(rng.integers(1, n)), min(engine.prefill_chunk, n - 1)} - {0})
    a = engine.alloc_slot()
    whole = engine.prefill_logits(a, prompt)
    ref = _greedy(engine, a, whole)
    engine.free_slot(a)
    for k in cuts:
        b = engine.alloc_slot()
        engine.prefill(b, prompt[:k])
        split = engine.prefill_logits(b, prompt[k:])
        assert np.array_equal(_bits(split), _bits(whole)), f"n={n}: prefill({k}) + prefill({n - k}) != prefill({n})"
        assert _greedy(engine, b, split) == ref
        engine.free_slot(b)


@pytest.mark.parametrize("n", [16, 70])
def test_graph_prefill_bitwise_equals_eager(engine, n):
    prompt = _prompt(engine, n)
    results = []
    try:
        for use_graphs in (False, True):
            engine.use_graphs = use_graphs
            slot = engine.alloc_slot()
            results.append(engine.prefill_logits(slot, prompt))
            engine.free_slot(slot)
    finally:
        engine.use_graphs = True
    eager, graph = results
    assert np.isfinite(eager).all()
    assert np.array_equal(_bits(eager), _bits(graph)), f"n={n}: chunked prefill graph != eager"


def check_prefill_batch(eng, lengths: list[int], lead: int = 0, sampling=None, n_new: int = 4) -> None:
    """prefill_batch of one piece per slot (after `lead` tokens each slot prefilled alone) equals each piece fed
    alone by `prefill`: the logits bitwise (greedy) or the sampled token, then the greedy continuations. A later
    piece starts in fresh slots that other pieces' states surround."""
    prompts = [_prompt(eng, lead + n) for n in lengths]
    slots = [eng.alloc_slot() for _ in lengths]
    for s, p in zip(slots, prompts):
        if lead:
            eng.prefill(s, p[:lead])
    pieces = [(s, p[lead:]) for s, p in zip(slots, prompts)]
    if sampling is None:
        batch = eng.prefill_batch_logits(pieces)
        firsts = [int(np.argmax(row)) for row in batch]
        assert np.isfinite(batch).all()
    else:
        firsts = eng.prefill_batch(pieces, [sampling] * len(pieces))
    for i, (slot, prompt) in enumerate(zip(slots, prompts)):
        alone = eng.alloc_slot()
        if lead:
            eng.prefill(alone, prompt[:lead])
        if sampling is None:
            solo = eng.prefill_logits(alone, prompt[lead:])
            assert np.array_equal(_bits(batch[i]), _bits(solo)), f"{lengths}: piece {i} != its prefill alone"
            first = int(np.argmax(solo))
        else:
            first = eng.prefill(alone, prompt[lead:], sampling)
        assert firsts[i] == first, f"{lengths}: piece {i}'s next token {firsts[i]} != {first} alone"
        cont = _greedy_from(eng, alone, first, n_new)
        eng.free_slot(alone)
        assert _greedy_from(eng, slot, first, n_new) == cont, f"{lengths}: piece {i}'s continuation differs"
    for s in slots:
        eng.free_slot(s)


@pytest.mark.parametrize("lengths,lead", [([5, 16, 3], 0), ([16, 16, 16], 0), ([40, 9], 0), ([7, 1, 24], 19)])
def test_prefill_batch_is_bitwise_each_piece_alone(engine, lengths, lead):
    check_prefill_batch(engine, lengths, lead)


def test_sampled_prefill_batch_picks_each_piece_alone(engine):
    from qtui.engine.sampling import SamplingParams

    sampling = SamplingParams(temperature=0.9, top_p=0.95, repetition_penalty=1.3, seed=1234)
    check_prefill_batch(engine, [6, 13, 2], sampling=sampling)


def test_chunked_prefill_matches_reference(make_model):
    """Several chunks plus a tail against the numpy engine, then greedy decode (test_engine's tolerance)."""
    report = compare_with_reference(make_model("tiny-tiled", "q8_0"), n_decode=8, prompt_len=37)
    assert report["split"] is not None or report["steps"] == 9
