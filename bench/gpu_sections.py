"""
The GPU check's sections (bench/gpu_check.py runs them, each in a process of its own under a time budget): what
each runs on the device and checks, and the record it leaves. Read Run and item first (a section's record, and a
step of it that may fail on its own), then the sections in this file's order: kernels, scan, decode, train, sst2,
mfu, ddp (the check runs sst2 first, its headline target). What they exercise lives in the lesson's files
(kernels.py, model.py, export.py, train.py) and in bench/kernel_speed.py and bench/speed.py (the timing and the
generation benchmark).
"""

import copy
import dataclasses
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
import traceback
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout: config files, train.py
# SST-2 as the configs train it (protocol glue_heldout, the compact vocabulary): the folder of --data it is prepared
# into and read from, data.dataset_dir("sst2", SST2_PROTOCOL, "compact")'s name (a test holds the two together)
SST2_PROTOCOL = "glue_heldout"
SST2_FOLDER = f"sst2_{SST2_PROTOCOL}_compact"

# Sizes per mode: the GPU's are the check; the CPU's make the same code paths run in seconds.
SIZES = {
    "gpu": dict(kernel_shape=(4, 1000, 384, 6, 1536),  # (batch, T, n_embd, n_head, ffn): T not a multiple of a tile
                kv_heads=2, scan_shape=(2, 333, 96, 16), scan_chunk=64,  # (B, T, D, N): a ragged last chunk
                # which kernel cases run in each dtype (a case runs when its name holds one of these): Triton
                # compiles a float32 attention kernel in 6-10 s for sm_90 (1-2 s in bf16), three kernels a
                # variant (forward, dK/dV, dQ), so float32 attention runs one variant, the grouped-query causal
                # one; the scan's other discretizations in bf16 would be four more compilations
                kernel_cases={"float32": ("rms_norm", "layer_norm", "swiglu", "query heads per kv head",
                                          "selective scan"),
                              "bfloat16": ("rms_norm", "layer_norm", "swiglu", "attention",
                                           "selective scan, zoh_approx")},
                kernel_timing=True,
                scan_lengths=(1024, 4096), scan_dims=(8, 128, 16), repeats=5,  # the scan's timing: B, D, N
                # decode: float32 is the target's; the bf16 recompile, its speed and tokens, and Hugging Face's
                # row are extras (Run.extra), run on time the sections before left unused
                golden_tokens=200, gen_tokens=128, gen_batches=(1,), gen_dtypes=("float32",), gen_rounds=2,
                gen_extra_dtypes=("bfloat16",), hf_row=True, rerecord_calls=10, bf16_tokens=True,
                train_steps=100, train_compiled=True, ddp_steps=40, ddp_shape=(8, 64), mfu_shape=(64, 256),
                mfu_steps=10,
                sst2_overrides={},
                tiny_model={}, tiny_lm={}),
    "cpu": dict(kernel_shape=(1, 13, 32, 2, 48), kv_heads=1, scan_shape=(1, 13, 5, 4), scan_chunk=4,
                kernel_cases={"float32": ("rms_norm", "query heads per kv head", "selective scan, zoh_approx"),
                              "bfloat16": ("rms_norm",)},
                kernel_timing=False,  # the interpreter's times measure Python: GPU only
                scan_lengths=(4, 8), scan_dims=(1, 2, 2), repeats=1,
                golden_tokens=24, gen_tokens=8, gen_batches=(1,), gen_dtypes=("float32",), gen_rounds=1,
                gen_extra_dtypes=(), hf_row=False,  # (importing transformers: seconds of the rehearsal)
                rerecord_calls=3, bf16_tokens=False,  # (a bf16 compiled step: another graph, 10 s of tracing)
                train_steps=4, ddp_steps=2, ddp_shape=(2, 16), mfu_shape=(2, 16), mfu_steps=2,
                sst2_overrides=dict(max_iters=4, eval_interval=2),
                # compile=True in training: tests/test_train.py traces it on the CPU; here 40 s of tracing
                train_compiled=False,
                tiny_model=dict(n_layer=1, n_embd=32, n_head=2, ffn_hidden=64, batch_size=4),
                tiny_lm=dict(block_size=16, eval_windows=4)),
}

# Normwise tolerances of a kernel against its float64 reference, max |x - ref| <= tol * max(max |ref|, 1), per
# dtype of the inputs: those of tests/test_triton_kernels.py, where the interpreter measured at most 6e-7 in
# float32 (room left for a GPU's approximate exp2 and rsqrt) and 8e-3 in bfloat16 (8 bits of mantissa).
KERNEL_TOLERANCE = {"float32": 1e-4, "bfloat16": 3e-2}
# A bf16 run (Triton kernels, compile on or off) against the float32 run, from the same weights on the same batches:
# their training losses over the first eighth of the steps (logged every 5 steps on a GPU), relative. Measured on
# the CPU (config/sst2_recurrent.py, dropout 0, 200 steps with 50 of warm-up, bf16 autocast against float32): within
# 0.3 % up to step 25 and 1.1 % at step 45; from step 50 on 1 to 37 % apart, and final validation losses of 0.40 and
# 0.45, as far apart as two float32 seeds' (0.42 and 0.51, another calibration). After the first steps the runs part
# as chaotic training does, so only those are compared; a wrong kernel is off from the first step.
TRAIN_LOSS_TOLERANCE = 0.02
# The losses torchrun logs against one plain process's, relative: the same model and batches, the gradient
# summed in another order across N > 1 processes (float32 with TF32 matmuls, as train.py runs on CUDA).
DDP_LOSS_TOLERANCE = 2e-3
# What each cold compile costs (seconds; nothing in inductor's or Triton's on-disk caches yet): a step that
# compiles is not begun with less than its estimate left, and a section's budget gives each of its compiles
# COMPILE_MARGIN times its estimate (bench/gpu_check.py, beside SECTIONS). Each compile's cost is measured where it
# runs (its section's figure compile_s, the estimate beside it; a note when it took more than its budget), so the
# first GPU run checks these numbers.
# GPU: estimates, no GPU has compiled them. The baseline's training step (6 x 384, forward and backward, bf16)
# measured on the 2-core VM: dynamo's capture 4 s, with AOT autograd's backward 12 s, through inductor with C++
# kernels 129 s (its kernels compiled by g++ on one loaded core). On a GPU host inductor's Python runs on a faster,
# idle core and its Triton kernels compile in parallel workers: 35 s. The compiled training run (3 x 256 looped
# twice, the Triton kernels, symbolic shapes: a training and an evaluation graph) 50 s; the CUDA-graph decode step
# (one token, 5 layers, no backward) 25 s.
# CPU: the rehearsal's captures (dynamo's 'eager' backend, no code generated), the most measured in 4 rehearsals on
# the loaded 2-core VM: the decode step 3.5-5.6 s, the mfu step 1.8-2.2 s (the training run is not compiled there).
COMPILE_S = {"gpu": {"decode step": 25, "train, compiled": 50, "mfu, compiled": 35},
             "cpu": {"decode step": 6, "train, compiled": 30, "mfu, compiled": 3}}
