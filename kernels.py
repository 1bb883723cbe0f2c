"""
Fast paths for model.py, each beside the plain reference it must equal. model.py calls the public
functions here; a switch (`impl=...`) forces either path, and tests/test_kernels.py proves them equal
in value and gradient on odd sizes. Later kernels (Triton) join this file the same way.

The first problem: the selective scan of Mamba (Gu & Dao 2023, eq. 2a), the linear recurrence

    h_t = a_t * h_{t-1} + b_t,     h_{-1} = 0 (or a given h0),     t = 0 .. T-1,

along the time dimension (dim 1), elementwise over every other dim. In Mamba a is the discretized
state transition and b the discretized input, both of shape (B, T, D, N) (eq. 4, zero-order hold):

    code name      paper symbol
    a              A-bar_t = exp(Delta_t A)            (in (0, 1) since A < 0; bilinear may give < 0)
    b              B-bar_t x_t = Delta_t B_t x_t       (the simplified B-bar of the Mamba code)
    h              the hidden state h_t, (B, T, D, N)
    B, T, D, N     batch, sequence length, channels (E * d_model), state size

Three algorithms, all equal up to rounding (SCANS, dispatched by `selective_scan`):
    sequential   the reference: a Python loop over t. T dependent steps.
    parallel     Blelloch's work-efficient scan: O(T) work, O(log T) dependent steps.
    logspace     Heinsen's scan: two cumulative sums in log space (cumsum, logcumsumexp). Fewest steps,
                 least precise for long sequences and large magnitudes (see `precision` below).

Benchmarks (timings are not tests; see main() for every option):
    python kernels.py scan                   # time each scan, forward and forward+backward, eager
    python kernels.py scan --compile         # ... and under torch.compile
    python kernels.py scan --device cuda --lengths 256 1024 4096 --batch 8 --d 128 --n 16
    python kernels.py precision              # float32 error of each scan vs the float64 reference
Both take --json FILE (the numbers with their conditions) and --plot DIR (PNGs; needs matplotlib).
Default sizes (B, D, N) = (4, 64, 16), 4,096 numbers per time step, T from 16 to 4096: `scan` takes
about 1.5 minutes on one CPU core (most of it the log-space scan at T=4096: torch's CPU logcumsumexp
is a scalar loop), `scan --compile` 4 to 8 more (compiling), `precision` under one. Slow points stop
early at --budget seconds, and the tables say so.
"""

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time

import torch
from torch.autograd.function import once_differentiable

# -----------------------------------------------------------------------------
# The selective scan: h_t = a_t * h_{t-1} + b_t along dim 1

SCANS = ("sequential", "parallel", "logspace")


