"""
Tests of kernels.py's Triton kernels: each equals its plain reference, forward and gradient, on odd sizes.

On a machine without CUDA the kernels run in Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET=1
before anything imports triton) on CPU tensors; with CUDA they run compiled, on the GPU. The whole module
skips where triton is not installed.

The references are model.py's own written-out paths (norm_impl='manual', FeedForward's SwiGLU, manual_attention,
selective_scan_reference), called through small adapters with the kernels' signatures, which are first checked
against model.py's modules; the kernels are then compared with the references run in float64 on the same inputs,
so the measured error is the kernel's alone. Sizes are odd on purpose: widths 37 and 48 (not powers of two:
masked columns), sequences of 7 and 37 (ragged last tiles; in the interpreter the attention tiles are 16, so 37
spans three), head sizes 16, 48, 64 (48 pads to 64). Tolerances are normwise, max |x - x_ref| <= tol * max(max
|x_ref|, 1). Measured in the interpreter, over every value and gradient here: float32 at most 6e-7 (tolerance
1e-4, room for a GPU's approximate exp2 and rsqrt); float16 6e-4 (tolerance 5e-3) and bfloat16 8e-3 (tolerance
3e-2), set by rounding the outputs, and attention's probabilities before their matmul, to 11 and 8 bits. The
selective scan also runs in float64 (its kernels compute in float64 then): at most 6e-14 (tolerance 1e-12).
"""

import json
import math
import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("triton", reason="the Triton kernels need triton (pip install -r requirements-test.txt; Linux)",
                    exc_type=ImportError)

import bench.kernel_speed as bench_kernels  # noqa: E402
import kernels  # noqa: E402
import model  # noqa: E402


def cannot_run():
    """Why Triton cannot run the kernels here, in a line, or None: kernels.py's own refusal (no Triton, or one older
    than it takes), or neither CUDA nor the interpreter."""
    try:
        kernels._triton_kernels()
    except RuntimeError as e:
        return str(e)
    if not kernels.triton_available():
        return ("Triton can run neither on CUDA here nor in its interpreter (TRITON_INTERPRET=1 must be set before "
                "triton is first imported)")


pytestmark = pytest.mark.skipif(cannot_run() is not None, reason=str(cannot_run()))

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
INTERPRETER_BF16_DOT = ("Triton's interpreter (3.9) multiplies bfloat16 tiles in tl.dot as their raw 16-bit "
                        "integers, so bfloat16 attention is checked only on CUDA")
TOL = {torch.float64: 1e-12, torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 3e-2}


@pytest.fixture(autouse=True)
def exact_float32_matmuls():
    """float32 tl.dot follows torch's matmul precision (TF32 when it is 'high'); the tolerances assume exact
    float32, so pin 'highest' for each test, whatever another test file set."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(before)


def randn(*shape, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(device=DEVICE, dtype=dtype)


def value_and_grads(fn, inputs, grad_out, dtype=None):
    """fn(*inputs) and the gradients of sum(grad_out * output) w.r.t. each input (None stays None), the
    inputs first cast to dtype if one is given."""
    leaves = [None if x is None else x.detach().to(dtype or x.dtype).requires_grad_(True) for x in inputs]
    out = fn(*leaves)
    out.backward(grad_out.to(out.dtype))
    return out, [None if x is None else x.grad for x in leaves]


def assert_close(x, ref, tol, what):
    err = (x.detach().double() - ref.detach().double()).abs().max().item()
    scale = max(ref.abs().max().item(), 1.0)
    assert err <= tol * scale, f"{what}: max error {err:.3e} > {tol:g} * {scale:.3g}"


def check_against_float64(triton_fn, reference_fn, inputs, names, dtype=torch.float32):
    """triton_fn on the inputs rounded to dtype vs reference_fn in float64 on the same rounded numbers: the
    output (shape, dtype, value) and every input's gradient. The output has the first input's shape."""
    rounded = [None if x is None else x.to(dtype) for x in inputs]
    grad_out = randn(*inputs[0].shape, seed=99)
    out, grads = value_and_grads(triton_fn, rounded, grad_out)
    ref, ref_grads = value_and_grads(reference_fn, rounded, grad_out, torch.float64)
    assert out.dtype == dtype and out.shape == ref.shape
    assert_close(out, ref, TOL[dtype], "output")
    for name, x, g, g_ref in zip(names, rounded, grads, ref_grads):
        if x is not None:
            assert g is not None and g.dtype == x.dtype and g.shape == x.shape, f"d{name}: {g}"
            assert_close(g, g_ref, TOL[dtype], f"d{name}")
    return out, grads


# -----------------------------------------------------------------------------
# the references are the model's math: model.py's written-out paths, with the kernels' signatures


def rms_norm_reference(x, w, eps):
    """model.RMSNorm's written-out path (norm_impl='manual'), its weight an input (so it gets a gradient)."""
    return torch.func.functional_call(model.RMSNorm(x.shape[-1], eps, impl="manual"), {"weight": w}, (x,))