COMPILE_MARGIN = 1.3


# -----------------------------------------------------------------------------
# what a section gets, and what it leaves


@dataclass
class Run:
    """A section's run: where and how it runs, and its record. Every figure, check and note is appended to
    `stream` (one JSON line each, flushed) the moment it lands, and the record is rewritten to `partial`, so
    that a section stopped at its budget, or a whole check cut off, keeps what it measured."""
    name: str
    cpu: bool
    data: str  # the data folder
    work: str  # this section's scratch folder
    partial: str  # the record's file
    deadline: float  # time.time() by which the section must be done
    sizes: dict
    stream: str = None  # the check's figures.jsonl, shared by every section
    started: float = None  # time.time() at this section's process start (its launch)
    record: dict = field(default_factory=lambda: {"figures": {}, "checks": [], "notes": [], "error": None,
                                                  "reached": None})

    @property
    def device(self):
        return "cpu" if self.cpu else "cuda"

    def time_left(self):
        return self.deadline - time.time()

    def reach(self, what):
        """The step the section is at: a section stopped at its budget says where it was."""
        self.record["reached"] = what
        self.save()

    def fits(self, what, seconds):
        """Whether `seconds` are left for the next step; if not, the step is a failed check, 'not run': a check
        that did not finish has not passed."""
        if self.time_left() >= seconds:
            self.reach(what)
            return True
        self.check(what, False, f"not run: {max(0.0, self.time_left()):.0f} s of the section's budget left, it needs "
                                f"about {seconds} s")
        return False

    def extra(self, what, seconds):
        """Whether `seconds` are left for an extra step, one that no target needs; if not, a note (not a failed
        check) says it was skipped. Extras run on what the sections before this one left unused."""
        if self.time_left() >= seconds:
            self.reach(what)
            return True
        self.note(f"{what}: skipped, an extra ({max(0.0, self.time_left()):.0f} s left, it needs about {seconds} s)")
        return False

    def compile_s(self, what):
        """The estimated seconds of the compile `what` on this device (COMPILE_S)."""
        return COMPILE_S["cpu" if self.cpu else "gpu"][what]

    def compiled(self, what, seconds):
        """A compile's measured cost, beside its estimate and what the section's budget gives it: the section's
        figure compile_s."""
        budgeted = math.ceil(COMPILE_MARGIN * self.compile_s(what))
        costs = self.record["figures"].get("compile_s", {})
        costs[what] = {"seconds": round(seconds, 1), "estimate": self.compile_s(what), "budgeted": budgeted}
        self.figure("compile_s", costs)
        if seconds > budgeted:
            self.note(f"compiling the {what} took {seconds:.0f} s, more than the {budgeted} s its section's budget "
                      f"gives it: raise its estimate (COMPILE_S, bench/gpu_sections.py) and the budget")

    def check(self, what, passed, detail=""):
        """A check: something that must hold on this device. Printed, and kept in the record."""
        self.record["checks"].append({"what": what, "passed": bool(passed), "detail": detail})
        print(f"[{self.name}] {'ok  ' if passed else 'FAIL'} {what}{': ' + detail if detail else ''}", flush=True)
        self.save("check", {"what": what, "passed": bool(passed), "detail": detail})

    def note(self, text):
        self.record["notes"].append(text)
        print(f"[{self.name}] note: {text}", flush=True)
        self.save("note", text)

    def figure(self, key, value):
        self.record["figures"][key] = value
        self.save("figure", {"key": key, "value": value})

    def save(self, kind=None, what=None):
        if kind and self.stream:  # appended and flushed: a line is there once this returns
            line = json.dumps({"section": self.name, "t": round(time.time() - (self.started or 0), 2), kind: what},
                              default=str)
            with open(self.stream, "a") as f:
                f.write(line + "\n")
        with open(self.partial + ".tmp", "w") as f:
            json.dump(self.record, f, indent=1, default=str)
        os.replace(self.partial + ".tmp", self.partial)