def _check(a, b, h0):
    """Reject inputs the scans would silently broadcast into a wrong answer."""
    if a.shape != b.shape:
        raise ValueError(f"selective_scan: a and b must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.dim() < 2 or a.shape[1] == 0:
        raise ValueError(f"selective_scan: a and b need a time dimension (dim 1) of at least one step, "
                         f"shape (B, T, ...); got {tuple(a.shape)}")
    if h0 is not None and h0.shape != a.shape[:1] + a.shape[2:]:
        raise ValueError(f"selective_scan: h0 must have the shape of one time step, "
                         f"{tuple(a.shape[:1] + a.shape[2:])}, got {tuple(h0.shape)}")


def _fold_h0(a, b, h0):
    """Fold an initial state into the first input: h_0 = a_0 * h0 + b_0, so b_0 <- b_0 + a_0 * h0 and the
    scan can start from zero. Written out of place so autograd reaches h0."""
    if h0 is None:
        return b
    return torch.cat([b[:, :1] + a[:, :1] * h0.unsqueeze(1), b[:, 1:]], dim=1)  # (B, T, ...)


def scan_sequential(a, b, h0=None):
    """The reference: eq. 2a of Mamba (Gu & Dao 2023), h_t = a_t * h_{t-1} + b_t, one step at a time.

    a, b: (B, T, ...) of one shape; h0: (B, ...) or None (zeros). Returns h, (B, T, ...).
    Out of place, so autograd gives the gradient (backpropagation through time). T dependent steps:
    this is the loop the other scans replace."""
    _check(a, b, h0)
    h = torch.zeros_like(b[:, 0]) if h0 is None else h0  # (B, ...)
    hs = []
    # unbind, not a[:, t]: the backward of each a[:, t] writes into a fresh zero tensor of a's full
    # size, T of them, which makes the backward O(T^2); unbind's backward stacks the T gradients once
    for a_t, b_t in zip(a.unbind(1), b.unbind(1)):  # (B, ...) each
        h = a_t * h + b_t
        hs.append(h)
    return torch.stack(hs, dim=1)  # (B, T, ...)


def _blelloch(a, b):
    """h for h_t = a_t * h_{t-1} + b_t from h_{-1} = 0, by recursive pair reduction (Blelloch 1990).

    The step is the associative operator on pairs (a, b): doing (a1, b1) then (a2, b2) is one step
    (a1, b1) o (a2, b2) = (a1 * a2, a2 * b1 + b2). Associativity lets us combine neighbours first:
      up-sweep:   merge each pair (2i, 2i+1) into one step; the merged sequence is half as long,
      recurse:    its scan gives h at every odd position 2i+1,
      down-sweep: each even position is one step from the odd one before it: h_2i = a_2i * h_{2i-1} + b_2i.
    Each level halves T, so there are log2(T) levels of elementwise work: O(T) in all, O(log T) deep."""
    T = a.shape[1]
    if T == 1:
        return b  # h_0 = a_0 * 0 + b_0
    if T % 2 == 1:
        # pad with the identity step (a=1, b=0), which leaves h unchanged, and cut it off again
        a = torch.cat([a, torch.ones_like(a[:, :1])], dim=1)  # (B, T+1, ...)
        b = torch.cat([b, torch.zeros_like(b[:, :1])], dim=1)  # (B, T+1, ...)
        return _blelloch(a, b)[:, :T]  # (B, T, ...)
    a_even, a_odd = a[:, 0::2], a[:, 1::2]  # (B, T/2, ...) each, strided views: steps 2i and 2i+1
    b_even, b_odd = b[:, 0::2], b[:, 1::2]  # (B, T/2, ...)
    # up-sweep: (a_2i, b_2i) o (a_2i+1, b_2i+1), then scan the half-length sequence
    h_odd = _blelloch(a_even * a_odd, a_odd * b_even + b_odd)  # (B, T/2, ...): h_1, h_3, ..., h_{T-1}
    # down-sweep: h_{2i-1} is h_odd shifted right by one, with h_{-1} = 0 in front
    h_before = torch.cat([torch.zeros_like(h_odd[:, :1]), h_odd[:, :-1]], dim=1)  # (B, T/2, ...)
    h_even = a_even * h_before + b_even  # (B, T/2, ...): h_0, h_2, ..., h_{T-2}
    # interleave: stack puts h_2i and h_2i+1 side by side on a new dim 2, which reshape flattens into time
    h = torch.stack([h_even, h_odd], dim=2)  # (B, T/2, 2, ...)
    return h.reshape(a.shape)  # (B, T, ...)


def scan_parallel(a, b, h0=None):
    """Blelloch's work-efficient parallel scan (Blelloch 1990, "Prefix sums and their applications",
    first-order linear recurrences) for eq. 2a of Mamba. See `_blelloch` for the algorithm.

    Same arguments and result as `scan_sequential`. Functional (no in-place ops), so autograd
    differentiates it; odd lengths are padded with identity steps at each level and cut back. (One
    difference: at T=1 without h0, a is not used at all, so its gradient is None rather than zeros.)
    A custom backward (`_ReverseScanGrad`, as scan_logspace uses) would save memory but measured only
    1.1x-1.5x faster forward+backward on one CPU core, so autograd's plain version stays."""
    _check(a, b, h0)
    return _blelloch(a, _fold_h0(a, b, h0))


class _ReverseScanGrad(torch.autograd.Function):
    """h = scan(a, b) (from h_{-1} = 0), differentiated by one more scan of the same kind, run backwards.

    The recurrence is linear, so the gradient reaching h_t, g~_t = dL/dh_t counting everything h_t feeds
    later, obeys the same recurrence in reverse time, with a shifted by one step:
        g~_t = g_t + a_{t+1} g~_{t+1},    g~_{T-1} = g_{T-1},
    and then dL/db_t = g~_t and dL/da_t = g~_t h_{t-1} (h_{-1} = 0). Mamba's fused kernel does the same.
    Only a and h are saved. Double backward is refused (once_differentiable) rather than silently wrong."""

    @staticmethod
    def forward(ctx, a, b, scan):
        h = scan(a, b)
        ctx.scan = scan
        ctx.save_for_backward(a, h)
        return h

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h):
        a, h = ctx.saved_tensors
        # a_{t+1} beside g_t; the last step's factor multiplies g~_T = 0, so 1 is as good as any
        a_next = torch.cat([a[:, 1:], torch.ones_like(a[:, :1])], dim=1)  # (B, T, ...)
        g = ctx.scan(a_next.flip(1), grad_h.flip(1)).flip(1)  # (B, T, ...): g~, scanned from the end
        h_prev = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], dim=1)  # (B, T, ...): h_{t-1}
        return g * h_prev, g, None


