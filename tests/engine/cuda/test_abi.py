"""The Python <-> PTX contract (DESIGN "Kernels"): every launch site the kernel table builds passes exactly the
parameters its `.entry` in the committed ptx/*.ptx declares (count and width/kind), and the constants the host
shares with the kernels agree with the .cu sources. Runs on the CPU (dry sites, no driver)."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pytest

from qtui.engine.cuda import kernels as K
from qtui.engine.cuda import sampler
from qtui.engine.cuda.kernels import KernelTable, Split

PTX = Path(__file__).resolve().parents[3] / "ptx"
PTX_TYPE = {
    np.dtype(np.uint64): ".u64",
    np.dtype(np.int64): ".u64",
    np.dtype(np.int32): ".u32",
    np.dtype(np.float32): ".f32",
}


def entries() -> dict[str, list[str]]:
    """kernel name -> its .param types, from every committed .ptx."""
    out: dict[str, list[str]] = {}
    for f in PTX.glob("*.ptx"):
        for m in re.finditer(r"\.entry (\w+)\(\s*(.*?)\)", f.read_text(), re.S):
            out[m.group(1)] = re.findall(r"\.param (\.\w+)", m.group(2))
    return out


def every_site() -> list:
    kt = KernelTable(dry=True)
    x, big = Split(1, 2, 512), Split(3, 4, 1024)
    sites = [
        kt.rmsnorm(m=2, x=1, w=2, out=x, eps=1e-6),
        kt.split_rows(m=2, x=1, out=x),
        kt.swiglu_split(m=2, gate=1, up=2, out=x),
        kt.argmax(m=2, logits=1, tokens=2, n=10),
        kt.read_stream(buf=1, nbytes=1 << 20, out=2, blocks=4),
        kt.qk_norm_rope_store(
            m=1,
            qg=1,
            kb=2,
            vb=3,
            q_norm=4,
            k_norm=5,
            q_out=6,
            k_cache=7,
            v_cache=8,
            slot_stride=9,
            slots=10,
            pos=11,
            n_head=2,
            n_kv=1,
            hd=64,
            max_ctx=64,
            n_rot=16,
            theta=1e4,
            eps=1e-6,
        ),
        *(
            kt.attn_partial(
                m=m,
                q=1,
                k_cache=2,
                v_cache=3,
                slot_stride=4,
                slots=5,
                pos=6,
                part=7,
                n_head=2,
                n_kv=1,
                hd=64,
                n_pieces=1,
                run=m,
            )
            for m in (1, 3)  # decode; a prefill run (attn_partial_run)
        ),
        kt.attn_combine(m=1, part=1, qg=2, pos=3, out=Split(1, 2, 128), n_head=2, hd=64, n_pieces=1),
        *(  # decode (conv_step_silu_rows), a prefill run (conv_step_silu)
            kt.conv_step_silu(
                m=2 * run, x=1, w=2, state=3, slot_stride=4, slots=5, out=6, channels=512, kernel=4, run=run
            )
            for run in (1, 2)
        ),
    ]
    for dk in (64, 128):
        # the fused decode kernel, the prefill pipeline (runs of more than one row); with the conv: inside the
        # decode kernel (delta_conv_step), before the pipeline (conv_step_silu)
        for run, conv in itertools.product((1, 2), (None, K.ConvIn(x=14, w=15, state=16, slot_stride=17, kernel=4))):
            sites += kt.delta_rule(
                m=K.DELTA_CONV_MIN_ROWS * run,
                d_k=dk,
                conv_out=1,
                a=2,
                b=3,
                ssm_a=4,
                dt_bias=5,
                S=6,
                slot_stride=7,
                slots=8,
                z=9,
                norm_w=10,
                out=Split(1, 2, 2 * dk),
                H_k=1,
                H_v=2,
                eps=1e-6,
                run=run,
                qk_n=11,
                gates=12,
                o_raw=13,
                conv=conv,
            )
    gemm_min_rows = K.GEMM_MIN_ROWS
    for qtype in K.GEMV_TYPES:
        # (12 / 20, False): 12 / 20 rows with the GEMM off (QTUI_GEMM_MIN_ROWS), the GEMV's 16- / 32-token passes
        # (9 - 16 rows on the GEMV are an A/B setting since every launch of 9+ rows runs as the GEMM)
        for m, gemm_on in [(m, True) for m in (1, 2, 3, 5, 9, 17, 33, 64, 200)] + [(12, False), (20, False)]:
            K.GEMM_MIN_ROWS = gemm_min_rows if gemm_on else 1 << 20
            sites += kt.gemv(qtype=qtype, w=1, x=big, outputs=[(2, 40)], m=m, res=3)
            sites += kt.gemv(qtype=qtype, w=1, x=big, outputs=[(2, 32), (3, 16), (4, 16)], m=m)
            if qtype in K.MMA_TYPES:
                sites += kt.swiglu_gemv(qtype=qtype, w_gate=1, w_up=2, x=big, act=x, m=m)
        K.GEMM_MIN_ROWS = gemm_min_rows
        if qtype in K.MMA_TYPES:  # decode-size GEMMs (2560+ units), shared out with tile groups cut (fold launches)
            wide, ffn = Split(5, 6, 4096), Split(5, 6, 2560)  # (ffn: the 4b's gate + up, 144 groups x 10)
            for m in (20, 64):  # the 32-token form, the 64-token one
                sites += kt.gemv(qtype=qtype, w=1, x=wide, outputs=[(2, 4096)], m=m, res=3)
                sites += kt.swiglu_gemv(qtype=qtype, w_gate=1, w_up=2, x=ffn, act=Split(3, 4, 9216), m=m)
            if qtype != "q4_k":  # a layer's projections of two types side by side (GEMM_PAIR_FIRST / SECOND)
                staged = Split(5, 6, 2560, 7)
                two = [(qtype, 1, [(2, 8192)]), ("q4_k", 2, [(3, 4096), (4, 32), (5, 32)])]
                pair = [k for m in (20, 64) for k in kt.projections(x=staged, launches=two, m=m)]
                assert [int(k.cells[-1][0]) for k in pair if k.name.startswith("mma_gemm")] == [1, 2] * 2
                sites += pair
        sites.append(kt.embed(qtype=qtype, m=2, table=1, tokens=2, out=3, n_embd=512))
        if qtype in K.MMA_TYPES:
            sites.append(kt.repack(qtype=qtype, raw=1, out=2, n_out=16, n_in=256))
    bufs = {"params": 1, "prompt_counts": 2, "output_counts": 3, "lp": 4, "top_ids": 5}
    sites += [
        sampler.site(None, "sample_rows", 3, 1000, (6, 7), bufs),
        sampler.site(None, "logprob_rows", 3, 1000, (6, 7), bufs),
        sampler.site(None, "count_tokens", 3, 1000, (6, 7, 8), bufs),
    ]
    return sites


@pytest.mark.parametrize("site", every_site(), ids=lambda k: k.name)
def test_site_matches_its_ptx_entry(site):
    table = entries()
    assert site.name in table, f"{site.name}: no .entry in ptx/*.ptx"
    assert [PTX_TYPE[t] for t in site.arg_types] == table[site.name], site.name


def max_threads() -> dict[str, int]:
    """kernel name -> its `.maxntid` (from __launch_bounds__), for the entries that declare one."""
    out: dict[str, int] = {}
    for f in PTX.glob("*.ptx"):
        for m in re.finditer(r"\.entry (\w+)\(.*?\)\s*\.maxntid (\d+), 1, 1", f.read_text(), re.S):
            out[m.group(1)] = int(m.group(2))
    return out


def test_block_sizes_match_the_launch_bounds():
    """A block larger than __launch_bounds__ fails to launch; a tensor-core GEMV's block must be exactly its
    bound (the kernels index their tiles by warp: fewer warps would leave tiles uncomputed)."""
    bounds = max_threads()
    for site in every_site():
        if site.name in bounds:
            assert site.block <= bounds[site.name], site.name
            if site.name.startswith("mma_"):
                assert site.block == bounds[site.name], site.name
    assert any(n.startswith("mma_gemv_q4_k_n4") for n in bounds)


def test_every_ptx_entry_has_a_builder():
    built = {k.name for k in every_site()}
    assert set(entries()) - built == set(), "kernels nobody launches (dead code) or untested builders"


@pytest.mark.parametrize(
    "name,value,source",
    [
        ("ATTN_PIECE", K.ATTN_PIECE, "attention.cu"),
        ("MAX_HEAD_DIM", K.MAX_HEAD_DIM, "attention.cu"),
        ("ATTN_RUN_THREADS", K.ATTN_RUN_THREADS, "attention.cu"),
        ("ATTN_RUN_QUERIES", K.ATTN_RUN_QUERIES, "attention.cu"),
        ("ATTN_RUN_KEYS", K.ATTN_RUN_KEYS, "attention.cu"),
        ("MAX_CONV", K.MAX_CONV, "deltanet.cu"),
        ("CONV_DECODE_ROWS", K.CONV_DECODE_ROWS, "deltanet.cu"),
        ("DELTA_CONV_K", K.DELTA_CONV_K, "deltanet.cu"),
        ("MMA_WARPS", K.MMA_WARPS, "mma.cuh"),
        ("MMA_RING_WARP_BYTES", K.MMA_RING_WARP_BYTES, "mma.cuh"),
        ("MMA_RING_NT", K.MMA_RING_NT, "mma.cuh"),
        ("GEMM_FOLD_MAX_SLABS", K.GEMM_FOLD_MAX_SLABS, "gemm.cuh"),
        ("GEMM_FOLD_SWIGLU_SPLIT", K.GEMM_FOLD_SWIGLU_SPLIT, "gemm.cuh"),
        ("ARGMAX_PARTS", K.ARGMAX_PARTS, "elementwise.cu"),
        ("SAMPLE_THREADS", sampler.SAMPLE_THREADS, "sampling.cu"),
        ("MAX_TOP", sampler.MAX_TOP, "sampling.cu"),
    ],
)
def test_shared_constants_agree_with_the_kernel_sources(name, value, source):
    m = re.search(rf"#define {name} (\d+)", (PTX / source).read_text())
    assert m and int(m.group(1)) == value
