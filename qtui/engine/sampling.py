"""Seeded sampling that stays batch-invariant: the engine-facing parameters and the numpy reference sampler.

The sampled token is a pure function of (the request's own logits row, its seed, its position, its own
previous tokens) — DESIGN invariant 6. Nothing reads another row, and the noise is counter-based, so a row
sampled inside a batch of 16 is the row sampled alone. The CUDA engine runs the same algorithm in
ptx/sampling.cu (one block per row, fixed-order reductions) on the same integer RNG bits.

The algorithm, per row (float32 unless said; every step is written so both engines can do it exactly):

1. penalties on the raw logits l (counts are the slot's own: prompt tokens from prefill, generated tokens
   from decode inputs): a token seen in the prompt or the reply gets `l > 0 ? l / repetition : l * repetition`;
   a token generated c > 0 times gets `l - frequency * c - presence` (OpenAI/vLLM semantics).
2. temperature 0 → the argmax of the penalized logits (ties → lowest id), no noise. Else z = l / temperature.
3. filters over z, each keeping ties at its boundary: top_k keeps keys >= the k-th largest; top_p keeps the
   smallest set of most likely tokens (among the top_k ones) whose mass reaches top_p, with mass measured in
   fixed point q = floor(exp(z - max z) * 2^32) (integers: the sum does not depend on its order); min_p keeps
   exp(z - max z) >= min_p.
4. Gumbel-max over the survivors: argmax of float64 z + g, g = -log(-log(u)), u = (x + 0.5) / 2^32 where x is
   word 0 of Philox-4x32-10 with key (seed low, seed high 32 bits) and counter (position, token id, 0, 0);
   position = the index in the slot's sequence of the token being sampled. Ties → lowest id.

Logprobs are the model's own: log-softmax of the raw logits (before penalties, temperature and filters),
with the log-sum-exp in float64.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np

from qtui.errors import InvalidParameter

F32 = np.float32
MAX_LOGPROBS = 20  # top alternatives per token (OpenAI's limit for top_logprobs)
MASK64 = (1 << 64) - 1
_PHILOX_M = (0xD2511F53, 0xCD9E8D57)
_PHILOX_W = (0x9E3779B9, 0xBB67AE85)


def _check(name: str, ok: bool, what: str) -> None:
    if not ok:
        raise InvalidParameter(name, f"`{name}` must be {what}")


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How one request picks its tokens. The defaults are greedy decoding (temperature 0, no penalties)."""

    temperature: float = 0.0  # 0: argmax; else logits / temperature
    top_p: float = 1.0  # (0, 1]; 1: off
    top_k: int = 0  # 0: off
    min_p: float = 0.0  # [0, 1]; 0: off
    presence_penalty: float = 0.0  # [-2, 2]
    frequency_penalty: float = 0.0  # [-2, 2]
    repetition_penalty: float = 1.0  # (0, 2]; 1: off
    seed: int = 0  # [0, 2^64): the Philox key
    logprobs: int | None = None  # None: no logprobs; n: the chosen token's logprob + the n most likely

    def __post_init__(self) -> None:
        _check("temperature", 0.0 <= self.temperature <= 100.0, "a number in [0, 100]")
        _check("top_p", 0.0 < self.top_p <= 1.0, "a number in (0, 1]")
        _check("top_k", 0 <= self.top_k, "an integer >= 0 (0: off)")
        _check("min_p", 0.0 <= self.min_p <= 1.0, "a number in [0, 1]")
        _check("presence_penalty", -2.0 <= self.presence_penalty <= 2.0, "a number in [-2, 2]")
        _check("frequency_penalty", -2.0 <= self.frequency_penalty <= 2.0, "a number in [-2, 2]")
        _check("repetition_penalty", 0.0 < self.repetition_penalty <= 2.0, "a number in (0, 2]")
        _check("seed", 0 <= self.seed <= MASK64, "an integer in [0, 2^64)")
        if self.logprobs is not None:
            _check("logprobs", 0 <= self.logprobs <= MAX_LOGPROBS, f"an integer in [0, {MAX_LOGPROBS}]")

    @property
    def has_penalties(self) -> bool:
        return self.presence_penalty != 0 or self.frequency_penalty != 0 or self.repetition_penalty != 1

    @property
    def is_greedy(self) -> bool:
        """Plain argmax of the raw logits: the engines' fast path (no sampler, no counts)."""
        return self.temperature == 0 and not self.has_penalties