def _logspace(a, b):
    """h for h_t = a_t * h_{t-1} + b_t from h_{-1} = 0, in log space (see `scan_logspace`). No gradient."""
    eps = math.sqrt(torch.finfo(a.dtype).tiny)  # 1.1e-19 in float32: see "Zeros" in scan_logspace
    # a* = sign * |a*|: the sign from the parity of the negative a's so far, |a*| in log space
    sign = 1 - 2 * (torch.cumsum((a < 0).to(torch.int32), dim=1) % 2).to(a.dtype)  # (B, T, ...): +1 or -1
    log_a_star = torch.cumsum(torch.log(a.abs().clamp_min(eps)), dim=1)  # (B, T, ...): log |a*_t|
    # b_s / a*_s = c_s / |a*_s| with c_s = b_s * sign_s; c's positive and negative parts go separately
    c = b * sign  # (B, T, ...)
    log_p = torch.logcumsumexp(torch.log(c.clamp_min(eps)) - log_a_star, dim=1)  # (B, T, ...): log P_t
    log_n = torch.logcumsumexp(torch.log((-c).clamp_min(eps)) - log_a_star, dim=1)  # (B, T, ...): log N_t
    return sign * (torch.exp(log_a_star + log_p) - torch.exp(log_a_star + log_n))  # (B, T, ...)


