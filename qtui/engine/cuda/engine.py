"""`CudaEngine`: the BatchEngine + LogitsEngine over PTX kernels launched through cuda.bindings.driver.

Weights live on the device as raw GGUF blocks; per-slot state (KV cache, conv state, float32 delta-rule S)
lives in pools indexed by slot id and zeroed when a slot is handed out; activations are preallocated for
max_batch rows. A decode step for m slots is one fixed list of launches (step.py), replayed as one CUDA graph
per (m, head) (graphs.py). Prefill feeds the prompt one token per step through the same m=1 step.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from qtui.engine.cuda import driver as drv
from qtui.engine.cuda.graphs import GraphCache
from qtui.engine.cuda.kernels import ATTN_PIECE, MAX_GEMV_ROWS, KernelTable
from qtui.engine.cuda.step import F32_BYTES, Activations, Pools, build_step
from qtui.engine.cuda.weights import DeviceWeights
from qtui.engine.slot_book import SlotBook
from qtui.errors import BadRequest, EngineUnavailable
from qtui.model.config import Qwen35Config


def check_supported(cfg: Qwen35Config) -> None:
    """The shapes the kernels are written for; raises EngineUnavailable naming the one that does not fit."""
    if cfg.d_k != cfg.d_v or cfg.d_k not in (64, 128):
        raise EngineUnavailable(f"CUDA delta-rule kernel needs d_k == d_v in (64, 128), got {cfg.d_k}, {cfg.d_v}")
    if cfg.head_dim % 32 or cfg.head_dim > 256:
        raise EngineUnavailable(f"CUDA attention needs head_dim a multiple of 32 up to 256, got {cfg.head_dim}")
    if cfg.ssm_d_conv > 8:
        raise EngineUnavailable(f"CUDA conv kernel supports d_conv <= 8, got {cfg.ssm_d_conv}")


class CudaEngine(SlotBook):
    name = "cuda"

    def __init__(self, model: Any, max_slots: int = 16, max_context: int = 4096, use_graphs: bool = True,
                 progress: bool = True) -> None:
        if not drv.cuda_available():
            raise EngineUnavailable("no CUDA driver or device here (cuInit failed)")
        assert max_slots >= 1 and max_context >= 1
        drv.primary_context()
        self.config = cfg = model.config
        check_supported(cfg)
        self._init_slots(max_slots, max_context, cfg.n_vocab)
        self.max_batch = min(max_slots, MAX_GEMV_ROWS)
        self.use_graphs = use_graphs
        self.stream = drv.new_stream()
        self.kernels = KernelTable()
        self.weights = DeviceWeights(model, self.stream, progress)
        self.pools = self._alloc_pools(cfg)
        self.acts = Activations(cfg, self.max_batch, (max_context + ATTN_PIECE - 1) // ATTN_PIECE, self.stream)
        B = self.max_batch
        self._staging = drv.PinnedArray((max_context, 3, B), np.int32)  # one step-buffer image per prompt token
        self._out_host = drv.PinnedArray((B,), np.int32)
        self._logits_host = drv.PinnedArray((B, cfg.n_vocab), np.float32)
        self.graphs = GraphCache(self.stream)
        self._plans: dict[tuple[int, bool], list[drv.Kernel]] = {}
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
            conv_layer=conv_layer, s_layer=s_layer, kv_layer=kv_layer, n_gdn=n_gdn, n_attn=n_attn,
        )

    # --- slots ---

    def alloc_slot(self) -> int:
        drv.primary_context()
        slot = self._take_free_slot()
        p = self.pools
        for buf, stride in ((p.conv, p.conv_stride), (p.S, p.s_stride), (p.k, p.kv_stride), (p.v, p.kv_stride)):
            buf.zero(self.stream, offset=slot * stride * F32_BYTES, nbytes=stride * F32_BYTES)
        drv.sync(self.stream)
        self._length[slot] = 0
        return slot

    # --- steps ---

    def _plan(self, m: int, head: bool) -> list[drv.Kernel]:
        key = (m, head)
        if key not in self._plans:
            self._plans[key] = build_step(self.kernels, self.config, self.weights, self.acts, self.pools, m, head,
                                          self.max_context)
        return self._plans[key]

    def _launch_step(self, m: int, head: bool, row: int) -> None:
        """Copy step-buffer image `row` of the pinned staging to the device, then run the step (graph or eager).
        All stream-ordered: nothing waits on the host here."""
        self.acts.step.upload(self._staging.array[row], self.stream)
        key = (m, head)
        if self.use_graphs:
            if key not in self.graphs:
                self.graphs.capture(key, self._plan(m, head))
            self.graphs.replay(key)
        else:
            for k in self._plan(m, head):
                k.launch(self.stream)

    def _stage(self, row: int, slots: Sequence[int], tokens: Sequence[int]) -> None:
        st = self._staging.array[row]  # [3, B] int32: tokens | slots | positions
        st[:] = 0
        m = len(slots)
        st[0, :m] = tokens
        st[1, :m] = slots
        st[2, :m] = self._length[list(slots)]

    def _run_decode(self, slots: list[int], ids: list[int], want_logits: bool) -> tuple[list[int], np.ndarray | None]:
        t0 = time.perf_counter()
        m = len(slots)
        self._stage(0, slots, ids)
        self._launch_step(m, True, 0)
        self.acts.out_tokens.download(self._out_host.array[:m], self.stream)
        if want_logits:
            self.acts.bufs["logits"].download(self._logits_host.array[:m], self.stream)
        t1 = time.perf_counter()
        drv.sync(self.stream)
        self._length[slots] += 1
        self.last_host_us, self.last_wall_us = (t1 - t0) * 1e6, (time.perf_counter() - t0) * 1e6
        logits = self._logits_host.array[:m].copy() if want_logits else None
        return [int(t) for t in self._out_host.array[:m]], logits

    def _decode(self, slots: Sequence[int], tokens: Sequence[int], want_logits: bool) -> tuple[list[int], list]:
        drv.primary_context()
        slots = [int(s) for s in slots]
        ids = self._check_tokens(tokens)
        assert len(slots) == len(ids) >= 1, "decode needs one token per slot"
        assert len(set(slots)) == len(slots), f"decode slots must be distinct: {slots}"
        for slot in slots:
            self._check_slot(slot)
            self._check_room(slot, 1)
        out, logits = [], []
        for i in range(0, len(slots), self.max_batch):  # more slots than max_batch: independent chunks
            toks, lg = self._run_decode(slots[i : i + self.max_batch], ids[i : i + self.max_batch], want_logits)
            out += toks
            logits.append(lg)
        return out, logits

    def decode(self, slots: Sequence[int], tokens: Sequence[int]) -> list[int]:
        return self._decode(slots, tokens, False)[0]

    def decode_logits(self, slots: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
        return np.concatenate(self._decode(slots, tokens, True)[1], axis=0)  # [m, n_vocab] f32

    def _prefill(self, slot: int, tokens: Sequence[int], want_logits: bool) -> tuple[int, np.ndarray | None]:
        drv.primary_context()
        self._check_slot(slot)
        ids = self._check_tokens(tokens)
        if not ids:
            raise BadRequest("prefill needs at least one token")
        self._check_room(slot, len(ids))
        for j, tok in enumerate(ids):  # every image staged first (position start + j): queued copies read them later
            self._stage(j, [slot], [tok])
            self._length[slot] += 1
        for j in range(len(ids)):
            self._launch_step(1, j == len(ids) - 1, j)
        self.acts.out_tokens.download(self._out_host.array[:1], self.stream)
        if want_logits:
            self.acts.bufs["logits"].download(self._logits_host.array[:1], self.stream)
        drv.sync(self.stream)
        return int(self._out_host.array[0]), (self._logits_host.array[0].copy() if want_logits else None)

    def prefill(self, slot: int, tokens: Sequence[int]) -> int:
        return self._prefill(slot, tokens, False)[0]

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
            "max_batch": self.max_batch,
            "graphs": self.use_graphs,
            "weight_bytes": self.weights.nbytes,
            "attention_piece": ATTN_PIECE,
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
        for pin in (self._staging, self._out_host, self._logits_host):
            pin.free()
