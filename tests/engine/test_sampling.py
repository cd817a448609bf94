"""The numpy reference sampler (qtui/engine/sampling.py) against independent oracles, and the reference
engine's sampled rows: batched == solo, seeds matter, counts are the slot's own."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qtui.engine.sampling import GREEDY, SamplingParams, derive_seed, filter_mask, gumbel_noise, philox4x32, sample_row
from qtui.errors import InvalidParameter

from .sampled_runs import run_sampled

F32 = np.float32


def _philox(c, k):
    return tuple(int(x[0]) for x in philox4x32(*[np.array([v], np.uint64) for v in c], *k))


def test_philox_known_answers():
    """Random123's kat_vectors for philox4x32_10."""
    assert _philox((0, 0, 0, 0), (0, 0)) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)
    assert _philox((0xFFFFFFFF,) * 4, (0xFFFFFFFF, 0xFFFFFFFF)) == (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)
    c, k = (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0)
    assert _philox(c, k) == (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)


def test_gumbel_noise_is_counter_based_and_gumbel_distributed():
    g = gumbel_noise(123, 7, 200_000)
    assert np.isfinite(g).all()
    assert abs(g.mean() - 0.5772) < 0.01 and abs(g.var() - math.pi**2 / 6) < 0.03  # Gumbel(0, 1)
    assert np.array_equal(gumbel_noise(123, 7, 1000), g[:1000])  # token v's noise does not depend on n
    assert not np.array_equal(gumbel_noise(124, 7, 1000), g[:1000])
    assert not np.array_equal(gumbel_noise(123, 8, 1000), g[:1000])


def _kept_oracle(z: np.ndarray, p: SamplingParams) -> set[int]:
    """Filters by a plain loop over tokens sorted by z (float64 probabilities; ties kept at each boundary)."""
    order = sorted(range(len(z)), key=lambda v: -float(z[v]))
    kept = order if not 0 < p.top_k < len(z) else [v for v in order if z[v] >= z[order[p.top_k - 1]]]
    e = np.exp(z.astype(np.float64) - float(z.max()))
    if p.top_p < 1:
        total, run, cut = sum(e[v] for v in kept), 0.0, None
        for v in kept:
            run += e[v]
            if run >= p.top_p * total:
                cut = z[v]
                break
        kept = [v for v in kept if z[v] >= cut]
    return {v for v in kept if e[v] >= p.min_p}


@pytest.mark.parametrize("seed", range(6))
def test_filters_match_a_loop_oracle_on_fresh_logits(seed):
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 2, 300).astype(F32)
    for p in [
        SamplingParams(temperature=1, top_k=17),
        SamplingParams(temperature=1, top_p=0.6),
        SamplingParams(temperature=1, min_p=0.05),
        SamplingParams(temperature=1, top_k=40, top_p=0.9, min_p=0.01),
    ]:
        got = set(np.flatnonzero(filter_mask(z, p)).tolist())
        assert got == _kept_oracle(z, p), p


def test_sampling_follows_softmax_and_greedy_is_argmax():
    rng = np.random.default_rng(11)
    logits = rng.normal(0, 1, 8).astype(F32)
    p = SamplingParams(temperature=0.7, seed=0)
    counts = np.bincount([sample_row(logits, SamplingParams(temperature=0.7, seed=s), 5) for s in range(6000)],
                         minlength=8)  # fmt: skip
    probs = np.exp(logits / 0.7) / np.exp(logits / 0.7).sum()
    assert np.abs(counts / 6000 - probs).max() < 0.025
    assert sample_row(logits, GREEDY, 5) == int(np.argmax(logits))
    assert sample_row(logits, SamplingParams(temperature=0.7, top_k=1, seed=3), 5) == int(np.argmax(logits))
    assert sample_row(logits, p, 5) == sample_row(logits.copy(), p, 5)  # a pure function


def test_penalties_follow_their_formulas():
    logits = np.array([2.0, -1.0, 0.5, 3.0], F32)
    prompt, out = np.array([1, 1, 0, 0], np.int32), np.array([0, 0, 2, 1], np.int32)
    p = SamplingParams(repetition_penalty=2.0, frequency_penalty=0.5, presence_penalty=0.25)
    from qtui.engine.sampling import penalize

    got = penalize(logits, p, prompt, out)
    assert got.tolist() == [1.0, -2.0, 0.5 / 2 - 0.5 * 2 - 0.25, 3.0 / 2 - 0.5 - 0.25]
    assert sample_row(logits, p, 0, prompt, out) == 0  # temperature 0: argmax of the penalized logits


def test_bad_parameters_name_themselves():
    for kw, name in [
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"top_k": -1}, "top_k"),
        ({"min_p": 2}, "min_p"),
        ({"seed": -1}, "seed"),
        ({"logprobs": 21}, "logprobs"),
    ]:
        with pytest.raises(InvalidParameter) as info:
            SamplingParams(**kw)
        assert info.value.param == name


def test_derived_seeds_are_distinct_and_choice_zero_keeps_the_seed():
    seeds = [derive_seed(42, i) for i in range(64)]
    assert seeds[0] == 42 and len(set(seeds)) == 64 and all(0 <= s < 2**64 for s in seeds)


def test_reference_engine_sampled_rows_batched_equal_solo(tiny_gguf):
    from qtui.engine.reference import ReferenceEngine
    from qtui.model.gguf_file import GGUFModel

    model = GGUFModel.open(tiny_gguf)
    eng = ReferenceEngine(model, max_slots=4, max_context=128)
    prompts = [[5, 6, 7], [9, 10], [5, 6, 7], [11, 12, 13, 14]]
    params = [SamplingParams(temperature=0.8, top_p=0.95, seed=7), SamplingParams(temperature=1.2, top_k=20, seed=8),
              SamplingParams(temperature=0.8, top_p=0.95, seed=7), SamplingParams(temperature=0.9, min_p=0.02,
              repetition_penalty=1.3, frequency_penalty=0.4, presence_penalty=0.2, seed=9)]  # fmt: skip

    def run(batch: list[int]) -> dict[int, list[int]]:
        return run_sampled(eng, prompts, params, batch, 12)

    solo = {i: run([i])[i] for i in range(4)}
    batched = run([3, 1, 0, 2])
    assert batched == solo
    assert solo[0] == solo[2]  # same prompt, same seed
    params[0] = SamplingParams(temperature=0.8, top_p=0.95, seed=70)
    assert run([0])[0] != solo[0]  # another seed, another reply
    model.close()