def scan_logspace(a, b, h0=None):
    """Heinsen's log-space scan (Heinsen 2023, "Efficient parallelization of a ubiquitous sequential
    computation", arXiv 2311.06281) for eq. 2a of Mamba. Unrolling the recurrence,

        h_t = a*_t (h0 + sum_{s<=t} b_s / a*_s),      a*_t = prod_{s<=t} a_s,
        log h_t = log a*_t + logcumsumexp_t(log b_t - log a*_t),   log a*_t = cumsum_t(log a_t),

    two cumulative sums, each one library call (h0 is folded into b_0 first).

    Signs: a and b may be negative (a bilinear discretization can give a < 0), and log needs x > 0.
    Heinsen takes complex logs (log x = log|x| + i*pi for x < 0); torch.logcumsumexp accepts complex
    input, forward and backward, but in torch 2.13 on the CPU its complex log1p returns NaN for a tiny
    argument with a subnormal imaginary part (torch.log1p(1e-153 + 1e-310j) is nan), which rounding in
    the running sum produces: a float64 scan of 100 steps came out NaN. So everything here stays real:
      sign(a*_t) = (-1)^(number of negative a_s, s <= t), and |a*_t| = exp(cumsum log|a_s|);
      c_s = b_s * sign(a*_s) (= b_s |a*_s| / a*_s) is split into its positive and negative parts,
      each summed by its own real logcumsumexp (P and N), and h_t = sign(a*_t) |a*_t| (P_t - N_t).

    Zeros (b_s = 0, a_s = 0, and the absent half of each of c's parts): log 0 = -inf would give NaN
    (exp(-inf + inf)), so |x| is clamped to eps = sqrt(smallest normal) before the log: 1.1e-19 in
    float32, 1.5e-154 in float64 (the square root leaves room for products with eps to stay normal).
    Each clamped entry adds eps * |a*_t / a*_s| to h_t, at most eps when |a| <= 1 (Mamba's case), far
    below rounding; the seed write-up's log 0 = -12 would add up to 6e-6 per entry. A zero a resets h,
    up to eps * |h|.

    Gradient: by the reverse scan of `_ReverseScanGrad`, itself in log space, not by autograd through
    the logs. Autograd would reach a through log|a|, as dL/da = (dL/dlog|a|) / a, and dL/dlog|a| is a
    difference of large cancelling sums: its rounding, divided by a small |a|, swamped the gradient
    (float32, a uniform in (-1, 1), T=100: errors 13% of the largest dL/da). The reverse scan needs no
    division, and the clamps are never differentiated, so zeros give no NaN and their true gradient.

    Precision: log|a*_t| grows like -t * mean(-log|a|), and h_t comes back as exp(log|a*_t| + log P_t),
    two large numbers that almost cancel. Their rounding, about |log a*_t| * machine epsilon, becomes
    h's relative error, so the error grows with length and with how fast a decays; and where P and N
    are large and close, their difference loses digits too. `python kernels.py precision` measures
    it. Computes in float32 for float32, float16 and bfloat16 inputs, float64 for float64; returns a's
    dtype."""
    _check(a, b, h0)
    dtype = a.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32
    a, b, h0 = (x if x is None else x.to(work) for x in (a, b, h0))
    b = _fold_h0(a, b, h0)  # outside the Function: autograd carries b_0's gradient on to h0 and a_0
    return _ReverseScanGrad.apply(a, b, _logspace).to(dtype)


_SCAN_FNS = {"sequential": scan_sequential, "parallel": scan_parallel, "logspace": scan_logspace}


def selective_scan(a, b, impl="sequential", h0=None):
    """h (same shape as a and b: (B, T, ...)) with h_t = a_t * h_{t-1} + b_t along dim 1 (Mamba eq. 2a),
    starting from h_{-1} = h0 (zeros if None, else shape (B, ...)). impl picks the algorithm (one of
    SCANS: 'sequential', the plain loop; 'parallel', Blelloch's scan; 'logspace', Heinsen's); all equal
    up to rounding, and all differentiable by autograd ('logspace' once: no double backward)."""
    if impl not in _SCAN_FNS:
        raise ValueError(f"unknown scan impl {impl!r}: expected one of {', '.join(map(repr, SCANS))}")
    return _SCAN_FNS[impl](a, b, h0=h0)


# -----------------------------------------------------------------------------
# Benchmarks: `python kernels.py scan` (time) and `python kernels.py precision` (float32 error)