GREEDY = SamplingParams()


def sampling_to_json(p: SamplingParams) -> dict[str, object]:
    """The fields that differ from greedy defaults, plus the seed of every non-greedy request (so a recorded
    request replays exactly); {} for plain greedy."""
    out = {f.name: getattr(p, f.name) for f in fields(p) if getattr(p, f.name) != getattr(GREEDY, f.name)}
    if not p.is_greedy:
        out["seed"] = p.seed
    return out


@dataclass(frozen=True, slots=True)
class Choice:
    """A chosen token with the model's logprob for it and the `n` most likely tokens (id, logprob)."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def derive_seed(seed: int, index: int) -> int:
    """The seed of choice `index` of an `n`-choice request: choice 0 keeps the request's seed (so n=1 and the
    first of n agree); the others get splitmix64(seed + index * golden gamma)."""
    if index == 0:
        return seed & MASK64
    z = (seed + index * 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


# ---- Philox-4x32-10 (Salmon et al., SC'11), vectorized over counters -------------------------------------


def philox4x32(c0: np.ndarray, c1: np.ndarray, c2: np.ndarray, c3: np.ndarray, k0: int, k1: int) -> list[np.ndarray]:
    """Philox-4x32-10 of counters (c0, c1, c2, c3) (uint32 arrays) under key (k0, k1); returns 4 uint32 arrays."""
    c = [np.asarray(x, dtype=np.uint64) for x in (c0, c1, c2, c3)]
    k = [np.uint64(k0), np.uint64(k1)]
    lo32 = np.uint64(0xFFFFFFFF)
    for r in range(10):
        if r:
            k = [(k[0] + np.uint64(_PHILOX_W[0])) & lo32, (k[1] + np.uint64(_PHILOX_W[1])) & lo32]
        p0 = c[0] * np.uint64(_PHILOX_M[0])  # < 2^64: exact in uint64
        p1 = c[2] * np.uint64(_PHILOX_M[1])
        hi0, low0, hi1, low1 = p0 >> np.uint64(32), p0 & lo32, p1 >> np.uint64(32), p1 & lo32
        c = [hi1 ^ c[1] ^ k[0], low1, hi0 ^ c[3] ^ k[1], low0]
    return [x.astype(np.uint32) for x in c]


def gumbel_noise(seed: int, position: int, n: int) -> np.ndarray:
    """g[v] = -log(-log(u)) for tokens v < n at `position`: [n] float64."""
    v = np.arange(n, dtype=np.uint64)
    zero = np.zeros(n, np.uint64)
    bits = philox4x32(np.full(n, position & 0xFFFFFFFF, np.uint64), v, zero, zero, seed & 0xFFFFFFFF, seed >> 32)[0]
    u = (bits.astype(np.float64) + 0.5) * (1.0 / 4294967296.0)  # in (0, 1), never 0 or 1
    return -np.log(-np.log(u))


# ---- the reference sampler --------------------------------------------------------------------------------


def order_keys(z: np.ndarray) -> np.ndarray:
    """float32 -> uint32 with the same order (negative floats flipped, positives' sign bit set)."""
    bits = z.astype(F32).view(np.uint32)
    return np.where(bits >> np.uint32(31), ~bits, bits | np.uint32(0x80000000)).astype(np.uint32)


def penalize(logits: np.ndarray, p: SamplingParams, prompt_counts: np.ndarray | None,
             output_counts: np.ndarray | None) -> np.ndarray:  # fmt: skip
    """Step 1 on one row: [V] float32 -> [V] float32."""
    x = logits.astype(F32, copy=True)
    if not p.has_penalties:
        return x
    assert prompt_counts is not None and output_counts is not None
    if p.repetition_penalty != 1:
        r = F32(p.repetition_penalty)
        seen = (prompt_counts + output_counts) > 0
        x = np.where(seen, np.where(x > 0, x / r, x * r), x).astype(F32)
    gen = output_counts > 0
    x = np.where(gen, x - F32(p.frequency_penalty) * output_counts.astype(F32), x).astype(F32)
    return np.where(gen, x - F32(p.presence_penalty), x).astype(F32)


def _threshold(keys: np.ndarray, weights: np.ndarray, target: float) -> int:
    """The largest key t with sum(weights[keys >= t]) >= target (sort-based; the kernel radix-selects)."""
    uniq, inverse = np.unique(keys, return_inverse=True)  # ascending
    group = np.zeros(len(uniq), np.uint64)
    np.add.at(group, inverse, weights.astype(np.uint64))
    desc_cum = np.cumsum(group[::-1]).astype(np.float64)  # mass of keys >= each unique key, descending
    return int(uniq[::-1][int(np.argmax(desc_cum >= target))])


def filter_mask(z: np.ndarray, p: SamplingParams) -> np.ndarray:
    """Step 3 on z [V] float32: the survivors, [V] bool."""
    keys = order_keys(z)
    keep = np.ones(len(z), bool)
    if 0 < p.top_k < len(z):
        keep &= keys >= _threshold(keys, np.ones(len(z), np.uint64), p.top_k)
    e = np.exp((z - z.max()).astype(F32)).astype(F32)  # in [0, 1], 1 at the max
    top_p = F32(p.top_p)  # the kernel gets float32 parameters: use the same values
    if top_p < F32(1.0):
        q = (e * F32(4294967296.0)).astype(np.uint64)  # fixed point, 2^-32 units (exact: power-of-two scale)
        target = float(np.float64(q[keep].sum()) * np.float64(top_p))
        keep &= keys >= _threshold(keys[keep], q[keep], target)
    if p.min_p > 0.0:
        keep &= e >= F32(p.min_p)
    return keep


def sample_row(logits: np.ndarray, p: SamplingParams, position: int, prompt_counts: np.ndarray | None = None,
               output_counts: np.ndarray | None = None) -> int:  # fmt: skip
    """The token one row picks: logits [V] float32 (raw), the slot's counts [V] int32 (needed with penalties)."""
    x = penalize(logits, p, prompt_counts, output_counts)
    if p.temperature == 0:
        return int(np.argmax(x))
    z = (x / F32(p.temperature)).astype(F32)
    score = np.where(filter_mask(z, p), z.astype(np.float64) + gumbel_noise(p.seed, position, len(z)), -np.inf)
    return int(np.argmax(score))


def choice_of(logits: np.ndarray, token: int, n_top: int | None) -> Choice:
    """The raw-logit logprob of `token` and the `n_top` most likely tokens (ties → lowest id)."""
    lmax = float(logits.max())
    lse = lmax + float(np.log(np.sum(np.exp(logits.astype(np.float64) - lmax))))
    order = np.argsort(-logits, kind="stable")[: n_top or 0]
    top = tuple((int(v), float(np.float64(logits[v]) - lse)) for v in order)
    return Choice(int(token), float(np.float64(logits[token]) - lse), top)


def sample_rows(
    logits: np.ndarray,
    params: Sequence[SamplingParams],
    positions: Sequence[int],
    prompt_counts: Sequence[np.ndarray | None],
    output_counts: Sequence[np.ndarray | None],
) -> list[int]:
    """`sample_row` for each row of logits [m, V]."""
    return [sample_row(logits[i], params[i], positions[i], prompt_counts[i], output_counts[i])
            for i in range(len(params))]  # fmt: skip
