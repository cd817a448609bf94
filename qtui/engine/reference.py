"""`ReferenceEngine`: the numpy float32 implementation of `BatchEngine` + `LogitsEngine`.

Slow and obvious on purpose: it is the readable statement of the math (ops.py, reference/qwen35.md §6) and
the oracle the CUDA engine is held to. Every weight is dequantized to float32 once, at construction.

Per-slot state lives in pools indexed by slot id (DESIGN.md invariant 2), zeroed when a slot is handed out:
KV cache per attention layer, conv state and delta-rule state S per Gated DeltaNet layer, and a length.
Every token, whether it belongs to a prefill or to one row of a batched decode, goes through the same
`_forward_token(slot, token)`, so a row never sees the other rows of its batch (invariant 1), and a prefill
cut into chunks runs exactly the same operations as one call with all the tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from qtui.engine.ops import AttentionWeights, FfnWeights, GdnWeights, ffn, gated_attention, gated_deltanet, rms_norm
from qtui.engine.sampling import Choice, SamplingParams, choice_of, sample_row
from qtui.engine.slot_book import SlotBook

if TYPE_CHECKING:
    from qtui.model.gguf_file import GGUFModel

F32 = np.float32


class ReferenceEngine(SlotBook):
    """numpy float32 engine over a `GGUFModel` (any supported quant type; weights dequantized at load)."""

    name = "cpu"

    def __init__(self, model: GGUFModel, max_slots: int = 16, max_context: int = 4096) -> None:
        assert max_slots >= 1 and max_context >= 1
        self.model = model
        self.config = cfg = model.config
        self._init_slots(max_slots, max_context, model.config.n_vocab)
        self.max_rows = max_slots  # one decode call may hold every slot (each row is its own mat-vec)
        self._load_weights(model)

        # --- per-slot pools, indexed by slot id (never by batch position) ---
        # np.zeros maps untouched pages lazily, so a KV pool sized by max_context costs memory only as used.
        kv_shape = (max_slots, max_context, cfg.n_head_kv, cfg.head_dim)
        self._k_cache = {i: np.zeros(kv_shape, F32) for i in cfg.attention_layers}  # [slots, ctx, n_kv, hd] f32
        self._v_cache = {i: np.zeros(kv_shape, F32) for i in cfg.attention_layers}  # [slots, ctx, n_kv, hd] f32
        conv_shape = (max_slots, cfg.ssm_d_conv - 1, cfg.conv_dim)
        s_shape = (max_slots, cfg.ssm_dt_rank, cfg.d_k, cfg.d_v)
        self._conv = {i: np.zeros(conv_shape, F32) for i in cfg.recurrent_layers}  # [slots, d_conv-1, conv_dim] f32
        self._s = {i: np.zeros(s_shape, F32) for i in cfg.recurrent_layers}  # [slots, H_v, d_k, d_v] f32
        # token counts for the sampling penalties: prompt tokens (prefill) and generated tokens (decode inputs)
        self._prompt_counts = np.zeros((max_slots, cfg.n_vocab), np.int32)  # [slots, n_vocab]
        self._output_counts = np.zeros((max_slots, cfg.n_vocab), np.int32)  # [slots, n_vocab]

    def _load_weights(self, model: GGUFModel) -> None:
        """Dequantize every weight of the main stack to float32, numpy order [out, in]."""
        cfg = model.config

        def get(name: str) -> np.ndarray:
            return np.ascontiguousarray(model.dequantize(name), dtype=F32)

        self._embed = get("token_embd.weight")  # [n_vocab, D]
        self._head = self._embed if cfg.tied_embeddings else get("output.weight")  # [n_vocab, D]
        self._output_norm = get("output_norm.weight")  # [D]
        self._attn_norm, self._post_norm, self._ffn, self._mixer = [], [], [], []
        for i in range(cfg.n_layer):
            p = f"blk.{i}."
            self._attn_norm.append(get(p + "attn_norm.weight"))  # [D]
            self._post_norm.append(get(p + "post_attention_norm.weight"))  # [D]
            self._ffn.append(
                FfnWeights(get(p + "ffn_gate.weight"), get(p + "ffn_up.weight"), get(p + "ffn_down.weight"))
            )
            if cfg.recurrent[i]:
                mixer: GdnWeights | AttentionWeights = GdnWeights(
                    qkv=get(p + "attn_qkv.weight"), z=get(p + "attn_gate.weight"),
                    beta=get(p + "ssm_beta.weight"), alpha=get(p + "ssm_alpha.weight"),
                    conv=get(p + "ssm_conv1d.weight"), dt_bias=get(p + "ssm_dt.bias"), a=get(p + "ssm_a"),
                    norm=get(p + "ssm_norm.weight"), out=get(p + "ssm_out.weight"),
                )  # fmt: skip
            else:
                mixer = AttentionWeights(
                    q=get(p + "attn_q.weight"), k=get(p + "attn_k.weight"), v=get(p + "attn_v.weight"),
                    out=get(p + "attn_output.weight"),
                    q_norm=get(p + "attn_q_norm.weight"), k_norm=get(p + "attn_k_norm.weight"),
                )  # fmt: skip
            self._mixer.append(mixer)

    # --- slots ---

    def alloc_slot(self) -> int:
        slot = self._take_free_slot()
        self._zero_slot(slot)
        return slot

    def _zero_slot(self, slot: int) -> None:
        used = int(self._length[slot])  # only rows a previous tenant wrote are dirty (keeps KV pages untouched)
        for i in self._k_cache:
            self._k_cache[i][slot, :used] = 0.0
            self._v_cache[i][slot, :used] = 0.0
        for i in self._conv:
            self._conv[i][slot] = 0.0
            self._s[i][slot] = 0.0
        self._prompt_counts[slot] = 0
        self._output_counts[slot] = 0
        self._length[slot] = 0

    # --- steps ---

    def prefill_logits(self, slot: int, tokens: Sequence[int]) -> np.ndarray:
        """Append `tokens` to the slot, token by token; return the logits after the last one: [n_vocab] f32."""
        return cast(np.ndarray, self._prefill_rows(slot, tokens, every_row=False)[-1])

    def _prefill_rows(self, slot: int, tokens: Sequence[int], every_row: bool) -> np.ndarray:
        """Feed `tokens`; logits after each one ([n, n_vocab] f32) or only after the last ([1, n_vocab])."""
        ids = self._check_prefill(slot, tokens)
        np.add.at(self._prompt_counts[slot], ids, 1)
        rows = []
        for i, token in enumerate(ids):
            h = self._forward_token(slot, token)
            if every_row or i == len(ids) - 1:  # only the state matters for the others: skip the head
                rows.append(self._logits(h))
        return np.stack(rows)

    def decode_logits(self, slots: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
        """One token for each of m distinct slots: [m, n_vocab] f32; row i is computed alone, as if m were 1."""
        slots, ids = self._check_decode(slots, tokens)
        rows = []
        for slot, token in zip(slots, ids):
            self._output_counts[slot, token] += 1  # a decode input is a generated token
            rows.append(self._logits(self._forward_token(slot, token)))
        return np.stack(rows)  # [m, n_vocab] f32

    def _pick(self, logits: np.ndarray, slot: int, sampling: SamplingParams | None) -> int:
        """The next token of `slot` from its logits row: argmax, or sampled at position = the slot's length."""
        if sampling is None or sampling.is_greedy:
            return int(np.argmax(logits))  # ties -> lowest id
        return sample_row(logits, sampling, int(self._length[slot]), self._prompt_counts[slot],
                          self._output_counts[slot])  # fmt: skip

    def prefill(self, slot: int, tokens: Sequence[int], sampling: SamplingParams | None = None) -> int:
        return self._pick(self.prefill_logits(slot, tokens), slot, sampling)

    def decode(self, slots: Sequence[int], tokens: Sequence[int],
               sampling: Sequence[SamplingParams] | None = None) -> list[int]:  # fmt: skip
        logits = self.decode_logits(slots, tokens)
        return [self._pick(logits[i], int(s), None if sampling is None else sampling[i]) for i, s in enumerate(slots)]

    def prefill_choices(self, slot: int, tokens: Sequence[int], sampling: SamplingParams,
                        targets: Sequence[int | None] | None = None) -> list[Choice]:  # fmt: skip
        assert targets is None or (len(targets) == len(tokens) and None not in targets[:-1])
        rows = self._prefill_rows(slot, tokens, every_row=targets is not None)
        wanted = list(targets) if targets is not None else [None]
        n_top = sampling.logprobs
        return [choice_of(row, self._pick(row, slot, sampling) if t is None else t, n_top)
                for row, t in zip(rows, wanted)]  # fmt: skip

    def decode_choices(self, slots: Sequence[int], tokens: Sequence[int],
                       sampling: Sequence[SamplingParams]) -> list[Choice]:  # fmt: skip
        logits = self.decode_logits(slots, tokens)
        return [choice_of(logits[i], self._pick(logits[i], int(s), sampling[i]), sampling[i].logprobs)
                for i, s in enumerate(slots)]  # fmt: skip

    def trace_token(self, slot: int, token: int) -> tuple[np.ndarray, np.ndarray]:
        """Feed one token (as a 1-token prefill) and return (residual stream after the embedding and after each
        layer: [n_layer + 1, D] f32, logits: [n_vocab] f32), for layer-by-layer comparisons with other engines."""
        self._check_slot(slot)
        (token,) = self._check_tokens([token])
        self._check_room(slot, 1)
        trace: list[np.ndarray] = []
        logits = self._logits(self._forward_token(slot, token, trace))
        return np.stack(trace), logits

    def _forward_token(self, slot: int, token: int, trace: list[np.ndarray] | None = None) -> np.ndarray:
        """One token of one slot through the whole stack at position slot_length; returns the final hidden [D].
        If `trace` is given, the residual stream is appended to it after the embedding and after every layer."""
        cfg = self.config
        pos = int(self._length[slot])
        h: np.ndarray = self._embed[token].copy()  # [D] f32 residual stream
        if trace is not None:
            trace.append(h.copy())
        for i in range(cfg.n_layer):
            x = rms_norm(h, self._attn_norm[i], cfg.rms_eps)  # [D]
            mixer = self._mixer[i]
            if isinstance(mixer, GdnWeights):
                h = h + gated_deltanet(mixer, cfg, x, self._conv[i][slot], self._s[i][slot])
            else:
                h = h + gated_attention(mixer, cfg, x, self._k_cache[i][slot], self._v_cache[i][slot], pos)
            h = h + ffn(self._ffn[i], rms_norm(h, self._post_norm[i], cfg.rms_eps))
            if trace is not None:
                trace.append(h.copy())
        self._length[slot] = pos + 1
        return h

    def _logits(self, h: np.ndarray) -> np.ndarray:
        """Final norm and LM head: [D] f32 -> [n_vocab] f32."""
        return cast(np.ndarray, self._head @ rms_norm(h, self._output_norm, self.config.rms_eps))

    def describe(self) -> dict[str, Any]:
        return {
            "engine": "cpu",
            "device": "numpy float32",
            "numpy": np.__version__,
            "max_slots": self.max_slots,
            "max_context": self.max_context,
            "weights": "dequantized to float32 at load",
        }