def mamba_like_inputs(shape, scale, dtype=torch.float32, device="cpu", seed=0):
    """(a, b) shaped like Mamba's: a = exp(-softplus(x) * scale), x ~ N(0, 1), which is exp(Delta A) with a
    positive step Delta = softplus(x) and A = -scale, so a is in (0, 1) and decays faster as scale grows;
    b ~ N(0, scale^2), of both signs. Made in float64 on the CPU from a seed, then cast, so every dtype
    and device gets the same numbers."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    a = torch.exp(-torch.nn.functional.softplus(x) * scale)
    b = torch.randn(shape, generator=g, dtype=torch.float64) * scale
    return a.to(device=device, dtype=dtype), b.to(device=device, dtype=dtype)


def _sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _median_ms(fn, device, repeats, budget_s):
    """(median wall time of fn() in ms, number of timed runs). One untimed warm-up run first (it also
    compiles, under torch.compile), then up to `repeats` timed runs, stopping early once they have
    used `budget_s` seconds: a slow point gets fewer runs (at least one), which the tables mark.
    On CUDA, synchronize before and after each run so the time covers the kernels, not their launch."""
    fn()
    _sync(device)
    times = []
    while len(times) < repeats and sum(times) < budget_s * 1e3:
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), len(times)


def _cpu_name():
    """The CPU's model name on Linux (platform.processor() there says only 'x86_64')."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def conditions(device, dtype):
    """What a number depends on, printed and saved beside it."""
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else _cpu_name()
    return {"device": device, "device_name": name, "dtype": str(dtype).replace("torch.", ""),
            "torch": torch.__version__, "python": platform.python_version(), "threads": torch.get_num_threads(),
            "cpu_count": os.cpu_count()}


