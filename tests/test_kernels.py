"""
Tests of kernels.py: every fast scan equals the plain reference, forward and gradient (and, at the end, the
scan benchmarks of bench/kernel_speed.py run and say what they measured).

The reference, scan_sequential, is checked against the recurrence unrolled into a sum and against a
case worked by hand; the fast scans are then checked against it in float64, on odd lengths (1, 3, 7,
33: the parallel scan pads those), with a of both signs (zero-order hold gives a in (0, 1), bilinear
can give a < 0) and b with exact zeros (log 0 in the log-space scan). Tolerances are normwise:
max |x - x_ref| <= tol * max(max |x_ref|, 1).
"""

import json

import pytest
import torch
import torch.nn.functional as F

import bench.kernel_speed as bench_kernels
import kernels
import model
from kernels import SCANS, scan_sequential, selective_scan

FAST = ("parallel", "logspace")
LENGTHS = (1, 2, 3, 7, 33, 100)
# The parallel scan does the same multiply-adds in another order (measured 3e-16 in float64, 2e-7 in
# float32); the log-space one rounds through log/exp of sums that grow with T (measured at T=100: 2e-14
# in float64, 6e-6 in float32, gradients included). The tolerances leave a margin of 10x or more.
TOL = {("parallel", torch.float64): 1e-10, ("parallel", torch.float32): 1e-5,
       ("logspace", torch.float64): 1e-11, ("logspace", torch.float32): 1e-4}


def make_inputs(T, a_sign, seed=0, shape=(2, 3, 4)):
    """(a, b, h0, w) in float64 of shape (2, T, 3, 4) (h0: (2, 3, 4)); w weighs the loss sum(w * h) so
    every output gets its own gradient. a_sign 'positive': a = exp(-softplus(x)), Mamba's exp(Delta A)
    with Delta A < 0; 'mixed': a uniform in (-1, 1). b ~ N(0, 1) with about a fifth set to exactly 0."""
    g = torch.Generator().manual_seed(1000 * seed + T)
    full = (shape[0], T) + shape[1:]
    if a_sign == "positive":
        a = torch.exp(-F.softplus(torch.randn(full, generator=g, dtype=torch.float64)))
    else:
        a = torch.rand(full, generator=g, dtype=torch.float64) * 2 - 1
    b = torch.randn(full, generator=g, dtype=torch.float64)
    b = torch.where(torch.rand(full, generator=g, dtype=torch.float64) < 0.2, 0.0, b)
    h0 = torch.randn(shape, generator=g, dtype=torch.float64)
    w = torch.randn(full, generator=g, dtype=torch.float64)
    return a, b, h0, w


def run(impl, inputs, w, dtype):
    """h and the gradients of sum(w * h) w.r.t. every input, with the inputs cast to dtype. A gradient
    that is identically zero may come back from autograd as None (a_0 at T=1 without h0): it is
    materialized as zeros so every impl is compared the same way."""
    leaves = [x.detach().to(dtype).requires_grad_(True) for x in inputs]
    a, b, h0 = (leaves + [None])[:3]
    h = selective_scan(a, b, impl, h0=h0)
    grads = torch.autograd.grad((h * w.to(dtype)).sum(), leaves, materialize_grads=True)
    return h, grads


def assert_close(x, ref, tol, what):
    err = (x.detach().double() - ref).abs().max().item()
    scale = max(ref.abs().max().item(), 1.0)
    assert err <= tol * scale, f"{what}: max error {err:.3e} > {tol:g} * {scale:.3g}"


