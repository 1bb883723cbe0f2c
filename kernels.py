"""
Fast paths for model.py, beside the plain references they must equal. model.py calls the public functions here;
a switch (`impl=...` here, or model.py's config) forces either path, and tests/test_kernels.py and
tests/test_triton_kernels.py prove the two equal in value and gradient on odd sizes. Read in order:
    the selective scan of Mamba: the reference loop (here, not in model.py, which imports this file), Blelloch's
        and Heinsen's scans, the discretizations, the chunked scan;
    the Triton kernels, each an autograd Function with a Triton forward and backward, whose reference is
        model.py's written-out path of the same math: rms_norm_triton, layer_norm_triton, swiglu_triton,
        flash_attention_triton (FlashAttention-2), selective_scan_triton (Mamba's scan, fused);
    the compiled decode step of the language models (`compiled_decoding`), whose reference is the eager step
        model.decode runs.
Triton is optional: it is imported at the first call of a Triton function (triton_available() says whether one
can run: on CUDA, or on the CPU in Triton's interpreter, TRITON_INTERPRET=1 set before triton's import).

The selective scan of Mamba (Gu & Dao 2023, eq. 2a) is the linear recurrence, along dim 1, elementwise over the
other dims, of a the discretized state transition and b the discretized input, both (B, T, D, N) (eq. 4):

    h_t = a_t * h_{t-1} + b_t,     h_{-1} = 0 (or a given h0),     t = 0 .. T-1

    code name      paper symbol
    a              A-bar_t = exp(Delta_t A)            (in (0, 1) since A < 0; bilinear may give < 0)
    b              B-bar_t x_t = Delta_t B_t x_t       (the simplified B-bar of the Mamba code)
    h              the hidden state h_t, (B, T, D, N)
    B, T, D, N     batch, sequence length, channels (E * d_model), state size

Three algorithms, equal up to rounding (SCANS, dispatched by `selective_scan`): 'sequential', the reference
loop (T dependent steps); 'parallel', Blelloch's work-efficient scan (O(T) work, O(log T) dependent steps);
'logspace', Heinsen's two cumulative sums in log space (fewest steps, least precise for long sequences).
How fast and how precise each path is, and whether every Triton kernel compiles for a GPU that is not here, is
measured by bench/kernel_speed.py (`python -m bench.kernel_speed scan|precision|triton|compile`).
"""

# annotations stay strings: the Triton kernels' `tl.constexpr` must not be evaluated where triton is absent
from __future__ import annotations

