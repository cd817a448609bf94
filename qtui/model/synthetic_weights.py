"""Random weights for synthetic models, drawn the way a trained Qwen3.5 checkpoint looks *after* the
llama.cpp converter's transforms (reference/qwen35.md §3.2):

* RMSNorm weights: HF zero-centred w ~ N(0, 0.1), stored as 1 + w (the converter bakes the +1 in);
  `ssm_norm` is HF's plain multiplier ~ 1 + N(0, 0.1), stored as is.
* `ssm_a = -exp(A_log)` with A_log = log U(1, 16) (HF/Mamba init); `ssm_dt.bias` = softplus^-1(dt) with
  dt log-uniform in [1e-3, 0.1]: per-token decays exp(g) then span roughly 0.2 .. 1.
* `ssm_conv1d` [conv_dim, d_conv] ~ U(-0.5, 0.5) (depthwise kernel, fan-in d_conv).
* 2-D weights ~ N(0, 1/sqrt(fan_in)), halved for projections back into the residual stream, so activations
  stay O(1) through the stack; token_embd ~ N(0, 0.25) (the tied head's logits then have std ~ 0.25 sqrt(D)).
Value heads are drawn directly in GGUF's tiled order (nothing reads HF's grouped order).

Each tensor has its own generator seeded by (seed, crc32(name)), so a tensor's values do not depend on
which other tensors the file holds or on the quant: q8_0 and f32 files of one seed share their weights
(up to quantization; the multi-GB presets draw their block-quant weights as random valid blocks instead).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import gguf
import numpy as np

from qtui.model import quants

QT = gguf.GGMLQuantizationType
_CHUNK_BYTES = 64 << 20  # big tensors are produced in row chunks of about this many stored bytes
_RESIDUAL_OUT = ("ssm_out.weight", "attn_output.weight", "ffn_down.weight")


def tensor_rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def weight_std(name: str, shape: tuple[int, ...]) -> float:
    """Standard deviation of a 2-D weight's entries."""
    if name in ("token_embd.weight", "output.weight"):
        return 0.25
    std: float = 1.0 / np.sqrt(shape[1])  # np.float64 (a float): kept, it sets the dtype of what it scales
    return std * 0.5 if name.endswith(_RESIDUAL_OUT) else std


def draw_small(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """float32 values of a tensor that stays F32 (norms, ssm_a, ssm_dt.bias, ssm_conv1d)."""
    if name.endswith("ssm_a"):
        return (-np.exp(np.log(rng.uniform(1.0, 16.0, shape)))).astype(np.float32)
    if name.endswith("ssm_dt.bias"):
        dt = np.exp(rng.uniform(np.log(1e-3), np.log(0.1), shape))
        return (dt + np.log(-np.expm1(-dt))).astype(np.float32)  # softplus^-1(dt) = log(expm1(dt))
    if name.endswith("ssm_conv1d.weight"):
        return rng.uniform(-0.5, 0.5, shape).astype(np.float32)
    if name.endswith("norm.weight"):
        return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    raise AssertionError(f"no small-tensor rule for {name}")


def draw_dense(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """float32 values of a 2-D weight, numpy [out, in]."""
    return rng.standard_normal(shape, dtype=np.float32) * np.float32(weight_std(name, shape))


def tensor_bytes(name: str, shape: tuple[int, ...], qtype: QT, seed: int, random_blocks: bool) -> Iterator[np.ndarray]:
    """The stored bytes of one tensor, as a sequence of uint8 chunks (whole rows each) to write in order.

    random_blocks: for block-quant 2-D weights, draw valid blocks directly (multi-GB presets: a 27b file in
    about a minute) instead of quantizing float draws. Either way only one chunk is in memory at a time.
    """
    rng = tensor_rng(seed, name)
    if len(shape) < 2 or not _is_dense(name):
        yield quants.quantize(draw_small(name, shape, rng), qtype).reshape(-1)
        return
    rows, cols = shape
    row_bytes = quants.n_bytes((1, cols), qtype)
    step = max(1, _CHUNK_BYTES // row_bytes)
    draw_blocks = random_blocks and qtype in quants.RANDOM_BLOCK_TYPES
    for r0 in range(0, rows, step):
        n = min(step, rows - r0)
        if draw_blocks:
            chunk = quants.random_blocks(qtype, n, cols, rng, std=weight_std(name, shape))
        else:
            chunk = quants.quantize(draw_dense(name, (n, cols), rng), qtype)
        yield chunk.reshape(-1)


def _is_dense(name: str) -> bool:
    return not (name.endswith(("norm.weight", "ssm_a", "ssm_dt.bias")) or "ssm_conv1d" in name)