@pytest.mark.parametrize("with_h0", [False, True], ids=["h0=0", "h0"])
@pytest.mark.parametrize("a_sign", ["positive", "mixed"])
@pytest.mark.parametrize("T", LENGTHS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("impl", FAST)
def test_fast_scan_matches_reference(impl, dtype, T, a_sign, with_h0):
    """Forward and gradients (w.r.t. a, b and h0) of each fast scan against the float64 reference."""
    a, b, h0, w = make_inputs(T, a_sign)
    inputs = (a, b, h0) if with_h0 else (a, b)
    h_ref, grads_ref = run("sequential", inputs, w, torch.float64)
    h, grads = run(impl, inputs, w, dtype)
    assert h.dtype == dtype and h.shape == a.shape
    tol = TOL[(impl, dtype)]
    assert_close(h, h_ref, tol, f"{impl} h")
    for name, g, g_ref in zip(("a", "b", "h0"), grads, grads_ref):
        assert g.dtype == dtype
        assert_close(g, g_ref, tol, f"{impl} dL/d{name}")


@pytest.mark.parametrize("impl", SCANS)
def test_hand_computed(impl):
    """T=3, one channel, worked out by hand (|a| > 1 and a < 0 on purpose):
    a = (0.5, -2, 0.25), b = (1, 3, -4), h0 = 2:
        h_0 = 0.5 * 2 + 1 = 2,   h_1 = -2 * 2 + 3 = -1,   h_2 = 0.25 * -1 - 4 = -4.25.
    L = h_0 + h_1 + h_2; the gradient reaching each h_t (itself plus all it feeds), from the end:
        g~_2 = 1,   g~_1 = 1 + 0.25 * 1 = 1.25,   g~_0 = 1 + -2 * 1.25 = -1.5
    so dL/db = g~ = (-1.5, 1.25, 1), dL/da_t = g~_t h_{t-1} = (-1.5 * 2, 1.25 * 2, 1 * -1) = (-3, 2.5, -1),
    dL/dh0 = a_0 g~_0 = -0.75. Without h0: h = (1, 1, -3.75)."""
    scan = getattr(kernels, f"scan_{impl}")
    a = torch.tensor([[0.5, -2.0, 0.25]], dtype=torch.float64, requires_grad=True)  # (B=1, T=3)
    b = torch.tensor([[1.0, 3.0, -4.0]], dtype=torch.float64, requires_grad=True)
    h0 = torch.tensor([2.0], dtype=torch.float64, requires_grad=True)  # (B=1,)
    h = scan(a, b, h0)
    h.sum().backward()
    want = {"h": [[2.0, -1.0, -4.25]], "a": [[-3.0, 2.5, -1.0]], "b": [[-1.5, 1.25, 1.0]], "h0": [-0.75]}
    for name, got in (("h", h), ("a", a.grad), ("b", b.grad), ("h0", h0.grad)):
        assert got.shape == torch.Size(torch.tensor(want[name]).shape)
        assert_close(got, torch.tensor(want[name], dtype=torch.float64), 1e-12, f"{impl} {name}")
    assert_close(scan(a, b), torch.tensor([[1.0, 1.0, -3.75]], dtype=torch.float64), 1e-12, f"{impl} h, no h0")


def test_reference_is_the_unrolled_sum():
    """scan_sequential against Mamba eq. 2a unrolled:
    h_t = (prod_{r<=t} a_r) h0 + sum_{s<=t} (prod_{s<r<=t} a_r) b_s."""
    a, b, h0, _ = make_inputs(7, "mixed")
    h = scan_sequential(a, b, h0)
    for t in range(7):
        want = torch.prod(a[:, :t + 1], dim=1) * h0
        for s in range(t + 1):
            want = want + torch.prod(a[:, s + 1:t + 1], dim=1) * b[:, s]  # an empty product is 1
        assert_close(h[:, t], want, 1e-12, f"h_{t}")


def test_unknown_impl_is_rejected_naming_the_options():
    a, b, _, _ = make_inputs(4, "positive")
    with pytest.raises(ValueError, match="blelloch") as info:
        selective_scan(a, b, "blelloch")
    for name in SCANS:
        assert repr(name) in str(info.value)


@pytest.mark.parametrize("impl", SCANS)
def test_bad_shapes_are_rejected(impl):
    a, b, h0, _ = make_inputs(5, "positive")  # (2, 5, 3, 4), h0 (2, 3, 4)
    with pytest.raises(ValueError, match="same shape"):
        selective_scan(a, b[:, :4], impl)
    with pytest.raises(ValueError, match="same shape"):
        selective_scan(a, b[..., None], impl)  # broadcastable, still refused
    with pytest.raises(ValueError, match="time dimension"):
        selective_scan(a[0, 0, 0], b[0, 0, 0], impl)  # 1-D
    with pytest.raises(ValueError, match="at least one step"):
        selective_scan(a[:, :0], b[:, :0], impl)  # T = 0
    with pytest.raises(ValueError, match="h0"):
        selective_scan(a, b, impl, h0=h0[:, 0])
    with pytest.raises(ValueError, match="h0"):
        selective_scan(a, b, impl, h0=a[:, 0:1])  # (B, 1, ...): a time step too many


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("impl", SCANS)
def test_zeros_give_no_nan(impl, dtype):
    """Exact zeros: b zero over a whole prefix, over whole channels and at scattered steps; a zero
    (a reset) at some steps. log 0 = -inf must not reach the output or the gradient (the log-space
    scan clamps to eps), and the gradient w.r.t. a zero b must be the true one, not 0."""
    a, b, h0, w = make_inputs(33, "mixed", seed=1)
    b[:, :5] = 0.0  # nothing to carry yet
    b[:, :, 0] = 0.0  # a channel that never receives input
    a[:, 10] = 0.0  # every channel forgets everything at t = 10
    a[1, 20:] = 0.0
    h_ref, grads_ref = run("sequential", (a, b, h0), w, torch.float64)
    h, grads = run(impl, (a, b, h0), w, dtype)
    assert torch.isfinite(h).all()
    for g in grads:
        assert torch.isfinite(g).all()
    tol = 1e-4 if dtype == torch.float32 else 1e-10
    assert_close(h, h_ref, tol, f"{impl} h")
    for name, g, g_ref in zip(("a", "b", "h0"), grads, grads_ref):
        assert_close(g, g_ref, tol, f"{impl} dL/d{name}")
    # dL/db_t = g~_t does not depend on b, so it is not 0 where b is 0
    assert grads[1][:, :5].abs().max() > 0.1


@pytest.mark.parametrize("impl", SCANS)
def test_all_zero_input_stays_zero(impl):
    """b = 0 everywhere: h = 0 exactly, except the log-space scan's clamp, which adds at most about
    T * eps = 33 * 1.1e-19 in float32 when |a| <= 1 (the error its docstring promises)."""
    a, _, _, _ = make_inputs(33, "mixed")
    h = selective_scan(a.float(), torch.zeros_like(a, dtype=torch.float32), impl)
    assert h.abs().max().item() <= (0.0 if impl != "logspace" else 33 * 1.1e-19)


@pytest.mark.parametrize("impl", SCANS)
def test_dtype_kept(impl):
    """Each scan returns its inputs' dtype; the log-space scan computes bfloat16 in float32."""
    a, b, _, _ = make_inputs(9, "positive")
    for dtype in (torch.float64, torch.float32, torch.bfloat16):
        assert selective_scan(a.to(dtype), b.to(dtype), impl).dtype == dtype
    h = selective_scan(a.to(torch.bfloat16), b.to(torch.bfloat16), impl)
    assert_close(h, scan_sequential(a, b), 0.05, f"{impl} bfloat16")  # bfloat16 keeps 8 bits


def test_logspace_gradient_needs_no_division_by_a():
    """Small |a| (a fast-decaying state) with a long-ish sequence: autograd through log|a| would give
    dL/da = (dL/dlog|a|) / a and amplify rounding by 1/|a|; the reverse-scan backward does not."""
    a, b, h0, w = make_inputs(100, "mixed", seed=2)
    a = a * 1e-3  # |a| < 1e-3
    _, grads_ref = run("sequential", (a, b, h0), w, torch.float64)
    _, grads = run("logspace", (a, b, h0), w, torch.float32)
    assert_close(grads[0], grads_ref[0], 1e-4, "logspace dL/da at small |a|")


def ssm_inputs(B=2, T=37, D=5, N=4, dtype=torch.float64, seed=0):
    """x, delta, A, Bm, Cm of Mamba's selective SSM, as the model makes them: Delta > 0, A < 0."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=g, dtype=dtype)  # noqa: E731
    delta = torch.rand(B, T, D, generator=g, dtype=dtype) * 0.6 + 0.01
    A = -(torch.rand(D, N, generator=g, dtype=dtype) * 3 + 0.1)
    return [t.requires_grad_() for t in (r(B, T, D), delta, A, r(B, T, N), r(B, T, N))]


@pytest.mark.parametrize("chunk", [1, 8, 64], ids=["chunk1", "chunk8", "chunk>T"])
@pytest.mark.parametrize("method", kernels.DISCRETIZATIONS)
def test_chunked_scan_is_the_reference_in_value_and_gradient(method, chunk):
    """selective_scan_chunked keeps one chunk's states at a time and differentiates each chunk by hand; y and the
    gradients of x, Delta, A, B and C equal the materialized reference's (float64, B = 3, T = 37, D = 5, N = 3: several
    chunks and a ragged last one, filled with zero steps), for each discretization and each scan within a chunk's
    forward, and compiled (captured by dynamo's 'eager' backend: inductor takes a minute)."""
    ins = ssm_inputs(B=3, N=3)
    ref = model.selective_scan_reference(*ins, method)
    gy = torch.randn_like(ref)
    want = torch.autograd.grad(ref, ins, gy)
    for scan, compile in [(s, False) for s in SCANS] + [("sequential", "eager")] * (chunk == 8):
        y = kernels.selective_scan_chunked(*ins, method, chunk=chunk, scan=scan, compile=compile)
        torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12, msg=f"y, {scan}, compile={compile}")
        for name, g, w in zip(["x", "delta", "A", "Bm", "Cm"], torch.autograd.grad(y, ins, gy), want):
            torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10, msg=f"d{name}, {scan}, compile={compile}")
    with pytest.raises(ValueError, match="A \\(D, N\\)"):
        kernels.selective_scan_chunked(ins[0], ins[1], ins[2].T, ins[3], ins[4], method)
    with pytest.raises(ValueError, match="discretization"):
        kernels.selective_scan_chunked(*ins, "euler")