def time_scans(lengths, batch, d, n, device="cpu", dtype=torch.float32, repeats=5, budget_s=5.0, compile=False,
               compile_loop_max=256, seed=0):
    """Times every scan at every length on Mamba-like inputs of shape (batch, T, d, n): forward (under
    no_grad) and forward+backward (gradients w.r.t. a and b from a fixed random output gradient).
    Returns {mode: {impl: {T: {'fwd': ms, 'fwd_runs': k, 'fwd_bwd': ms, 'fwd_bwd_runs': k}}}} for mode
    'eager' and, with compile=True, 'compiled' (torch.compile, one static-shape graph per length).
    A point that could not be timed holds {'error': why} instead: torch.compile failing (no compiler on
    the machine, an unsupported op) is reported this way, never raised. The compiled sequential scan
    is skipped past T = compile_loop_max: torch.compile unrolls its loop into T steps, and its compile
    time grows with T (over a minute at T=256 on one CPU core)."""
    results = {}
    for mode in ["eager"] + (["compiled"] if compile else []):
        results[mode] = {}
        for impl in SCANS:
            results[mode][impl] = {}
            for T in lengths:
                fn = _SCAN_FNS[impl]
                if mode == "compiled":
                    if impl == "sequential" and T > compile_loop_max:
                        results[mode][impl][T] = {"error": f"skipped: T > --compile_loop_max={compile_loop_max}"}
                        continue
                    try:
                        # A fresh compile per point, from empty caches: each length and grad mode is its
                        # own graph, and past dynamo's recompile limit (8) torch.compile quietly runs
                        # eager. dynamic=False: with dynamic shapes the recursion of scan_parallel took
                        # over ten minutes to compile at T=256 (a guard on T's parity per level).
                        torch.compiler.reset()
                        fn = torch.compile(fn, dynamic=False)
                    except Exception as e:  # an old torch, a platform without dynamo, ...
                        results[mode][impl][T] = {"error": f"torch.compile: {type(e).__name__}: {e}"[:300]}
                        continue
                a, b = mamba_like_inputs((batch, T, d, n), 1.0, dtype, device, seed)
                grad = torch.randn_like(b)
                a.requires_grad_(True)
                b.requires_grad_(True)

                def forward():
                    with torch.no_grad():
                        fn(a, b)

                def forward_backward():
                    a.grad = b.grad = None
                    fn(a, b).backward(grad)

                t0 = time.perf_counter()
                try:
                    r = {}
                    r["fwd"], r["fwd_runs"] = _median_ms(forward, device, repeats, budget_s)
                    r["fwd_bwd"], r["fwd_bwd_runs"] = _median_ms(forward_backward, device, repeats, budget_s)
                except Exception as e:  # compilation fails at the first call, not at torch.compile()
                    r = {"error": f"{type(e).__name__}: {e}"[:300]}
                results[mode][impl][T] = r
                # progress on stderr, so stdout holds only the conditions and the tables
                shown = r.get("error") or f"fwd {r['fwd']:.2f} ms, fwd+bwd {r['fwd_bwd']:.2f} ms"
                print(f"  {mode} {impl} T={T}: {shown} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    return results


def time_table(results, lengths, key, repeats):
    """Markdown table of one timing (key 'fwd' or 'fwd_bwd') for one mode's results. A time that is the
    median of fewer than `repeats` runs (the point hit its budget) shows the count: '812.3 (2)'."""
    def cell(r):
        if key not in r:
            return "skipped" if r["error"].startswith("skipped") else "failed"
        runs = r[f"{key}_runs"]
        return f"{r[key]:.2f}" + (f" ({runs})" if runs < repeats else "")

    lines = ["| length | sequential ms | parallel ms | logspace ms | speedup parallel vs sequential |",
             "|---:|---:|---:|---:|---:|"]
    for T in lengths:
        row = [results[impl][T] for impl in SCANS]
        seq, par = row[0], row[1]
        speedup = f"{seq[key] / par[key]:.2f}x" if key in seq and key in par else "-"
        lines.append(f"| {T} | " + " | ".join(cell(r) for r in row) + f" | {speedup} |")
    return lines


def measure_precision(lengths, scales, batch, d, n, seed=0):
    """Float32 error of every scan against the float64 sequential reference on the same Mamba-like
    inputs (`mamba_like_inputs`, rounded to float32 for both), on the CPU. Returns {scale: {length:
    {impl: {'max_abs': e, 'max_rel': e}}}}, where max_rel = max|h - h_ref| / max|h_ref| (relative to the
    largest state, since single entries of h_ref cross zero)."""
    results = {}
    for scale in scales:
        results[scale] = {}
        for T in lengths:
            a32, b32 = mamba_like_inputs((batch, T, d, n), scale, torch.float32, "cpu", seed)
            with torch.no_grad():
                # the reference starts from the same float32 inputs, so only the scans' arithmetic is measured
                ref = scan_sequential(a32.double(), b32.double())
                results[scale][T] = {}
                for impl in SCANS:
                    err = (_SCAN_FNS[impl](a32, b32).double() - ref).abs().max().item()
                    results[scale][T][impl] = {"max_abs": err, "max_rel": err / ref.abs().max().item()}
    return results


def precision_table(results, scales, lengths):
    lines = ["| scale | length | " + " | ".join(f"{impl} abs / rel" for impl in SCANS) + " |",
             "|---:|---:|" + "---:|" * len(SCANS)]
    for scale in scales:
        for T in lengths:
            r = results[scale][T]
            cells = [f"{r[impl]['max_abs']:.1e} / {r[impl]['max_rel']:.1e}" for impl in SCANS]
            lines.append(f"| {scale:g} | {T} | " + " | ".join(cells) + " |")
    return lines


def plot_times(results, lengths, out_dir):
    """time vs length, log-log, one panel each for forward and forward+backward; one PNG per mode."""
    import matplotlib  # imported here only: plotting is optional and matplotlib is not a requirement
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for mode, by_impl in results.items():
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for ax, key, title in zip(axes, ("fwd", "fwd_bwd"), ("forward", "forward + backward")):
            for impl in SCANS:
                pts = [(T, by_impl[impl][T][key]) for T in lengths if key in by_impl[impl][T]]
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=impl)
            ax.set(xscale="log", yscale="log", xlabel="sequence length T", ylabel="ms (median)",
                   title=f"{title} ({mode})")
            ax.set_xticks(lengths, [str(T) for T in lengths], minor=False)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend()
        fig.tight_layout()
        paths.append(os.path.join(out_dir, f"scan_time_{mode}.png"))
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    return paths