import functools
import math
import os
import types

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
    return b if h0 is None else torch.cat([b[:, :1] + a[:, :1] * h0.unsqueeze(1), b[:, 1:]], dim=1)  # (B, T, ...)


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
    """Blelloch's work-efficient parallel scan (Blelloch 1990, "Prefix sums and their applications", first-order linear
    recurrences) for eq. 2a of Mamba, by `_blelloch`. Same arguments and result as `scan_sequential`; functional, so
    autograd differentiates it (at T=1 without h0, a is not used at all, so its gradient is None rather than zeros). A
    custom backward (`_ReverseScanGrad`, as scan_logspace uses) would save memory but measured only 1.1x-1.5x faster
    forward+backward on one CPU core, so autograd's plain version stays."""
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

    Zeros (b_s = 0, a_s = 0, and the absent half of each of c's parts): log 0 = -inf would give NaN (exp(-inf + inf)),
    so |x| is clamped to eps = sqrt(smallest normal) before the log: 1.1e-19 in float32, 1.5e-154 in float64 (the square
    root leaves room for products with eps to stay normal). Each clamped entry adds eps * |a*_t / a*_s| to h_t, at most
    eps when |a| <= 1 (Mamba's case), far below rounding; the source write-up's log 0 = -12 would add up to 6e-6 per
    entry. A zero a resets h, up to eps * |h|.

    Gradient: by the reverse scan of `_ReverseScanGrad`, itself in log space, not by autograd through
    the logs. Autograd would reach a through log|a|, as dL/da = (dL/dlog|a|) / a, and dL/dlog|a| is a
    difference of large cancelling sums: its rounding, divided by a small |a|, swamped the gradient
    (float32, a uniform in (-1, 1), T=100: errors 13% of the largest dL/da). The reverse scan needs no
    division, and the clamps are never differentiated, so zeros give no NaN and their true gradient.

    Precision: log|a*_t| grows like -t * mean(-log|a|), and h_t comes back as exp(log|a*_t| + log P_t), two large
    numbers that almost cancel. Their rounding, about |log a*_t| * machine epsilon, becomes h's relative error, so the
    error grows with length and with how fast a decays; and where P and N are large and close, their difference loses
    digits too. `python -m bench.kernel_speed precision` measures it. Computes in float32 for float32, float16 and
    bfloat16 inputs, float64 for float64; returns a's dtype."""
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


def discretize(delta, A, Bm, x, method):
    """The continuous (A, B) at step size Delta made discrete, for diagonal A (so every inverse is a
    division). delta, x: (B, T, D); A: (D, N); Bm: (B, T, N). Returns (a_bar, bx_bar), each (B, T, D, N).
        'zoh_approx'  A-bar = exp(Delta A),  B-bar = Delta B   (Mamba's simplification, Gu & Dao sec. 3.5.2)
        'zoh'         A-bar = exp(Delta A),  B-bar = (Delta A)^-1 (exp(Delta A) - I) Delta B   (exact zero-order
                      hold, Mamba eq. 4); for diagonal A that is (exp(Delta A) - 1) / A * B
        'bilinear'    A-bar = (I - Delta A/2)^-1 (I + Delta A/2),  B-bar = (I - Delta A/2)^-1 Delta B   (S4 eq. 3)
    A < 0 and Delta > 0, so Delta A < 0: exp(Delta A) is in (0, 1); the bilinear A-bar is in (-1, 1), negative
    once Delta A < -2 (the scans handle signs)."""
    dA = delta[..., None] * A  # (B, T, D, N)
    dBx = (delta * x)[..., None] * Bm[:, :, None, :]  # (B, T, D, N): Delta B x
    if method == "zoh_approx":
        return torch.exp(dA), dBx
    if method == "zoh":
        a_bar = torch.exp(dA)
        # expm1: exp(dA) - 1 without the cancellation that loses its digits as dA -> 0
        return a_bar, torch.expm1(dA) / A * (x[..., None] * Bm[:, :, None, :])  # (exp(dA) - 1)/(dA) * Delta B x
    if method == "bilinear":
        inv = 1.0 / (1 - dA / 2)
        return inv * (1 + dA / 2), inv * dBx
    raise ValueError(f"discretization={method!r}: expected one of {DISCRETIZATIONS}")


DISCRETIZATIONS = ("zoh_approx", "zoh", "bilinear")


def _scan_chunk(x, delta, Bm, Cm, A, h0, discretization, scan):
    """One chunk of the fused scan: (y (B, L, D), the state after its last step (B, D, N), a copy, not a view that
    would keep every state alive), from the state h0 before it; C_t h_t summed over N (compiled: fused in the loop)."""
    a_bar, bx_bar = discretize(delta, A, Bm, x, discretization)
    h = selective_scan(a_bar, bx_bar, scan, h0=h0)  # (B, L, D, N)
    return (h * Cm[:, :, None, :]).sum(-1), h[:, -1].clone()


def _step_terms(delta, A, method):
    """(a, s, a_z, s_d, s_A) of the Triton section's table (below) for one step's delta (B, D, 1): A-bar, B-bar x /
    (x B) and their derivatives; zoh's s as discretize has it, expm1(z) / A, so ds/dA = (z e^z - expm1(z)) / A^2."""
    z = delta * A  # (B, D, N)
    if method == "bilinear":
        inv = 1 / (1 - z / 2)
        return (1 + z / 2) * inv, delta * inv, inv * inv, inv * inv, delta * delta * inv * inv / 2
    a = torch.exp(z)
    if method == "zoh_approx":
        return a, delta, a, 1.0, 0.0
    return a, torch.expm1(z) / A, a, a, (z * a - torch.expm1(z)) / (A * A)


def _chunk_backward(x, delta, Bm, Cm, A, h0, gy, g_end, method):
    """One chunk's gradients by hand, as _sscan_bwd (the Triton section's comment derives them): states recomputed from
    h0, then eq. 2a's adjoint g_t = C_t gy_t + a_{t+1} g_{t+1} from the last step (a_L g_L = g_end, from later chunks).
    Returns dx, d delta, dB, dC, dA (per row) and what reaches h0. No autograd: compiled, a few fused loops a step."""
    terms = [_step_terms(delta[:, t, :, None], A, method) for t in range(x.size(1))]  # (a, s, a_z, s_d, s_A) each
    xB = [x[:, t, :, None] * Bm[:, t, None, :] for t in range(x.size(1))]  # (B, D, N) each
    h = [h0]  # h[t + 1] is h_t
    for (a, s, *_), xb in zip(terms, xB):
        h.append(a * h[-1] + s * xb)
    g, dA, grads = g_end, 0, []
    for t, (a, s, a_z, s_d, s_A) in reversed(list(enumerate(terms))):
        g = gy[:, t, :, None] * Cm[:, t, None, :] + g  # (B, D, N): g_t
        g_a, g_s, g_sb = g * h[t] * a_z, g * xB[t], g * s  # d a_t da/dz, d s_t, d (x_t B_t)
        grads.append(((g_sb * Bm[:, t, None, :]).sum(-1), (g_a * A + g_s * s_d).sum(-1),  # dx_t, d delta_t
                      (g_sb * x[:, t, :, None]).sum(1), (gy[:, t, :, None] * h[t + 1]).sum(1)))  # dB_t, dC_t
        dA = dA + g_a * delta[:, t, :, None] + g_s * s_A  # (B, D, N): the caller sums over the batch
        g = a * g  # what reaches h_{t-1}
    return (*(torch.stack(z[::-1], 1) for z in zip(*grads)), dA, g)


CHUNK_COMPILE_BACKEND = "inductor"  # what model.py's scan_compile asks for (tests: dynamo's 'eager', no codegen)


@functools.lru_cache(maxsize=None)  # one torch.compile per function and backend, built at its first call
def _chunk_fn(fn, compile):
    """fn, or its torch.compile (`compile`: a backend name, or False) for _chunks' one shape: once per batch size."""
    return torch.compile(fn, backend=compile, dynamic=False) if compile else fn


def _chunks(t, steps):
    """(B, T, C) -> (T/steps, B, steps, C), contiguous (one copy; a copy per chunk cost more), zero steps (Delta = x
    = 0: a = 1, B-bar x = 0 in every discretization: steps that change nothing) filling the last chunk."""
    t = torch.nn.functional.pad(t, (0, 0, 0, -t.size(1) % steps)) if t.size(1) % steps else t
    return t.unflatten(1, (-1, steps)).transpose(0, 1).contiguous()


class _ChunkedScan(torch.autograd.Function):
    """selective_scan_chunked's autograd: the forward keeps y and each chunk's start state; the backward walks the
    chunks from the last, recomputing each one's states from its start (gradient checkpointing: Chen et al. 2016, as
    Mamba does, Gu & Dao 2023 sec. 3.3.2), differentiating it by hand and passing on what reaches its start."""

    @staticmethod
    def forward(ctx, x, delta, A, Bm, Cm, discretization, chunk, scan, compile):
        ins = [_chunks(t, min(chunk, x.size(1))) for t in (x, delta, Bm, Cm)]  # (T/chunk, B, chunk, .) each
        h, ys, starts = x.new_zeros(x.size(0), *A.shape), [], []
        for c in zip(*ins):  # a chunk's x, delta, Bm, Cm: (B, chunk, .) each
            starts.append(h)
            y, h = _chunk_fn(_scan_chunk, compile)(*c, A, h, discretization, scan)
            ys.append(y)
        ctx.save_for_backward(*ins, A, *starts)
        ctx.settings = (discretization, compile, x.size(1))
        return torch.cat(ys, 1)[:, :x.size(1)]

    @staticmethod
    @once_differentiable
    def backward(ctx, gy):
        (*ins, A), starts, (discretization, compile, T) = ctx.saved_tensors[:5], ctx.saved_tensors[5:], ctx.settings
        g_end, gA, parts = torch.zeros_like(starts[0]), torch.zeros_like(A), []  # g_end: what reaches a chunk's end
        for *c, gy_c, h0 in reversed(list(zip(*ins, _chunks(gy, ins[0].size(2)), starts))):
            *g, g_a, g_end = _chunk_fn(_chunk_backward, compile)(*c, A, h0, gy_c, g_end, discretization)
            parts.append(g)  # [dx, d delta, dB, dC] of this chunk
            gA += g_a.sum(0)  # (summed here: a sum over the batch inside the compiled chunk measured slower)
        gx, gdelta, gB, gC = (torch.cat(g[::-1], 1)[:, :T] for g in zip(*parts))
        return gx, gdelta, gA, gB, gC, None, None, None, None


def _check_selective_scan(name, x, delta, A, Bm, Cm, discretization, chunk):
    shapes = ", ".join(f"{n} {tuple(t.shape)}" for n, t in zip(("x", "delta", "A", "Bm", "Cm"), (x, delta, A, Bm, Cm)))
    if not (x.dim() == 3 and delta.shape == x.shape and Bm.dim() == 3 and Cm.shape == Bm.shape
            and Bm.shape[:2] == x.shape[:2] and A.shape == (x.shape[2], Bm.shape[2])):
        raise ValueError(f"{name}: expected x and delta (B, T, D), A (D, N), Bm and Cm (B, T, N); got {shapes}")
    if min(*x.shape, Bm.shape[2]) == 0:
        raise ValueError(f"{name}: B, T, D and N must be at least 1; got {shapes}")
    if discretization not in DISCRETIZATIONS:
        raise ValueError(f"{name}: discretization={discretization!r}, expected one of {DISCRETIZATIONS}")
    if not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"{name}: chunk={chunk!r}, expected an int >= 1")


def selective_scan_chunked(x, delta, A, Bm, Cm, discretization="zoh_approx", chunk=16, scan="sequential",
                           compile=False):
    """model.selective_scan_reference's y (B, T, D), `chunk` steps at a time: the (B, T, D, N) states exist for one
    chunk at a time, forward and backward (_ChunkedScan), so memory is O(B chunk D N + B T D + B (T/chunk) D N), not
    O(B T D N). `scan`: a chunk's forward's algorithm (SCANS; the backward's is the loop); compile: _chunk_fn's."""
    _check_selective_scan("selective_scan_chunked", x, delta, A, Bm, Cm, discretization, chunk)
    return _ChunkedScan.apply(x, delta, A, Bm, Cm, discretization, chunk, scan, compile)


# -----------------------------------------------------------------------------
# Triton kernels: RMSNorm, LayerNorm, SwiGLU, flash attention and Mamba's selective scan, each forward and
# backward; their references are model.py's written-out paths (norm_impl='manual', FeedForward's SwiGLU,
# manual_attention, selective_scan_reference).
#
# Triton (Linux; CUDA builds of torch bring it) is imported at the first call of a Triton function, never at
# `import kernels`: the kernels below are plain functions until that call decorates them with triton.jit.
# triton.jit compiles or interprets by reading TRITON_INTERPRET when it decorates, and Triton's own library
# (tl.zeros, tl.sum, ...) is decorated at triton's first import, so the variable must be set before anything
# imports triton (torch.compile does): tests/conftest.py sets it first thing without CUDA, and _triton_kernels
# refuses, saying so, when it came too late. The interpreter runs each program of the grid in turn with NumPy,
# on CPU tensors: slow, but exact enough to test the kernels' arithmetic and masks on a laptop.
#
# Conventions in the kernels: every reduction and accumulator is float32, whatever the inputs; a block
# is a power of two at least as long as what it covers (tl.arange needs a power of two), and loads and
# stores past the true length are masked, so any size works.

_TRITON = None  # the jitted kernels (a namespace), made by _triton_kernels() at the first call
triton = tl = None  # the modules, set by _triton_kernels(); the kernels' bodies read `tl` from here

# The longest row the norm kernels take: one program holds a whole row (a power-of-two block of it) in
# registers. The lab's widths are at most 1536; a longer row would need a loop over column blocks.
MAX_NORM_WIDTH = 16384


def _interpreting():
    """True when Triton interprets (TRITON_INTERPRET=1): as triton.knobs says from Triton 3.4, the variable before."""
    if getattr(triton, "knobs", None) is not None:
        return bool(triton.knobs.runtime.interpret)
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def _triton_kernels():
    """Import Triton and jit every kernel, once; return them as a namespace. Raises RuntimeError, saying
    how to install it, where Triton is missing or older than 3.3."""
    global _TRITON, triton, tl
    if _TRITON is None:
        try:
            import triton as triton_module
            import triton.language as tl_module
        except ImportError as e:
            raise RuntimeError("kernels.py's Triton kernels need Triton: pip install triton (Linux only; torch's "
                               "CUDA wheels already bring it). model.py's own paths need nothing.") from e
        triton, tl = triton_module, tl_module
        if tuple(map(int, triton.__version__.split(".")[:2])) < (3, 3):  # why: requirements-test.txt
            raise RuntimeError(f"kernels.py needs Triton >= 3.3 (torch >= 2.7's), and this is {triton.__version__}")
        if _interpreting() and isinstance(tl.zeros, triton.runtime.JITFunction):
            # Triton's library was decorated for compiling: the variable came after triton's first import
            raise RuntimeError("TRITON_INTERPRET=1 was set after triton was first imported (torch.compile, for "
                               "one, imports it), so Triton's own functions are compiled ones and the interpreter "
                               "cannot run: set the variable before anything imports triton")
        # Helpers that kernels call are looked up by name in this module when a kernel compiles, and Triton
        # compiles calls to jitted functions only: so each helper's name is rebound to its jitted self.
        globals().update({fn.__name__: triton.jit(fn) for fn in _KERNEL_HELPERS})
        jit = (lambda fn: triton.jit(_interpretable(fn))) if _interpreting() else triton.jit  # (helpers jitted first)
        _TRITON = types.SimpleNamespace(**{fn.__name__: jit(fn) for fn in _KERNELS})
    return _TRITON


def _interpretable(fn):
    """Kernel fn for Triton's interpreter, which runs its body as Python: a loop bound it computes is a tensor of a
    1-element array, which Triton <= 3.6 gives to int(), refused by NumPy >= 2.4 (triton-lang/triton#9171). So: a copy
    of fn whose globals (this module's, helpers jitted) hold a `range` reading the element; the compiler sees none."""
    def bounds_range(*bounds):
        return range(*(b.handle.data.item() if isinstance(b, tl.tensor) else b for b in bounds))
    return functools.update_wrapper(types.FunctionType(fn.__code__, dict(fn.__globals__, range=bounds_range)), fn)


def triton_available():
    """True if Triton imports and can run here: on a CUDA device, or in its interpreter (TRITON_INTERPRET=1)."""
    try:
        _triton_kernels()
    except RuntimeError:
        return False
    return torch.cuda.is_available() or _interpreting()


_KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _prepare(name, floats, others=(), dtypes=_KERNEL_DTYPES):
    """The kernels, after checking that the tensors can reach them: one device, one of `dtypes` (float32,
    float16 or bfloat16 unless told) for `floats` (the masks in `others` are checked by their caller), and
    a CUDA device unless Triton interprets (the interpreter takes CPU tensors)."""
    kernels = _triton_kernels()
    devices = {t.device for t in (*floats, *others)}
    if len(devices) > 1:
        raise ValueError(f"{name}: all tensors must be on one device, got {sorted(map(str, devices))}")
    device = devices.pop()
    if device.type != "cuda" and not _interpreting():
        raise RuntimeError(f"{name}: Triton runs on CUDA tensors, got {device}. On the CPU, set TRITON_INTERPRET=1 "
                           f"before anything imports triton to run the kernels in Triton's interpreter (slow).")
    for t in floats:
        if t.dtype not in dtypes:
            names = [str(d).replace("torch.", "") for d in dtypes]
            raise ValueError(f"{name}: expected {', '.join(names[:-1])} or {names[-1]} tensors, got {t.dtype}")
    return kernels


def _row_warps(block):
    """Warps for a one-row-per-program kernel: about 256 elements per warp (8 per thread), 1 to 8 warps."""
    return min(max(block // 256, 1), 8)


def _n_row_programs(n_rows, device):
    """How many programs the norms' backward runs, each over a strided share of the rows, keeping its float32
    partial dweight (a row of the (programs, C) buffer torch then sums): a few per streaming multiprocessor
    fill the GPU without a buffer as tall as the input. In the interpreter 4, so the stride loop is exercised."""
    per_gpu = 4 * torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4
    return max(1, min(n_rows, per_gpu))


def _as_rows(x, name, *params):
    """x viewed as a contiguous (rows, C) matrix for the row kernels, after checking that each of `params`
    (weight, bias) is (C,): the kernels read C numbers from each, whatever their size."""
    C = x.shape[-1]
    if C > MAX_NORM_WIDTH:
        raise ValueError(f"{name}: the last dim is {C}, above MAX_NORM_WIDTH={MAX_NORM_WIDTH} (one row per program)")
    for p in params:
        if p is not None and tuple(p.shape) != (C,):
            raise ValueError(f"{name}: weight and bias must have shape ({C},), x's last dim; got {tuple(p.shape)}")
    return x.reshape(-1, C).contiguous()  # (M, C)


# --- The norms: RMSNorm (Zhang & Sennrich 2019, eq. 4), y = x / sqrt(mean(x^2) + eps) * w, and LayerNorm
# (Ba et al. 2016), y = (x - mean) / sqrt(var + eps) * w + b with the biased variance, over the last dim.
# RMSNorm is LayerNorm without the centring and the bias, so one pair of kernels computes both: CENTER
# subtracts the mean (and takes its gradient), HAS_BIAS adds b.

def _norm_fwd(X, W, B, Y, MEAN, RSTD, C, eps, CENTER: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_C: tl.constexpr):
    """One row per program: mean (CENTER; else 0), r = 1 / sqrt(mean((x - mean)^2) + eps),
    y = (x - mean) r w (+ b). Saves r, and the mean when it centres, for the backward."""
    row = tl.program_id(0).to(tl.int64)  # 64-bit offsets: rows * C may pass 2^31 in a large batch
    cols = tl.arange(0, BLOCK_C)
    inside = cols < C
    x = tl.load(X + row * C + cols, mask=inside, other=0.0).to(tl.float32)  # the padding adds 0 to the sums
    mean = tl.sum(x, axis=0) / C if CENTER else 0.0  # divide by the true C, not the block
    xc = tl.where(inside, x - mean, 0.0)  # the padding must not add mean^2 to the variance
    rstd = tl.rsqrt(tl.sum(xc * xc, axis=0) / C + eps)
    y = xc * rstd * tl.load(W + cols, mask=inside, other=0.0).to(tl.float32)
    if HAS_BIAS:
        y += tl.load(B + cols, mask=inside, other=0.0).to(tl.float32)
    tl.store(Y + row * C + cols, y.to(Y.dtype.element_ty), mask=inside)
    if CENTER:
        tl.store(MEAN + row, mean)
    tl.store(RSTD + row, rstd)


def _norm_bwd(X, W, DY, MEAN, RSTD, DX, DW_PART, DB_PART, M, C, CENTER: tl.constexpr, HAS_BIAS: tl.constexpr,
              BLOCK_C: tl.constexpr):
    """With x^ = (x - mean) r and g = dy * w, y = x^ w (+ b) gives
        dx = r (g - mean(g) - x^ mean(g x^)),    dw = sum over rows of dy x^,    db = sum over rows of dy.
    mean(g) is the gradient through the mean (CENTER only: RMSNorm has none), x^ mean(g x^) the one through
    r (dr/dx = -r^3 (x - mean) / C). Each program takes rows pid, pid + P, pid + 2P, ... and writes its
    float32 shares of dw (and db) to row pid of DW_PART (and DB_PART)."""
    pid = tl.program_id(0).to(tl.int64)
    n_programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_C)
    inside = cols < C
    w = tl.load(W + cols, mask=inside, other=0.0).to(tl.float32)
    dw = tl.zeros((BLOCK_C,), dtype=tl.float32)
    db = tl.zeros((BLOCK_C,), dtype=tl.float32)
    for i in range(0, tl.cdiv(M - pid, n_programs)):
        row = pid + i * n_programs
        x = tl.load(X + row * C + cols, mask=inside, other=0.0).to(tl.float32)
        dy = tl.load(DY + row * C + cols, mask=inside, other=0.0).to(tl.float32)
        mean = tl.load(MEAN + row) if CENTER else 0.0
        rstd = tl.load(RSTD + row)
        x_hat = tl.where(inside, (x - mean) * rstd, 0.0)
        g = dy * w  # 0 in the padding, since dy and w load as 0 there
        dx = g - x_hat * (tl.sum(g * x_hat, axis=0) / C)
        if CENTER:
            dx -= tl.sum(g, axis=0) / C
        tl.store(DX + row * C + cols, (dx * rstd).to(DX.dtype.element_ty), mask=inside)
        dw += dy * x_hat
        db += dy
    tl.store(DW_PART + pid * C + cols, dw, mask=inside)
    if HAS_BIAS:
        tl.store(DB_PART + pid * C + cols, db, mask=inside)


class _NormTriton(torch.autograd.Function):
    """Both norms: center=False is RMSNorm (bias None), center=True LayerNorm."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps, center, name):
        kernels = _prepare(name, [t for t in (x, weight, bias) if t is not None])
        x2 = _as_rows(x, name, weight, bias)  # (M, C)
        weight = weight.contiguous()
        has_bias = bias is not None
        bias = bias.contiguous() if has_bias else weight  # without a bias, any pointer: it is never read
        M, C = x2.shape
        y = torch.empty_like(x2)
        rstd = torch.empty(M, dtype=torch.float32, device=x.device)
        mean = torch.empty(M, dtype=torch.float32, device=x.device) if center else rstd  # RMSNorm: never touched
        block = triton.next_power_of_2(C)
        kernels._norm_fwd[(M,)](x2, weight, bias, y, mean, rstd, C, eps, CENTER=center, HAS_BIAS=has_bias,
                                BLOCK_C=block, num_warps=_row_warps(block))
        ctx.save_for_backward(x2, weight, mean, rstd)
        ctx.x_shape, ctx.center, ctx.has_bias, ctx.bias_dtype = x.shape, center, has_bias, bias.dtype
        return y.view(x.shape)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        x2, weight, mean, rstd = ctx.saved_tensors
        M, C = x2.shape
        dy2 = dy.reshape(M, C).contiguous()  # (M, C)
        dx = torch.empty_like(x2)
        programs = _n_row_programs(M, x2.device)
        dw_part = torch.empty((programs, C), dtype=torch.float32, device=x2.device)
        db_part = torch.empty((programs, C), dtype=torch.float32, device=x2.device) if ctx.has_bias else dw_part
        block = triton.next_power_of_2(C)
        _TRITON._norm_bwd[(programs,)](x2, weight, dy2, mean, rstd, dx, dw_part, db_part, M, C, CENTER=ctx.center,
                                       HAS_BIAS=ctx.has_bias, BLOCK_C=block, num_warps=_row_warps(block))
        db = db_part.sum(0).to(ctx.bias_dtype) if ctx.has_bias else None
        return dx.view(ctx.x_shape), dw_part.sum(0).to(weight.dtype), db, None, None, None


def rms_norm_triton(x, weight, eps):
    """RMSNorm over the last dim in one Triton kernel forward and one backward (dweight summed from per-program
    float32 parts). x: any leading shape, last dim C <= MAX_NORM_WIDTH; weight: (C,); float32, float16 or
    bfloat16, statistics in float32, x's dtype out. Equals model.RMSNorm's written-out path (norm_impl='manual')."""
    return _NormTriton.apply(x, weight, None, eps, False, "rms_norm_triton")


def layer_norm_triton(x, weight, bias, eps):
    """LayerNorm over the last dim (the biased variance, as torch.nn.LayerNorm), as rms_norm_triton; bias: (C,)
    or None. Equals model.LayerNorm's written-out path (norm_impl='manual')."""
    return _NormTriton.apply(x, weight, bias, eps, True, "layer_norm_triton")


# --- SwiGLU (Shazeer 2020, "GLU variants improve transformer", eq. 6): silu(gate) * value

SWIGLU_BLOCK = 1024  # elements per program: elementwise work, so any size that keeps the loads wide


def _swiglu_fwd(A, V, Y, N, BLOCK: tl.constexpr):
    """y = a * sigmoid(a) * v, elementwise; the sigmoid in float32."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < N
    a = tl.load(A + offs, mask=inside, other=0.0).to(tl.float32)
    v = tl.load(V + offs, mask=inside, other=0.0).to(tl.float32)
    tl.store(Y + offs, (a * tl.sigmoid(a) * v).to(Y.dtype.element_ty), mask=inside)


def _swiglu_bwd(A, V, DY, DA, DV, N, BLOCK: tl.constexpr):
    """With s = sigmoid(a): dy/dv = a s, and dy/da = v s (1 + a (1 - s)) (as ds/da = s (1 - s)).
    a and v are re-read rather than saving silu(a): recomputing the sigmoid costs less than the memory."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < N
    a = tl.load(A + offs, mask=inside, other=0.0).to(tl.float32)
    v = tl.load(V + offs, mask=inside, other=0.0).to(tl.float32)
    dy = tl.load(DY + offs, mask=inside, other=0.0).to(tl.float32)
    s = tl.sigmoid(a)
    tl.store(DA + offs, (dy * v * s * (1.0 + a * (1.0 - s))).to(DA.dtype.element_ty), mask=inside)
    tl.store(DV + offs, (dy * a * s).to(DV.dtype.element_ty), mask=inside)


class _SwiGLUTriton(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate, value):
        kernels = _prepare("swiglu_triton", (gate, value))
        if gate.shape != value.shape or gate.dtype != value.dtype:
            raise ValueError(f"swiglu_triton: gate and value must have one shape and dtype (no broadcasting), got "
                             f"{tuple(gate.shape)} {gate.dtype} and {tuple(value.shape)} {value.dtype}")
        a, v = gate.contiguous(), value.contiguous()
        y = torch.empty_like(a)
        n = a.numel()
        kernels._swiglu_fwd[(triton.cdiv(n, SWIGLU_BLOCK),)](a, v, y, n, BLOCK=SWIGLU_BLOCK, num_warps=4)
        ctx.save_for_backward(a, v)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        a, v = ctx.saved_tensors
        dy = dy.contiguous()
        da, dv = torch.empty_like(a), torch.empty_like(v)
        n = a.numel()
        _TRITON._swiglu_bwd[(triton.cdiv(n, SWIGLU_BLOCK),)](a, v, dy, da, dv, n, BLOCK=SWIGLU_BLOCK, num_warps=4)
        return da, dv


def swiglu_triton(gate, value):
    """SwiGLU's gating (Shazeer 2020, eq. 6): silu(gate) * value, elementwise, one Triton kernel forward and
    one backward (d gate, d value). gate and value: one shape (any) and dtype, float32, float16 or
    bfloat16; the arithmetic is float32. Equals model.FeedForward's F.silu(w1 x) * w3 x."""
    return _SwiGLUTriton.apply(gate, value)


# --- Flash attention (Dao 2023, FlashAttention-2, Algorithms 1 and 2)
#
# softmax(q k^T / sqrt(hs) + M) v without the (Tq, Tk) matrix: each program owns a block of queries and
# walks the keys a block at a time, keeping for each query the running max m of its scores, the running
# sum l of exp(score - m), and the running output acc, all rescaled when m grows ("online softmax").
# Memory is O(T), not O(T^2). The forward saves each row's logsumexp, L = m + log l, from which the
# backward recomputes every probability exactly, p = exp(score - L), block by block.
#
#   code name     meaning
#   B, nh, nkv    batch, query heads, key/value heads (grouped-query attention: nh % nkv == 0, and query
#                 head h reads kv head h // (nh // nkv); the kernels index it, nothing is copied)
#   Tq, Tk, hs    query length, key length, head size
#   BLOCK_M/N/D   queries per block, keys per block, head size padded to a power of two (>= 16: tl.dot's
#                 smallest tile)
#   s, p          scores and probabilities of one (BLOCK_M, BLOCK_N) tile
#   lse           L, per query row; kept in base 2 (the kernels use exp2, which is what the GPU computes
#                 natively: exp(x) = exp2(x log2 e), so the scale folds log2 e into 1/sqrt(hs))
#   delta         D_i = rowsum(dO_i * O_i) of Algorithm 2, per query row
#
# The mask: key j is allowed for query i if key_mask[b, j] (padding False) and, when causal, if j <= Tk - Tq + i (query
# i sits at position Tk - Tq + i among the keys: the model's `torch.ones(T, S).tril(S - T)`). A row with no allowed key
# gets output 0 and gradient 0, no NaN, though the row is padding nobody reads; its L is +inf, so that exp2(s - L) is 0
# in the backward even before the mask zeroes it (L = -inf would compute infinities, then discard them). There is no
# dropout: callers run it with dropout 0 (or in eval), or take another path.

def _attn_fwd(Q, K, V, OUT, LSE, KEY_MASK,
              sqb, sqh, sqt, sqd, skb, skh, skt, skd, svb, svh, svt, svd, sob, soh, sot, sod,
              n_head, group, Tq, Tk, HS, qk_scale,
              HAS_MASK: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """FlashAttention-2's forward (Algorithm 1) for one block of BLOCK_M queries of one (batch, head)."""
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // n_head).to(tl.int64)
    h = bh % n_head
    hk = h // group  # the kv head this query head reads
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HS
    q = tl.load(Q + b * sqb + h * sqh + offs_m[:, None] * sqt + offs_d[None, :] * sqd,
                mask=(offs_m[:, None] < Tq) & d_ok[None, :], other=0.0)  # (BLOCK_M, BLOCK_D)
    k_base = K + b * skb + hk * skh
    v_base = V + b * svb + hk * svh
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    q_pos = offs_m + (Tk - Tq)  # each query's position among the keys
    hi = Tk
    if CAUSAL:  # keys past the block's last query are masked for every row: skip their blocks
        hi = tl.minimum(Tk, (start_m + 1) * BLOCK_M + (Tk - Tq))
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k_ok = offs_n < Tk
        kT = tl.load(k_base + offs_n[None, :] * skt + offs_d[:, None] * skd,
                     mask=k_ok[None, :] & d_ok[:, None], other=0.0)  # (BLOCK_D, BLOCK_N): k transposed
        s = tl.dot(q, kT, input_precision=PRECISION) * qk_scale  # (BLOCK_M, BLOCK_N), base-2 scores
        allowed = (offs_m[:, None] < Tq) & k_ok[None, :]  # (BLOCK_M, BLOCK_N)
        if HAS_MASK:
            real = tl.load(KEY_MASK + b * Tk + offs_n, mask=k_ok, other=0)
            allowed = allowed & (real[None, :] != 0)
        if CAUSAL:
            allowed = allowed & (offs_n[None, :] <= q_pos[:, None])
        s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        # a row with nothing allowed yet has m = -inf, and s - m would be -inf - (-inf) = NaN: subtract 0
        # instead, which keeps its p (exp2(-inf) = 0) and its rescaling factor (exp2(m_i - 0) = 0) at 0
        m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_sub[:, None])  # (BLOCK_M, BLOCK_N)
        alpha = tl.exp2(m_i - m_sub)  # rescales what was summed under the old max
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_base + offs_n[:, None] * svt + offs_d[None, :] * svd,
                    mask=k_ok[:, None] & d_ok[None, :], other=0.0)  # (BLOCK_N, BLOCK_D)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new
    empty = l_i == 0.0  # no allowed key at all (l >= 1 otherwise: the max's own term is exp2(0))
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    tl.store(OUT + b * sob + h * soh + offs_m[:, None] * sot + offs_d[None, :] * sod, out.to(OUT.dtype.element_ty),
             mask=(offs_m[:, None] < Tq) & d_ok[None, :])
    lse = tl.where(empty, float("inf"), m_i + tl.log2(tl.where(empty, 1.0, l_i)))
    tl.store(LSE + bh.to(tl.int64) * Tq + offs_m, lse, mask=offs_m < Tq)


def _attn_bwd_dkdv(Q, K, V, DO, LSE, DELTA, KEY_MASK, DK, DV,
                   sqb, sqh, sqt, sqd, skb, skh, skt, skd, svb, svh, svt, svd, sdob, sdoh, sdot, sdod,
                   n_head, n_kv_head, group, Tq, Tk, HS, qk_scale, sm_scale,
                   HAS_MASK: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """dk and dv (FlashAttention-2, Algorithm 2) for one block of BLOCK_N keys of one (batch, kv head),
    walking every query block of every query head in its group, so grouped-query sums need no atomics:
        p = exp(s - L),  dv = sum p^T dO,  dp = dO v^T,  ds = p (dp - D),  dk = sm_scale sum ds^T q.
    The tiles are kept transposed (keys along rows), so no tl.trans of the (BLOCK_N, BLOCK_D) blocks."""
    start_n = tl.program_id(0)
    bhk = tl.program_id(1)
    b = (bhk // n_kv_head).to(tl.int64)
    hk = bhk % n_kv_head
    offs_n = start_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HS
    k_ok = offs_n < Tk
    kv_mask = k_ok[:, None] & d_ok[None, :]
    k = tl.load(K + b * skb + hk * skh + offs_n[:, None] * skt + offs_d[None, :] * skd, mask=kv_mask, other=0.0)
    v = tl.load(V + b * svb + hk * svh + offs_n[:, None] * svt + offs_d[None, :] * svd, mask=kv_mask, other=0.0)
    key_allowed = k_ok
    if HAS_MASK:
        real = tl.load(KEY_MASK + b * Tk + offs_n, mask=k_ok, other=0)
        key_allowed = key_allowed & (real != 0)
    dk = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    lo = 0
    if CAUSAL:  # the first query that sees key start_n * BLOCK_N is at index start_n * BLOCK_N - (Tk - Tq)
        lo = (tl.maximum(start_n * BLOCK_N - (Tk - Tq), 0) // BLOCK_M) * BLOCK_M
    for h in range(hk * group, hk * group + group):
        q_base = Q + b * sqb + h * sqh
        do_base = DO + b * sdob + h * sdoh
        row_base = (b * n_head + h) * Tq  # into LSE and DELTA, (B, nh, Tq) contiguous
        for start_m in range(lo, Tq, BLOCK_M):
            offs_m = start_m + tl.arange(0, BLOCK_M)
            m_ok = offs_m < Tq
            q_mask = m_ok[:, None] & d_ok[None, :]
            q = tl.load(q_base + offs_m[:, None] * sqt + offs_d[None, :] * sqd, mask=q_mask, other=0.0)
            do = tl.load(do_base + offs_m[:, None] * sdot + offs_d[None, :] * sdod, mask=q_mask, other=0.0)
            lse = tl.load(LSE + row_base + offs_m, mask=m_ok, other=float("inf"))
            delta = tl.load(DELTA + row_base + offs_m, mask=m_ok, other=0.0)
            sT = tl.dot(k, tl.trans(q), input_precision=PRECISION) * qk_scale  # (BLOCK_N, BLOCK_M)
            allowed = key_allowed[:, None] & m_ok[None, :]
            if CAUSAL:
                allowed = allowed & (offs_n[:, None] <= offs_m[None, :] + (Tk - Tq))
            pT = tl.where(allowed, tl.exp2(sT - lse[None, :]), 0.0)  # (BLOCK_N, BLOCK_M)
            dv += tl.dot(pT.to(do.dtype), do, input_precision=PRECISION)
            dpT = tl.dot(v, tl.trans(do), input_precision=PRECISION)  # (BLOCK_N, BLOCK_M)
            dsT = pT * (dpT - delta[None, :])
            dk += tl.dot(dsT.to(q.dtype), q, input_precision=PRECISION)
    out_mask = k_ok[:, None] & d_ok[None, :]
    out_offs = (b * n_kv_head + hk) * Tk * HS + offs_n[:, None] * HS + offs_d[None, :]  # DK, DV contiguous
    tl.store(DK + out_offs, (dk * sm_scale).to(DK.dtype.element_ty), mask=out_mask)
    tl.store(DV + out_offs, dv.to(DV.dtype.element_ty), mask=out_mask)


def _attn_bwd_dq(Q, K, V, DO, LSE, DELTA, KEY_MASK, DQ,
                 sqb, sqh, sqt, sqd, skb, skh, skt, skd, svb, svh, svt, svd, sdob, sdoh, sdot, sdod,
                 n_head, group, Tq, Tk, HS, qk_scale, sm_scale,
                 HAS_MASK: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """dq (FlashAttention-2, Algorithm 2) for one block of BLOCK_M queries of one (batch, head), walking the
    keys as the forward does: dq = sm_scale sum ds k, with p and ds recomputed as in _attn_bwd_dkdv.
    A pass of its own, rather than every key block's program adding into dq (atomic adds, as Algorithm 2's
    loop over key blocks would need in parallel): deterministic, and no float32 dq buffer to convert."""
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // n_head).to(tl.int64)
    h = bh % n_head
    hk = h // group
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HS
    m_ok = offs_m < Tq
    q_mask = m_ok[:, None] & d_ok[None, :]
    q = tl.load(Q + b * sqb + h * sqh + offs_m[:, None] * sqt + offs_d[None, :] * sqd, mask=q_mask, other=0.0)
    do = tl.load(DO + b * sdob + h * sdoh + offs_m[:, None] * sdot + offs_d[None, :] * sdod, mask=q_mask, other=0.0)
    row = bh.to(tl.int64) * Tq + offs_m
    lse = tl.load(LSE + row, mask=m_ok, other=float("inf"))
    delta = tl.load(DELTA + row, mask=m_ok, other=0.0)
    k_base = K + b * skb + hk * skh
    v_base = V + b * svb + hk * svh
    dq = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    hi = Tk
    if CAUSAL:
        hi = tl.minimum(Tk, (start_m + 1) * BLOCK_M + (Tk - Tq))
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k_ok = offs_n < Tk
        kv_mask = k_ok[:, None] & d_ok[None, :]
        k = tl.load(k_base + offs_n[:, None] * skt + offs_d[None, :] * skd, mask=kv_mask, other=0.0)
        v = tl.load(v_base + offs_n[:, None] * svt + offs_d[None, :] * svd, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale  # (BLOCK_M, BLOCK_N)
        allowed = m_ok[:, None] & k_ok[None, :]
        if HAS_MASK:
            real = tl.load(KEY_MASK + b * Tk + offs_n, mask=k_ok, other=0)
            allowed = allowed & (real[None, :] != 0)
        if CAUSAL:
            allowed = allowed & (offs_n[None, :] <= offs_m[:, None] + (Tk - Tq))
        p = tl.where(allowed, tl.exp2(s - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)  # (BLOCK_M, BLOCK_N)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)
    tl.store(DQ + bh.to(tl.int64) * Tq * HS + offs_m[:, None] * HS + offs_d[None, :],
             (dq * sm_scale).to(DQ.dtype.element_ty), mask=q_mask)


MAX_HEAD_SIZE = 128  # one (BLOCK, hs) tile of q, k and v each must fit a program's registers and shared memory


def _attn_config(hs_pad, interpreting):
    """(BLOCK_M, BLOCK_N) for the forward, the same for the backward, and the launch options. On a GPU, 64-query, 64-key
    tiles, the usual size for FlashAttention-2 in Triton; for hs up to 128 the key tiles halve and the warps double, so
    that float32 tiles still fit shared memory (with two pipeline stages, not three) and registers. The backward holds
    more per program (k, v, dk, dv, and q, dO tiles), so its query tiles are halved. Not tuned: no GPU was at hand when
    they were chosen. In the interpreter, 16 (tl.dot's smallest): the tests' sequences of 7 and 37 then span several
    tiles and a ragged last one, which is where online softmax and the masks can go wrong."""
    if interpreting:
        return (16, 16), (16, 16), {}
    if hs_pad <= 64:
        return (64, 64), (32, 64), {"num_warps": 4, "num_stages": 3}
    return (64, 32), (32, 32), {"num_warps": 8, "num_stages": 2}


def _matmul_precision(dtype):
    """tl.dot's precision for float32 inputs follows torch's own switch: 'ieee' (exact float32 products)
    by default, TF32 only where torch.set_float32_matmul_precision('high' or 'medium') allows it for
    torch's matmuls too. 16-bit inputs take the tensor cores' 16-bit path either way."""
    return "ieee" if dtype == torch.float32 and torch.get_float32_matmul_precision() == "highest" else "tf32"


def _check_attention(q, k, v, key_mask):
    if q.dim() != 4 or k.dim() != 4 or v.shape != k.shape:
        raise ValueError(f"flash_attention_triton: expected q (B, nh, Tq, hs) and k, v (B, nkv, Tk, hs) of one "
                         f"shape, got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    B, nh, Tq, hs = q.shape
    _, nkv, Tk, hs_k = k.shape
    if k.shape[0] != B or hs_k != hs or nkv == 0 or nh % nkv:
        raise ValueError(f"flash_attention_triton: k and v must match q's batch and head size, with nh % nkv == 0; "
                         f"got q {tuple(q.shape)} and k {tuple(k.shape)}")
    if hs > MAX_HEAD_SIZE:
        raise ValueError(f"flash_attention_triton: head size {hs} > MAX_HEAD_SIZE={MAX_HEAD_SIZE}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"flash_attention_triton: q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if key_mask is not None and (key_mask.dtype != torch.bool or tuple(key_mask.shape) != (B, Tk)):
        raise ValueError(f"flash_attention_triton: key_mask must be bool (B, Tk) = ({B}, {Tk}), "
                         f"got {key_mask.dtype} {tuple(key_mask.shape)}")


class _FlashAttentionTriton(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, key_mask, causal):
        _check_attention(q, k, v, key_mask)
        kernels = _prepare("flash_attention_triton", (q, k, v), () if key_mask is None else (key_mask,))
        B, nh, Tq, hs = q.shape
        nkv, Tk = k.shape[1], k.shape[2]
        hs_pad = max(16, triton.next_power_of_2(hs))
        (bm, bn), _, launch = _attn_config(hs_pad, _interpreting())
        # the mask as bytes (a free view: bool is one byte); without one, any pointer, never read
        mask_bytes = key_mask.contiguous().view(torch.uint8) if key_mask is not None else q
        o = torch.empty((B, nh, Tq, hs), dtype=q.dtype, device=q.device)
        lse = torch.empty((B, nh, Tq), dtype=torch.float32, device=q.device)
        sm_scale = 1.0 / math.sqrt(hs)
        precision = _matmul_precision(q.dtype)
        kernels._attn_fwd[(triton.cdiv(Tq, bm), B * nh)](
            q, k, v, o, lse, mask_bytes, *q.stride(), *k.stride(), *v.stride(), *o.stride(),
            nh, nh // nkv, Tq, Tk, hs, sm_scale * math.log2(math.e),
            HAS_MASK=key_mask is not None, CAUSAL=bool(causal), PRECISION=precision,
            BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=hs_pad, **launch)
        ctx.save_for_backward(q, k, v, o, lse, mask_bytes)
        ctx.has_mask, ctx.causal, ctx.precision = key_mask is not None, bool(causal), precision
        return o

    @staticmethod
    @once_differentiable
    def backward(ctx, do):
        q, k, v, o, lse, mask_bytes = ctx.saved_tensors
        B, nh, Tq, hs = q.shape
        nkv, Tk = k.shape[1], k.shape[2]
        hs_pad = max(16, triton.next_power_of_2(hs))
        _, (bm, bn), launch = _attn_config(hs_pad, _interpreting())
        # D_i = rowsum(dO_i * O_i) (Algorithm 2; it equals rowsum(P_i * dP_i)), in float32; one
        # small pass over (B, nh, Tq, hs), O(T) memory like everything else here
        delta = (do.float() * o.float()).sum(-1).contiguous()  # (B, nh, Tq)
        dq, dk, dv = (torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v))  # contiguous
        sm_scale = 1.0 / math.sqrt(hs)
        common = dict(HAS_MASK=ctx.has_mask, CAUSAL=ctx.causal, PRECISION=ctx.precision,
                      BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=hs_pad, **launch)
        strides = (*q.stride(), *k.stride(), *v.stride(), *do.stride())
        _TRITON._attn_bwd_dkdv[(triton.cdiv(Tk, bn), B * nkv)](
            q, k, v, do, lse, delta, mask_bytes, dk, dv, *strides,
            nh, nkv, nh // nkv, Tq, Tk, hs, sm_scale * math.log2(math.e), sm_scale, **common)
        _TRITON._attn_bwd_dq[(triton.cdiv(Tq, bm), B * nh)](
            q, k, v, do, lse, delta, mask_bytes, dq, *strides,
            nh, nh // nkv, Tq, Tk, hs, sm_scale * math.log2(math.e), sm_scale, **common)
        return dq, dk, dv, None, None


def flash_attention_triton(q, k, v, key_mask=None, causal=False):
    """softmax(q k^T / sqrt(hs) + M) v by FlashAttention-2 (Dao 2023), as the section's comment says: forward
    (Algorithm 1) and backward (Algorithm 2: dk and dv per key block, dq per query block) in Triton.
    q: (B, nh, Tq, hs); k, v: (B, nkv, Tk, hs), nh % nkv == 0 (dk and dv sum over the query heads of their
    group); hs <= MAX_HEAD_SIZE, any Tq and Tk. key_mask: bool (B, Tk), True for real keys, or None; causal:
    query i sits at position Tk - Tq + i. float32 (exact products unless torch.set_float32_matmul_precision
    allows TF32), float16, bfloat16; returns (B, nh, Tq, hs) in q's dtype. Equals model.manual_attention with
    the key/value heads repeated where that is defined (a row with no allowed key: NaN there, 0 here)."""
    return _FlashAttentionTriton.apply(q, k, v, key_mask, causal)


# --- The selective scan of Mamba (Gu & Dao 2023, Algorithm 2), fused: discretize, scan and read out at once
#
# model.selective_scan_reference's y without its (B, T, D, N) tensors. Each program owns one sequence b and a block of
# BLOCK_D channels, and walks t = 0 .. T-1 keeping the block's state h (BLOCK_D, N) in registers: at each step it
# discretizes (A, B) at the step Delta_t on the fly, from delta_t, A, B_t and x_t, updates h, and writes only
# y_t = h_t C_t. This is the hardware-aware scan of sec. 3.3.2: the states live in fast memory and never reach the GPU's
# main memory. Every `chunk` steps it also writes the state before the chunk's first step ("starts": zeros, then the
# states after steps chunk-1, 2 chunk-1, ...; shape (B, ceil(T/chunk), D, N)) for the backward.
#
# The backward runs the adjoint of the recurrence backwards in time. With g_t the gradient reaching h_t,
#     g_t = dy_t[:, None] C_t[None, :] + a_{t+1} g_{t+1}     (from y_t, and from h_{t+1} = a_{t+1} h_t + ...)
#     d a_t = g_t h_{t-1},   d bx_t = g_t,   dC_t = sum_d dy_t[d] h_t[d, :],
# then through the discretization to d delta, dA, dB and dx. It needs h_{t-1} at every step, in reverse:
# for each chunk, the last first, it recomputes the chunk's states from its saved start into a scratch
# buffer of chunk + 1 states per program (memory independent of T), then walks that chunk backwards (sec.
# 3.3.2's recomputation, one chunk at a time, as selective_scan_chunked does in PyTorch). dA (D, N) and dB,
# dC (B, T, N) sum over channels, so over programs: each program writes its share to a float32 (float64)
# partial buffer that torch then sums, as the norms' dweight (deterministic, no atomics). dB's and dC's
# partials are (D / BLOCK_D) B T N numbers each, N / BLOCK_D times x's size (half of it at Mamba's N = 16).
#
#   code name     meaning
#   B, T, D, N    batch, time steps, channels, state size
#   z             Delta_t A, (BLOCK_D, BLOCK_N): the exponent in the discretization
#   a, s          A-bar = a(z), and B-bar's scale: bx_bar = s x_t B_t, i.e. s * x[:, None] * B_t[None, :]
#   a_z, s_d, s_A da/dz, ds/dDelta and ds/dA (a depends on Delta and A only through z = Delta A)
#   g, carry      the gradient reaching h_t, and a_t g_t, the part of it that reaches h_{t-1}
#   starts        the state before each chunk's first step, (B, ceil(T/chunk), D, N)
#   DISC          the discretization, numbered: 0 zoh_approx, 1 zoh, 2 bilinear
#   ACC           the arithmetic's dtype: float64 if an input is float64, else float32
#
# The three discretizations (discretize() above) as a and s, and the derivatives the backward chains through:
#   zoh_approx  a = e^z                  s = Delta               a_z = e^z             s_d = 1    s_A = 0
#   zoh         a = e^z                  s = Delta phi(z)        a_z = e^z             s_d = e^z  s_A = Delta^2 phi'(z)
#   bilinear    a = (1 + z/2)/(1 - z/2)  s = Delta / (1 - z/2)   a_z = 1/(1 - z/2)^2   s_d = a_z  s_A = Delta^2 a_z / 2
# where phi(z) = (e^z - 1)/z, so that zoh's B-bar x, (e^z - 1)/A B x, is Delta phi(z) B x (and zoh's s_d is
# phi + z phi' = e^z). Then d delta = sum_n (d a a_z A + d s s_d), dA = sum_t (d a a_z Delta + d s s_A), with
# d a = g h_{t-1} and d s = g x B_t.
#
# Numerical care. Written as (e^z - 1)/A, zoh's B-bar loses digits as z -> 0, where e^z - 1 cancels (float32 keeps
# about 7 - log10(1/|z|) digits of it), and is 0/0 where A = 0 (the kernels' masked padding). So it is Delta phi(z),
# with phi and phi'(z) = (e^z - phi)/z summed from their Taylor series where |z| < 1/2 (phi = sum_k z^k/(k+1)!,
# phi' = sum_k (k+1) z^k/(k+2)!; 8 terms in float32 and 15 in float64 leave truncation errors below 2e-8 and 2e-18 at
# |z| = 1/2) and taken directly beyond it, where e^z - 1 and e^z - phi cancel about two bits at most; phi = -1/z as e^z
# underflows, with no log (Kahan's (e^z - 1)/log(e^z) would need one, and would divide by -inf there). The bilinear a
# is negative once z < -2: nothing here takes a logarithm, so signs need no care (unlike a log-space scan), and
# 1 - z/2 > 1 for z < 0, so its divisions are safe.

MAX_SCAN_STATE = 256  # N: one (BLOCK_D, N) state tile per program lives in registers (Mamba uses N = 16)
_DISC_CODES = {"zoh_approx": 0, "zoh": 1, "bilinear": 2}


def _ssm_discretize(dlt, A, DISC: tl.constexpr, TERMS: tl.constexpr):
    """(a, s, a_z, s_d, s_A) of the table above, each (BLOCK_D, BLOCK_N), for steps dlt (BLOCK_D, 1) and
    A (BLOCK_D, BLOCK_N). A helper the kernels call by name, jitted by _triton_kernels() under that name (Triton
    compiles calls to jitted functions only); the forward uses a and s, and the compiler drops the rest, inlined."""
    z = dlt * A
    zero = tl.zeros(z.shape, z.dtype)
    if DISC == 2:  # bilinear
        inv = 1.0 / (1.0 - 0.5 * z)
        a_z = inv * inv
        a, s, s_d, s_A = (1.0 + 0.5 * z) * inv, dlt * inv, a_z, 0.5 * dlt * dlt * a_z
    else:
        a = tl.exp(z)
        a_z = a
        if DISC == 0:  # zoh_approx
            s, s_d, s_A = dlt + zero, zero + 1.0, zero
        else:  # zoh: phi(z) and phi'(z), the series where |z| < 1/2 (terms t_k = t_{k-1} z / (k+1), t_0 = 1)
            term = zero + 1.0
            phi_series = term
            dphi_series = 0.5 * term
            for k in tl.static_range(1, TERMS):
                term = term * z * (1.0 / (k + 1))  # a constant's multiply, not a division per term
                phi_series += term
                dphi_series += term * ((k + 1) / (k + 2))
            small = tl.abs(z) < 0.5
            z_safe = tl.where(small, 1.0, z)  # the direct branch is computed everywhere: no 0/0 where z = 0
            phi = tl.where(small, phi_series, (a - 1.0) / z_safe)
            dphi = tl.where(small, dphi_series, (a - phi) / z_safe)
            s, s_d, s_A = dlt * phi, a, dlt * dlt * dphi
    return a, s, a_z, s_d, s_A


def _sscan_fwd(X, DELTA, A, BM, CM, Y, STARTS, T, D, N, CHUNK,
               DISC: tl.constexpr, ACC: tl.constexpr, TERMS: tl.constexpr,
               BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr):
    """The forward for sequence program_id(0) and the channels of block program_id(1): h_t = a_t h_{t-1} +
    s_t x_t B_t and y_t = h_t C_t for t = 0 .. T-1 (Mamba eq. 2a-2b), h in registers; the state before each
    chunk's first step goes to STARTS."""
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T D may pass 2^31
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    d_ok = offs_d < D
    n_ok = offs_n < N
    dn_ok = d_ok[:, None] & n_ok[None, :]
    # padding loads as 0 everywhere, so z = 0 there, a = 1, s x B = 0: the padded states stay 0
    a_mat = tl.load(A + offs_d[:, None] * N + offs_n[None, :], mask=dn_ok, other=0.0).to(ACC)  # (BLOCK_D, BLOCK_N)
    h = tl.zeros((BLOCK_D, BLOCK_N), dtype=ACC)
    n_chunks = tl.cdiv(T, CHUNK)
    for c in range(0, n_chunks):
        tl.store(STARTS + ((b * n_chunks + c) * D + offs_d[:, None]) * N + offs_n[None, :], h, mask=dn_ok)
        for t in range(c * CHUNK, tl.minimum(c * CHUNK + CHUNK, T)):
            row = b * T + t  # the (b, t) row of the (B, T, D) and (B, T, N) inputs
            dlt = tl.load(DELTA + row * D + offs_d, mask=d_ok, other=0.0).to(ACC)
            x = tl.load(X + row * D + offs_d, mask=d_ok, other=0.0).to(ACC)
            b_t = tl.load(BM + row * N + offs_n, mask=n_ok, other=0.0).to(ACC)
            c_t = tl.load(CM + row * N + offs_n, mask=n_ok, other=0.0).to(ACC)
            a, s, _, _, _ = _ssm_discretize(dlt[:, None], a_mat, DISC, TERMS)
            h = a * h + s * x[:, None] * b_t[None, :]
            tl.store(Y + row * D + offs_d, tl.sum(h * c_t[None, :], axis=1).to(Y.dtype.element_ty), mask=d_ok)


def _sscan_bwd(X, DELTA, A, BM, CM, DY, STARTS, SCRATCH, DX, DDELTA, DA_PART, DB_PART, DC_PART, T, D, N, CHUNK,
               DISC: tl.constexpr, ACC: tl.constexpr, TERMS: tl.constexpr,
               BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr):
    """The backward for sequence program_id(0) and the channels of block program_id(1): the chunks from the
    last, each recomputed forward from its start into this program's slots of SCRATCH ((CHUNK + 1) states,
    slot i + 1 holding h_t for the chunk's i-th step and slot 0 its start), then walked backwards with the
    adjoint recurrence (see above). Writes dx and d delta; its shares of dB and dC to its block's rows of
    DB_PART and DC_PART ((D / BLOCK_D, B, T, N)), and its share of dA to DA_PART[b] ((B, D, N))."""
    b = tl.program_id(0).to(tl.int64)
    n_batch = tl.num_programs(0)
    blk = tl.program_id(1)
    n_blocks = tl.num_programs(1)
    offs_d = blk * BLOCK_D + tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    d_ok = offs_d < D
    n_ok = offs_n < N
    dn_ok = d_ok[:, None] & n_ok[None, :]
    a_mat = tl.load(A + offs_d[:, None] * N + offs_n[None, :], mask=dn_ok, other=0.0).to(ACC)
    tile = tl.arange(0, BLOCK_D)[:, None] * BLOCK_N + offs_n[None, :]  # a state's place in a scratch slot
    slots = SCRATCH + (b * n_blocks + blk) * (CHUNK + 1) * (BLOCK_D * BLOCK_N)  # this program's slots
    part = (blk * n_batch + b) * T  # the first (block, b, t) row of DB_PART and DC_PART that is this program's
    carry = tl.zeros((BLOCK_D, BLOCK_N), dtype=ACC)  # a_{t+1} g_{t+1}: 0 past the last step
    da = tl.zeros((BLOCK_D, BLOCK_N), dtype=ACC)
    n_chunks = tl.cdiv(T, CHUNK)
    for cc in range(0, n_chunks):
        c = n_chunks - 1 - cc
        t0 = c * CHUNK
        steps = tl.minimum(CHUNK, T - t0)  # the last chunk may be ragged
        h = tl.load(STARTS + ((b * n_chunks + c) * D + offs_d[:, None]) * N + offs_n[None, :], mask=dn_ok,
                    other=0.0)
        # On a GPU the scratch is written by some threads and read by others: a barrier keeps the last
        # chunk's reads before these writes, and the next one these writes before the reads below.
        tl.debug_barrier()
        tl.store(slots + tile, h)
        for i in range(0, steps):
            row = b * T + t0 + i
            dlt = tl.load(DELTA + row * D + offs_d, mask=d_ok, other=0.0).to(ACC)
            x = tl.load(X + row * D + offs_d, mask=d_ok, other=0.0).to(ACC)
            b_t = tl.load(BM + row * N + offs_n, mask=n_ok, other=0.0).to(ACC)
            a, s, _, _, _ = _ssm_discretize(dlt[:, None], a_mat, DISC, TERMS)
            h = a * h + s * x[:, None] * b_t[None, :]
            tl.store(slots + (i + 1) * (BLOCK_D * BLOCK_N) + tile, h)
        tl.debug_barrier()
        for j in range(0, steps):
            i = steps - 1 - j
            t = t0 + i
            row = b * T + t
            dlt = tl.load(DELTA + row * D + offs_d, mask=d_ok, other=0.0).to(ACC)
            x = tl.load(X + row * D + offs_d, mask=d_ok, other=0.0).to(ACC)
            b_t = tl.load(BM + row * N + offs_n, mask=n_ok, other=0.0).to(ACC)
            c_t = tl.load(CM + row * N + offs_n, mask=n_ok, other=0.0).to(ACC)
            dy = tl.load(DY + row * D + offs_d, mask=d_ok, other=0.0).to(ACC)
            h_t = tl.load(slots + (i + 1) * (BLOCK_D * BLOCK_N) + tile)
            h_prev = tl.load(slots + i * (BLOCK_D * BLOCK_N) + tile)
            a, s, a_z, s_d, s_A = _ssm_discretize(dlt[:, None], a_mat, DISC, TERMS)
            g = dy[:, None] * c_t[None, :] + carry  # (BLOCK_D, BLOCK_N): the gradient reaching h_t
            g_a = g * h_prev  # d a_t
            g_s = g * x[:, None] * b_t[None, :]  # d s_t
            g_sb = g * s  # d (x_t B_t), as bx = s (x B)
            tl.store(DDELTA + row * D + offs_d, tl.sum(g_a * a_z * a_mat + g_s * s_d, axis=1)
                     .to(DDELTA.dtype.element_ty), mask=d_ok)
            tl.store(DX + row * D + offs_d, tl.sum(g_sb * b_t[None, :], axis=1).to(DX.dtype.element_ty), mask=d_ok)
            tl.store(DB_PART + (part + t) * N + offs_n, tl.sum(g_sb * x[:, None], axis=0), mask=n_ok)
            tl.store(DC_PART + (part + t) * N + offs_n, tl.sum(dy[:, None] * h_t, axis=0), mask=n_ok)
            da += g_a * a_z * dlt[:, None] + g_s * s_A
            carry = a * g
    tl.store(DA_PART + (b * D + offs_d[:, None]) * N + offs_n[None, :], da, mask=dn_ok)


def _scan_config(D, N, interpreting):
    """(BLOCK_D, BLOCK_N, launch options). BLOCK_N covers N; BLOCK_D channels make a tile of at most 512 states (32
    channels at Mamba's N = 16), held by 4 warps, 4 states per thread. Small blocks keep more programs running side by
    side, which is what a sequential scan has to offer a GPU (B D / BLOCK_D of them); not tuned: no GPU was at hand when
    they were chosen. In the interpreter, 4 channels: the tests' 5 channels then span two blocks, the second ragged, so
    the masks and the partial sums over blocks are exercised."""
    block_n = triton.next_power_of_2(N)
    if interpreting:
        return 4, block_n, {}
    block_d = min(triton.next_power_of_2(D), max(1, 512 // block_n))
    return block_d, block_n, {"num_warps": max(1, min(4, block_d * block_n // 128))}


class _SelectiveScanTriton(torch.autograd.Function):
    """The fused scan of the section's comment. Memory: y (B, T, D) and the chunk starts (B, T/chunk, D, N)
    forward; the backward adds one chunk of states per program (B, D/BLOCK_D, chunk + 1, BLOCK_D, BLOCK_N:
    independent of T), the gradients, and the partial sums of dA, dB, dC over channel blocks."""

    @staticmethod
    def forward(ctx, x, delta, A, Bm, Cm, discretization, chunk):
        floats = (x, delta, A, Bm, Cm)
        kernels = _prepare("selective_scan_triton", floats, dtypes=_KERNEL_DTYPES + (torch.float64,))
        acc = torch.float64 if any(t.dtype == torch.float64 for t in floats) else torch.float32
        x, delta, A, Bm, Cm = (t.contiguous() for t in floats)
        B, T, D = x.shape
        N = A.shape[1]
        chunk = min(chunk, T)  # a chunk longer than the sequence is the sequence (and sizes the scratch)
        block_d, block_n, launch = _scan_config(D, N, _interpreting())
        y = torch.empty((B, T, D), dtype=acc, device=x.device)
        starts = torch.empty((B, triton.cdiv(T, chunk), D, N), dtype=acc, device=x.device)
        settings = dict(DISC=_DISC_CODES[discretization], ACC=tl.float64 if acc == torch.float64 else tl.float32,
                        TERMS=15 if acc == torch.float64 else 8, BLOCK_D=block_d, BLOCK_N=block_n, **launch)
        kernels._sscan_fwd[(B, triton.cdiv(D, block_d))](x, delta, A, Bm, Cm, y, starts, T, D, N, chunk, **settings)
        ctx.save_for_backward(x, delta, A, Bm, Cm, starts)
        ctx.chunk, ctx.settings = chunk, settings
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        x, delta, A, Bm, Cm, starts = ctx.saved_tensors
        (B, T, D), N = x.shape, A.shape[1]
        chunk, settings = ctx.chunk, ctx.settings
        block_d, block_n = settings["BLOCK_D"], settings["BLOCK_N"]
        n_blocks = triton.cdiv(D, block_d)
        acc, device = starts.dtype, x.device
        # per program, one chunk's states and the state before them
        scratch = torch.empty((B, n_blocks, chunk + 1, block_d, block_n), dtype=acc, device=device)
        dx, ddelta = torch.empty_like(x), torch.empty_like(delta)
        da_part = torch.empty((B, D, N), dtype=acc, device=device)
        db_part, dc_part = (torch.empty((n_blocks, B, T, N), dtype=acc, device=device) for _ in range(2))
        _TRITON._sscan_bwd[(B, n_blocks)](x, delta, A, Bm, Cm, dy.contiguous(), starts, scratch, dx, ddelta, da_part,
                                          db_part, dc_part, T, D, N, chunk, **settings)
        return (dx, ddelta, da_part.sum(0).to(A.dtype), db_part.sum(0).to(Bm.dtype), dc_part.sum(0).to(Cm.dtype),
                None, None)


def selective_scan_triton(x, delta, A, Bm, Cm, discretization="zoh_approx", chunk=64):
    """model.selective_scan_reference's y (Mamba's SSM before its skip and gate) in one Triton kernel forward
    and one backward that never hold the (B, T, D, N) states (the section's comment).
    x, delta: (B, T, D); A: (D, N), negative, N <= MAX_SCAN_STATE; Bm, Cm: (B, T, N). discretization: one of
    DISCRETIZATIONS. chunk: the steps between the states the forward saves; the backward recomputes `chunk` at
    a time. Returns y (B, T, D) in float64 where an input is float64 (the arithmetic too), else float32
    (float32, float16 and bfloat16 inputs, which may be mixed); gradients in each input's dtype."""
    _check_selective_scan("selective_scan_triton", x, delta, A, Bm, Cm, discretization, chunk)
    if Bm.shape[2] > MAX_SCAN_STATE:
        raise ValueError(f"selective_scan_triton: state size N = {Bm.shape[2]} > MAX_SCAN_STATE={MAX_SCAN_STATE}")
    return _SelectiveScanTriton.apply(x, delta, A, Bm, Cm, discretization, chunk)


# Every kernel above, jitted together by _triton_kernels() at the first call, and the helpers they call
_KERNELS = (_norm_fwd, _norm_bwd, _swiglu_fwd, _swiglu_bwd, _attn_fwd, _attn_bwd_dkdv, _attn_bwd_dq,
            _sscan_fwd, _sscan_bwd)
_KERNEL_HELPERS = (_ssm_discretize,)


# -----------------------------------------------------------------------------
# Compiled decoding: a causal language model's one-token step under torch.compile, model.decode's mode
# 'compiled'. Its reference is the eager step it compiles (model.decode's mode 'eager'): tests/test_llama.py and
# tests/test_lm.py hold the tokens of the two equal, in both shape schemes (compile_step).

STATIC_DECODE = ("cuda",)  # device types whose compiled step has static shapes (CUDA graphs; see compile_step)
COMPILE_BACKEND = "inductor"  # tests use dynamo's 'eager' backend: the same graph capture, no code generated


def one_query_attention(q, k, v, mask=None):
    """Attention of one query per head (incremental decoding) written as broadcast products and sums,
    the grouped-query heads sharing their key/value head in place: q (B, nh, 1, hs), k and v (B, nkv, S, hs),
    mask bool broadcastable to (B, 1, 1, S). The same function as model.manual_attention; what it is for is
    torch.compile, which fuses it into a loop or two, where SDPA stays an opaque call (on a CPU its flash
    kernel takes most of a batch-32 decode step). Eagerly, SDPA is the faster of the two."""
    B, nh, _, hs = q.shape
    nkv = k.size(1)
    qg = q.view(B, nkv, nh // nkv, hs)  # (B, nkv, rep, hs): the query heads that share a key/value head
    scores = (qg[:, :, :, None, :] * k[:, :, None, :, :]).sum(-1) * hs ** -0.5  # (B, nkv, rep, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # (B, 1, 1, S) broadcast over heads
    y = (scores.softmax(-1)[..., None] * v[:, :, None, :, :]).sum(-2)  # (B, nkv, rep, hs)
    return y.reshape(B, nh, 1, hs)


def compile_step(step, static):
    """torch.compile of a causal model's one-token decode step, `step(idx, start, key_mask, cache)`, as
    model.decode calls it (through compiled_decoding): compiled(idx (B, 1), position, mask, cache).

    A small model's token costs calls, not arithmetic: stories260K's step is ~330 PyTorch operations of a
    few microseconds each. Compiled, the step is a handful of fused kernels called in one go.
      dynamic (CPU): inductor's C++ kernels, called from its C++ wrapper (no Python between them). The
           position is an int, the mask the whole (B, L) one (cut to the keys so far inside the graph), and
           attention reads only the keys written so far; one graph serves every position from 2 on
           (torch.compile specializes the sizes 0 and 1: model.decode runs those eagerly) and, from batch size 2
           on, every batch size (`mark_decode_sizes` says which sizes vary).
      static (CUDA): every token replays one CUDA graph (mode 'reduce-overhead'), which needs the same
           shapes every time: the position is a (1,) tensor and the whole cache is attended to, its
           unwritten keys masked out (`real`: True on the cache positions that are not padding), and the
           cache is the model's, kept from call to call (`static_cache`)."""
    if not static:
        def dynamic_step(idx, pos, mask, cache):
            return step(idx, pos, None if mask is None else mask[:, :pos + 1], cache)  # (B, pos + 1): keys so far
        options = {"cpp_wrapper": True} if COMPILE_BACKEND == "inductor" else None
        return or_eager(torch.compile(dynamic_step, backend=COMPILE_BACKEND, fullgraph=True, dynamic=True,
                                      options=options), dynamic_step)

    def static_step(idx, pos, real, cache):
        key_mask = real & (torch.arange(real.size(1), device=real.device) <= pos)  # (B, L): written, not padding
        return step(idx, pos, key_mask, cache)
    mode = "reduce-overhead" if COMPILE_BACKEND == "inductor" else None
    return or_eager(torch.compile(static_step, backend=COMPILE_BACKEND, mode=mode, fullgraph=True, dynamic=False),
                    static_step)


def or_eager(compiled, plain):
    """compiled, or plain (the same step uncompiled) once dynamo refuses another graph: a static step has one per
    (batch size, autocast dtype), and past recompile_limit (8) fullgraph=True raises instead of running eagerly."""
    said = []

    def step(*args):
        try:
            return compiled(*args)
        except torch._dynamo.exc.FailOnRecompileLimitHit:
            said or said.append(print("note: the compiled decode step is at dynamo's recompile limit: decoding eagerly"))
            return plain(*args)
    return step


def mark_decode_sizes(tok, mask, cache):
    """The sizes a dynamic decode step sees vary or stay, said to torch.compile: the batch, the cache's length
    and the mask's width vary, each a symbol of its own; the key/value heads and the head size are the model's.
    Left to dynamic=True alone, sizes that happen to be equal at the first call share one symbol (dynamo's
    "duck sizing"), and the model's constants then pin them: a first batch of 2 beside 2 key/value heads, of 8
    beside a head size of 8, or equal to the token's offset in its row, made a graph for that batch alone, and
    the next batch size compiled again. (maybe_mark_dynamic: a batch of 1 is specialized, as it must be.)"""
    torch._dynamo.maybe_mark_dynamic(tok, 0)  # (B, 1)
    if mask is not None:
        for d in (0, 1):  # (B, L)
            torch._dynamo.maybe_mark_dynamic(mask, d)
    for c in cache:
        for buf in (c.k, c.v):  # (B, nkv, L, hs)
            for d in (0, 2):
                torch._dynamo.maybe_mark_dynamic(buf, d)
            for d in (1, 3):
                torch._dynamo.mark_static(buf, d)


def static_cache(model, batch_size):
    """The KV cache of the static (CUDA-graph) decode step: one per batch size (and device, dtype), kept on the
    model and zeroed for each call, as a new one would start. A CUDA graph replays on the addresses it was
    recorded with; a new cache per call made the graph record again at every generate (and at every window a
    char GPT restarts), and past torch's limit of re-recordings it runs without graphs. The whole context
    long, so that its shape never changes. Held while the model lives: stories260K's is 0.66 MB per row of
    the batch; `model.__dict__.pop('_static_caches')` lets them go."""
    caches = model.__dict__.setdefault("_static_caches", {})  # not a submodule: never saved or moved
    p = model.tok_emb.weight
    key = (batch_size, p.device, p.dtype)
    if key not in caches:
        caches[key] = model.new_cache(batch_size, model.cfg.block_size)
        for c in caches[key]:  # written in place, never copied
            torch._dynamo.mark_static_address(c.k)
            torch._dynamo.mark_static_address(c.v)
    else:
        for c in caches[key]:
            c.k.zero_()
            c.v.zero_()
    return caches[key]


def compiled_decoding(model, idx, mask):
    """model.decode's fast path: (cache, step), the KV cache to decode into and the compiled one-token step,
    step(token (B, 1), position) -> logits (B, V), for decoding idx (B, total) with key mask `mask` (B, total)
    (None without padding). The compiled step is built once per model, device type and backend, and kept on the
    model; the eager steps around it (the prefill, positions 0 and 1) write into the same cache."""
    B, total = idx.shape
    dev = idx.device
    static = dev.type in STATIC_DECODE
    cache = static_cache(model, B) if static else model.new_cache(B, total)
    steps = model.__dict__.setdefault("_compiled_steps", {})  # not a submodule: never saved or moved
    key = (dev.type, static, COMPILE_BACKEND)
    if key not in steps:
        steps[key] = compile_step(model.step, static)
    compiled = steps[key]
    # each step's input token is copied into a (B, 1) of its own: a column of idx would carry idx's length in
    # its stride and its position in its offset, and a static graph would be built again for every length
    tok = idx.new_empty(B, 1)
    if static:
        pos = torch.zeros(1, dtype=torch.long, device=dev)  # the position, set in place: no copy from the host
        real = torch.ones(B, cache[0].k.size(2), dtype=torch.bool, device=dev)
        if mask is not None:
            real[:, :total] = mask
        return cache, lambda token, t: compiled(tok.copy_(token), pos.fill_(t), real, cache)
    mark_decode_sizes(tok, mask, cache)
    return cache, lambda token, t: compiled(tok.copy_(token), t, mask, cache)