@pytest.mark.parametrize("method", kernels.DISCRETIZATIONS)
def test_chunk_backward_is_autograd_of_the_chunk(method):
    """_chunk_backward, the chunked scan's hand-written backward of one chunk, equals autograd through the chunk's
    forward (_scan_chunk) from a nonzero start state h0 with a gradient arriving at its last state from the chunks
    after it: the gradients of x, Delta, B, C, A and h0 (the two that cross chunks), float64, odd sizes."""
    x, delta, A, Bm, Cm = ssm_inputs(B=3, T=7, D=5, N=3, seed=1)
    h0 = torch.randn(3, 5, 3, dtype=torch.float64, requires_grad=True)
    y, h_end = kernels._scan_chunk(x, delta, Bm, Cm, A, h0, method, "sequential")
    gy, g_end = torch.randn_like(y), torch.randn_like(h_end)
    want = torch.autograd.grad((y, h_end), (x, delta, Bm, Cm, A, h0), (gy, g_end))
    *got, dA, dh0 = kernels._chunk_backward(*(t.detach() for t in (x, delta, Bm, Cm, A, h0)), gy, g_end, method)
    for name, g, w in zip(["x", "delta", "Bm", "Cm", "A", "h0"], (*got, dA.sum(0), dh0), want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10, msg=name)


