"""The CUDA side of seeded sampling (ptx/sampling.cu): device buffers, launch sites, and the engine glue.

The step graph still ends with the greedy argmax into `out_tokens`; a step with any non-greedy row then runs
`count_tokens` (the decode inputs into the slots' generated-token counts) and `sample_rows`, which overwrites
`out_tokens` with each row's pick. Logits stay on the device: only token ids and, when asked, the logprobs
of a few tokens per row come back to the host. Greedy steps never touch this module (today's speed).

Per-slot state: prompt and generated token counts, [max_slots][n_vocab] int32 each, zeroed by `zero_slot`
(called from `alloc_slot`), so a row's penalties see only its own request's tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from qtui.engine.cuda.driver import DeviceBuffer, Kernel, KernelArg, PinnedArray
from qtui.engine.sampling import MAX_LOGPROBS, Choice, SamplingParams

if TYPE_CHECKING:
    from qtui.engine.cuda.engine import CudaEngine
    from qtui.engine.cuda.kernels import KernelTable

P, I32 = np.uint64, np.int32
SAMPLE_THREADS = 1024  # SAMPLE_THREADS in ptx/sampling.cu
MAX_TOP = MAX_LOGPROBS  # MAX_TOP in ptx/sampling.cu
# struct RowParams in ptx/sampling.cu (14 x 32 bits)
ROW_DTYPE = np.dtype(
    [
        ("temperature", "<f4"),
        ("top_p", "<f4"),
        ("min_p", "<f4"),
        ("presence", "<f4"),
        ("frequency", "<f4"),
        ("repetition", "<f4"),
        ("top_k", "<i4"),
        ("slot", "<i4"),
        ("pos", "<i4"),
        ("flags", "<i4"),
        ("seed_lo", "<u4"),
        ("seed_hi", "<u4"),
        ("n_top", "<i4"),
        ("pad", "<i4"),
    ]
)
assert ROW_DTYPE.itemsize == 56


class Sampler:
    """Owns the sampling buffers of one engine; `rows` is the most rows one launch samples."""

    def __init__(self, kt: KernelTable, stream: Any, n_vocab: int, max_slots: int, rows: int, max_context: int) -> None:
        self.kt, self.stream, self.n_vocab, self.rows = kt, stream, n_vocab, rows
        counts_bytes = max_slots * n_vocab * 4
        self.prompt_counts = DeviceBuffer(counts_bytes)  # [slots][n_vocab] int32
        self.output_counts = DeviceBuffer(counts_bytes)  # [slots][n_vocab] int32
        for buf in (self.prompt_counts, self.output_counts):
            buf.zero(stream)
        self.params = DeviceBuffer(rows * ROW_DTYPE.itemsize)  # [rows] RowParams
        self.targets = DeviceBuffer(rows * 4)  # [rows] int32: tokens whose logprob is asked
        self.lp = DeviceBuffer(rows * (1 + MAX_TOP) * 4)  # [rows][1 + MAX_TOP] f32
        self.top_ids = DeviceBuffer(rows * MAX_TOP * 4)  # [rows][MAX_TOP] int32
        self.prompt = DeviceBuffer(max_context * 8)  # int32 [max_context] prompt ids | [max_context] their slot
        self._params_host = PinnedArray((rows,), ROW_DTYPE)
        self._prompt_host = PinnedArray((2, max_context), np.int32)
        self._targets_host = PinnedArray((rows,), np.int32)
        self._lp_host = PinnedArray((rows, 1 + MAX_TOP), np.float32)
        self._ids_host = PinnedArray((rows, MAX_TOP), np.int32)
        self._max_context = max_context
        self._sites: dict[tuple[str | int, ...], Kernel] = {}  # (name, m, *pointers)

    def zero_slot(self, slot: int) -> None:
        nbytes = self.n_vocab * 4
        self.prompt_counts.zero(self.stream, offset=slot * nbytes, nbytes=nbytes)
        self.output_counts.zero(self.stream, offset=slot * nbytes, nbytes=nbytes)

    # ---- launch sites (cached: arguments are fixed pointers) ---------------------------------------------
    def _site(self, name: str, m: int, *ptrs: int) -> Kernel:
        key: tuple[str | int, ...] = (name, m, *ptrs)
        if key not in self._sites:
            bufs = {
                "params": int(self.params),
                "prompt_counts": int(self.prompt_counts),
                "output_counts": int(self.output_counts),
                "lp": int(self.lp),
                "top_ids": int(self.top_ids),
            }
            self._sites[key] = site(self.kt.fn("sampling", name), name, m, self.n_vocab, ptrs, bufs)
        return self._sites[key]

    def stage(self, slots: Sequence[int], positions: Sequence[int], sampling: Sequence[SamplingParams],
              host: np.ndarray | None = None) -> None:  # fmt: skip
        """Copy the rows' parameters to the device (stream-ordered, from pinned memory: `host`, [rows] ROW_DTYPE,
        where the copy may run after this returns and the next stage comes, as for a step queued ahead)."""
        rows = self._params_host.array if host is None else host
        for r, (slot, pos, p) in enumerate(zip(slots, positions, sampling)):
            rows[r] = (p.temperature, p.top_p, p.min_p, p.presence_penalty, p.frequency_penalty,
                       p.repetition_penalty, p.top_k, slot, pos, int(p.has_penalties), p.seed & 0xFFFFFFFF,
                       p.seed >> 32, p.logprobs or 0, 0)  # fmt: skip
        self.params.upload(rows[: len(slots)], self.stream)

    def count(self, m: int, tokens: int, slots: int, counts: DeviceBuffer) -> None:
        """counts[slots[i]][tokens[i]] += 1 for i < m (device pointers to int32 arrays)."""
        self._site("count_tokens", m, tokens, slots, int(counts)).launch(self.stream)

    def count_prompt(self, slot: int, tokens: Sequence[int]) -> None:
        n = len(tokens)
        assert n <= self._max_context
        host = self._prompt_host.array
        host[0, :n], host[1, :n] = tokens, slot
        self.prompt.upload(host[0, :n], self.stream)
        self.prompt.upload(host[1, :n], self.stream, offset=4 * self._max_context)
        self.count(n, int(self.prompt), int(self.prompt) + 4 * self._max_context, self.prompt_counts)

    def sample(self, m: int, logits: int, out_tokens: int) -> None:
        """out_tokens[r] = row r's pick from logits [m][n_vocab] (parameters staged first)."""
        self._site("sample_rows", m, logits, out_tokens).launch(self.stream)

    def logprobs(self, m: int, logits: int, targets: int) -> None:
        self._site("logprob_rows", m, logits, targets).launch(self.stream)

    def fetch_choices(self, m: int, tokens: Sequence[int], sampling: Sequence[SamplingParams]) -> list[Choice]:
        """Download the logprob results of `logprobs` (after a stream sync by the caller's download)."""
        from qtui.engine.cuda import driver as drv

        self.lp.download(self._lp_host.array[:m], self.stream)
        self.top_ids.download(self._ids_host.array[:m], self.stream)
        drv.sync(self.stream)
        out = []
        for r in range(m):
            n_top = sampling[r].logprobs or 0
            lp, ids = self._lp_host.array[r], self._ids_host.array[r]
            out.append(
                Choice(int(tokens[r]), float(lp[0]), tuple((int(ids[k]), float(lp[1 + k])) for k in range(n_top)))
            )
        return out

    def free(self) -> None:
        for buf in (self.prompt_counts, self.output_counts, self.params, self.targets, self.lp, self.top_ids,
                    self.prompt):  # fmt: skip
            buf.free()
        for pin in (self._params_host, self._prompt_host, self._targets_host, self._lp_host, self._ids_host):
            pin.free()