def one_line(e):
    """An exception in one line: its type and the first line of its message, cut to 300 characters."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}{': ' + text[0] if text else ''}"[:300]


@contextmanager
def item(run, what):
    """One step of a section that may fail on its own: its error is a failed check, and the section goes on."""
    try:
        yield
    except Exception as e:  # a bug in one kernel must not hide the others
        traceback.print_exc()
        run.check(what, False, one_line(e))


def normwise_error(x, ref):
    """max |x - ref| / max(max |ref|, 1): how tests/test_triton_kernels.py measures a kernel."""
    return ((x.detach().double() - ref.detach().double()).abs().max() / max(ref.abs().max().item(), 1.0)).item()


def peak_mb(fn, device):
    """(fn's result, the peak memory it allocated above what was resident before, in MB; None on a CPU)."""
    if device != "cuda":
        return fn(), None
    torch.cuda.synchronize()
    resident = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    return out, (torch.cuda.max_memory_allocated() - resident) / 2**20


# -----------------------------------------------------------------------------
# kernels: each Triton kernel against its reference in float64, float32 and bfloat16 inputs


def selective_inputs(B, T, D, N, device, dtype=torch.float32, seed=0):
    """x, delta, A, Bm, Cm as Mamba has them: delta = softplus(N(-1, 1)) > 0, A = -exp(N(0, 1)) < 0, so Delta A
    spreads over both branches of the kernel's zero-order hold. Drawn in float64 from a seed; A stays float32,
    as a parameter does under autocast."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape: torch.randn(shape, generator=g, dtype=torch.float64)  # noqa: E731
    x, delta, A = r(B, T, D), torch.nn.functional.softplus(r(B, T, D) - 1), -torch.exp(r(D, N))
    Bm, Cm = r(B, T, N), r(B, T, N)
    return [t.to(device=device, dtype=torch.float32 if t is A else dtype) for t in (x, delta, A, Bm, Cm)]


def kernel_cases(sizes, device, dtype):
    """[(name, triton_fn, reference_fn, inputs, input names)]: the cases of `python -m bench.kernel_speed triton`
    (norms, SwiGLU, attention plain, with a key mask and causal: each beside its PyTorch op, which serves as the
    reference), grouped-query attention, one decoding query against a padded cache, and the selective scan in
    each discretization."""
    import kernels
    import model
    from bench.kernel_speed import triton_bench_cases
    batch, T, C, nh, ffn = sizes["kernel_shape"]
    names = {"rms_norm": "x w", "layer_norm": "x w b", "swiglu": "gate value"}
    cases = [(name, fast, ref, inputs, names.get(name, "q k v").split())
             for name, _, ref, fast, inputs in triton_bench_cases(batch, T, C, nh, ffn, device, dtype)]
    g = torch.Generator().manual_seed(1)
    hs, nkv = C // nh, sizes["kv_heads"]
    r = lambda *shape: torch.randn(shape, generator=g).to(device=device, dtype=dtype)  # noqa: E731
    padded = torch.ones(batch, T, dtype=torch.bool, device=device)
    padded[-1, T - T // 3:] = False  # the last row's final third is padding

    def manual(q, k, v, mask):  # model.manual_attention, the key/value heads repeated as model.Attention repeats them
        rep = q.size(1) // k.size(1)
        return model.manual_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), mask)[0]
    cases += [
        (f"attention, {nh // nkv} query heads per kv head, causal",
         lambda q, k, v: kernels.flash_attention_triton(q, k, v, causal=True),
         lambda q, k, v: manual(q, k, v, torch.ones(T, T, dtype=torch.bool, device=device).tril()),
         [r(batch, nh, T, hs), r(batch, nkv, T, hs), r(batch, nkv, T, hs)], ["q", "k", "v"]),
        ("attention, one query against a padded cache",
         lambda q, k, v: kernels.flash_attention_triton(q, k, v, padded, causal=True),
         lambda q, k, v: manual(q, k, v, padded[:, None, None, :]),  # (one query, causal: it sees every key)
         [r(batch, nh, 1, hs), r(batch, nkv, T, hs), r(batch, nkv, T, hs)], ["q", "k", "v"])]
    for disc in kernels.DISCRETIZATIONS:
        cases.append((f"selective scan, {disc}",
                      lambda *a, d=disc: kernels.selective_scan_triton(*a, discretization=d, chunk=sizes["scan_chunk"]),
                      lambda *a, d=disc: model.selective_scan_reference(*a, discretization=d),
                      selective_inputs(*sizes["scan_shape"], device, dtype), ["x", "delta", "A", "B", "C"]))
    return cases


def kernel_errors(fast, reference, inputs, seed=0):
    """{'y': error, 'd<input>': error, ...}: the kernel's output and gradients (from one random output gradient)
    against the reference's run in float64 on the same numbers."""
    leaves = [x.detach().requires_grad_(x.is_floating_point()) for x in inputs]
    out = fast(*leaves)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    out.backward(grad.to(device=out.device, dtype=out.dtype))
    leaves64 = [x.detach().double().requires_grad_(x.is_floating_point()) for x in inputs]
    ref = reference(*leaves64)
    ref.backward(grad.to(ref.device))
    errors = {"y": normwise_error(out, ref)}
    for x, x64 in zip(leaves, leaves64):
        if x.requires_grad:
            errors[len(errors)] = normwise_error(x.grad, x64.grad)
    return errors


def section_kernels(run):
    import kernels
    from bench.kernel_speed import time_triton
    if importlib.util.find_spec("triton") is None:
        raise RuntimeError("Triton is not installed: pip install triton (Linux; torch's CUDA wheels bring it)")
    if not kernels.triton_available():
        raise RuntimeError("Triton cannot run here (on a CPU: TRITON_INTERPRET=1 before triton's first import)")
    run.figure("triton", kernels.triton.__version__)  # (the module's: its package may be named pytorch-triton)
    run.figure("tolerance", KERNEL_TOLERANCE)
    torch.set_float32_matmul_precision("highest")  # float32 tl.dot follows it: TF32 would need a looser tolerance
    run.figure("float32_matmul_precision", "highest (the comparisons); TF32 off")
    errors = {}
    for dtype_name in ("float32", "bfloat16"):
        dtype = getattr(torch, dtype_name)
        wanted = run.sizes["kernel_cases"][dtype_name]
        for name, fast, reference, inputs, input_names in kernel_cases(run.sizes, run.device, dtype):
            what = f"{name}, {dtype_name}"
            if not any(w in name for w in wanted):
                continue
            if run.cpu and dtype == torch.bfloat16 and name.startswith("attention"):
                run.note(f"{what}: not on the CPU (Triton's interpreter multiplies bfloat16 tiles in tl.dot as raw "
                         f"16-bit integers); on a GPU it runs")
                continue
            run.reach(what)
            with item(run, what):
                t0 = time.perf_counter()
                got = kernel_errors(fast, reference, inputs)
                named = {("y" if k == "y" else "d" + input_names[k - 1]): v for k, v in got.items()}
                errors[what] = {**named, "seconds": time.perf_counter() - t0}
                worst = max(named, key=named.get)
                tol = KERNEL_TOLERANCE[dtype_name]
                run.check(what, named[worst] <= tol, f"worst {worst} {named[worst]:.1e} (tolerance {tol:g})")
                run.figure("errors", errors)
    run.figure("cases", {d: list(w) for d, w in run.sizes["kernel_cases"].items()})
    # speed against the PyTorch ops, in bf16 (the training dtype); not in the CPU's interpreter, whose times
    # measure Python
    if not run.sizes["kernel_timing"]:
        run.note("the timing against the PyTorch ops runs on a GPU only (the interpreter's times measure Python)")
        return
    batch, T, C, nh, ffn = run.sizes["kernel_shape"]
    if run.extra("timing against the PyTorch ops", 10):
        with item(run, "timing against the PyTorch ops"):
            times = time_triton([T], batch, C, nh, ffn, run.device, torch.bfloat16, repeats=run.sizes["repeats"],
                                budget_s=1.0)
            run.figure("timing", {"interpreter": False, "dtype": "bfloat16", "T": T, "batch": batch, "n_embd": C,
                                  "n_head": nh, "ffn": ffn, "repeats": run.sizes["repeats"],
                                  "results": {k: v[T] for k, v in times.items()}})


# -----------------------------------------------------------------------------
# scan: Mamba's selective scan, the Triton kernel against the PyTorch scans


def section_scan(run):
    import kernels
    import model
    from bench.kernel_speed import GOAL_LENGTH, GOAL_SPEEDUP
    from bookkeeping.timing import median_ms
    B, D, N = run.sizes["scan_dims"]
    scans = {"sequential": lambda *a: model.selective_scan_reference(*a, scan="sequential"),
             "parallel": lambda *a: model.selective_scan_reference(*a, scan="parallel"),
             "chunked": lambda *a: kernels.selective_scan_chunked(*a, chunk=64, scan="sequential"),
             "triton": lambda *a: kernels.selective_scan_triton(*a, chunk=64)}
    run.figure("shape", {"B": B, "D": D, "N": N, "dtype": "float32", "discretization": "zoh_approx", "chunk": 64,
                         "repeats": run.sizes["repeats"], "what": "forward + backward, median ms of up to `repeats` "
                         "runs after a warm-up, fewer once they take 4 s"})
    table = {}
    for T in run.sizes["scan_lengths"]:
        inputs = [t.requires_grad_() for t in selective_inputs(B, T, D, N, run.device)]
        grad = torch.randn(B, T, D, generator=torch.Generator().manual_seed(1)).to(run.device)
        outputs = {}
        for name, fn in scans.items():
            if not run.fits(f"T={T} {name}", 1 if run.cpu else 5):
                continue
            with item(run, f"T={T} {name}"):
                def step(fn=fn):
                    for t in inputs:
                        t.grad = None
                    y = fn(*inputs)
                    y.backward(grad)
                    return y.detach()
                outputs[name], mb = peak_mb(step, run.device)
                # what the scan holds beyond its inputs, their gradients and its output: its own memory
                held = (2 * sum(t.numel() * t.element_size() for t in inputs) + 4 * B * T * D) / 2**20
                ms, runs = median_ms(step, run.device, run.sizes["repeats"], budget_s=0.5 if run.cpu else 4.0)
                table.setdefault(T, {})[name] = {"ms": ms, "runs": runs, "peak_mb": mb,
                                                 "extra_mb": None if mb is None else mb - held}
                run.figure("results", table)
        if "sequential" in outputs:
            for name, y in outputs.items():
                err = normwise_error(y, outputs["sequential"])
                table[T][name]["error_vs_sequential"] = err
                run.check(f"T={T} {name} equals the sequential scan", err <= 1e-4, f"{err:.1e} (tolerance 1e-4)")
                if "ms" in table[T]["sequential"] and name != "sequential":
                    table[T][name]["speedup"] = table[T]["sequential"]["ms"] / table[T][name]["ms"]
        run.figure("results", table)
    run.figure("goal", f"triton >= {GOAL_SPEEDUP:g}x the sequential loop at T={GOAL_LENGTH}; its memory beyond "
                       f"inputs, gradients and output flat in T")


# -----------------------------------------------------------------------------
# decode: stories260K, the eager and CUDA-graph steps


@contextmanager
def counting_graph_captures():
    """A list that grows by one at every CUDA graph capture (torch.cuda.CUDAGraph.capture_begin: inductor's
    CUDA-graph trees record through it), while the context lasts."""
    captures = []
    cls = torch.cuda.CUDAGraph
    real = cls.capture_begin

    def capture_begin(self, *args, **kwargs):
        captures.append(1)
        return real(self, *args, **kwargs)

    cls.capture_begin = capture_begin
    try:
        yield captures
    finally:
        cls.capture_begin = real


@contextmanager
def counting_caches():
    """A list of every KVCache made while the context lasts."""
    import model
    made, real = [], model.KVCache.__init__

    def init(self, *args, **kwargs):
        made.append(self)
        real(self, *args, **kwargs)

    model.KVCache.__init__ = init
    try:
        yield made
    finally:
        model.KVCache.__init__ = real


def section_decode(run):
    import torch._dynamo  # (its counters)

    import export
    import kernels
    from bench.speed import GEN_PROMPT, STORIES260K_GREEDY, generation_bench
    from corpora.llama2c import load_llama_tokenizer, pretrained_file
    from hardware import devices
    if run.cpu:  # the same static (CUDA-graph) step, captured by dynamo without code: inductor takes minutes here
        kernels.STATIC_DECODE, kernels.COMPILE_BACKEND = ("cpu", "cuda"), "eager"
        run.note("CPU: the static (CUDA-graph) step, captured by dynamo's 'eager' backend; no CUDA graphs")
    path = pretrained_file("stories260K")
    tok = load_llama_tokenizer("tok512")
    m = export.read_llama2c(path).to(run.device)
    n = run.sizes["golden_tokens"]
    golden = STORIES260K_GREEDY
    compiled_runs = False  # whether the compiled step ran at all: the speed tables leave it out if not
    for mode in ("eager", "compiled"):
        if mode == "compiled" and not run.fits("golden text, compiled step", run.compile_s("decode step") + 3):
            continue
        with item(run, f"golden text, {mode} step"):
            t0 = time.perf_counter()
            with counting_graph_captures() if not run.cpu else nullcontext([]) as captures:
                out = m.generate([[tok.bos_id]], n, temperature=0, mode=mode)[0]
            compiled_runs = compiled_runs or mode == "compiled"
            text = tok.decode([tok.bos_id] + out)
            run.figure(f"golden_{mode}_s", time.perf_counter() - t0)
            if mode == "compiled":  # (the first call compiles; its 200 tokens take about a second)
                run.compiled("decode step", time.perf_counter() - t0)
            if mode == "compiled" and not run.cpu:  # else the re-recording count below would hold by default
                run.figure("golden_graph_captures", len(captures))
                run.check("the compiled step runs as a CUDA graph", len(captures) >= 1, f"{len(captures)} captures")
            ok = text == golden if n == 200 else golden.startswith(text)  # (200: all of llama2.c's text)
            first = next((i for i, (a, b) in enumerate(zip(text, golden)) if a != b), min(len(text), len(golden)))
            run.check(f"golden text, {mode} step", ok,
                      f"{n} tokens from BOS" + ("" if ok else f"; differs from character {first}"))
    if not compiled_runs:
        run.note("the compiled step failed: the re-recording count is not taken, and the speed tables time the eager "
                 "step and Hugging Face only")
    else:
        with item(run, "re-recordings across generate calls"):
            calls = run.sizes["rerecord_calls"]
            graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
            capture = counting_graph_captures() if not run.cpu else nullcontext([])
            with capture as captures, counting_caches() as caches:
                outs = [m.generate([[tok.bos_id]], 16 + i, temperature=0, mode="compiled")[0] for i in range(calls)]
            graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs
            run.figure("rerecord", {"generate_calls": calls, "graph_captures": None if run.cpu else len(captures),
                                    "caches_allocated": len(caches), "graphs_compiled": graphs})
            run.check(f"{calls} more generate calls reuse the step's cache", not caches,
                      f"{len(caches)} caches allocated")
            run.check(f"{calls} more generate calls compile nothing", not graphs, f"{graphs} graphs compiled")
            if not run.cpu:
                run.check(f"{calls} more generate calls record no CUDA graph", not captures,
                          f"{len(captures)} captures")
            run.check(f"{calls} more generate calls, of 16 to {15 + calls} tokens, give the golden text's start",
                      all(golden.startswith(tok.decode([tok.bos_id] + out)) for out in outs))
    run.figure("graph_breaks", {"decode step": graph_breaks()})  # (fullgraph=True: a break would have raised)
    args = SimpleNamespace(rounds=run.sizes["gen_rounds"], runc=None)
    speed = {}
    for dtype_name in run.sizes["gen_dtypes"] + run.sizes["gen_extra_dtypes"]:
        what = f"speed, {dtype_name}"
        if dtype_name in run.sizes["gen_extra_dtypes"]:  # another autocast dtype: another graph to compile
            if not run.extra(what, run.compile_s("decode step") + 5):
                continue
        elif not run.fits(what, 5 if run.cpu else 4):  # (2 rounds of 128 tokens: about a second on a GPU)
            continue
        # Hugging Face's row: importing transformers and building its model, seconds more; an extra
        peers = run.sizes["hf_row"] and run.extra(f"{what}: Hugging Face's row", (5 if run.cpu else 4) + 8)
        run.reach(what)
        with item(run, what):
            with devices.autocast_context(run.device, dtype_name):
                tables = generation_bench(args, run.device, run.sizes["gen_tokens"], run.sizes["gen_batches"],
                                          compiled=compiled_runs, peers=peers)
            speed[dtype_name] = {batch: {name: {k: f[k] for k in ("tokens_per_s", "same_tokens", "compile_s") if k in f}
                                         for name, f in table.items()} for batch, table in tables["tables"].items()}
            run.figure("speed", {"tokens": run.sizes["gen_tokens"], "rounds": run.sizes["gen_rounds"],
                                 "prompt": GEN_PROMPT, "tables": speed})
            run.figure("graph_breaks", {"decode step": graph_breaks()})
            hf = all("Hugging Face LlamaForCausalLM" in t for t in tables["tables"].values())
            if dtype_name == "float32":  # every contestant against our eager step, in float32
                same = all(f["same_tokens"] for t in tables["tables"].values() for f in t.values())
                run.check("float32: every contestant's tokens are ours", same)
            if peers and not hf:
                run.check("a Hugging Face row", False, "transformers is not installed")
            elif not run.sizes["hf_row"]:
                run.note("no Hugging Face row on the CPU (importing transformers costs the rehearsal seconds)")
    if compiled_runs and run.sizes["bf16_tokens"] and run.extra("bf16: the compiled step's tokens against the eager "
                                                                "step's", 5 if "bfloat16" in speed else
                                                                run.compile_s("decode step") + 5):
        # Under bf16 autocast the compiled step rounds in another order than the eager one (fused kernels, bf16
        # intermediates kept or not): a near-tie between two logits can go the other way, and from there the
        # greedy paths part. So the bf16 compiled tokens are compared with the bf16 eager ones (not with float32's
        # golden text), and a difference is reported, not failed: it is expected of bf16 rounding.
        with item(run, "bf16: the compiled step's tokens against the eager step's"):
            n = run.sizes["gen_tokens"]
            with devices.autocast_context(run.device, "bfloat16"):
                eager, fast = (m.generate([[tok.bos_id]], n, temperature=0, mode=mode)[0]
                               for mode in ("eager", "compiled"))
            first = next((i for i, (a, b) in enumerate(zip(eager, fast)) if a != b), None)
            run.figure("bf16_compiled_vs_eager", {"tokens": n, "first_difference": first})
            run.note(f"bf16 autocast: the compiled step's {n} greedy tokens " + (
                "are the eager step's" if first is None else f"part from the eager step's at token {first} "
                "(expected: bf16 rounds in another order in the fused kernels, and a near-tie flips)"))


def graph_breaks():
    """Graph breaks dynamo counted in this process so far (torch._dynamo.utils.counters, by reason)."""
    import torch._dynamo.utils
    return sum(torch._dynamo.utils.counters["graph_break"].values())


# -----------------------------------------------------------------------------
# train: the study's models, float32 against bf16 with the fast paths, compile off and on


TRAIN_CASES = {  # name: (config file, its prepared data folder in --data, its fast paths: Triton kernels). The
    # baseline encoder is the mfu section's
    "sst2_recurrent": ("config/sst2_recurrent.py", SST2_FOLDER,
                       dict(attn_impl="triton", norm_impl="triton", ffn_impl="triton")),
    "char_gpt": ("config/shakespeare_char.py", "shakespeare_char",
                 dict(attn_impl="triton", norm_impl="triton")),  # a GELU FFN: the SwiGLU kernel does not apply
}
TRAIN_VARIANTS = {  # dropout is off in all: the flash kernel has none, and the runs are compared
    "float32": dict(dtype="float32"),  # the reference: TF32 off (devices.FLOAT32_MATMULS 'highest')
    "bf16, Triton kernels": dict(dtype="bfloat16", fast=True),
    "bf16, Triton kernels, compiled": dict(dtype="bfloat16", fast=True, compile=True),
}


def data_folder(run, folder):
    """The prepared dataset `folder` of --data; in a CPU rehearsal a copy cut small (the first 8 examples of each
    classification split, cut to 12 tokens; 1,024 tokens of a corpus): Triton's interpreter takes seconds for a
    norm over a few hundred rows."""
    import data
    source = os.path.join(run.data, folder)
    if not run.cpu:
        return source
    cut = os.path.join(run.work, "data", folder)
    if os.path.isfile(os.path.join(cut, "meta.json")):
        return cut
    os.makedirs(cut, exist_ok=True)
    meta = data.load_meta(source)
    for split in data.TASK_SPLITS[meta["task"]][1]:
        if meta["task"] == "classification":
            whole = data.ClassificationSplit(source, split)
            items = [whole[i] for i in range(min(8, len(whole)))]
            data.write_split(cut, split, [ids[:12] for ids, _ in items], [label for _, label in items],
                             whole.tokens.dtype)
        else:
            data.write_bin(os.path.join(cut, f"{split}.bin"), np.asarray(data.TokenSplit(source, split).tokens[:1024]))
    data.write_meta(cut, meta)
    return cut


def train_dir(run, case, variant):
    """The out_dir of the training run `case`, `variant` in the section's scratch."""
    return os.path.join(run.work, f"{case}-{variant.replace(', ', '-').replace(' ', '_')}")


def train_run(run, case, variant, settings, overrides=None):
    """Train `case` under `settings` for the section's steps (or the config as it is, with `overrides`);
    return its figures: summary figures, tokens/s and MFU (the median over the logged intervals after the first,
    which holds the warm-up and any compilation), seconds, the graph breaks of a compiled run, and when its
    best checkpoint was written (seconds after this section's process started)."""
    import train
    config, folder, fast = TRAIN_CASES[case]
    if settings is not None and settings.pop("fast", False):
        settings.update(fast)
        if run.cpu:  # Triton's interpreter takes seconds a step, and dynamo cannot trace it: the kernels section
            settings.update(attn_impl="sdpa", norm_impl="torch", ffn_impl="torch")  # rehearses them
    out_dir = train_dir(run, case, variant)
    if overrides is None:
        steps = run.sizes["train_steps"]
        overrides = dict(max_iters=steps, eval_interval=steps, log_interval=max(1, steps // 20),
                         warmup_iters=max(1, steps // 4), dropout=0.0, early_stop_patience=0, **settings)
    overrides = dict(overrides, out_dir=out_dir, data_dir=data_folder(run, folder), overwrite=True,
                     device=run.device, **run.sizes["tiny_model"])
    if case == "char_gpt":
        overrides.update(run.sizes["tiny_lm"])
    cfg = train.make_config([os.path.join(ROOT, config)] + [f"--{k}={v}" for k, v in overrides.items()])
    breaks = graph_breaks()
    t0 = time.time()
    summary = train.train(cfg)
    seconds = time.time() - t0
    logged = [json.loads(line) for line in open(os.path.join(out_dir, "log.jsonl"))]
    logged = [r for r in logged if r["type"] == "train"]
    steady = logged[1:] or logged
    best = os.path.join(out_dir, "ckpt.pt")  # written at each new best of select_on: its last write is the best
    early = max(1, summary["iters"] // 8)
    figures = {"config": config, "settings": {k: v for k, v in overrides.items() if k not in ("out_dir", "overwrite")},
               "steps": summary["iters"], "seconds": seconds,
               "early_losses": {r["iter"]: r["loss"] for r in logged if r["iter"] <= early},
               "final_val_loss": summary.get("final_val_loss"), "best_val_loss": summary["best_val_loss"],
               "tok_per_s": statistics.median(r["tok_per_s"] for r in steady) if steady else None,
               "mfu": statistics.median(r["mfu"] for r in steady) if steady and "mfu" in steady[0] else None,
               "best_checkpoint_s": os.path.getmtime(best) - run.started if os.path.isfile(best) else None,
               "test_accuracy": summary.get("test_accuracy")}
    if cfg["compile"]:
        figures["graph_breaks"] = graph_breaks() - breaks
    return figures


def section_train(run):
    import torch._dynamo

    from hardware import devices
    if run.cpu:
        devices.COMPILE_BACKEND = "eager"
        run.note("CPU: compile=True captures graphs with dynamo's 'eager' backend (no code generated), and the bf16 "
                 "runs keep PyTorch's attention, norms and SwiGLU (the interpreter takes seconds a step, and dynamo "
                 "cannot trace it): compile with the kernels runs on a GPU")
    runs = {}
    order = [(case, variant) for variant in ("float32", "bf16, Triton kernels") for case in TRAIN_CASES]
    if run.sizes["train_compiled"]:
        order += [("sst2_recurrent", "bf16, Triton kernels, compiled")]
    else:
        run.note("CPU: no compiled training run (dynamo traces it in tens of seconds here; tests/test_train.py "
                 "covers compile=True); the mfu section compiles a training step")
    for case, variant in order:
        name = f"{case}, {variant}"
        # the seconds a run needs at least on a GPU: 100 steps of a small model and an evaluation, 5 s; a
        # compiled one waits for inductor to build its graphs (COMPILE_S) first
        needs = (3 if run.cpu else 5) + (run.compile_s("train, compiled") if variant.endswith("compiled") else 0)
        if not run.fits(name, needs):
            continue
        with item(run, name):
            settings = dict(TRAIN_VARIANTS[variant])
            torch._dynamo.reset()  # each compiled run from empty caches: its own graphs, its own limit
            # the float32 reference in float32 (train.py takes TF32 matmuls on CUDA, a 10-bit mantissa)
            devices.FLOAT32_MATMULS = "highest" if variant == "float32" else "high"
            figures = train_run(run, case, variant, settings)
            reference = runs.get(f"{case}, float32")
            if reference is not None and variant != "float32":
                ours, theirs = figures["early_losses"], reference["early_losses"]
                same_steps = ours.keys() == theirs.keys() and ours
                worst = max(abs(ours[i] - theirs[i]) / theirs[i] for i in theirs) if same_steps else float("inf")
                figures["early_rel_diff"] = worst
                figures["delta_vs_float32"] = figures["final_val_loss"] - reference["final_val_loss"]
                run.check(f"{name}: the float32 run's losses", worst <= TRAIN_LOSS_TOLERANCE,
                          f"the {len(ours)} losses logged by step {max(ours, default=0)}: {worst:.2%} apart at "
                          f"most (tolerance {TRAIN_LOSS_TOLERANCE:.0%}); final validation loss "
                          f"{figures['final_val_loss']:.4f} against {reference['final_val_loss']:.4f}")
            else:
                run.check(f"{name}: trains", figures["final_val_loss"] is not None,
                          f"val loss {figures['final_val_loss']}")
            runs[name] = figures
            run.figure("runs", runs)
            plain = runs.get(name.replace(", compiled", ""))
            if variant.endswith("compiled") and plain:  # what the compiled run took more than the same one eager
                run.compiled("train, compiled", figures["seconds"] - plain["seconds"])
    run.figure("tolerance", TRAIN_LOSS_TOLERANCE)


# -----------------------------------------------------------------------------
# sst2: config/sst2_recurrent.py as it stands, timed from its process's start to its best checkpoint


@contextmanager
def evaluations_as_they_land(run, out_dir, every=0.2):
    """Follow a training run's log.jsonl from a thread while the run trains: each evaluation record, the moment it
    is appended, becomes an entry of the section's figure `evaluations` (its step, its validation loss and accuracy,
    whether it was a new best of the run's select_on figure, that is a write of ckpt.pt, and when: seconds since the
    section's process started, ckpt.pt's
    write time for a new best), streamed to figures.jsonl at once. A section stopped at its budget, or a check cut
    off, keeps every evaluation the run reached. Yields the list of entries."""
    log, best = os.path.join(out_dir, "log.jsonl"), os.path.join(out_dir, "ckpt.pt")
    if os.path.exists(log):
        os.remove(log)  # (an earlier run's, in a --work given again)
    entries, offset, stop = [], [0], threading.Event()

    def look():
        if not os.path.isfile(log):
            return
        with open(log, "rb") as f:
            f.seek(offset[0])
            text = f.read()
        complete = text[:text.rfind(b"\n") + 1]  # a line still being written waits for the next look
        offset[0] += len(complete)
        evals = [r for r in map(json.loads, complete.decode().splitlines()) if r.get("type") == "eval"]
        now = time.time()
        newest = max((i for i, r in enumerate(evals) if r.get("best")), default=None)
        for i, r in enumerate(evals):  # (an earlier best of the same look: its record's arrival, within `every`)
            at = os.path.getmtime(best) if i == newest and os.path.isfile(best) else now
            entries.append({"iter": r["iter"], "val_loss": r.get("val_loss"), "val_accuracy": r.get("val_accuracy"),
                            "best": bool(r.get("best")),
                            "s": round(at - (run.started or 0), 2)})
        if evals:
            run.figure("evaluations", entries)

    def follow():
        while not stop.wait(every):
            look()
    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    try:
        yield entries
    finally:
        stop.set()
        thread.join()
        look()  # what the run appended since the last look


def section_sst2(run):
    """The README's goal: SST-2's recurrent encoder to its best checkpoint in under a minute, counted from the
    start of the process that trains it (this section's: Python's start, the imports, CUDA's and the data's
    loading, the evaluations included) to the last write of ckpt.pt (the best validation accuracy's: the config
    selects on accuracy), after the
    run has ended (before, a later checkpoint could still be better). Each evaluation is recorded as it lands
    (evaluations_as_they_land): stopped at its budget, the section still says when each best checkpoint was
    written, and a best written at 60 s or later already fails the goal."""
    run.reach("config/sst2_recurrent.py as configured")
    with evaluations_as_they_land(run, train_dir(run, "sst2_recurrent", "as configured")):
        figures = train_run(run, "sst2_recurrent", "as configured", None, overrides=dict(run.sizes["sst2_overrides"]))
    run.figure("run", figures)
    run.check("config/sst2_recurrent.py trains to its best checkpoint", figures["best_checkpoint_s"] is not None,
              f"{figures['best_checkpoint_s'] or 0:.1f} s after its process started (goal < 60 s on a GPU), test "
              f"accuracy {figures['test_accuracy']}")


# -----------------------------------------------------------------------------
# mfu: the baseline encoder's training step in bf16 at a shape where MFU means something


def baseline_case(run):
    """bench.speed's case of the study's baseline encoder (6 x 384); in the rehearsal, a width-32 layer."""
    from bench.speed import BENCH_CASES
    case = next(c for c in BENCH_CASES if c.name == "study baseline 6x384")
    if run.cpu:
        case = dataclasses.replace(case, settings={**case.settings, "n_layer": 1, "n_embd": 32, "n_head": 2,
                                                   "ffn_hidden": 64})
    return case


def section_mfu(run):
    """Model FLOPs utilization (PaLM, appendix B) of the study's baseline encoder (6 x 384) in bf16: batch 64 of 256
    tokens, no padding (so SDPA may take its flash kernel), dropout 0; a training step (forward, backward, fused
    AdamW) timed eagerly and compiled, MFU = 3 x the forward's analytic FLOPs per second over the GPU's dense
    bf16 peak (bookkeeping.timing.peak_flops). At SST-2's own lengths (24 tokens) a step is a few milliseconds of
    launches and MFU measures the launches, not the model."""
    import data
    from bench.speed import our_model
    from bookkeeping.flops import forward_flops
    from bookkeeping.timing import peak_flops, timed
    from hardware import devices
    case = baseline_case(run)
    B, T = run.sizes["mfu_shape"]
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(data.N_SPECIAL, 1000, (B, T), generator=g)
    idx[:, 0] = data.CLS
    batch = {"idx": idx.to(run.device), "targets": torch.randint(0, 2, (B,), generator=g).to(run.device)}
    peak = peak_flops(run.device, "bfloat16")
    ctx = devices.autocast_context(run.device, "bfloat16")
    run.figure("setup", {"model": case.name, "batch": B, "T": T, "dtype": "bfloat16 autocast",
                         "steps": run.sizes["mfu_steps"], "peak_flops": peak})
    results = {}
    for mode in ("eager", "compiled"):
        if not run.fits(f"MFU, {mode}", (2 if run.cpu else 5) + (run.compile_s("mfu, compiled") if mode == "compiled"
                                                                 else 0)):
            continue
        with item(run, f"MFU, {mode}"):
            torch.manual_seed(0)
            module, loss_fn = our_model(case, T, dropout=0.0)
            module = module.to(run.device)
            flops = 3 * forward_flops(module, T, B)
            stepper = module
            if mode == "compiled":
                torch._dynamo.reset()
                stepper = torch.compile(module, backend="eager" if run.cpu else "inductor")
            opt = torch.optim.AdamW(module.parameters(), lr=1e-4, fused=True)

            def step():
                with ctx:
                    loss = stepper(batch["idx"], None, batch["targets"])[1]
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            breaks = graph_breaks()
            t0 = time.perf_counter()
            for _ in range(3):  # warm-up: the allocator, the kernels picked, the compilation
                step()
            warm = time.perf_counter() - t0
            steps = run.sizes["mfu_steps"]
            ms = timed(lambda: [step() for _ in range(steps)], run.device) / steps * 1e3
            r = {"step_ms": ms, "warmup_s": warm, "tokens_per_s": B * T / ms * 1e3, "flops_per_step": flops,
                 "mfu": flops / (ms / 1e3) / peak[0] if peak else None}
            if mode == "compiled":
                r["graph_breaks"] = graph_breaks() - breaks
                run.compiled("mfu, compiled", warm)  # (3 warm-up steps, the first compiling)
            results[mode] = r
            run.figure("results", results)
            run.check(f"MFU, {mode}: a training step runs", ms > 0,
                      f"{ms:.1f} ms a step" + (f", MFU {r['mfu']:.1%}" if peak else ", no peak FLOP/s known here"))


# -----------------------------------------------------------------------------
# ddp: a one-rank process group (NCCL on a GPU) with DistributedDataParallel on it; train.py under torchrun against
# one plain process


def train_losses(out_dir):
    """{iteration: logged training loss} and the best validation loss of a run, from its log.jsonl."""
    records = [json.loads(line) for line in open(os.path.join(out_dir, "log.jsonl"))]
    losses = {r["iter"]: r["loss"] for r in records if r["type"] == "train"}
    return losses, next(r["best_val_loss"] for r in records if r["type"] == "summary")


def one_rank_group(run, backend):
    """A process group of one rank on the section's device ('nccl' on 'cuda': device_id given, so NCCL builds its
    communicator at once). Through it, an all_reduce and a barrier; then DistributedDataParallel over the
    study's baseline encoder (bench.speed's case, dropout 0, float32), two backward passes of one batch against
    the plain module's: a one-rank group sums each gradient bucket over one rank and divides by a world of 1,
    so the gradients are the plain module's (to the rounding of a non-deterministic kernel), and a reducer left
    waiting for a gradient fails at the second pass. With one GPU, this is what NCCL and DDP can be made to do.
    Returns the collective's figures and DDP's: {'seconds', 'equal'}, {'seconds', 'error', 'parameters'}."""
    import torch.distributed as dist

    from bench.speed import bench_batch, our_model
    t0 = time.time()
    store = dist.FileStore(os.path.join(run.work, f"store-{os.getpid()}"), 1)
    kwargs = {"device_id": torch.device("cuda", 0)} if run.device == "cuda" else {}
    dist.init_process_group(backend, store=store, rank=0, world_size=1, **kwargs)
    try:
        x = torch.arange(4096, dtype=torch.float32, device=run.device)
        y = x.clone()
        dist.all_reduce(y)
        dist.barrier()
        collective = {"backend": backend, "device": run.device, "world_size": 1, "seconds": time.time() - t0,
                      "equal": torch.equal(x, y)}  # (a host copy: the collective has finished)
        t0 = time.time()
        case = baseline_case(run)
        B, T = run.sizes["ddp_shape"]
        torch.manual_seed(0)
        plain, loss_fn = our_model(case, T, dropout=0.0)
        plain = plain.to(run.device)
        wrapped = copy.deepcopy(plain)
        batch = bench_batch(case, B, T, run.device)
        loss_fn(plain, batch).backward()
        unused = [name for name, p in plain.named_parameters() if p.requires_grad and p.grad is None]
        ddp = torch.nn.parallel.DistributedDataParallel(wrapped, device_ids=[0] if run.device == "cuda" else None,
                                                        find_unused_parameters=bool(unused))
        for _ in range(2):
            wrapped.zero_grad(set_to_none=True)
            loss_fn(ddp, batch).backward()
        pairs = [(a.grad, b.grad) for a, b in zip(wrapped.parameters(), plain.parameters()) if b.grad is not None]
        error = max(normwise_error(a, b) if a is not None else float("inf") for a, b in pairs)
        module = {"seconds": time.time() - t0, "error": error, "parameters": len(pairs), "unused": unused,
                  "model": case.name, "batch": B, "T": T}
    finally:
        dist.destroy_process_group()
    return collective, module


def section_ddp(run):
    import train
    backend = "gloo" if run.cpu else "nccl"
    with item(run, f"{backend}: a one-rank group, an all_reduce and DistributedDataParallel"):
        run.reach("a one-rank process group")
        c, m = one_rank_group(run, backend)
        run.figure("collective", c)
        run.check(f"{backend}: a one-rank group on {run.device}, all_reduce and barrier", c["equal"],
                  f"{c['seconds']:.1f} s, the all_reduce's sum {'is' if c['equal'] else 'is NOT'} its input")
        run.figure("module", m)
        run.check(f"DistributedDataParallel on the one-rank {backend} group: the plain module's gradients",
                  m["error"] <= 1e-5, f"{m['parameters']} gradients, normwise {m['error']:.1e} apart at most "
                                      f"(tolerance 1e-5), two backward passes")
    # train.py under torchrun: one process per GPU (one in the rehearsal), against one plain process
    n = run.sizes.get("ddp_processes") or (1 if run.cpu else max(1, torch.cuda.device_count()))
    steps = run.sizes["ddp_steps"]
    run.figure("setup", {"processes": n, "backend": backend, "steps": steps, "dtype": "float32", "grad_accum": n,
                         "what": "config/sst2_recurrent.py, dropout 0"})
    if n == 1:
        run.note("one process under torchrun: train.py joins the process group (and on a GPU its gloo group for "
                 "the CPU sums) and writes as rank 0, but wraps the model in DistributedDataParallel only for 2 "
                 "or more processes (train.Processes.models); DDP itself ran above, on a one-rank group")
    what = f"torchrun ({n} process{'es' if n > 1 else ''}, {backend}) logs the plain run's losses"
    # a new interpreter for torchrun's agent and one per process, each importing torch: seconds on a busy CPU
    if not run.fits(what, 15):
        return
    with item(run, what):
        settings = dict(max_iters=steps, eval_interval=steps, log_interval=max(1, steps // 4), warmup_iters=1,
                        dropout=0.0, dtype="float32", grad_accum=n, early_stop_patience=0, overwrite=True,
                        device=run.device, data_dir=data_folder(run, SST2_FOLDER),
                        **run.sizes["tiny_model"])
        argv = [os.path.join(ROOT, "config/sst2_recurrent.py")] + [f"--{k}={v}" for k, v in settings.items()]
        one = os.path.join(run.work, "one_process")
        train.train(train.make_config(argv + [f"--out_dir={one}"]))
        many = os.path.join(run.work, "torchrun")
        t0 = time.time()
        limit = max(5.0, run.time_left() - 3)  # ends before the section's budget: its record is kept
        try:
            done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                   f"--nproc_per_node={n}", "train.py", *argv, f"--out_dir={many}"], cwd=ROOT,
                                  capture_output=True, text=True, timeout=limit)
        except subprocess.TimeoutExpired:
            run.check(what, False, f"torchrun did not finish in {limit:.0f} s (stopped)")
            return
        print(done.stdout[-3000:], done.stderr[-3000:], sep="\n")
        run.figure("torchrun_s", time.time() - t0)
        if done.returncode != 0:
            run.check(what, False, f"torchrun exited {done.returncode}: "
                                   f"{(done.stderr.strip().splitlines() or [''])[-1][:200]}")
            return
        (a, best_a), (b, best_b) = train_losses(one), train_losses(many)
        worst = max(abs(a[i] - b[i]) / abs(a[i]) for i in a) if a.keys() == b.keys() else float("inf")
        worst = max(worst, abs(best_a - best_b) / abs(best_a))
        run.figure("losses", {"one_process": a, "torchrun": b, "best_val_loss": [best_a, best_b],
                              "max_rel_diff": worst})
        run.check(what, worst <= DDP_LOSS_TOLERANCE,
                  f"max relative difference {worst:.1e} (tolerance {DDP_LOSS_TOLERANCE:g}), torchrun in "
                  f"{time.time() - t0:.0f} s")