def test_zoh_keeps_its_digits_for_small_steps():
    """Exact zero-order hold, B-bar x = (e^(Delta A) - 1) / A * B x, in float32 for |Delta A| from 5e-8 to 1e-2 (a
    small step, or a slow channel), against float64 on the same numbers: within 1e-6, relative, entry by entry.
    exp(z) - 1 written out cancels there (21 % off near |z| = 1e-7 in float32; the tests above use |Delta A| >= 0.1
    in float64, where it would pass): expm1 is what keeps the digits."""
    delta = torch.logspace(-7, -2, 11, dtype=torch.float64).view(1, 1, 11)  # (B, T, D)
    A = -torch.linspace(0.5, 1.0, 3, dtype=torch.float64).expand(11, 3)  # (D, N): Delta A in [-1e-2, -5e-8]
    Bm, x = torch.ones(1, 1, 3, dtype=torch.float64), torch.ones(1, 1, 11, dtype=torch.float64)
    ins32 = [t.float() for t in (delta, A, Bm, x)]
    a32, bx32 = kernels.discretize(*ins32, "zoh")
    a64, bx64 = kernels.discretize(*(t.double() for t in ins32), "zoh")  # the same rounded inputs
    assert ((bx32.double() - bx64) / bx64).abs().max() < 1e-6
    assert ((a32.double() - a64) / a64).abs().max() < 1e-6