def site(fn: Any, name: str, m: int, n: int, ptrs: tuple[int, ...], bufs: dict[str, int]) -> Kernel:
    """A launch site of ptx/sampling.cu (plain launches: these kernels are not PDL-aware, and they read the
    logits the step just wrote). `ptrs` are the per-site pointers, `bufs` the sampler's own buffers."""
    if name == "sample_rows":  # (logits, params, prompt_counts, output_counts, n, tokens)
        args: list[KernelArg] = [(ptrs[0], P), (bufs["params"], P), (bufs["prompt_counts"], P),
                                 (bufs["output_counts"], P), (n, I32), (ptrs[1], P)]  # fmt: skip
        return Kernel(fn, name, (m, 1, 1), SAMPLE_THREADS, args, pdl=False)
    if name == "logprob_rows":  # (logits, params, targets, n, lp, top_ids)
        args = [(ptrs[0], P), (bufs["params"], P), (ptrs[1], P), (n, I32), (bufs["lp"], P), (bufs["top_ids"], P)]
        return Kernel(fn, name, (m, 1, 1), SAMPLE_THREADS, args, pdl=False)
    assert name == "count_tokens"  # (tokens, slots, m, n, counts)
    args = [(ptrs[0], P), (ptrs[1], P), (m, I32), (n, I32), (ptrs[2], P)]
    return Kernel(fn, name, ((m + 255) // 256, 1, 1), 256, args, pdl=False)


# ---- engine glue: what CudaEngine's methods call (kept here so engine.py changes stay a few lines) --------


def after_decode_step(eng: CudaEngine, slots: list[int], sampling: Sequence[SamplingParams],
                      host: np.ndarray | None = None) -> None:  # fmt: skip
    """After a decode step's graph (before the slots' lengths move on): count the inputs, then sample every row into
    out_tokens. host: the pinned parameter rows to stage from (default: the sampler's own)."""
    s, m = eng.sampler, len(slots)
    positions = [int(eng._length[slot]) + 1 for slot in slots]  # the index of the token being sampled
    s.stage(slots, positions, sampling, host)
    s.count(m, eng.acts.tokens(), eng.acts.slots(), s.output_counts)
    s.sample(m, eng.acts["logits"], int(eng.acts.out_tokens))


def after_prefill(eng: CudaEngine, slot: int, ids: list[int], last: int, sampling: SamplingParams) -> None:
    """After the last prefill chunk: count the prompt tokens, then sample logits row `last` (the prompt's last
    token) into out_tokens[last]."""
    s = eng.sampler
    s.stage([slot], [int(eng._length[slot])], [sampling])
    s.count_prompt(slot, ids)
    row = eng.acts["logits"] + 4 * last * eng.config.n_vocab
    s.sample(1, row, int(eng.acts.out_tokens) + 4 * last)


def decode_choices(eng: CudaEngine, slots: Sequence[int], tokens: Sequence[int],
                   sampling: Sequence[SamplingParams]) -> list[Choice]:  # fmt: skip
    out: list[Choice] = []
    step = eng.max_rows
    for i in range(0, len(slots), step):  # as decode: independent steps of at most max_rows rows
        part = list(sampling[i : i + step])
        picked = eng.decode(slots[i : i + step], tokens[i : i + step], part)
        eng.sampler.stage([int(s) for s in slots[i : i + step]], [0] * len(part), part)
        eng.sampler.logprobs(len(part), eng.acts["logits"], int(eng.acts.out_tokens))
        out += eng.sampler.fetch_choices(len(part), picked, part)
    return out


def prefill_choices(eng: CudaEngine, slot: int, tokens: Sequence[int], sampling: SamplingParams,
                    targets: Sequence[int | None] | None) -> list[Choice]:  # fmt: skip
    """Logprobs of the last row (targets None: the prompt's last token, logits row 0), or of every row (echo):
    then the prompt is fed in pieces of at most max_rows tokens, each with the LM head on all its rows, which
    is bitwise the same as one call (chunked prefill)."""
    s = eng.sampler
    ids = [int(t) for t in tokens]
    if targets is None:
        token = eng.prefill(slot, ids, sampling)
        s.stage([slot], [0], [sampling])
        s.logprobs(1, eng.acts["logits"], int(eng.acts.out_tokens))
        return s.fetch_choices(1, [token], [sampling])
    out: list[Choice] = []
    size = min(eng.prefill_chunk, eng.max_rows)
    for a in range(0, len(ids), size):
        piece, wanted = ids[a : a + size], list(targets[a : a + size])
        picked = eng._prefill(slot, piece, False, sampling, head="all")[0]  # its tokens count for the penalties
        if wanted[-1] is None:
            wanted[-1] = picked
        s._targets_host.array[: len(piece)] = wanted
        s.targets.upload(s._targets_host.array[: len(piece)], s.stream)
        s.stage([slot] * len(piece), [0] * len(piece), [sampling] * len(piece))
        s.logprobs(len(piece), eng.acts["logits"], int(s.targets))
        out += s.fetch_choices(len(piece), wanted, [sampling] * len(piece))  # type: ignore[arg-type]  # None filled
    return out