def plot_precision(results, scales, lengths, out_dir):
    """max relative error vs length, one panel per input scale."""
    import matplotlib  # imported here only, as in plot_times
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(scales), figsize=(4 * len(scales), 4), squeeze=False)
    for ax, scale in zip(axes[0], scales):
        for impl in SCANS:
            # an exact 0 (a short sequential scan) cannot sit on a log axis: floor it at 1e-10
            ax.plot(lengths, [max(results[scale][T][impl]["max_rel"], 1e-10) for T in lengths], marker="o",
                    label=impl)
        ax.set(xscale="log", yscale="log", xlabel="sequence length T", ylabel="max |h - h_ref| / max |h_ref|",
               title=f"float32 error, scale {scale:g}")
        ax.set_xticks(lengths, [str(T) for T in lengths], minor=False)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    path = os.path.join(out_dir, "scan_precision.png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [path]


def _write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
    print(f"wrote {path}")


def _plot(plot_fn, out_dir, *args):
    """Plots come last, after the tables are printed and the JSON written, so a missing matplotlib
    loses nothing."""
    try:
        os.makedirs(out_dir, exist_ok=True)
        for path in plot_fn(*args, out_dir):
            print(f"wrote {path}")
    except ImportError:
        sys.exit("--plot needs matplotlib (pip install matplotlib); the tables above are complete")


GOAL_LENGTH, GOAL_SPEEDUP = 1024, 10.0  # the goal: parallel >= 10x faster than sequential at T=1024


def main(argv=None):
    p = argparse.ArgumentParser(description="Benchmarks of the selective scans: speed (scan) and float32 "
                                            "precision (precision). Timings are measurements, not tests.")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("scan", help="time each scan, forward and forward+backward")
    s.add_argument("--device", default="cpu", help="cpu or cuda")
    s.add_argument("--lengths", type=int, nargs="+", default=[16, 64, 256, 1024, 4096])
    # B*D*N = 4096 numbers per step: the default run (eager) takes about 1.5 minutes on one CPU core
    s.add_argument("--batch", type=int, default=4)
    s.add_argument("--d", type=int, default=64, help="channels D")
    s.add_argument("--n", type=int, default=16, help="state size N (Mamba's default, d_state=16)")
    s.add_argument("--compile", action="store_true", help="also time each scan under torch.compile")
    s.add_argument("--repeats", type=int, default=5, help="timed runs per point at most (the median is reported)")
    s.add_argument("--budget", type=float, default=5.0,
                   help="seconds of timed runs per point; a slower point stops early (at least one run)")
    s.add_argument("--compile_loop_max", type=int, default=256,
                   help="longest T at which the sequential scan is compiled (its compile time grows with T)")
    s.add_argument("--dtype", default="float32", choices=["float32", "float64", "bfloat16", "float16"])
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--json", help="write the timings and their conditions to this file")
    s.add_argument("--plot", metavar="DIR", help="write time-vs-length PNGs into DIR")
    q = sub.add_parser("precision", help="float32 error of each scan vs the float64 sequential reference")
    q.add_argument("--lengths", type=int, nargs="+", default=[16, 64, 256, 1024, 4096])
    q.add_argument("--scales", type=float, nargs="+", default=[0.1, 1.0, 10.0],
                   help="a = exp(-softplus(x) * scale), b ~ N(0, scale^2): larger scales decay faster")
    q.add_argument("--batch", type=int, default=4)
    q.add_argument("--d", type=int, default=64)
    q.add_argument("--n", type=int, default=16)
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--json", help="write the errors and their conditions to this file")
    q.add_argument("--plot", metavar="DIR", help="write an error-vs-length PNG into DIR")
    args = p.parse_args(argv)
    if min(args.lengths) < 1:
        p.error("--lengths must be positive")

    if args.command == "scan":
        if args.device.startswith("cuda") and not torch.cuda.is_available():
            p.error("--device cuda, but torch.cuda.is_available() is False")
        dtype = getattr(torch, args.dtype)
        cond = conditions(args.device, dtype)
        cond.update(batch=args.batch, d=args.d, n=args.n, repeats=args.repeats, budget_s=args.budget, seed=args.seed,
                    shape=f"(B, T, D, N) = ({args.batch}, T, {args.d}, {args.n})")
        print("conditions: " + ", ".join(f"{k}={v}" for k, v in cond.items()))
        results = time_scans(args.lengths, args.batch, args.d, args.n, args.device, dtype, args.repeats,
                             args.budget, args.compile, args.compile_loop_max, args.seed)
        goal = {}
        for mode, by_impl in results.items():
            for key, title in (("fwd", "forward (no_grad)"), ("fwd_bwd", "forward + backward")):
                print(f"\n{mode}, {title}, median of {args.repeats} runs after a warm-up "
                      f"(fewer in parentheses, where a point hit --budget={args.budget:g} s):\n")
                print("\n".join(time_table(by_impl, args.lengths, key, args.repeats)))
            errors = {f"{impl} T={T}": r["error"] for impl in SCANS for T, r in by_impl[impl].items() if "error" in r}
            for where, why in errors.items():
                print(f"  {mode} {where}: {why}")
            if GOAL_LENGTH in args.lengths:
                # the same device and mode for both; where the compiled loop was skipped (too long to
                # compile), compiled parallel is also set against the eager loop, and says so
                pairs = [(mode, mode)] + ([("eager", mode)] if mode != "eager" else [])
                for seq_mode, par_mode in pairs:
                    seq = results[seq_mode]["sequential"][GOAL_LENGTH]
                    par = results[par_mode]["parallel"][GOAL_LENGTH]
                    if seq_mode != par_mode and "fwd" in results[par_mode]["sequential"][GOAL_LENGTH]:
                        continue  # both compiled: already compared
                    for key in ("fwd", "fwd_bwd"):
                        if key in seq and key in par:
                            ratio = seq[key] / par[key]
                            goal[f"{seq_mode}_sequential_vs_{par_mode}_parallel_{key}"] = ratio
                            print(f"goal: {par_mode} parallel >= {GOAL_SPEEDUP:g}x faster than {seq_mode} "
                                  f"sequential at T={GOAL_LENGTH} ({key}): measured {ratio:.2f}x: "
                                  f"{'met' if ratio >= GOAL_SPEEDUP else 'NOT met'}")
        if GOAL_LENGTH not in args.lengths:
            print(f"(the goal is stated at T={GOAL_LENGTH}, which --lengths leaves out)")
        if args.json:
            _write_json(args.json, {"conditions": cond, "lengths": args.lengths, "results": results,
                                    "goal": {"length": GOAL_LENGTH, "speedup": GOAL_SPEEDUP, "measured": goal}})
        if args.plot:
            _plot(plot_times, args.plot, results, args.lengths)
    else:
        cond = conditions("cpu", torch.float32)
        cond.update(batch=args.batch, d=args.d, n=args.n, seed=args.seed, reference="scan_sequential in float64")
        print("conditions: " + ", ".join(f"{k}={v}" for k, v in cond.items()))
        results = measure_precision(args.lengths, args.scales, args.batch, args.d, args.n, args.seed)
        print("\nfloat32 max abs error / max relative error (max|h - h_ref| / max|h_ref|) vs float64 sequential:\n")
        print("\n".join(precision_table(results, args.scales, args.lengths)))
        if args.json:
            _write_json(args.json, {"conditions": cond, "lengths": args.lengths, "scales": args.scales,
                                    "results": results})
        if args.plot:
            _plot(plot_precision, args.plot, results, args.scales, args.lengths)


if __name__ == "__main__":
    main()