def layer_norm_reference(x, w, b, eps):
    """model.LayerNorm's written-out path (norm_impl='manual'); b None: a LayerNorm without bias."""
    norm = model.LayerNorm(x.shape[-1], eps, bias=b is not None, impl="manual")
    return torch.func.functional_call(norm, {"weight": w} if b is None else {"weight": w, "bias": b}, (x,))


def swiglu_reference(gate, value):
    """model.FeedForward's SwiGLU, SiLU(W1 x) * W3 x, of gate = W1 x and value = W3 x."""
    return torch.nn.functional.silu(gate) * value


def attention_reference(q, k, v, key_mask=None, causal=False):
    """model.manual_attention with what model.Attention builds around it: the key/value heads repeated to the
    query heads, and one bool mask from the key mask and the causal tril(Tk - Tq). A row with no allowed key (all
    padding, or a query placed before every key), where manual_attention's softmax is NaN, gives 0 and passes no
    gradient, as the kernel does."""
    B, nh, Tq, hs = q.shape
    Tk, rep = k.shape[2], nh // k.shape[1]
    allowed = torch.ones(B, 1, Tq, Tk, dtype=torch.bool, device=q.device)  # (B, 1, Tq, Tk)
    if key_mask is not None:
        allowed = allowed & key_mask[:, None, None, :]
    if causal:
        allowed = allowed & torch.ones(Tq, Tk, dtype=torch.bool, device=q.device).tril(Tk - Tq)
    empty = ~allowed.any(dim=-1, keepdim=True)  # (B, 1, Tq, 1): rows with nothing to attend to
    y, _ = model.manual_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), allowed | empty)
    return y.masked_fill(empty, 0.0)  # (B, nh, Tq, hs)


def test_references_match_model():
    """The references above compute what model.py's hand-written RMSNorm, LayerNorm (norm_impl='manual') and
    manual_attention do (where the latter is defined: every query row has a key), so the kernels tested
    against them below stand in for the model's own paths."""
    x, w, b = randn(2, 5, 37, seed=1), randn(37, seed=2), randn(37, seed=3)
    rms = model.RMSNorm(37, eps=1e-5).to(DEVICE)
    ln = model.LayerNorm(37, eps=1e-5).to(DEVICE)
    ln_nobias = model.LayerNorm(37, eps=1e-5, bias=False).to(DEVICE)
    with torch.no_grad():
        for m in (rms, ln, ln_nobias):
            m.weight.copy_(w)
            m.impl = "manual"  # the hand-written math (norm_impl='manual'), not F.rms_norm / F.layer_norm
        ln.bias.copy_(b)
        torch.testing.assert_close(rms_norm_reference(x, w, 1e-5), rms(x))
        torch.testing.assert_close(layer_norm_reference(x, w, b, 1e-5), ln(x))
        torch.testing.assert_close(layer_norm_reference(x, w, None, 1e-5), ln_nobias(x))
        # attention: 4 query heads reading 2 kv heads; causal, Tq < Tk, the second sequence padded
        q, k, v = randn(2, 4, 5, 16, seed=4), randn(2, 2, 37, 16, seed=5), randn(2, 2, 37, 16, seed=6)
        key_mask = torch.ones(2, 37, dtype=torch.bool, device=DEVICE)
        key_mask[1, 27:] = False
        mask = key_mask[:, None, None, :] & torch.ones(5, 37, dtype=torch.bool, device=DEVICE).tril(37 - 5)
        expected, _ = model.manual_attention(q, k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1), mask)
        torch.testing.assert_close(attention_reference(q, k, v, key_mask, causal=True), expected)


# -----------------------------------------------------------------------------
# RMSNorm, LayerNorm and SwiGLU


def norm_case(kind, shape, seed=0):
    """(inputs, names, triton_fn, reference_fn) for one norm on x of `shape`; weights far from 1 and a
    bias far from 0, so a kernel that drops either fails."""
    C = shape[-1]
    x = randn(*shape, seed=seed) * 3 + 1  # an offset, so LayerNorm's centring matters
    w, b = randn(C, seed=seed + 1), randn(C, seed=seed + 2)
    eps = 1e-5
    if kind == "rms":
        return ((x, w), "xw", lambda x, w: kernels.rms_norm_triton(x, w, eps),
                lambda x, w: rms_norm_reference(x, w, eps))
    bias = b if kind == "layer" else None
    return ((x, w, bias), "xwb", lambda x, w, b: kernels.layer_norm_triton(x, w, b, eps),
            lambda x, w, b: layer_norm_reference(x, w, b, eps))


NORMS = ("rms", "layer", "layer_no_bias")


