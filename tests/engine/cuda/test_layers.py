"""Layer kernels against the reference engine's math (qtui.engine.ops) evaluated in float64."""

from __future__ import annotations

import numpy as np
import pytest

from qtui.engine import ops
from qtui.engine.cuda import splitfmt
from qtui.engine.cuda.kernels import ATTN_PIECE

from .conftest import BACKENDS

pytestmark = pytest.mark.parametrize("gpu", BACKENDS, indirect=True)  # on the GPU and on the host simulator
F64 = np.float64
# Single ops in float32 against float64: a few ulp, plus exp/rsqrt approximations: 1e-5 relative (normwise).
LAYER_REL_TOL = 1e-5


def _rel(got, ref):
    assert np.isfinite(got).all(), "unwritten or NaN output"
    return float(np.linalg.norm(got.astype(F64) - ref) / np.linalg.norm(ref))


def _split_values(gpu, sp, rows):
    """A split-format output: its values (hi + lo), after checking its slice sums are its own (kernel order)."""
    xs, xsum = gpu.get_split(sp, rows)
    vals = splitfmt.join(xs)
    assert np.array_equal(xsum.view(np.uint32), splitfmt.slice_sums(vals).view(np.uint32))
    return vals


@pytest.mark.parametrize("n", [1280, 7184])  # quads a thread keeps in registers; past them (n > 6144) read again
def test_rmsnorm_writes_the_split_format(gpu, n):
    rng = np.random.default_rng()
    m, eps = 5, 1e-6
    x = (rng.standard_normal((m, n)) * 3).astype(np.float32)
    w = (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)
    out = gpu.split_buffer(m, n)
    gpu.run(gpu.kt.rmsnorm(m=m, x=int(gpu.put(x)), w=int(gpu.put(w)), out=out, eps=eps))
    # values carry the split's 2^-16 representation error on top of float32 arithmetic
    assert _rel(_split_values(gpu, out, m), ops.rms_norm(x.astype(F64), w.astype(F64), eps)) < LAYER_REL_TOL


def test_swiglu_split(gpu):
    rng = np.random.default_rng()
    g, u = (rng.standard_normal((2, 3, 1024)) * 4).astype(np.float32)
    out = gpu.split_buffer(3, 1024)
    gpu.run(gpu.kt.swiglu_split(m=3, gate=int(gpu.put(g)), up=int(gpu.put(u)), out=out))
    assert _rel(_split_values(gpu, out, 3), ops.silu(g.astype(F64)) * u) < LAYER_REL_TOL


