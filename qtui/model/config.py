"""`Qwen35Config`: every hyperparameter of a `qwen35` GGUF, read from its metadata (reference/qwen35.md §3.3).

Names follow llama.cpp's hparams where they exist (n_embd, n_ff, ssm_d_state, ...). Derived sizes are
properties, so nothing can disagree with the metadata.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from qtui.errors import ModelFileError

ARCH = "qwen35"


@dataclass(frozen=True, slots=True)
class Qwen35Config:
    n_vocab: int
    n_embd: int  # hidden size D
    n_layer: int  # main stack = block_count - nextn_predict_layers
    n_ff: int  # FFN intermediate size
    n_head: int  # full-attention query heads
    n_head_kv: int  # full-attention KV heads
    head_dim: int  # attention.key_length (= value_length) = 256
    n_rot: int  # rope.dimension_count = 64 (NEOX half-split on the first n_rot dims)
    rope_theta: float
    rms_eps: float
    context_length: int
    ssm_d_conv: int  # conv kernel = 4
    ssm_d_state: int  # d_k = d_v = 128
    ssm_n_group: int  # H_k (GDN key heads)
    ssm_dt_rank: int  # H_v (GDN value heads)
    ssm_d_inner: int  # H_v * d_v
    recurrent: tuple[bool, ...]  # per main-stack layer: True = Gated DeltaNet, False = gated full attention
    nextn_predict_layers: int = 0  # MTP blocks in the file (unused by the forward pass)
    tied_embeddings: bool = True  # no output.weight: the head reads token_embd

    def __post_init__(self) -> None:
        assert len(self.recurrent) == self.n_layer
        assert self.n_head % self.n_head_kv == 0
        assert self.ssm_dt_rank % self.ssm_n_group == 0
        assert self.ssm_d_inner == self.ssm_dt_rank * self.ssm_d_state

    # --- derived sizes (reference/qwen35.md §1.1 "Derived dimensions") ---
    @property
    def d_k(self) -> int:
        return self.ssm_d_state

    @property
    def d_v(self) -> int:
        return self.ssm_d_inner // self.ssm_dt_rank

    @property
    def key_dim(self) -> int:  # H_k * d_k
        return self.ssm_n_group * self.d_k

    @property
    def value_dim(self) -> int:  # H_v * d_v
        return self.ssm_d_inner

    @property
    def conv_dim(self) -> int:  # channels through the causal conv: [q | k | v]
        return 2 * self.key_dim + self.value_dim

    @property
    def n_layer_all(self) -> int:
        return self.n_layer + self.nextn_predict_layers

    @property
    def attention_layers(self) -> tuple[int, ...]:
        return tuple(i for i, r in enumerate(self.recurrent) if not r)

    @property
    def recurrent_layers(self) -> tuple[int, ...]:
        return tuple(i for i, r in enumerate(self.recurrent) if r)

    def layer_kind(self, i: int) -> str:
        return "gdn" if self.recurrent[i] else "attention"

    # --- per-slot state sizes, in float32 elements ---
    def kv_floats_per_token(self) -> int:
        """K and V for every attention layer, one token."""
        return len(self.attention_layers) * 2 * self.n_head_kv * self.head_dim

    def recurrent_floats(self) -> int:
        """Conv state + delta-rule state S for every GDN layer, one slot."""
        conv = (self.ssm_d_conv - 1) * self.conv_dim
        s = self.ssm_dt_rank * self.d_k * self.d_v
        return len(self.recurrent_layers) * (conv + s)

    @classmethod
    def from_metadata(
        cls, md: Mapping[str, Any], tensor_names: set[str] | frozenset[str] = frozenset()
    ) -> Qwen35Config:
        """Build from GGUF key/values (already decoded to Python values). Raises ModelFileError naming the key."""
        arch = md.get("general.architecture")
        if arch != ARCH:
            raise ModelFileError(f"general.architecture is {arch!r}; qtui serves {ARCH!r} models only")

        def get(key: str, typ: type, default: Any = None) -> Any:
            full = f"{ARCH}.{key}"
            if full not in md:
                if default is not None:
                    return default
                raise ModelFileError(f"missing metadata key {full!r}")
            val = md[full]
            try:
                if typ is int and isinstance(val, (list, tuple)):
                    raise TypeError("array")
                return typ(val)
            except (TypeError, ValueError) as exc:
                raise ModelFileError(f"metadata key {full!r} has value {val!r}, expected {typ.__name__}") from exc

        block_count = get("block_count", int)
        nextn = get("nextn_predict_layers", int, 0) if f"{ARCH}.nextn_predict_layers" in md else 0
        n_layer = block_count - nextn
        if n_layer <= 0:
            raise ModelFileError(
                f"{ARCH}.block_count={block_count} leaves no layers after nextn_predict_layers={nextn}"
            )
        rec_key = f"{ARCH}.attention.recurrent_layers"
        if rec_key in md:
            rec_all = [bool(x) for x in md[rec_key]]
            if len(rec_all) < n_layer:
                raise ModelFileError(f"{rec_key} has {len(rec_all)} entries, block_count needs {n_layer}")
            recurrent = tuple(rec_all[:n_layer])
        else:
            interval = get("full_attention_interval", int)
            if interval <= 0:
                raise ModelFileError(f"{ARCH}.full_attention_interval must be positive, got {interval}")
            recurrent = tuple((i + 1) % interval != 0 for i in range(n_layer))
        head_kv = md.get(f"{ARCH}.attention.head_count_kv")
        if isinstance(head_kv, (list, tuple)):  # per-layer array (Ollama exports): all attention layers must agree
            vals = {int(head_kv[i]) for i in range(n_layer) if not recurrent[i]}
            if len(vals) != 1:
                raise ModelFileError(f"{ARCH}.attention.head_count_kv varies across attention layers: {sorted(vals)}")
            n_head_kv = vals.pop()
        else:
            n_head_kv = get("attention.head_count_kv", int)
        key_len = get("attention.key_length", int)
        val_len = get("attention.value_length", int, key_len)
        if key_len != val_len:
            raise ModelFileError(f"{ARCH}.attention.key_length={key_len} != value_length={val_len}")
        vocab = md.get(f"{ARCH}.vocab_size")
        if vocab is None:
            toks = md.get("tokenizer.ggml.tokens")
            if toks is None:
                raise ModelFileError("missing metadata key 'tokenizer.ggml.tokens' (and no qwen35.vocab_size)")
            vocab = len(toks)
        try:
            cfg = cls(
                n_vocab=int(vocab),
                n_embd=get("embedding_length", int),
                n_layer=n_layer,
                n_ff=get("feed_forward_length", int),
                n_head=get("attention.head_count", int),
                n_head_kv=n_head_kv,
                head_dim=key_len,
                n_rot=get("rope.dimension_count", int),
                rope_theta=get("rope.freq_base", float),
                rms_eps=get("attention.layer_norm_rms_epsilon", float),
                context_length=get("context_length", int),
                ssm_d_conv=get("ssm.conv_kernel", int),
                ssm_d_state=get("ssm.state_size", int),
                ssm_n_group=get("ssm.group_count", int),
                ssm_dt_rank=get("ssm.time_step_rank", int),
                ssm_d_inner=get("ssm.inner_size", int),
                recurrent=recurrent,
                nextn_predict_layers=nextn,
                tied_embeddings="output.weight" not in tensor_names,
            )
        except AssertionError as exc:
            raise ModelFileError(f"inconsistent {ARCH} hyperparameters in metadata: {exc}") from exc
        if cfg.n_rot > cfg.head_dim or cfg.n_rot % 2:
            raise ModelFileError(f"{ARCH}.rope.dimension_count={cfg.n_rot} does not fit head_dim={cfg.head_dim}")
        for key, value in (("attention.layer_norm_rms_epsilon", cfg.rms_eps), ("rope.freq_base", cfg.rope_theta)):
            if not math.isfinite(value) or value <= 0:  # a NaN epsilon turns every reply into token 0 repeated
                raise ModelFileError(f"metadata key '{ARCH}.{key}' is {value!r}: must be a finite number > 0")
        return cfg