@pytest.mark.parametrize("shape", [(3, 37), (2, 5, 48), (2, 3, 384)])
@pytest.mark.parametrize("kind", NORMS)
def test_norm_matches_reference(kind, shape):
    """Value, dx, dweight (and dbias) in float32 vs the float64 reference. 10 and 6 rows run on at most 4
    programs in the interpreter, so the backward's strided row loop and per-program dweight parts are used."""
    inputs, names, fn, ref = norm_case(kind, shape)
    check_against_float64(fn, ref, inputs, names)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kind", NORMS)
def test_norm_16_bit(kind, dtype):
    inputs, names, fn, ref = norm_case(kind, (2, 5, 48), seed=10)
    check_against_float64(fn, ref, inputs, names, dtype)


def test_norm_bfloat16_input_float32_weight():
    """Under autocast the weight stays float32 and x is bfloat16: the output takes x's dtype and each
    gradient its input's."""
    x, w = randn(4, 37, seed=20, dtype=torch.bfloat16), randn(37, seed=21)
    grad = randn(4, 37, seed=22, dtype=torch.bfloat16)
    y, (dx, dw) = value_and_grads(lambda x, w: kernels.rms_norm_triton(x, w, 1e-5), (x, w), grad)
    y_ref, (dx_ref, dw_ref) = value_and_grads(lambda x, w: rms_norm_reference(x, w, 1e-5), (x, w), grad,
                                              torch.float64)
    assert (y.dtype, dx.dtype, dw.dtype) == (torch.bfloat16, torch.bfloat16, torch.float32)
    for got, want, what in ((y, y_ref, "y"), (dx, dx_ref, "dx"), (dw, dw_ref, "dw")):
        assert_close(got, want, TOL[torch.bfloat16], what)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(3, 37), (2, 7, 384)])
def test_swiglu_matches_reference(shape, dtype):
    """(2, 7, 384) is 5,376 elements: five full blocks of 1,024 and a ragged sixth."""
    gate, value = randn(*shape, seed=30) * 3, randn(*shape, seed=31)  # gates well into silu's curved range
    check_against_float64(kernels.swiglu_triton, swiglu_reference, (gate, value), ("gate", "value"), dtype)


def test_norms_reject_a_weight_of_another_width():
    """The kernels read C numbers of the weight and bias whatever their size: a wrong one must be refused."""
    x = randn(3, 37, seed=0)
    with pytest.raises(ValueError, match=r"shape \(37,\)"):
        kernels.rms_norm_triton(x, randn(36, seed=1), 1e-5)
    with pytest.raises(ValueError, match=r"shape \(37,\)"):
        kernels.layer_norm_triton(x, randn(37, seed=1), randn(48, seed=2), 1e-5)


def test_swiglu_rejects_broadcasting():
    with pytest.raises(ValueError, match="one shape"):
        kernels.swiglu_triton(randn(3, 37, seed=0), randn(1, 37, seed=1))


# -----------------------------------------------------------------------------
# flash attention

# (nkv, Tq, Tk, hs, padded, causal) with B=2, nh=4: every kv-head count (4: plain; 2, 1: grouped-query),
# sequences of 7 and 37, decoding (Tq = 1 or 5 queries against 37 keys), head sizes 16, 48 (padded to 64
# in the kernel) and 64, right padding, causal masking, and both
ATTENTION_CASES = [
    (4, 7, 7, 16, False, False),
    (4, 37, 37, 64, True, False),
    (2, 37, 37, 48, False, True),
    (1, 37, 37, 16, True, True),
    (2, 7, 7, 48, True, True),
    (1, 7, 7, 64, False, False),
    (2, 1, 37, 64, True, True),
    (4, 5, 37, 48, False, True),
    (1, 5, 37, 16, True, False),
]