# -----------------------------------------------------------------------------
# the benchmarks: `python -m bench.kernel_speed scan` and `precision`


def test_scan_benchmark_runs_and_writes_json(tmp_path, capsys):
    path = tmp_path / "scan.json"
    bench_kernels.main(["scan", "--lengths", "3", "8", "--batch", "1", "--d", "2", "--n", "2", "--repeats", "2",
                        "--json", str(path)])
    out = capsys.readouterr().out
    assert "| length | sequential ms | parallel ms | logspace ms | speedup parallel vs sequential |" in out
    assert "conditions: device=cpu" in out and "leaves out" in out  # T=1024, the goal's length, not run
    result = json.loads(path.read_text())
    for impl in SCANS:
        for T in ("3", "8"):
            r = result["results"]["eager"][impl][T]
            assert r["fwd"] > 0 and r["fwd_bwd"] > 0 and 1 <= r["fwd_runs"] <= 2
    assert result["conditions"]["torch"] == torch.__version__


def test_scan_benchmark_states_the_goal(tmp_path, capsys):
    """At T=1024 the benchmark prints the measured parallel/sequential ratio and whether the 10x goal
    is met, whichever it is (one number per step here, so it is quick)."""
    path = tmp_path / "goal.json"
    bench_kernels.main(["scan", "--lengths", "1024", "--batch", "1", "--d", "1", "--n", "1", "--repeats", "1",
                        "--json", str(path)])
    goal_lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("goal:")]
    assert len(goal_lines) == 2  # forward, and forward + backward
    measured = json.loads(path.read_text())["goal"]["measured"]
    for line, ratio in zip(goal_lines, measured.values()):
        assert f"measured {ratio:.2f}x" in line
        assert line.endswith(": met") == (ratio >= 10) and line.endswith("NOT met") == (ratio < 10)


def test_scan_benchmark_survives_a_failing_compile(monkeypatch):
    """--compile must report a torch.compile failure, not crash; the compiled loop is skipped past
    --compile_loop_max."""
    def broken_compile(fn, **kwargs):
        if fn is kernels.scan_logspace:
            raise RuntimeError("no compiler here")
        return fn  # the others 'compile' to themselves: fast, and enough to exercise the bookkeeping

    monkeypatch.setattr(torch, "compile", broken_compile)
    monkeypatch.setattr(torch.compiler, "reset", lambda: None)  # nothing compiled; spares importing dynamo
    results = bench_kernels.time_scans([3, 8], 1, 2, 2, repeats=1, compile=True, compile_loop_max=4)
    compiled = results["compiled"]
    assert "no compiler here" in compiled["logspace"][3]["error"]
    assert compiled["sequential"][8]["error"].startswith("skipped")
    assert compiled["sequential"][3]["fwd"] > 0 and compiled["parallel"][8]["fwd_bwd"] > 0
    table = "\n".join(bench_kernels.time_table(compiled, [3, 8], "fwd", repeats=1))
    assert "failed" in table and "skipped" in table


def test_precision_benchmark(tmp_path, capsys):
    path = tmp_path / "precision.json"
    bench_kernels.main(["precision", "--lengths", "5", "64", "--scales", "1", "--batch", "1", "--d", "2", "--n", "2",
                        "--json", str(path)])
    assert "| scale | length |" in capsys.readouterr().out
    result = json.loads(path.read_text())["results"]["1.0"]
    for T in ("5", "64"):
        assert result[T]["parallel"]["max_rel"] < 1e-5
        assert result[T]["sequential"]["max_rel"] < 1e-5  # float32 rounding of the same loop
        assert 0 < result[T]["logspace"]["max_rel"] < 1e-3
