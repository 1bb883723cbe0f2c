"""
The benchmarks of kernels.py's fast paths: how fast each scan and each Triton kernel is, how precise the scans
are in float32, and whether every Triton kernel compiles for a GPU that is not here. Timings are measurements,
not tests (the tests prove the fast paths equal to their references; these say what they cost).

    python -m bench.kernel_speed scan                   # time each scan, forward and forward+backward, eager
    python -m bench.kernel_speed scan --compile         # ... and under torch.compile
    python -m bench.kernel_speed scan --device cuda --lengths 256 1024 4096 --batch 8 --d 128 --n 16
    python -m bench.kernel_speed precision              # float32 error of each scan vs the float64 reference
    python -m bench.kernel_speed triton --device cuda   # each Triton kernel vs its PyTorch op (F.rms_norm, SDPA, ...)
    python -m bench.kernel_speed compile --arch 90      # build every Triton kernel for an H100 here, no GPU needed
All take --json FILE (the numbers with their conditions); scan and precision take --plot DIR (PNGs;
needs matplotlib). See main() for every option.
Default sizes (B, D, N) = (4, 64, 16), 4,096 numbers per time step, T from 16 to 4096: `scan` takes
about 1.5 minutes on one CPU core (most of it the log-space scan at T=4096: torch's CPU logcumsumexp
is a scalar loop), `scan --compile` 4 to 8 more (compiling), `precision` under one. Slow points stop
early at --budget seconds, and the tables say so.

Read in order: the scans' inputs, timing and precision (`scan`, `precision`), the Triton kernels' timing
(`triton`), their compilation for a GPU (`compile`), the command line (main). (Moved out of kernels.py, which
keeps the fast paths and what they are checked against: the lesson there, its tooling here.)
"""

import argparse
import json
import os
import sys
import time

import torch

import configurator
import kernels
from bookkeeping.timing import conditions, median_ms
from cli.help import HelpFormatter
from evaluation.ranges import check_new_file
from kernels import (
    SCANS,
    SWIGLU_BLOCK,
    flash_attention_triton,
    layer_norm_triton,
    rms_norm_triton,
    scan_sequential,
    swiglu_triton,
)

# -----------------------------------------------------------------------------
# The scans: `python -m bench.kernel_speed scan` (time) and `python -m bench.kernel_speed precision` (float32 error)


GOAL_LENGTH, GOAL_SPEEDUP = 1024, 10.0  # the goal: parallel >= 10x faster than sequential at T=1024


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
                fn = kernels._SCAN_FNS[impl]
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
                    r["fwd"], r["fwd_runs"] = median_ms(forward, device, repeats, budget_s)
                    r["fwd_bwd"], r["fwd_bwd_runs"] = median_ms(forward_backward, device, repeats, budget_s)
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
                    err = (kernels._SCAN_FNS[impl](a32, b32).double() - ref).abs().max().item()
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


# -----------------------------------------------------------------------------
# Benchmark of the Triton kernels: `python -m bench.kernel_speed triton` (time against their PyTorch counterparts)