def attention_inputs(nkv, Tq, Tk, hs, padded, seed=0, B=2, nh=4):
    """q, k, v and a key mask (None unless padded: then the second sequence's last third is padding, and
    the first sequence is full, so one batch has both kinds)."""
    q, k, v = randn(B, nh, Tq, hs, seed=seed), randn(B, nkv, Tk, hs, seed=seed + 1), randn(B, nkv, Tk, hs,
                                                                                              seed=seed + 2)
    key_mask = None
    if padded:
        key_mask = torch.ones(B, Tk, dtype=torch.bool, device=DEVICE)
        key_mask[1, Tk - Tk // 3:] = False
    return q, k, v, key_mask


def attention_fns(key_mask, causal):
    return (lambda q, k, v: kernels.flash_attention_triton(q, k, v, key_mask=key_mask, causal=causal),
            lambda q, k, v: attention_reference(q, k, v, key_mask=key_mask, causal=causal))


@pytest.mark.parametrize("nkv, Tq, Tk, hs, padded, causal", ATTENTION_CASES)
def test_attention_matches_reference(nkv, Tq, Tk, hs, padded, causal):
    """Output, dq, dk and dv in float32 vs the float64 reference; with nkv < nh, dk and dv sum over the
    query heads of each group (the reference repeats k and v, so autograd sums them)."""
    q, k, v, key_mask = attention_inputs(nkv, Tq, Tk, hs, padded)
    check_against_float64(*attention_fns(key_mask, causal), (q, k, v), ("q", "k", "v"))


def test_attention_rows_with_no_key():
    """A row with nothing to attend to (all its keys padding, or, causal with Tq > Tk, a query placed
    before the first key) gives output 0, gradient 0 and no NaN, and the other rows are unaffected."""
    q, k, v = randn(2, 4, 37, 16, seed=40), randn(2, 2, 7, 16, seed=41), randn(2, 2, 7, 16, seed=42)
    key_mask = torch.ones(2, 7, dtype=torch.bool, device=DEVICE)
    key_mask[1] = False  # the second sequence is all padding
    out, (dq, dk, dv) = check_against_float64(*attention_fns(key_mask, True), (q, k, v), ("q", "k", "v"))
    # causal, Tq=37 > Tk=7: query i sits at position i - 30, so queries 0..29 precede every key
    assert torch.isfinite(out).all() and all(torch.isfinite(g).all() for g in (dq, dk, dv))
    assert (out[1] == 0).all() and (out[0, :, :30] == 0).all() and (out[0, :, 30:] != 0).all()
    assert (dq[1] == 0).all() and (dq[0, :, :30] == 0).all() and (dk[1] == 0).all() and (dv[1] == 0).all()


def test_attention_strided_inputs():
    """q, k, v and the output gradient as the model makes them, transposed views of (B, T, nh, hs): the
    kernels read through the strides, and must give exactly what contiguous copies give."""
    def strided(*shape, seed):  # (B, T, h, hs) -> a (B, h, T, hs) view
        return randn(shape[0], shape[2], shape[1], shape[3], seed=seed).transpose(1, 2)

    q, k, v, grad = strided(2, 4, 37, 48, seed=50), strided(2, 2, 37, 48, seed=51), strided(2, 2, 37, 48, seed=52), \
        strided(2, 4, 37, 48, seed=53)
    assert not q.is_contiguous() and not grad.is_contiguous()
    fn = attention_fns(None, True)[0]
    out, grads = value_and_grads(fn, (q, k, v), grad)
    out_c, grads_c = value_and_grads(fn, [x.contiguous() for x in (q, k, v)], grad.contiguous())
    assert torch.equal(out, out_c)
    for g, g_c in zip(grads, grads_c):
        assert torch.equal(g, g_c)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_attention_16_bit(dtype):
    if dtype == torch.bfloat16 and DEVICE == "cpu":
        pytest.skip(INTERPRETER_BF16_DOT)
    q, k, v, key_mask = attention_inputs(2, 37, 37, 48, padded=True, seed=60)
    check_against_float64(*attention_fns(key_mask, True), (q, k, v), ("q", "k", "v"), dtype)


def test_attention_rejects_bad_shapes():
    q, k, v, _ = attention_inputs(2, 7, 7, 16, padded=False)
    with pytest.raises(ValueError, match="nh % nkv"):
        kernels.flash_attention_triton(randn(2, 3, 7, 16, seed=0), k, v)  # 3 query heads, 2 kv heads
    with pytest.raises(ValueError, match="MAX_HEAD_SIZE"):
        kernels.flash_attention_triton(randn(1, 1, 7, 160, seed=0), randn(1, 1, 7, 160, seed=1),
                                       randn(1, 1, 7, 160, seed=2))
    with pytest.raises(ValueError, match="key_mask must be bool"):
        kernels.flash_attention_triton(q, k, v, key_mask=torch.ones(2, 7, device=DEVICE))  # float, not bool
    with pytest.raises(ValueError, match="key_mask must be bool"):
        kernels.flash_attention_triton(q, k, v, key_mask=torch.ones(2, 6, dtype=torch.bool, device=DEVICE))


# -----------------------------------------------------------------------------
# Mamba's selective scan

SCAN_NAMES = ("x", "delta", "A", "Bm", "Cm")


def scan_inputs(B, T, D, N, seed=0):
    """x, delta, A, Bm, Cm in float64, with delta = softplus(N(-1, 1)) > 0 and A = -exp(N(0, 1)) < 0 as in
    Mamba. Their products z = delta A spread over about [-7, -1e-3]: both sides of |z| = 1/2, where zoh's
    phi(z) = (e^z - 1)/z changes from its series to its closed form in the kernel, and past z = -2, where the
    bilinear a_bar turns negative (scan_regimes checks both)."""
    f64 = {"dtype": torch.float64}
    x = randn(B, T, D, seed=seed, **f64)
    delta = torch.nn.functional.softplus(randn(B, T, D, seed=seed + 1, **f64) - 1)
    A = -torch.exp(randn(D, N, seed=seed + 2, **f64))
    return x, delta, A, randn(B, T, N, seed=seed + 3, **f64), randn(B, T, N, seed=seed + 4, **f64)


def scan_regimes(delta, A):
    z = delta[..., None] * A  # (B, T, D, N)
    return {"series": (z.abs() < 0.5).float().mean().item(), "closed form": (z.abs() >= 0.5).float().mean().item(),
            "negative bilinear a_bar": (z < -2).float().mean().item()}


def scan_fns(discretization, chunk):
    return (lambda *a: kernels.selective_scan_triton(*a, discretization=discretization, chunk=chunk),
            lambda *a: model.selective_scan_reference(*a, discretization=discretization))


@pytest.mark.parametrize("discretization", kernels.DISCRETIZATIONS)
def test_selective_scan_matches_reference_float64(discretization):
    """y and the gradients of x, delta, A, Bm and Cm, computed in float64 by the kernels, equal the float64
    reference's to rounding (measured: at most 1e-15 of their size). T = 21 with chunk = 8 is three chunks,
    the last ragged (5 steps); D = 5 channels are two blocks of 4 in the interpreter, the second ragged,
    and N = 3 pads to 4: so the backward's chunk walk, the masks and the partial sums over channel blocks
    are all used."""
    inputs = scan_inputs(2, 21, 5, 3)
    assert all(share > 0.02 for share in scan_regimes(inputs[1], inputs[2]).values())  # 68%, 32%, 3.5%
    check_against_float64(*scan_fns(discretization, 8), inputs, SCAN_NAMES, torch.float64)


@pytest.mark.parametrize("discretization", kernels.DISCRETIZATIONS)
def test_selective_scan_float32(discretization):
    """In float32 against the float64 reference on the same (rounded) numbers: measured at most 4e-7 of
    their size. T = 13, chunk = 4: four chunks, the last one step."""
    inputs = scan_inputs(2, 13, 5, 4, seed=10)
    check_against_float64(*scan_fns(discretization, 4), inputs, SCAN_NAMES)


@pytest.mark.parametrize("B, T, D, N, chunk, discretization", [
    (2, 5, 5, 4, 8, "bilinear"),  # T < chunk: one chunk, shorter than asked
    (1, 1, 3, 4, 8, "zoh"),  # a single step
    (1, 16, 3, 2, 8, "zoh_approx"),  # two whole chunks, no ragged one
    (1, 6, 9, 1, 1, "zoh"),  # chunk = 1: a saved state per step; N = 1; three channel blocks
])
def test_selective_scan_short_sequences(B, T, D, N, chunk, discretization):
    check_against_float64(*scan_fns(discretization, chunk), scan_inputs(B, T, D, N, seed=20), SCAN_NAMES,
                          torch.float64)


def test_selective_scan_saves_no_states():
    """What the forward keeps for the backward: the inputs and the T/chunk chunk starts (B, 3, D, N), nothing
    of size B T D N."""
    B, T, D, N = 2, 20, 5, 4
    x, delta, A, Bm, Cm = (t.requires_grad_() for t in scan_inputs(B, T, D, N, seed=30))
    y = kernels.selective_scan_triton(x, delta, A, Bm, Cm, chunk=8)
    saved = [tuple(t.shape) for t in y.grad_fn.saved_tensors]
    assert (B, 3, D, N) in saved  # ceil(20 / 8) = 3 chunk starts
    assert max(math.prod(shape) for shape in saved) < B * T * D * N


def test_selective_scan_zoh_small_and_large_steps():
    """zoh's B-bar, (e^z - 1)/A B, where z = Delta A runs from -1e-7 to -20 (one step; x = B = C = 1): the float32
    kernels against closed forms computed in float64, y = expm1(z)/A, d delta = e^z, dA = (z e^z - expm1(z))/A^2
    (accurate to 2e-9 here), elementwise. Measured in the interpreter: at most 4e-7 relative error, where the
    reference's float32 (e^z - 1)/A is 19% off at z = -1e-7 and its dA 4e6 times too large (e^z - 1 cancels;
    the kernels sum phi's series there). The tolerance leaves room for a GPU's approximate exp."""
    D = 41  # eleven channel blocks of 4 in the interpreter, one step each
    # rounded to float32 first, so that the closed forms see the numbers the kernels see
    delta = torch.logspace(-7, math.log10(20), D, dtype=torch.float64, device=DEVICE).float().double().view(1, 1, D)
    A = -torch.ones(D, 1, dtype=torch.float64, device=DEVICE)
    ones = torch.ones(1, 1, 1, dtype=torch.float64, device=DEVICE)
    y, (_, d_delta, dA, _, _) = value_and_grads(lambda *a: kernels.selective_scan_triton(*a, discretization="zoh"),
                                                (torch.ones_like(delta), delta, A, ones, ones),
                                                torch.ones_like(delta), torch.float32)
    z = (delta * A.view(1, 1, D)).view(D)  # A = -1: z = -delta
    expected = {"y": torch.expm1(z) / -1.0, "d delta": torch.exp(z), "dA": (z * torch.exp(z) - torch.expm1(z)) / 1.0}
    for name, got in (("y", y), ("d delta", d_delta), ("dA", dA)):
        rel = ((got.double().view(D) - expected[name]) / expected[name]).abs().max().item()
        assert rel < 1e-5, f"{name}: max relative error {rel:.2e}"


def test_selective_scan_bfloat16_inputs_float32_A():
    """As under autocast: x, delta, Bm, Cm in bfloat16, A a float32 parameter. The arithmetic is float32 and y is
    float32; each gradient comes back in its input's dtype."""
    x, delta, A, Bm, Cm = scan_inputs(2, 5, 5, 4, seed=40)
    inputs = [t.to(torch.bfloat16) for t in (x, delta)] + [A.float()] + [t.to(torch.bfloat16) for t in (Bm, Cm)]
    grad = randn(2, 5, 5, seed=41)
    y, grads = value_and_grads(kernels.selective_scan_triton, inputs, grad)
    y_ref, grads_ref = value_and_grads(model.selective_scan_reference, inputs, grad, torch.float64)
    assert y.dtype == torch.float32
    assert_close(y, y_ref, TOL[torch.float32], "y")
    for name, t, g, g_ref in zip(SCAN_NAMES, inputs, grads, grads_ref):
        assert g.dtype == t.dtype, name
        assert_close(g, g_ref, TOL[t.dtype], f"d{name}")


def test_selective_scan_rejects_bad_input():
    x, delta, A, Bm, Cm = scan_inputs(2, 7, 5, 4)
    with pytest.raises(ValueError, match=r"A \(5, 3\)"):  # the message names every shape
        kernels.selective_scan_triton(x, delta, A[:, :3], Bm, Cm)
    with pytest.raises(ValueError, match=r"delta \(2, 6, 5\)"):
        kernels.selective_scan_triton(x, delta[:, :6], A, Bm, Cm)
    with pytest.raises(ValueError, match=r"Cm \(2, 7, 3\)"):
        kernels.selective_scan_triton(x, delta, A, Bm, Cm[..., :3])
    with pytest.raises(ValueError, match="at least 1"):
        kernels.selective_scan_triton(x[:, :0], delta[:, :0], A, Bm[:, :0], Cm[:, :0])
    with pytest.raises(ValueError, match="discretization"):
        kernels.selective_scan_triton(x, delta, A, Bm, Cm, discretization="euler")
    with pytest.raises(ValueError, match="chunk"):
        kernels.selective_scan_triton(x, delta, A, Bm, Cm, chunk=0)
    with pytest.raises(ValueError, match="MAX_SCAN_STATE"):
        N = kernels.MAX_SCAN_STATE + 1
        kernels.selective_scan_triton(x, delta, randn(5, N, seed=0), randn(2, 7, N, seed=1), randn(2, 7, N, seed=2))
    with pytest.raises(ValueError, match="float32, float16, bfloat16 or float64"):
        kernels.selective_scan_triton(x.to(torch.int32), delta, A, Bm, Cm)


# -----------------------------------------------------------------------------
# without Triton, or without a way to run it


def test_import_without_triton():
    """`import kernels` works where triton is missing (macOS, CPU installs); the Triton functions then say
    how to install it, and the references (model.py's written-out paths) still run. In a fresh interpreter,
    with triton blocked."""
    code = ("import sys; sys.modules['triton'] = None\n"
            "import torch, kernels, model\n"
            "assert not kernels.triton_available()\n"
            "print(model.RMSNorm(3, impl='manual')(torch.ones(2, 3)).shape)\n"
            "try:\n"
            "    kernels.rms_norm_triton(torch.ones(2, 3), torch.ones(3), 1e-5)\n"
            "except RuntimeError as e:\n"
            "    print('refused:', e)\n")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "torch.Size([2, 3])" in r.stdout and "refused:" in r.stdout and "pip install triton" in r.stdout


def test_a_triton_older_than_3_3_is_refused_in_one_line(monkeypatch):
    """Triton 3.0 and 3.1's interpreter reads kernels.py's annotations (strings: `from __future__ import
    annotations`) as no constexpr, and 3.2 lacks what bench.kernel_speed compiles with: below 3.3 the kernels
    refuse in one line, and triton_available() says no (requirements-test.txt asks for 3.3)."""
    import triton
    monkeypatch.setattr(kernels, "_TRITON", None)
    monkeypatch.setattr(triton, "__version__", "3.2.0")
    with pytest.raises(RuntimeError, match=r"^kernels.py needs Triton >= 3.3 \(torch >= 2.7's\), and this is 3.2.0$"):
        kernels._triton_kernels()
    assert not kernels.triton_available()


def test_interpreted_loops_take_a_bound_of_one_element():
    """In Triton's interpreter a loop bound a kernel computes (`range(0, tl.cdiv(...))`) is a tensor holding a
    1-element array; Triton <= 3.6 gives that array to int(), which NumPy >= 2.4 refuses (issue 65). The kernels
    the interpreter runs are copies whose `range` reads the element: checked here whatever this Triton is."""
    if DEVICE == "cuda":
        pytest.skip("compiled kernels here: the interpreter's copies are not made")
    import numpy as np
    from triton.runtime.interpreter import TensorHandle
    tl = kernels.tl
    bound = tl.tensor(TensorHandle(np.array([5], dtype=np.int32), tl.int32), tl.int32)  # as the interpreter has it
    interpreted = kernels._interpretable(kernels._norm_bwd)
    assert list(interpreted.__globals__["range"](0, bound, 2)) == [0, 2, 4]
    assert interpreted.__globals__["range"](3) == range(3) and interpreted.__name__ == "_norm_bwd"
    assert "range" not in vars(kernels)  # the module's own code, and the compiler, keep the builtin


def test_cpu_tensors_need_the_interpreter(monkeypatch, capsys):
    """Compiled Triton takes CUDA tensors only: CPU tensors without the interpreter are refused with the
    way out, and so is the benchmark."""
    monkeypatch.setattr(kernels, "_interpreting", lambda: False)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        kernels.rms_norm_triton(torch.ones(2, 3), torch.ones(3), 1e-5)
    with pytest.raises(SystemExit):
        bench_kernels.main(["triton", "--device", "cpu"])
    assert "interpreter" in capsys.readouterr().err


# -----------------------------------------------------------------------------
# the benchmark command


def test_triton_benchmark_command(tmp_path, capsys):
    """`python -m bench.kernel_speed triton` at a tiny size: one table row per kernel, and the Triton outputs agree with
    the PyTorch ops they are timed against."""
    path = tmp_path / "triton.json"
    bench_kernels.main(["triton", "--device", DEVICE, "--dtype", "float32", "--batch", "1", "--lengths", "16",
                        "--n_embd", "32", "--n_head", "2", "--ffn", "48", "--repeats", "1", "--json", str(path)])
    out = capsys.readouterr().out
    saved = json.loads(path.read_text())
    names = ["rms_norm", "layer_norm", "swiglu", "attention", "attention, key mask", "attention, causal"]
    assert list(saved["results"]) == names
    assert saved["conditions"]["interpreter"] == (DEVICE == "cpu")
    for name in names:
        r = saved["results"][name]["16"]
        assert r["max_abs_diff"] < 1e-4, (name, r)
        assert r["triton_fwd"] > 0 and r["triton_fwd_bwd"] > 0 and r["torch_fwd_bwd"] > 0
        assert f"| {name} | 16 |" in out


def test_every_kernel_compiles_for_an_h100(tmp_path):
    """The interpreter runs the kernels' arithmetic but does not compile them. `python -m bench.kernel_speed compile`
    builds every variant the launchers use with Triton's real compiler, for an H100 (sm_90), with no GPU
    present (Triton's wheel brings ptxas), and checks each one's shared memory against the H100's limit.
    In a process of its own: this one runs the interpreter, and a process chooses once."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"  # Triton 3.9's default, said out loud (it warns otherwise)
    out = tmp_path / "compiled.json"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    run = subprocess.run([sys.executable, "-m", "bench.kernel_speed", "compile", "--arch", "90", "--dtypes", "bfloat16",
                          "--head_sizes", "48", "--json", str(out)], cwd=root, env=env, capture_output=True,
                         text=True, timeout=300)
    if run.returncode and "ptxas" in run.stderr:
        pytest.skip(f"this Triton has no ptxas to compile with: {run.stderr[-300:]}")
    assert run.returncode == 0, run.stderr[-2000:]
    variants = json.loads(out.read_text())["variants"]
    names = [v["kernel"] for v in variants]
    # two norm widths x four norm kernels, SwiGLU's two, and three mask/causal cases x three attention kernels
    assert len(variants) == 2 * 4 + 2 + 3 * 3 and names.count("_attn_fwd") == 3
    assert all(v["fits"] and v["shared"] > 0 for v in variants if v["kernel"].startswith("_attn"))
    assert {v["constexprs"]["BLOCK_D"] for v in variants if "BLOCK_D" in v["constexprs"]} == {64}  # 48 pads to 64
    assert "19 variants compiled; 0 over the shared-memory limit" in run.stdout


# -----------------------------------------------------------------------------
# model.py's switches: a whole model on the Triton kernels equals it on PyTorch's ops


def twin_models(family, triton, **kw):
    """Two models of one family with the same weights, the second with the Triton switches `triton` set."""
    cls, cfg_cls = {"encoder": (model.EncoderClassifier, model.EncoderConfig), "gpt": (model.GPT, model.GPTConfig),
                    "llama": (model.Llama, model.LlamaConfig)}[family]
    cfg = cfg_cls(**kw)
    torch.manual_seed(0)
    ref = cls(cfg).to(DEVICE).train()
    fast = cls(cfg_cls(**kw, **triton)).to(DEVICE).train()
    fast.load_state_dict(ref.state_dict())
    return ref, fast


@pytest.mark.parametrize("family, kw, inputs", [
    # an encoder (SwiGLU, RMSNorm, RoPE) on a right-padded batch: the key mask reaches the kernel
    ("encoder", dict(vocab_size=23, block_size=9, n_layer=1, n_loops=2, n_embd=32, n_head=2, ffn_hidden=24,
                     dropout=0.0), "padded"),
    # a GELU, LayerNorm GPT: causal, no mask
    ("gpt", dict(vocab_size=23, block_size=9, n_layer=2, n_embd=32, n_head=2, ffn="gelu", norm="layer", bias=True),
     "causal"),
    # a grouped-query Llama: causal and a key mask together, two query heads per key/value head
    ("llama", dict(vocab_size=23, block_size=9, n_layer=1, n_embd=32, n_head=2, n_kv_head=1, ffn_hidden=24),
     "padded"),
])
def test_model_on_triton_kernels_equals_model_on_torch(family, kw, inputs):
    triton = {"attn_impl": "triton", "norm_impl": "triton"}
    if family != "gpt":
        triton["ffn_impl"] = "triton"
    ref, fast = twin_models(family, triton, **kw)
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(3, 23, (2, 9), generator=g).to(DEVICE)
    args = {"targets": torch.randint(0, 23, (2, 9), generator=g).to(DEVICE)}
    if family == "encoder":
        args = {"key_mask": (torch.arange(9)[None] < torch.tensor([[9], [6]])).to(DEVICE),
                "targets": torch.tensor([0, 1], device=DEVICE)}
    elif family == "llama":
        args["key_mask"] = (torch.arange(9)[None] < torch.tensor([[9], [5]])).to(DEVICE)
        args["targets"][1, 5:] = -100  # padding is not scored
    (y_ref, loss_ref), (y, loss) = ref(idx, **args), fast(idx, **args)
    scored = slice(None) if family != "llama" else (0,)  # Llama's padded row: padding positions are never read
    torch.testing.assert_close(y[scored], y_ref[scored], atol=1e-4, rtol=1e-4)
    loss_ref.backward()
    loss.backward()
    torch.testing.assert_close(loss, loss_ref, atol=1e-5, rtol=1e-5)
    for (name, p), q in zip(fast.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-3, msg=name)


def test_triton_attention_refuses_dropout_in_training():
    """The flash kernel has no dropout: training with it on is an error that says what to do, not a silently
    different model; evaluation (dropout off) runs."""
    _, fast = twin_models("gpt", {"attn_impl": "triton"}, vocab_size=11, block_size=5, n_layer=1, n_embd=16,
                          n_head=1, dropout=0.1)
    idx = torch.randint(0, 11, (1, 5)).to(DEVICE)
    with pytest.raises(ValueError, match="dropout=0"):
        fast(idx)
    assert fast.eval()(idx)[0].shape == (1, 5, 11)


def test_mamba_with_the_triton_scan_is_the_model_with_the_reference_scan():
    """scan='triton' inside the model: a tiny Mamba's logits, loss and every parameter's gradient equal the
    sequential scan's (the kernel saves a state every 4 steps here: a ragged last chunk)."""
    torch.manual_seed(0)
    cfg = dict(vocab_size=30, block_size=40, n_layer=1, n_embd=8, d_state=4, discretization="bilinear")
    ref = model.Mamba(model.MambaConfig(**cfg, scan="sequential"))
    fused = model.Mamba(model.MambaConfig(**cfg, scan="triton", scan_chunk=4))
    fused.load_state_dict(ref.state_dict())
    idx, targets = torch.randint(3, 30, (2, 11)), torch.randint(3, 30, (2, 11))
    (logits, loss), (want_logits, want_loss) = fused(idx, targets), ref(idx, targets)
    torch.testing.assert_close(logits, want_logits, atol=1e-5, rtol=1e-4)
    loss.backward()
    want_loss.backward()
    for (name, a), b in zip(fused.named_parameters(), ref.parameters()):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-5, rtol=1e-3, msg=name)
