"""`CudaEngine`: the BatchEngine + LogitsEngine over PTX kernels launched through cuda.bindings.driver.

Weights live on the device as raw GGUF blocks; per-slot state (KV cache, conv state, float32 delta-rule S)
lives in pools indexed by slot id and zeroed when a slot is handed out; activations are preallocated for
max(max_rows, PREFILL_CHUNK) rows. A step is one fixed list of launches (step.py), replayed as one CUDA graph
per (m, head, run) (graphs.py). A decode step has m <= max_rows rows of m slots (run = 1). Prefill feeds the
prompt in chunks of PREFILL_CHUNK tokens, one chunk per step: the m rows of a chunk are one slot at consecutive
positions, a single run of m rows that the recurrent kernels walk in order with the per-token arithmetic; only
the last chunk runs the LM head, on its last row. So a chunked prefill is bitwise the same prompt fed one token
per step, wherever the chunk boundaries fall (GEMV columns are m-invariant; attention reads each row's own
positions 0..pos after the chunk's K/V are stored): DESIGN invariants 1 and 7.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from qtui.engine.cuda import driver as drv
from qtui.engine.cuda import sampler as sampling_glue
from qtui.engine.cuda.ahead import DecodeRing, StepTimes, Submitted
from qtui.engine.cuda.graphs import GraphCache
from qtui.engine.cuda.kernels import ATTN_PIECE, GEMM_TOKENS, MAX_HEAD_DIM, KernelTable
from qtui.engine.cuda.prefill_runs import RunStep, plan_runs
from qtui.engine.cuda.step import F32_BYTES, Activations, Head, Pools, build_step
from qtui.engine.cuda.weights import DeviceWeights
from qtui.engine.sampling import Choice, SamplingParams
from qtui.engine.slot_book import SlotBook
from qtui.errors import EngineUnavailable
from qtui.model.config import Qwen35Config

# Rows of one decode step: two 64-token GEMM passes. A step's GEMM units and delta-rule states scale with its rows, its
# folds, norms and launch boundaries do not, so 128 rows ran the 4b at 10,697 tok/s against 9,721 for 64 (H100,
# session 27; 96 rows, a half-empty second pass: 9,069, still above 64 + 32 in two calls). More slots than this
# decode in several calls a step (the scheduler).
MAX_ROWS = 128
# Prompt tokens a mixed step carries beside decoding slots: one 64-token pass, which costs about one 64-row decode step,
# so such a step costs ~2x a plain one (a 256-token chunk: 4.2x; issue 11's bound).
MIXED_PREFILL_ROWS = GEMM_TOKENS
PREFILL_CHUNK = 256  # prompt tokens per prefill step (4 GEMV passes)
MULTI_RUN_PLANS = 64  # launch lists of prefill_batch's step shapes kept (~400 sites each)
# Greedy decode steps queued before the host reads the previous one (ahead.py; the bench ladder and the scheduler
# use decode_submit / decode_collect where `decode_ahead`): QTUI_DECODE_AHEAD=0 for A/B runs.
DECODE_AHEAD = os.environ.get("QTUI_DECODE_AHEAD", "1") != "0"
# The scheduler sends a step's prompt pieces in one prefill_batch call where `batch_prefill` (its GPU tests and the
# parity ladder through qtui serve passed on an H100, session 24): QTUI_BATCH_PREFILL=0 gives one call a piece.
BATCH_PREFILL = os.environ.get("QTUI_BATCH_PREFILL", "1") != "0"


def check_supported(cfg: Qwen35Config) -> None:
    """The shapes the kernels are written for; raises EngineUnavailable naming the one that does not fit."""
    if cfg.d_k != cfg.d_v or cfg.d_k not in (64, 128):
        raise EngineUnavailable(f"CUDA delta-rule kernel needs d_k == d_v in (64, 128), got {cfg.d_k}, {cfg.d_v}")
    if cfg.head_dim % 32 or cfg.head_dim > MAX_HEAD_DIM:
        raise EngineUnavailable(
            f"CUDA attention needs head_dim a multiple of 32 up to {MAX_HEAD_DIM}, got {cfg.head_dim}"
        )
    if cfg.ssm_d_conv > 8:
        raise EngineUnavailable(f"CUDA conv kernel supports d_conv <= 8, got {cfg.ssm_d_conv}")


class CudaEngine(SlotBook):
    name = "cuda"

    def __init__(
        self,
        model: Any,
        max_slots: int = MAX_ROWS,
        max_context: int = 4096,
        use_graphs: bool = True,
        progress: bool = True,
        prefill_chunk: int = PREFILL_CHUNK,
    ) -> None:
        if not drv.cuda_available():
            raise EngineUnavailable("no CUDA driver or device here (cuInit failed)")
        assert max_slots >= 1 and max_context >= 1 and 1 <= prefill_chunk <= PREFILL_CHUNK
        drv.primary_context()
        self.config = cfg = model.config
        check_supported(cfg)
        self._init_slots(max_slots, max_context, cfg.n_vocab)
        self.max_rows = min(max_slots, MAX_ROWS)  # rows one decode step holds (BatchEngine.max_rows)
        self.use_graphs = use_graphs
        self.stream = drv.new_stream()
        self.kernels = KernelTable()
        self.weights = DeviceWeights(model, self.kernels, self.stream, progress)
        self.pools = self._alloc_pools(cfg)
        self.prefill_chunk = prefill_chunk  # tokens per prefill step (any size gives the same bits)
        rows = max(self.max_rows, prefill_chunk)  # full prefill chunks even with fewer slots than a chunk
        self.acts = Activations(cfg, rows, self.max_rows, (max_context + ATTN_PIECE - 1) // ATTN_PIECE, self.stream)
        n_images = (max_context + prefill_chunk - 1) // prefill_chunk
        self._staging = drv.PinnedArray((n_images, 3, self.acts.rows), np.int32)  # a step image per chunk
        self._out_host = drv.PinnedArray((self.max_rows,), np.int32)
        self._runs_out_host = drv.PinnedArray((n_images, self.max_rows), np.int32)  # prefill_batch: a row a step
        self._logits_host = drv.PinnedArray((self.max_rows, cfg.n_vocab), np.float32)
        self.graphs = GraphCache(self.stream)
        self.sampler = sampling_glue.Sampler(
            self.kernels, self.stream, cfg.n_vocab, max_slots, self.max_rows, max_context
        )
        self._plans: dict[tuple[int, Head, int], list[drv.Site]] = {}
        self._multi_run_plans: dict[tuple[int, Head, int], list[drv.Site]] = {}  # oldest use first
        # decode steps queued ahead of the host (ahead.py)
        self.ring = DecodeRing(self.max_rows, self.acts.rows, sampling_glue.ROW_DTYPE)
        self.step_times = StepTimes()  # decode steps queued ahead, their GPU ms by m (decode_ms)
        self.decode_ahead = DECODE_AHEAD
        self.batch_prefill = BATCH_PREFILL
        self.last_host_us = 0.0  # host time of the last decode call up to the sync (us)
        self.last_wall_us = 0.0  # wall time of the last decode call (us)
        self._device_name = drv.device_name()

    def _alloc_pools(self, cfg: Qwen35Config) -> Pools:
        n_gdn, n_attn = len(cfg.recurrent_layers), len(cfg.attention_layers)
        conv_layer = (cfg.ssm_d_conv - 1) * cfg.conv_dim
        s_layer = cfg.ssm_dt_rank * cfg.d_k * cfg.d_v
        kv_layer = self.max_context * cfg.n_head_kv * cfg.head_dim
        S = self.max_slots
        return Pools(
            conv=drv.DeviceBuffer(S * max(n_gdn, 1) * conv_layer * F32_BYTES),
            S=drv.DeviceBuffer(S * max(n_gdn, 1) * s_layer * F32_BYTES),
            k=drv.DeviceBuffer(S * max(n_attn, 1) * kv_layer * F32_BYTES),
            v=drv.DeviceBuffer(S * max(n_attn, 1) * kv_layer * F32_BYTES),
            conv_layer=conv_layer,
            s_layer=s_layer,
            kv_layer=kv_layer,
            n_gdn=n_gdn,
            n_attn=n_attn,
        )

    # --- slots ---

    def alloc_slot(self) -> int:
        drv.primary_context()
        slot = self._take_free_slot()
        p = self.pools
        for buf, stride in ((p.conv, p.conv_stride), (p.S, p.s_stride), (p.k, p.kv_stride), (p.v, p.kv_stride)):
            buf.zero(self.stream, offset=slot * stride * F32_BYTES, nbytes=stride * F32_BYTES)
        self.sampler.zero_slot(slot)  # the slot's token counts (sampling penalties)
        drv.sync(self.stream)
        self._length[slot] = 0
        self.ring.forget(slot)
        return slot

    # --- steps ---

    def _plan(self, m: int, head: Head, run: int = 1) -> list[drv.Site]:
        """The step's launch list; run = rows per slot run (1: decode, m: a prefill chunk of one slot, else
        several slots' runs: the last MULTI_RUN_PLANS of those are kept, see _run_step)."""
        key = (m, head, run)
        plans = self._plans if run in (1, m) else self._multi_run_plans
        if key in plans:
            plans[key] = plans.pop(key)  # (the newest last)
        else:
            plans[key] = build_step(
                self.kernels, self.config, self.weights, self.acts, self.pools, m, head, self.max_context, run
            )
            if len(self._multi_run_plans) > MULTI_RUN_PLANS:
                del self._multi_run_plans[next(iter(self._multi_run_plans))]
        return plans[key]

    def _launch_step(self, m: int, head: Head, run: int, image: int) -> None:
        """Copy step-buffer image `image` of the pinned staging to the device, then run the step (graph or
        eager). All stream-ordered: nothing waits on the host here."""
        self.acts.step.upload(self._staging.array[image], self.stream)
        self._run_step(m, head, run)

    def _run_step(self, m: int, head: Head, run: int) -> None:
        """The step's kernels on the step buffer as it stands (graph or eager). Steps of several slot runs
        (prefill_batch) launch eagerly: their shapes are many (runs x run lengths, ~2000 at a 256-row chunk) and a
        graph each would hold memory for shapes seen once, while a prefill step's GPU time covers its launches."""
        key = (m, head, run)
        if self.use_graphs and run in (1, m):
            if key not in self.graphs:
                self.graphs.capture(key, self._plan(m, head, run))
            self.graphs.replay(key)
        else:
            for k in self._plan(m, head, run):
                k.launch(self.stream)

    def _stage(self, image: int, slots: Sequence[int], tokens: Sequence[int], pos: Sequence[int] | None = None) -> None:
        """Fill step-buffer image `image` of the pinned staging (stage_image)."""
        self._stage_image(self._staging.array[image], slots, tokens, pos)

    def _stage_image(self, st: np.ndarray, slots: Sequence[int], tokens: Sequence[int],
                     pos: Sequence[int] | None = None) -> None:  # fmt: skip
        """Fill a step-buffer image st ([3, rows] int32: tokens | slots | positions): row r is tokens[r] of slots[r]
        at pos[r] (default: the slot's length). Rows past m stay 0: padded GEMV rows read token 0, and no per-row
        kernel runs them."""
        st[:] = 0
        m = len(slots)
        st[0, :m] = tokens
        st[1, :m] = slots
        st[2, :m] = self._length[list(slots)] if pos is None else pos

    def _run_decode(
        self, slots: list[int], ids: list[int], want_logits: bool, sampling: Sequence[SamplingParams] | None = None
    ) -> tuple[list[int], np.ndarray | None]:
        t0 = time.perf_counter()
        m = len(slots)
        for slot in slots:  # out_tokens is not copied to the ring here: a later step cannot chain from this one
            self.ring.forget(slot)
        self._stage(0, slots, ids)
        self._launch_step(m, "all", 1, 0)
        if sampling is not None:  # non-greedy rows: overwrite the argmax in out_tokens (sampler.py)
            sampling_glue.after_decode_step(self, slots, sampling)
        self.acts.out_tokens.download(self._out_host.array[:m], self.stream)
        if want_logits:
            self.acts.bufs["logits"].download(self._logits_host.array[:m], self.stream)
        t1 = time.perf_counter()
        drv.sync(self.stream)
        self._length[slots] += 1
        self.last_host_us, self.last_wall_us = (t1 - t0) * 1e6, (time.perf_counter() - t0) * 1e6
        logits = self._logits_host.array[:m].copy() if want_logits else None
        return [int(t) for t in self._out_host.array[:m]], logits

    def _decode(
        self,
        slots: Sequence[int],
        tokens: Sequence[int],
        want_logits: bool,
        sampling: Sequence[SamplingParams] | None = None,
    ) -> tuple[list[int], list[np.ndarray]]:
        """Tokens of the m rows, and (want_logits) their logits in parts of at most max_rows rows."""
        drv.primary_context()
        slots, ids = self._check_decode(slots, tokens)
        out: list[int] = []
        logits: list[np.ndarray] = []
        if sampling is not None and all(p.is_greedy for p in sampling):
            sampling = None  # plain argmax: the greedy path
        step = self.max_rows
        for i in range(0, len(slots), step):  # more slots than max_rows: independent steps
            part = None if sampling is None else sampling[i : i + step]
            toks, lg = self._run_decode(slots[i : i + step], ids[i : i + step], want_logits, part)
            out += toks
            if lg is not None:
                logits.append(lg)
        return out, logits

    def decode_submit(self, slots: Sequence[int], tokens: Sequence[int | None],
                      sampling: Sequence[SamplingParams] | None = None) -> Submitted:  # fmt: skip
        """Queue one decode step of m <= max_rows distinct slots and return at once; `decode_collect` reads its
        tokens. tokens[i] None: slot i's input is the token its previous decode step (submitted here, one of the
        last RING) produced, copied on the device (ahead.py). The tokens are bitwise those of `decode`, sampled rows
        (no logprobs) included."""
        drv.primary_context()
        t0 = time.perf_counter()
        ring, m = self.ring, len(slots)
        assert m <= self.max_rows, f"decode_submit takes at most {self.max_rows} rows"
        slots, ids = self._check_decode(slots, [0 if t is None else t for t in tokens])  # None: a placeholder 0
        runs = ring.chain_runs(slots, list(tokens))
        entry = ring.take_entry()
        self._stage_image(ring.staging.array[entry], slots, ids)
        timed = not self.use_graphs or (m, "all", 1) in self.graphs  # a capture on the way idles the stream
        ring.starts[entry].record(self.stream)
        self.acts.step.upload(ring.staging.array[entry], self.stream)
        for row, addr, n in runs:  # the chained rows' inputs, over the placeholders
            drv.copy_on_device(self.acts.tokens() + 4 * row, addr, 4 * n, self.stream)
        self._run_step(m, "all", 1)
        if sampling is not None and not all(p.is_greedy for p in sampling):
            sampling_glue.after_decode_step(self, slots, sampling, ring.params.array[entry])
        drv.copy_on_device(int(ring.chain) + 4 * entry * ring.rows, int(self.acts.out_tokens), 4 * m, self.stream)
        self.acts.out_tokens.download(ring.out.array[entry, :m], self.stream)
        ring.events[entry].record(self.stream)
        self._length[slots] += 1
        self.last_host_us = (time.perf_counter() - t0) * 1e6
        return ring.record(slots, entry, timed)

    def decode_collect(self, submitted: Submitted) -> list[int]:
        """Wait for a submitted step and return its m tokens (once per step)."""
        assert not submitted.collected, "decode step collected twice"
        tokens = self.ring.collect(submitted)
        if submitted.timed:
            self.step_times.observe(len(tokens), self.ring.gpu_ms(submitted))
        return tokens

    def decode_ms(self, m: int) -> float | None:
        """The GPU milliseconds of an m-row decode step queued ahead, averaged over the last ones timed (None: no
        such step timed yet); the scheduler's choice of rows a step (step_rows) reads it."""
        return self.step_times.get(m)

    def decode(self, slots: Sequence[int], tokens: Sequence[int],
               sampling: Sequence[SamplingParams] | None = None) -> list[int]:  # fmt: skip
        return self._decode(slots, tokens, False, sampling)[0]

    def decode_choices(self, slots: Sequence[int], tokens: Sequence[int],
                       sampling: Sequence[SamplingParams]) -> list[Choice]:  # fmt: skip
        return sampling_glue.decode_choices(self, slots, tokens, sampling)

    def prefill_choices(self, slot: int, tokens: Sequence[int], sampling: SamplingParams,
                        targets: Sequence[int | None] | None = None) -> list[Choice]:  # fmt: skip
        return sampling_glue.prefill_choices(self, slot, tokens, sampling, targets)

    def decode_logits(self, slots: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
        return np.concatenate(self._decode(slots, tokens, True)[1], axis=0)  # [m, n_vocab] f32

    def _prefill(
        self,
        slot: int,
        tokens: Sequence[int],
        want_logits: bool,
        sampling: SamplingParams | None = None,
        head: Head = "last",
    ) -> tuple[int, np.ndarray | None]:
        """Feed tokens in prefill chunks; the last chunk runs the LM head on its last row (head "last": logits
        and out_tokens row 0) or on all its rows (head "all", chunks of at most max_rows: row r = token r)."""
        drv.primary_context()
        ids = self._check_prefill(slot, tokens)
        self.ring.forget(slot)  # its next input is the prompt's, not its last decode step's output
        start = int(self._length[slot])
        size = self.prefill_chunk if head == "last" else min(self.prefill_chunk, self.max_rows)
        chunks = [ids[i : i + size] for i in range(0, len(ids), size)]
        for c, chunk in enumerate(chunks):  # every image staged first: the queued copies read them later
            first = start + c * size
            self._stage(c, [slot] * len(chunk), chunk, range(first, first + len(chunk)))
        self._length[slot] += len(ids)
        for c, chunk in enumerate(chunks):  # one run of len(chunk) rows; the LM head on the final chunk
            self._launch_step(len(chunk), head if c == len(chunks) - 1 else "none", len(chunk), c)
        last = 0 if head == "last" else len(chunks[-1]) - 1  # the logits row of the prompt's last token
        if sampling is not None and not sampling.is_greedy:  # overwrite the argmax in out_tokens[last]
            sampling_glue.after_prefill(self, slot, ids, last, sampling)
        self.acts.out_tokens.download(self._out_host.array[:1], self.stream, offset=4 * last)
        if want_logits:
            n_vocab = self.config.n_vocab
            self.acts.bufs["logits"].download(self._logits_host.array[:1], self.stream, offset=4 * last * n_vocab)
        drv.sync(self.stream)
        return int(self._out_host.array[0]), (self._logits_host.array[0].copy() if want_logits else None)

    def prefill(self, slot: int, tokens: Sequence[int], sampling: SamplingParams | None = None) -> int:
        return self._prefill(slot, tokens, False, sampling)[0]

    def prefill_batch(self, pieces: Sequence[tuple[int, Sequence[int]]],
                      sampling: Sequence[SamplingParams | None] | None = None) -> list[int]:  # fmt: skip
        return self._prefill_batch(pieces, sampling, False)[0]

    def prefill_batch_logits(self, pieces: Sequence[tuple[int, Sequence[int]]]) -> np.ndarray:
        """As prefill_batch, returning each piece's logits after its last token: [pieces, n_vocab] float32."""
        logits = self._prefill_batch(pieces, None, True)[1]
        assert logits is not None
        return logits

    def _prefill_batch(
        self,
        pieces: Sequence[tuple[int, Sequence[int]]],
        sampling: Sequence[SamplingParams | None] | None,
        want_logits: bool,
    ) -> tuple[list[int], np.ndarray | None]:
        """Several slots' prompt pieces in shared steps (prefill_runs.py): each piece's next token (and logits) are
        bitwise what `prefill` gives it alone, since every kernel computes a row from its own slot's run."""
        drv.primary_context()
        slots = [int(s) for s, _ in pieces]
        assert len(set(slots)) == len(slots), f"prefill_batch slots must be distinct: {slots}"
        ids = [self._check_prefill(s, t) for s, t in pieces]  # every piece checked before any state moves
        picks = [None if p is None or p.is_greedy else p for p in (sampling or [None] * len(ids))]
        starts = [int(self._length[s]) for s in slots]
        for slot, piece in zip(slots, ids):
            self.ring.forget(slot)  # its next input is the prompt's, not its last decode step's output
            self._length[slot] += len(piece)
        steps = plan_runs([len(p) for p in ids], self.prefill_chunk, self.max_rows)
        tokens = [0] * len(ids)
        logits = np.zeros((len(ids), self.config.n_vocab), np.float32) if want_logits else None
        images = self._staging.array.shape[0]
        for g in range(0, len(steps), images):  # a group's images all staged first: its queued copies read them
            group = steps[g : g + images]
            for image, st in enumerate(group):
                rows = [(slots[i], ids[i][at + r], starts[i] + at + r) for i, at in st.parts for r in range(st.run)]
                row_slots, row_tokens, row_pos = zip(*rows)
                self._stage(image, row_slots, row_tokens, row_pos)
            for image, st in enumerate(group):
                self._run_runs(image, st, slots, ids, picks, logits)
            drv.sync(self.stream)
            for image, st in enumerate(group):
                for r, i in self._finals(st, ids):
                    tokens[i] = int(self._runs_out_host.array[image, r])
        return tokens, logits

    @staticmethod
    def _finals(st: RunStep, ids: list[list[int]]) -> list[tuple[int, int]]:
        """(run, piece) of the runs of `st` that end their piece."""
        return [(r, i) for r, (i, at) in enumerate(st.parts) if at + st.run == len(ids[i])]

    def _run_runs(self, image: int, st: RunStep, slots: list[int], ids: list[list[int]],
                  picks: list[SamplingParams | None], logits: np.ndarray | None) -> None:  # fmt: skip
        """One step of prefill_batch on staged image `image`: the LM head on its runs' last rows where a run ends
        its piece (run 1: every row, as a decode step's graph), each such run's token into row `image` of the
        pinned output."""
        finals = self._finals(st, ids)
        self._launch_step(st.m, ("all" if st.run == 1 else "last") if finals else "none", st.run, image)
        if not finals:
            return
        for r, i in finals:
            if (pick := picks[i]) is not None:  # sampled: overwrite the argmax in out_tokens[r]
                sampling_glue.after_prefill(self, slots[i], ids[i], r, pick)
                drv.sync(self.stream)  # (the sampler's pinned staging is rewritten by the next one)
        self.acts.out_tokens.download(self._runs_out_host.array[image, : len(st.parts)], self.stream)
        if logits is not None:
            n_vocab = self.config.n_vocab
            for r, i in finals:
                self.acts.bufs["logits"].download(self._logits_host.array[:1], self.stream, offset=4 * r * n_vocab)
                drv.sync(self.stream)
                logits[i] = self._logits_host.array[0]

    def prefill_logits(self, slot: int, tokens: Sequence[int]) -> np.ndarray:
        logits = self._prefill(slot, tokens, True)[1]
        assert logits is not None
        return logits

    def describe(self) -> dict[str, Any]:
        return {
            "engine": "cuda",
            "device": self._device_name,
            "max_slots": self.max_slots,
            "max_context": self.max_context,
            "max_rows": self.max_rows,
            "graphs": self.use_graphs,
            "weight_bytes": self.weights.nbytes,
            "attention_piece": ATTN_PIECE,
            "prefill_chunk": self.prefill_chunk,
            "batch_prefill": self.batch_prefill,  # a step's prompt pieces in one prefill_batch call
            "mixed_prefill_chunk": min(self.prefill_chunk, MIXED_PREFILL_ROWS),  # prompt tokens beside decoding slots
            "decode_pass_rows": GEMM_TOKENS,  # ... per this many decoding rows (a 128-row step is two passes)
        }

    def close(self) -> None:
        """Free every device and pinned allocation (Python objects own no CUDA resources)."""
        drv.primary_context()
        drv.sync(self.stream)
        self.graphs.clear()
        self.weights.free()
        self.acts.free()
        for buf in (self.pools.conv, self.pools.S, self.pools.k, self.pools.v):
            buf.free()
        for pin in (self._staging, self._out_host, self._runs_out_host, self._logits_host):
            pin.free()
        self.ring.free()
        self.sampler.free()