def triton_bench_cases(batch, T, n_embd, n_head, ffn, device, dtype, seed=0):
    """The kernels at one sequence length, each beside the PyTorch op a model would call instead:
    [(name, torch op's name, torch_fn, triton_fn, inputs)], where fn(*inputs) returns the output and the
    inputs are leaves that require grad. Shapes are the lab's: x (B, T, C) for the norms, (B, T, ffn) for
    SwiGLU, (B, n_head, T, C / n_head) for attention. The masked case pads a random tail of each row
    (lengths from T/2 to T, as a length-bucketed batch has), given to SDPA as a (B, 1, 1, T) bool mask."""
    F = torch.nn.functional
    g = torch.Generator().manual_seed(seed)

    def leaf(*shape):
        return torch.randn(shape, generator=g).to(device=device, dtype=dtype).requires_grad_(True)

    C, hs, eps = n_embd, n_embd // n_head, 1e-5
    lengths = torch.randint(T // 2 + 1, T + 1, (batch,), generator=g)
    key_mask = (torch.arange(T)[None, :] < lengths[:, None]).to(device)  # (B, T): True for real keys
    x, w, b = leaf(batch, T, C), leaf(C), leaf(C)
    gate, value = leaf(batch, T, ffn), leaf(batch, T, ffn)
    q, k, v = leaf(batch, n_head, T, hs), leaf(batch, n_head, T, hs), leaf(batch, n_head, T, hs)
    sdpa = F.scaled_dot_product_attention
    return [
        ("rms_norm", "F.rms_norm", lambda x, w: F.rms_norm(x, (C,), w, eps),
         lambda x, w: rms_norm_triton(x, w, eps), (x, w)),
        ("layer_norm", "F.layer_norm", lambda x, w, b: F.layer_norm(x, (C,), w, b, eps),
         lambda x, w, b: layer_norm_triton(x, w, b, eps), (x, w, b)),
        ("swiglu", "F.silu(a) * b", lambda a, b: F.silu(a) * b, swiglu_triton, (gate, value)),
        ("attention", "SDPA", sdpa, flash_attention_triton, (q, k, v)),
        ("attention, key mask", "SDPA, bool mask", lambda q, k, v: sdpa(q, k, v, attn_mask=key_mask[:, None, None, :]),
         lambda q, k, v: flash_attention_triton(q, k, v, key_mask=key_mask), (q, k, v)),
        ("attention, causal", "SDPA, is_causal", lambda q, k, v: sdpa(q, k, v, is_causal=True),
         lambda q, k, v: flash_attention_triton(q, k, v, causal=True), (q, k, v)),
    ]


def time_triton(lengths, batch, n_embd, n_head, ffn, device, dtype, repeats=10, budget_s=5.0, seed=0):
    """Times each case of `triton_bench_cases` at each length, the PyTorch op and the Triton kernel on the
    same inputs: forward (under no_grad) and forward+backward (from a fixed random output gradient).
    Returns {name: {T: {'torch_op', 'torch_fwd', 'torch_fwd_runs', ..., 'triton_fwd_bwd', 'max_abs_diff'}}},
    where max_abs_diff compares the two forward outputs: a wrong kernel shows here, not as a fast one."""
    results = {}
    for T in lengths:
        for name, op_name, torch_fn, triton_fn, inputs in triton_bench_cases(batch, T, n_embd, n_head, ffn, device,
                                                                            dtype, seed):
            with torch.no_grad():
                diff = (torch_fn(*inputs).float() - triton_fn(*inputs).float()).abs().max().item()
            r = {"torch_op": op_name, "max_abs_diff": diff}
            for impl, fn in (("torch", torch_fn), ("triton", triton_fn)):
                grad = torch.randn_like(fn(*inputs))

                def forward():
                    with torch.no_grad():
                        fn(*inputs)

                def forward_backward():
                    for t in inputs:
                        t.grad = None
                    fn(*inputs).backward(grad)

                for key, run in (("fwd", forward), ("fwd_bwd", forward_backward)):
                    r[f"{impl}_{key}"], r[f"{impl}_{key}_runs"] = median_ms(run, device, repeats, budget_s)
            results.setdefault(name, {})[T] = r
            print(f"  {name} T={T}: torch {r['torch_fwd_bwd']:.3f} ms, triton {r['triton_fwd_bwd']:.3f} ms "
                  f"(fwd+bwd)", file=sys.stderr)
    return results


def triton_table(results, lengths, repeats):
    """Markdown table: per kernel and length, the PyTorch op's and the kernel's times and their ratio
    (> 1: the kernel is faster), forward and forward+backward. A median of fewer than `repeats` runs
    (the point hit its budget) shows the count, as in time_table."""
    def ms(r, key):
        runs = r[f"{key}_runs"]
        return f"{r[key]:.3f}" + (f" ({runs})" if runs < repeats else "")

    lines = ["| kernel | T | torch op | torch fwd ms | triton fwd ms | fwd speedup | torch fwd+bwd ms | "
             "triton fwd+bwd ms | fwd+bwd speedup | max abs diff |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, by_T in results.items():
        for T in lengths:
            r = by_T[T]
            lines.append(f"| {name} | {T} | {r['torch_op']} | {ms(r, 'torch_fwd')} | {ms(r, 'triton_fwd')} | "
                         f"{r['torch_fwd'] / r['triton_fwd']:.2f}x | {ms(r, 'torch_fwd_bwd')} | "
                         f"{ms(r, 'triton_fwd_bwd')} | {r['torch_fwd_bwd'] / r['triton_fwd_bwd']:.2f}x | "
                         f"{r['max_abs_diff']:.1e} |")
    return lines


def triton_command(p, args):
    """`python -m bench.kernel_speed triton`: checks that the kernels can run here, then times and prints them."""
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error("--device cuda, but torch.cuda.is_available() is False")
    try:
        kernels._triton_kernels()
    except RuntimeError as e:
        p.error(str(e))
    if not args.device.startswith("cuda") and not kernels._interpreting():
        p.error("the Triton kernels run on a CUDA device (--device cuda). On the CPU they run only in Triton's "
                "interpreter, TRITON_INTERPRET=1, whose timings measure Python, not the kernels: run "
                "`TRITON_INTERPRET=1 python -m bench.kernel_speed triton --batch 1 --lengths 16` only to see the "
                "command work")
    dtype = getattr(torch, args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32"))
    if args.n_embd % args.n_head:
        p.error(f"--n_embd {args.n_embd} is not a multiple of --n_head {args.n_head}")
    cond = conditions(args.device, dtype)
    cond.update(triton=kernels.triton.__version__, interpreter=kernels._interpreting(), batch=args.batch,
                n_embd=args.n_embd, n_head=args.n_head, ffn=args.ffn, repeats=args.repeats, budget_s=args.budget,
                seed=args.seed, float32_matmul_precision=torch.get_float32_matmul_precision())
    print("conditions: " + ", ".join(f"{k}={v}" for k, v in cond.items()))
    if kernels._interpreting():
        print("Triton's interpreter is on (TRITON_INTERPRET=1): these timings measure Python and NumPy, "
              "not the kernels, and mean nothing")
    results = time_triton(args.lengths, args.batch, args.n_embd, args.n_head, args.ffn, args.device, dtype,
                          args.repeats, args.budget, args.seed)
    print(f"\nmedian of {args.repeats} runs after a warm-up (fewer in parentheses, where a point hit "
          f"--budget={args.budget:g} s); speedup = torch time / triton time; max abs diff between the outputs:\n")
    print("\n".join(triton_table(results, args.lengths, args.repeats)))
    if args.json:
        _write_json(args.json, {"conditions": cond, "lengths": args.lengths, "results": results})


# -----------------------------------------------------------------------------
# compiling the kernels for a GPU without one: `python -m bench.kernel_speed compile --arch 90`
#
# The interpreter checks the kernels' arithmetic; it does not compile them, and the compiler is stricter
# (types, layouts, shared memory). Triton compiles ahead of time for a named target with no GPU present
# (its wheel brings ptxas), so every variant kernels.py's launchers use can be built here for an H100 (sm_90),
# an A100 (sm_80) or a consumer card (sm_86, sm_89), and its shared memory checked against that GPU's limit.

# the most shared memory one block may use, by compute capability (CUDA C Programming Guide, "Technical
# Specifications per Compute Capability"), in bytes
SHARED_MEMORY_LIMIT = {80: 163 * 1024, 86: 99 * 1024, 87: 163 * 1024, 89: 99 * 1024, 90: 227 * 1024}
_TRITON_TYPE = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def gpu_compile_variants(dtype_name, head_sizes=(64, 128), norm_widths=(384, 1536)):
    """[(kernel name, signature, constexprs, launch options)]: every variant the launchers use for inputs
    of dtype_name, head sizes (padded as the launcher pads them) and norm widths. Integer arguments are
    typed i32, as Triton types a Python int below 2**31 at launch."""
    p, f32 = "*" + _TRITON_TYPE[dtype_name], "*fp32"
    ints = lambda *names: {n: "i32" for n in names}  # noqa: E731
    out = []
    for width in norm_widths:
        block = kernels.triton.next_power_of_2(width)
        launch = {"num_warps": kernels._row_warps(block)}
        for center, has_bias in ((False, False), (True, True)):  # RMSNorm, LayerNorm
            flags = {"CENTER": center, "HAS_BIAS": has_bias, "BLOCK_C": block}
            out += [("_norm_fwd", dict(X=p, W=f32, B=f32, Y=p, MEAN=f32, RSTD=f32, C="i32", eps="fp32"), flags, launch),
                    ("_norm_bwd", dict(X=p, W=f32, DY=p, MEAN=f32, RSTD=f32, DX=p, DW_PART=f32, DB_PART=f32,
                                       **ints("M", "C")), flags, launch)]
    out += [("_swiglu_fwd", dict(A=p, V=p, Y=p, N="i32"), {"BLOCK": SWIGLU_BLOCK}, {"num_warps": 4}),
            ("_swiglu_bwd", dict(A=p, V=p, DY=p, DA=p, DV=p, N="i32"), {"BLOCK": SWIGLU_BLOCK}, {"num_warps": 4})]
    qkv = ints(*(f"s{t}{d}" for t in "qkv" for d in "bhtd"))
    precision = "ieee" if dtype_name == "float32" else "tf32"  # 16-bit inputs ignore it
    for hs in head_sizes:
        hs_pad = max(16, kernels.triton.next_power_of_2(hs))
        fwd_blocks, bwd_blocks, launch = kernels._attn_config(hs_pad, False)
        for has_mask, causal in ((True, False), (False, True), (True, True)):
            flags = dict(HAS_MASK=has_mask, CAUSAL=causal, PRECISION=precision, BLOCK_D=hs_pad)
            fwd = dict(flags, BLOCK_M=fwd_blocks[0], BLOCK_N=fwd_blocks[1])
            bwd = dict(flags, BLOCK_M=bwd_blocks[0], BLOCK_N=bwd_blocks[1])
            shapes = dict(**ints("Tq", "Tk", "HS"), qk_scale="fp32")
            out += [("_attn_fwd", dict(Q=p, K=p, V=p, OUT=p, LSE=f32, KEY_MASK="*u8", **qkv,
                                       **ints("sob", "soh", "sot", "sod", "n_head", "group"), **shapes), fwd, launch),
                    ("_attn_bwd_dkdv", dict(Q=p, K=p, V=p, DO=p, LSE=f32, DELTA=f32, KEY_MASK="*u8", DK=p, DV=p, **qkv,
                                            **ints("sdob", "sdoh", "sdot", "sdod", "n_head", "n_kv_head", "group"),
                                            **shapes, sm_scale="fp32"), bwd, launch),
                    ("_attn_bwd_dq", dict(Q=p, K=p, V=p, DO=p, LSE=f32, DELTA=f32, KEY_MASK="*u8", DQ=p, **qkv,
                                          **ints("sdob", "sdoh", "sdot", "sdod", "n_head", "group"), **shapes,
                                          sm_scale="fp32"), bwd, launch)]
    return out


def compile_for_gpu(arch, dtype_names=("float32", "bfloat16"), head_sizes=(64, 128)):
    """Compile every kernel variant for CUDA compute capability `arch` (90: H100) without a GPU. Returns
    [{kernel, dtype, constexprs, shared (bytes), fits (within the arch's limit), seconds}]; a variant the
    compiler rejects raises its error."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    jitted = kernels._triton_kernels()
    if kernels._interpreting():
        raise RuntimeError("compiling for a GPU needs Triton's compiler: run without TRITON_INTERPRET=1")
    target, limit = GPUTarget("cuda", arch, 32), SHARED_MEMORY_LIMIT.get(arch)
    rows = []
    for dtype_name in dtype_names:
        for name, signature, constexprs, launch in gpu_compile_variants(dtype_name, head_sizes):
            signature = {**signature, **dict.fromkeys(constexprs, "constexpr")}
            source = ASTSource(fn=getattr(jitted, name), signature=signature, constexprs=constexprs)
            t0 = time.perf_counter()
            compiled = kernels.triton.compile(source, target=target, options=launch)
            shared = compiled.metadata.shared
            rows.append({"kernel": name, "dtype": dtype_name, "constexprs": constexprs, "shared": shared,
                         "fits": limit is None or shared <= limit, "seconds": time.perf_counter() - t0})
    return rows


def compile_command(p, args):
    """`python -m bench.kernel_speed compile`: build every kernel variant for a GPU architecture; print shared
    memory."""
    try:
        rows = compile_for_gpu(args.arch, args.dtypes, args.head_sizes)
    except RuntimeError as e:
        p.error(str(e))
    limit = SHARED_MEMORY_LIMIT.get(args.arch)
    print(f"compiled for sm_{args.arch} with Triton {kernels.triton.__version__}, no GPU needed; shared memory per "
          f"block against the limit of {limit:,} bytes" if limit else "(no limit known for this architecture)")
    for r in rows:
        flags = ", ".join(f"{k}={v}" for k, v in r["constexprs"].items())
        print(f"  {r['kernel']:<16} {r['dtype']:<9} {flags:<80} shared {r['shared']:>7,} B"
              f"{'' if r['fits'] else '  OVER THE LIMIT'}  ({r['seconds']:.1f} s)")
    over = [r for r in rows if not r["fits"]]
    print(f"{len(rows)} variants compiled; {len(over)} over the shared-memory limit")
    if args.json:
        _write_json(args.json, {"arch": args.arch, "triton": kernels.triton.__version__, "limit": limit,
                                "variants": rows})
    if over:
        sys.exit(1)


def main(argv=None):
    helped = dict(formatter_class=HelpFormatter)  # each option's default shown after its help
    p = argparse.ArgumentParser(prog="python -m bench.kernel_speed", **helped,
                                description="Benchmarks of kernels.py's fast paths: the selective scans' speed (scan) "
                                "and float32 precision (precision), the Triton kernels' speed (triton) and their "
                                "variants compiled for a GPU (compile). Timings are measurements, not tests. "
                                "`python -m bench.kernel_speed COMMAND --help` gives a command's options.")
    sub = p.add_subparsers(dest="command", required=True, help="scan, precision, triton or compile")
    s = sub.add_parser("scan", help="time each scan, forward and forward+backward", **helped)
    s.add_argument("--device", default="cpu", help="cpu or cuda")
    s.add_argument("--lengths", type=int, nargs="+", default=[16, 64, 256, 1024, 4096], help="sequence lengths T")
    # B*D*N = 4096 numbers per step: the default run (eager) takes about 1.5 minutes on one CPU core
    s.add_argument("--batch", type=int, default=4, help="batch size B")
    s.add_argument("--d", type=int, default=64, help="channels D")
    s.add_argument("--n", type=int, default=16, help="state size N (Mamba's default, d_state=16)")
    s.add_argument("--compile", action="store_true", help="also time each scan under torch.compile")
    s.add_argument("--repeats", type=int, default=5, help="timed runs per point at most (the median is reported)")
    s.add_argument("--budget", type=float, default=5.0,
                   help="seconds of timed runs per point; a slower point stops early (at least one run)")
    s.add_argument("--compile_loop_max", type=int, default=256,
                   help="longest T at which the sequential scan is compiled (its compile time grows with T)")
    s.add_argument("--dtype", default="float32", choices=["float32", "float64", "bfloat16", "float16"],
                   help="the scans' precision")
    s.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    s.add_argument("--json", help="write the timings and their conditions to this file")
    s.add_argument("--plot", metavar="DIR", help="write time-vs-length PNGs into DIR")
    q = sub.add_parser("precision", help="float32 error of each scan vs the float64 sequential reference", **helped)
    q.add_argument("--lengths", type=int, nargs="+", default=[16, 64, 256, 1024, 4096], help="sequence lengths T")
    q.add_argument("--scales", type=float, nargs="+", default=[0.1, 1.0, 10.0],
                   help="a = exp(-softplus(x) * scale), b ~ N(0, scale^2): larger scales decay faster")
    q.add_argument("--batch", type=int, default=4, help="batch size B")
    q.add_argument("--d", type=int, default=64, help="channels D")
    q.add_argument("--n", type=int, default=16, help="state size N")
    q.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    q.add_argument("--json", help="write the errors and their conditions to this file")
    q.add_argument("--plot", metavar="DIR", help="write an error-vs-length PNG into DIR")
    t = sub.add_parser("triton", help="time the Triton kernels against their PyTorch counterparts (needs CUDA)",
                       **helped)
    t.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cuda (or cpu, "
                   "only under TRITON_INTERPRET=1, to see the command work)")
    t.add_argument("--dtype", choices=["float32", "bfloat16", "float16"],
                   help="default bfloat16 on CUDA (the lab's training dtype), float32 on the CPU")
    t.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 256], help="sequence lengths T")
    # the lab's shapes: the baseline encoder's width and heads, SwiGLU's hidden size 4C, a batch of 64
    t.add_argument("--batch", type=int, default=64, help="batch size")
    t.add_argument("--n_embd", type=int, default=384, help="width C")
    t.add_argument("--n_head", type=int, default=6, help="attention heads")
    t.add_argument("--ffn", type=int, default=1536, help="SwiGLU's hidden size")
    t.add_argument("--repeats", type=int, default=20, help="timed runs per point at most (the median is reported)")
    t.add_argument("--budget", type=float, default=5.0, help="seconds of timed runs per point at most")
    t.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    t.add_argument("--json", help="write the timings and their conditions to this file")
    c = sub.add_parser("compile", help="compile every Triton kernel variant for a GPU architecture, without a GPU, "
                       "and check its shared memory", **helped)
    c.add_argument("--arch", type=int, default=90, help="CUDA compute capability x 10: 90 (H100, H200), 80 (A100), "
                   "86, 89")
    c.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16", "float16"],
                   help="the dtypes to compile each kernel for")
    c.add_argument("--head_sizes", type=int, nargs="+", default=[64, 128], help="attention head sizes to compile "
                   "flash attention for")
    c.add_argument("--json", help="write every variant's figures to this file")
    args = p.parse_args(argv)
    if getattr(args, "json", None):
        try:
            check_new_file(args.json, "--json")
        except configurator.ConfigError as e:
            p.error(str(e))
    if args.command == "compile":
        return compile_command(p, args)
    if min(args.lengths) < 1:
        p.error("--lengths must be positive")
    if args.command == "triton":
        return triton_command(p, args)

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