@pytest.mark.parametrize("n", [248320, 151937])  # 4-value loads; n % 4 != 0: one value per load
def test_argmax_ties_go_to_lowest_index(gpu, n):
    rng = np.random.default_rng()
    m = 8
    logits = rng.standard_normal((m, n)).astype(np.float32)
    for r in range(m):  # plant a tie for the maximum at two random indices (adjacent ones in row 0: one load)
        i, j = sorted(rng.choice(n, 2, replace=False)) if r else (4 * int(rng.integers(n // 4)) + 1,) * 2
        j += 0 if r else 1
        logits[r, i] = logits[r, j] = logits[r].max() + 1.0
    logits[m - 1, -1] = logits[m - 1].max() + 2.0  # the row's last value
    out = gpu.poisoned((m,), np.int32)
    gpu.run(gpu.kt.argmax(m=m, logits=int(gpu.put(logits)), tokens=int(out), n=n))
    assert gpu.get(out, (m,), np.int32).tolist() == np.argmax(logits, axis=1).tolist()


def _delta_oracle(conv_out, a, b, ssm_a, dt_bias, S, H_k, H_v, dk, z, norm_w, eps):
    """ops.gated_deltanet's state update + gated norm for one row (float64): returns [H_v, dk], updates S."""
    q = conv_out[: H_k * dk].reshape(H_k, dk)
    k = conv_out[H_k * dk : 2 * H_k * dk].reshape(H_k, dk)
    v = conv_out[2 * H_k * dk :].reshape(H_v, dk)
    q = ops.l2_norm(q, 1e-6) / np.sqrt(dk)
    k = ops.l2_norm(k, 1e-6)
    kh = np.arange(H_v) % H_k  # tiled value heads
    q, k = q[kh], k[kh]
    g = ops.softplus(a + dt_bias) * ssm_a
    beta = ops.sigmoid(b)
    S *= np.exp(g)[:, None, None]
    delta = (v - np.einsum("hkv,hk->hv", S, k)) * beta[:, None]
    S += k[:, :, None] * delta[:, None, :]
    o = np.einsum("hkv,hk->hv", S, q)
    return ops.rms_norm(o, norm_w, eps) * ops.silu(z)


def _gdn_params(rng, C, K, H_v, dk, n_slots):
    """A GDN layer's conv weights, ssm_a, dt_bias, gated-norm weights, and conv / delta states of n_slots slots."""
    conv_w = rng.uniform(-0.5, 0.5, (C, K)).astype(np.float32)
    ssm_a = -rng.uniform(1, 16, H_v).astype(np.float32)
    dt_bias = rng.uniform(-7, -2, H_v).astype(np.float32)
    norm_w = (1 + 0.1 * rng.standard_normal(dk)).astype(np.float32)
    conv_state = rng.standard_normal((n_slots, K - 1, C)).astype(np.float32)
    S = (0.1 * rng.standard_normal((n_slots, H_v, dk, dk))).astype(np.float32)
    return conv_w, ssm_a, dt_bias, norm_w, conv_state, S


@pytest.mark.parametrize("dk", [64, 128])
@pytest.mark.parametrize("blocks", [1, 3])
def test_conv_and_delta_step_over_three_steps(gpu, dk, blocks):
    """Conv step + SiLU, l2norm, delta rule with tiled heads, gated norm; rows read state by slot id. The
    persistent delta_step on `blocks` blocks (each walking several (head, row) items through its two state
    buffers) is bitwise the default launch (one item per block here) on a second copy of the state."""
    rng = np.random.default_rng()
    H_k, H_v, K, n_slots = 2, 4, 4, 5
    C = (2 * H_k + H_v) * dk
    slots = np.array([3, 4, 1], np.int32)
    m = len(slots)
    conv_w, ssm_a, dt_bias, norm_w, conv_state, S = _gdn_params(rng, C, K, H_v, dk, n_slots)
    st_buf, S_buf, S_default = gpu.put(conv_state), gpu.put(S), gpu.put(S)
    cs64, S64 = conv_state.astype(F64), S.astype(F64)
    w_buf, a_dev, dt_dev, sl = gpu.put(conv_w), gpu.put(ssm_a), gpu.put(dt_bias), gpu.put(slots)
    nw_dev, eps = gpu.put(norm_w), 1e-6

    def delta(ins, S_dev, out, step_blocks):
        """The fused decode kernel over this step's inputs (conv_out, a, b, z), one row per slot."""
        conv_out, a_dev_r, b_dev_r, z_dev = ins
        return gpu.kt.delta_rule(
            m=m,
            d_k=dk,
            conv_out=int(conv_out),
            a=int(a_dev_r),
            b=int(b_dev_r),
            ssm_a=int(a_dev),
            dt_bias=int(dt_dev),
            S=int(S_dev),
            slot_stride=H_v * dk * dk,
            slots=int(sl),
            z=int(z_dev),
            norm_w=int(nw_dev),
            out=out,
            H_k=H_k,
            H_v=H_v,
            eps=eps,
            step_blocks=step_blocks,
        )

    for _step in range(3):
        x = rng.standard_normal((m, C)).astype(np.float32)
        a, b = rng.standard_normal((2, m, H_v)).astype(np.float32)
        z = rng.standard_normal((m, H_v, dk)).astype(np.float32)
        conv_out, o, o_default = gpu.poisoned((m, C)), gpu.split_buffer(m, H_v * dk), gpu.split_buffer(m, H_v * dk)
        ins = (conv_out, gpu.put(a), gpu.put(b), gpu.put(z))
        gpu.run(
            gpu.kt.conv_step_silu(
                m=m,
                x=int(gpu.put(x)),
                w=int(w_buf),
                state=int(st_buf),
                slot_stride=(K - 1) * C,
                slots=int(sl),
                out=int(conv_out),
                channels=C,
                kernel=K,
            ),
            *delta(ins, S_buf, o, blocks),
            *delta(ins, S_default, o_default, None),
        )
        got_o = _split_values(gpu, o, m).reshape(m, H_v, dk)
        default_o = _split_values(gpu, o_default, m).reshape(m, H_v, dk)
        assert np.array_equal(got_o.view(np.uint32), default_o.view(np.uint32)), f"step {_step}: blocks change bits"
        for r, s in enumerate(slots):
            window = np.concatenate([cs64[s], x[r][None].astype(F64)])
            cs64[s] = window[1:]
            mixed = ops.silu(np.sum(window * conv_w.T.astype(F64), axis=0))
            ref = _delta_oracle(mixed, a[r], b[r], ssm_a, dt_bias, S64[s], H_k, H_v, dk, z[r], norm_w, eps)
            assert _rel(got_o[r], ref) < 1e-4, f"step {_step} row {r}"  # S carries error across steps
    np.testing.assert_allclose(gpu.get(st_buf, conv_state.shape), cs64, rtol=0, atol=0)  # pure copies
    untouched = [s for s in range(n_slots) if s not in slots]
    assert np.array_equal(gpu.get(S_buf, S.shape)[untouched], S[untouched])
    assert np.array_equal(gpu.get(S_buf, S.shape).view(np.uint32), gpu.get(S_default, S.shape).view(np.uint32))


@pytest.mark.parametrize("m", [1, 5, 9])
def test_decode_conv_rows_kernel_gives_the_run_kernels_bits(gpu, m, monkeypatch):
    """A decode step's conv (conv_step_silu_rows: four rows, four slots, a thread) writes the outputs and new states
    conv_step_silu writes for the same rows one per block, bit for bit, with partial row blocks; both against the
    float64 window sum."""
    from qtui.engine.cuda import kernels

    rng = np.random.default_rng()
    C, K, n_slots = 300, 4, 12  # C: a partial channel block
    slots = rng.permutation(n_slots)[:m].astype(np.int32)
    w = rng.uniform(-0.5, 0.5, (C, K)).astype(np.float32)
    state = rng.standard_normal((n_slots, K - 1, C)).astype(np.float32)
    x = rng.standard_normal((m, C)).astype(np.float32)
    x_dev, w_dev, sl = gpu.put(x), gpu.put(w), gpu.put(slots)
    got = {}
    for rows_kernel in (True, False):
        monkeypatch.setattr(kernels, "CONV_DECODE_KERNEL", rows_kernel)
        st, out = gpu.put(state), gpu.poisoned((m, C))
        site = gpu.kt.conv_step_silu(
            m=m, x=int(x_dev), w=int(w_dev), state=int(st), slot_stride=(K - 1) * C, slots=int(sl), out=int(out),
            channels=C, kernel=K,
        )  # fmt: skip
        assert site.name == ("conv_step_silu_rows" if rows_kernel else "conv_step_silu")
        gpu.run(site)
        got[rows_kernel] = gpu.get(out, (m, C)), gpu.get(st, state.shape)
    (out4, st4), (out1, st1) = got[True], got[False]
    assert np.isfinite(out4).all()
    assert np.array_equal(out4.view(np.uint32), out1.view(np.uint32))
    assert np.array_equal(st4.view(np.uint32), st1.view(np.uint32))
    window = np.concatenate([state[slots].astype(F64), x[:, None].astype(F64)], axis=1)  # [m][K][C]
    ref = ops.silu(np.einsum("mkc,ck->mc", window, w.astype(F64)))
    assert _rel(out4, ref) < 1e-5
    expect = state.copy()
    expect[slots] = window[:, 1:].astype(np.float32)
    assert np.array_equal(st4, expect)


@pytest.mark.parametrize("dk", [64, 128])
@pytest.mark.parametrize("ratio,blocks", [(1, None), (2, 1), (2, 3), (2, None), (3, 2)])  # H_v / H_k
def test_decode_conv_inside_the_delta_rule_gives_the_two_kernels_bits(gpu, dk, ratio, blocks, monkeypatch):
    """A decode step's conv inside the delta rule (delta_conv_step: (row, k-head) items, their value heads one
    after another in a block) writes the outputs, conv states and delta states that conv_step_silu_rows +
    delta_step write, bit for bit, over three steps (each step's conv reads the state the last one wrote), with
    rows in a random slot order and persistent blocks walking several items; slots not in the step untouched."""
    from qtui.engine.cuda import kernels

    rng = np.random.default_rng()
    H_k, K, n_slots, eps = 2, 4, 7, 1e-6
    H_v = ratio * H_k
    C = (2 * H_k + H_v) * dk
    m = 5
    slots = rng.permutation(n_slots)[:m].astype(np.int32)
    conv_w, ssm_a, dt_bias, norm_w, conv_state, S = _gdn_params(rng, C, K, H_v, dk, n_slots)
    w_buf, a_dev, dt_dev, nw_dev, sl = (gpu.put(v) for v in (conv_w, ssm_a, dt_bias, norm_w, slots))
    states = {fused: (gpu.put(conv_state), gpu.put(S)) for fused in (True, False)}
    bits = lambda v: v.view(np.uint32)  # noqa: E731
    for step in range(3):
        x = rng.standard_normal((m, C)).astype(np.float32)
        a, b = rng.standard_normal((2, m, H_v)).astype(np.float32)
        z = rng.standard_normal((m, H_v, dk)).astype(np.float32)
        x_dev, a_dev_r, b_dev_r, z_dev = (gpu.put(v) for v in (x, a, b, z))
        got = {}
        for fused in (True, False):
            monkeypatch.setattr(kernels, "DELTA_CONV_MIN_ROWS", 1 if fused else m + 1)  # (from m rows: fused)
            st_buf, S_buf = states[fused]
            conv_out, o = gpu.poisoned((m, C)), gpu.split_buffer(m, H_v * dk)
            sites = gpu.kt.delta_rule(
                m=m, d_k=dk, conv_out=int(conv_out), a=int(a_dev_r), b=int(b_dev_r), ssm_a=int(a_dev),
                dt_bias=int(dt_dev), S=int(S_buf), slot_stride=H_v * dk * dk, slots=int(sl), z=int(z_dev),
                norm_w=int(nw_dev), out=o, H_k=H_k, H_v=H_v, eps=eps, step_blocks=blocks,
                conv=kernels.ConvIn(x=int(x_dev), w=int(w_buf), state=int(st_buf), slot_stride=(K - 1) * C, kernel=K),
            )  # fmt: skip
            names = [s.name for s in sites]
            assert names == ([f"delta_conv_step_d{dk}"] if fused else ["conv_step_silu_rows", f"delta_step_d{dk}"])
            gpu.run(*sites)
            got[fused] = _split_values(gpu, o, m), gpu.get(st_buf, conv_state.shape), gpu.get(S_buf, S.shape)
        for name, f, u in zip(("outputs", "conv states", "delta states"), got[True], got[False], strict=True):
            assert np.isfinite(f).all(), f"step {step}: {name}"
            assert np.array_equal(bits(f), bits(u)), f"step {step}: {name} differ"
    untouched = [s for s in range(n_slots) if s not in slots]
    conv_after, S_after = got[True][1], got[True][2]
    assert np.array_equal(conv_after[untouched], conv_state[untouched]) and np.array_equal(
        S_after[untouched], S[untouched]
    )
    assert not np.array_equal(conv_after[slots], conv_state[slots])  # (the states moved on)


@pytest.mark.parametrize("dk", [64, 128])
@pytest.mark.parametrize("run", [2, 5, 16, 40])
def test_conv_and_delta_runs_of_rows_are_tokens_in_order(gpu, dk, run):
    """Two runs of `run` rows (two slots, a prefill chunk each) in one launch: each run's rows are that slot's
    tokens in order, against the oracle row by row, and BITWISE what the same tokens give fed one row per slot
    per launch (run = 1, the decode step): outputs and both states. Runs go through the prefill pipeline
    (delta_prep / delta_scan / delta_norm), single rows through the fused delta_step: two kernel paths, one
    arithmetic."""
    rng = np.random.default_rng()
    H_k, H_v, K, n_slots, eps = 2, 4, 4, 5, 1e-6
    C = (2 * H_k + H_v) * dk
    run_slots = [3, 1]
    m = run * len(run_slots)
    conv_w, ssm_a, dt_bias, norm_w, conv_state, S = _gdn_params(rng, C, K, H_v, dk, n_slots)
    x = rng.standard_normal((m, C)).astype(np.float32)  # row i*run + t: token t of run i
    a, b = rng.standard_normal((2, m, H_v)).astype(np.float32)
    z = rng.standard_normal((m, H_v, dk)).astype(np.float32)
    w_buf, a_dev, dt_dev, nw_dev = gpu.put(conv_w), gpu.put(ssm_a), gpu.put(dt_bias), gpu.put(norm_w)

    def launch(rows, n_run, st_buf, S_buf):
        """rows of x/a/b/z in runs of n_run; returns (conv_out, out) on the host."""
        mm = len(rows)
        sl = gpu.put(np.array([run_slots[r // run] for r in rows], np.int32))
        conv_out, o = gpu.poisoned((mm, C)), gpu.split_buffer(mm, H_v * dk)
        qk_n, gates, o_raw = gpu.poisoned((mm, 2 * H_k * dk)), gpu.poisoned((mm, 2 * H_v)), gpu.poisoned((mm, H_v * dk))
        conv = gpu.kt.conv_step_silu(
            m=mm,
            x=int(gpu.put(x[rows])),
            w=int(w_buf),
            state=int(st_buf),
            slot_stride=(K - 1) * C,
            slots=int(sl),
            out=int(conv_out),
            channels=C,
            kernel=K,
            run=n_run,
        )
        kernels = gpu.kt.delta_rule(
            m=mm,
            d_k=dk,
            conv_out=int(conv_out),
            a=int(gpu.put(a[rows])),
            b=int(gpu.put(b[rows])),
            ssm_a=int(a_dev),
            dt_bias=int(dt_dev),
            S=int(S_buf),
            slot_stride=H_v * dk * dk,
            slots=int(sl),
            z=int(gpu.put(z[rows])),
            norm_w=int(nw_dev),
            out=o,
            H_k=H_k,
            H_v=H_v,
            eps=eps,
            run=n_run,
            qk_n=int(qk_n),
            gates=int(gates),
            o_raw=int(o_raw),
        )
        assert [k.name for k in kernels] == (
            [f"delta_step_d{dk}"] if n_run == 1 else [f"delta_{p}_d{dk}" for p in ("prep", "scan", "norm")]
        )
        gpu.run(conv, *kernels)
        return gpu.get(conv_out, (mm, C)), _split_values(gpu, o, mm).reshape(mm, H_v, dk)

    st_run, S_run = gpu.put(conv_state), gpu.put(S)
    co_run, o_run = launch(list(range(m)), run, st_run, S_run)
    st_one, S_one = gpu.put(conv_state), gpu.put(S)
    co_one, o_one = np.empty_like(co_run), np.empty_like(o_run)
    for t in range(run):  # decode steps: one row of each slot per launch
        rows = [i * run + t for i in range(len(run_slots))]
        co_one[rows], o_one[rows] = launch(rows, 1, st_one, S_one)
    bits = lambda v: v.view(np.uint32)  # noqa: E731
    assert np.array_equal(bits(co_run), bits(co_one)) and np.array_equal(bits(o_run), bits(o_one))
    assert np.array_equal(bits(gpu.get(st_run, conv_state.shape)), bits(gpu.get(st_one, conv_state.shape)))
    assert np.array_equal(bits(gpu.get(S_run, S.shape)), bits(gpu.get(S_one, S.shape)))

    cs64, S64 = conv_state.astype(F64), S.astype(F64)
    for r in range(m):  # the oracle, token by token
        s = run_slots[r // run]
        window = np.concatenate([cs64[s], x[r][None].astype(F64)])
        cs64[s] = window[1:]
        mixed = ops.silu(np.sum(window * conv_w.T.astype(F64), axis=0))
        ref = _delta_oracle(mixed, a[r], b[r], ssm_a, dt_bias, S64[s], H_k, H_v, dk, z[r], norm_w, eps)
        assert _rel(o_run[r], ref) < 1e-4, f"row {r}"  # S carries error across the run
    np.testing.assert_allclose(gpu.get(st_run, conv_state.shape), cs64, rtol=0, atol=0)  # pure copies
    untouched = [s for s in range(n_slots) if s not in run_slots]
    assert np.array_equal(gpu.get(S_run, S.shape)[untouched], S[untouched])


def test_attention_decode_against_softmax(gpu):
    """q/k norm + RoPE + KV store + split attention + gate, lengths spanning 1..3 pieces, slots != rows; the
    pieces taken by the default grid (a block per piece here), by one block per (head, row) and by two: the same
    bits every way."""
    rng = np.random.default_rng()
    nh, nkv, hd, n_rot, theta, eps, max_ctx, n_slots = 4, 2, 256, 64, 1e7, 1e-6, 1024, 4
    n_pieces = max_ctx // ATTN_PIECE
    slots = np.array([2, 0, 3], np.int32)
    pos = np.array([600, 255, 0], np.int32)  # 3 pieces, exactly 1 full piece, first token
    m = len(slots)
    qg = rng.standard_normal((m, nh, 2, hd)).astype(np.float32)
    kb, vb = rng.standard_normal((2, m, nkv, hd)).astype(np.float32)
    qn, kn = (1 + 0.1 * rng.standard_normal((2, hd))).astype(np.float32)
    K = rng.standard_normal((n_slots, max_ctx, nkv, hd)).astype(np.float32)
    V = rng.standard_normal((n_slots, max_ctx, nkv, hd)).astype(np.float32)
    Kd, Vd, qg_d = gpu.put(K), gpu.put(V), gpu.put(qg)
    sl, ps = gpu.put(slots), gpu.put(pos)
    stride = max_ctx * nkv * hd
    kb_d, vb_d, qn_d, kn_d = (int(gpu.put(a)) for a in (kb, vb, qn, kn))
    # what both kernels take of the step and the KV cache
    cache = dict(
        m=m,
        k_cache=int(Kd),
        v_cache=int(Vd),
        slot_stride=stride,
        slots=int(sl),
        pos=int(ps),
        n_head=nh,
        n_kv=nkv,
        hd=hd,
    )

    def attend(piece_blocks):  # fresh poisoned outputs each time
        qr, part = gpu.poisoned((m, nh, hd)), gpu.poisoned((m, nh, n_pieces, hd + 2))
        out = gpu.split_buffer(m, nh * hd)
        gpu.run(
            gpu.kt.qk_norm_rope_store(
                qg=int(qg_d),
                kb=kb_d,
                vb=vb_d,
                q_norm=qn_d,
                k_norm=kn_d,
                q_out=int(qr),
                max_ctx=max_ctx,
                n_rot=n_rot,
                theta=theta,
                eps=eps,
                **cache,
            ),
            gpu.kt.attn_partial(q=int(qr), part=int(part), n_pieces=n_pieces, piece_blocks=piece_blocks, **cache),
            gpu.kt.attn_combine(
                m=m, part=int(part), qg=int(qg_d), pos=int(ps), out=out, n_head=nh, hd=hd, n_pieces=n_pieces
            ),
        )
        return _split_values(gpu, out, m).reshape(m, nh, hd)

    got = attend(None)
    for z in (1, 2):
        assert np.array_equal(attend(z).view(np.uint32), got.view(np.uint32)), f"{z} piece blocks"
    K_after = gpu.get(Kd, K.shape)
    for r, (s, p) in enumerate(zip(slots, pos)):
        cos, sin = ops.rope_angles(int(p), n_rot, theta)
        q = ops.rope_neox(ops.rms_norm(qg[r, :, 0].astype(F64), qn, eps), cos, sin)  # [nh, hd]
        k = ops.rope_neox(ops.rms_norm(kb[r].astype(F64), kn, eps), cos, sin)  # [nkv, hd]
        assert _rel(K_after[s, p], k) < LAYER_REL_TOL
        keys = np.concatenate([K[s, :p].astype(F64), k[None]])  # [p+1, nkv, hd]
        vals = np.concatenate([V[s, :p].astype(F64), vb[r][None].astype(F64)])
        kvh = np.arange(nh) // (nh // nkv)
        scores = np.einsum("hd,thd->ht", q, keys[:, kvh]) / np.sqrt(hd)
        att = np.einsum("ht,thd->hd", ops.softmax(scores), vals[:, kvh]) * ops.sigmoid(qg[r, :, 1].astype(F64))
        assert _rel(got[r], att) < LAYER_REL_TOL, f"row {r} (slot {s}, pos {p})"


@pytest.mark.parametrize(
    "nh, nkv, hd, p0, m",
    [
        (16, 4, 256, 500, 21),  # the 4b's heads; rows ending in piece 1 and in piece 2, a partial last row group
        (4, 2, 128, 0, 37),  # a prompt's first chunk: every row's last piece is the diagonal one
    ],
)
def test_attention_run_kernel_gives_the_decode_kernels_bits(gpu, nh, nkv, hd, p0, m):
    """A prefill run (m rows of one slot at positions p0..p0+m-1) through attn_partial_run writes the very floats
    attn_partial writes for those rows, every (row, head, piece), and nothing past each row's length; whatever its
    piece blocks."""
    rng = np.random.default_rng()
    max_ctx, n_slots, slot = 1024, 3, 1
    n_pieces = max_ctx // ATTN_PIECE
    q = rng.standard_normal((m, nh, hd)).astype(np.float32)
    K, V = rng.standard_normal((2, n_slots, max_ctx, nkv, hd)).astype(np.float32)
    cache = dict(
        m=m,
        q=int(gpu.put(q)),
        k_cache=int(gpu.put(K)),
        v_cache=int(gpu.put(V)),
        slot_stride=max_ctx * nkv * hd,
        slots=int(gpu.put(np.full(m, slot, np.int32))),
        pos=int(gpu.put(np.arange(p0, p0 + m, dtype=np.int32))),
        n_head=nh,
        n_kv=nkv,
        hd=hd,
        n_pieces=n_pieces,
    )

    def parts(**how):
        part = gpu.poisoned((m, nh, n_pieces, hd + 2))
        gpu.run(gpu.kt.attn_partial(part=int(part), **cache, **how))
        return gpu.get(part, (m, nh, n_pieces, hd + 2))

    decode = parts(run=1)
    written = ~np.isnan(decode).all(axis=3)  # [m, nh, piece]: the pieces below each row's length
    reach = np.arange(n_pieces) * ATTN_PIECE < np.arange(p0, p0 + m)[:, None] + 1  # [m, piece]
    assert np.array_equal(written, np.broadcast_to(reach[:, None], written.shape))
    for z in (None, 1, 2):
        got = parts(run=m, piece_blocks=z)
        assert np.array_equal(got.view(np.uint32), decode.view(np.uint32)), f"piece blocks {z}"
