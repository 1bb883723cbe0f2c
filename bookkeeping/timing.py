"""
The one timing helper of the project, and the conditions every number is printed and stored with. Read in order:

    sync(device)                          wait for the device's queued kernels (CUDA and MPS run asynchronously)
    timed(fn, device)                     seconds of one fn(), the device synchronized before and after
    median_ms(fn, device, repeats, budget_s)
                                          a warm-up, then the median of several timed runs within a time budget
    conditions(device, dtype)             what a number depends on: the device and its name, the precision, the
                                          versions, the threads (train.py's run logs, study.py's timing pass,
                                          the benchmarks)
    finite(x)                             numbers as strict JSON stores them: a float that is not finite is None
    write_json(path, obj, indent)         a JSON file written atomically, in strict JSON (data.py, study.py, ...)
    peak_flops(device, dtype_name)        a GPU's datasheet peak, the denominator of MFU
    Meter                                 train.py's progress lines: tokens/s, MFU and the time left

The rules for honest numbers (as modded-nanogpt keeps them): warm-up runs first, the device synchronized around
every timed region, the median of several repeats, and the conditions beside the figures. evaluate.py times a
checkpoint with these, bench/speed.py our models against their peers, and train.py measures its steps with the
Meter. This module imports nothing of ours: every other file may use it.
"""

import json
import math
import os
import platform
import re
import statistics
import time

import torch


def sync(device):
    """Wait for the kernels queued on the device: a GPU returns from a call before its work is done."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    elif device == "mps":
        torch.mps.synchronize()


def timed(fn, device):
    """Seconds that fn() takes, with the device synchronized before and after (kernels are async)."""
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def median_ms(fn, device, repeats, budget_s):
    """(median wall time of fn() in ms, number of timed runs). One untimed warm-up run first (it also
    compiles, under torch.compile), then up to `repeats` timed runs, stopping early once they have
    used `budget_s` seconds: a slow point gets fewer runs (at least one), which the tables mark.
    On CUDA, synchronize before and after each run so the time covers the kernels, not their launch."""
    fn()
    sync(device)
    times = []
    while len(times) < repeats and sum(times) < budget_s * 1e3:
        times.append(timed(fn, device) * 1e3)
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


def finite(x):
    """x with every float that is not finite made None, in dicts, lists and tuples: strict JSON has no Infinity or
    NaN (the best validation loss of a run that never evaluated is inf), which Python's json writes unless told not
    to, into a file that only Python then reads. write_json and a run's log.jsonl store numbers through it."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    return [finite(v) for v in x] if isinstance(x, (list, tuple)) else x


def write_json(path, obj, indent=None):
    """Write a JSON file atomically (temporary file, then rename): readers never see half a file. Strict JSON: a
    float that is not finite is written null (finite)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(finite(obj), f, indent=indent, allow_nan=False)
    os.replace(tmp, path)


def peak_flops(device, dtype_name):
    """(peak FLOP/s, its source) of one GPU for matmuls in `dtype_name`, dense (without 2:4 sparsity, which
    the datasheets' headline figures assume), looked up by torch.cuda.get_device_name; None for a CPU, an
    MPS device or a GPU not in the table, or a dtype the GPU has no tensor cores for. 'float32' is the
    TF32 tensor-core rate where the GPU has one (train.py allows TF32 on CUDA), else the plain FP32 rate.
    The denominator of MFU (model FLOPs utilization, PaLM, Chowdhery et al. 2022, appendix B)."""
    if not str(device).startswith("cuda"):
        return None
    name = torch.cuda.get_device_name(device)
    # (pattern in the device name, TFLOP/s by dtype, source); the first match wins, so the specific
    # variants (PCIe, NVL) come before their family. The datasheets print sparse figures with an
    # asterisk; the dense ones are half of those.
    table = [
        (r"H100.*PCIe", {"bfloat16": 756, "float16": 756, "float32": 378}, "NVIDIA H100 datasheet, H100 PCIe"),
        (r"H100 NVL", {"bfloat16": 835, "float16": 835, "float32": 418}, "NVIDIA H100 datasheet, H100 NVL"),
        (r"H200 NVL", {"bfloat16": 835, "float16": 835, "float32": 418}, "NVIDIA H200 datasheet, H200 NVL"),
        (r"GH200", {"bfloat16": 989, "float16": 989, "float32": 494}, "NVIDIA GH200 datasheet"),
        (r"H200", {"bfloat16": 989, "float16": 989, "float32": 494}, "NVIDIA H200 datasheet, H200 SXM"),
        (r"H100", {"bfloat16": 989, "float16": 989, "float32": 494}, "NVIDIA H100 datasheet, H100 SXM"),
        (r"A100", {"bfloat16": 312, "float16": 312, "float32": 156}, "NVIDIA A100 datasheet"),
        (r"\bL4\b", {"bfloat16": 121, "float16": 121, "float32": 60}, "NVIDIA L4 datasheet"),
        (r"\bA10\b", {"bfloat16": 125, "float16": 125, "float32": 62.5}, "NVIDIA A10 datasheet"),
        (r"RTX 4090", {"bfloat16": 165.2, "float16": 165.2, "float32": 82.6},
         "NVIDIA Ada GPU architecture whitepaper, GeForce RTX 4090, FP32 accumulate"),
        (r"V100S", {"float16": 130, "float32": 16.4}, "NVIDIA V100 datasheet, V100S PCIe"),  # Volta: no bf16, no TF32
        (r"V100.*PCIE", {"float16": 112, "float32": 14}, "NVIDIA V100 datasheet, V100 PCIe"),
        (r"V100", {"float16": 125, "float32": 15.7}, "NVIDIA V100 datasheet, V100 SXM2"),
        (r"\bT4\b", {"float16": 65, "float32": 8.1}, "NVIDIA T4 datasheet"),  # Turing: no bf16, no TF32
    ]
    for pattern, tflops, source in table:
        if re.search(pattern, name, re.IGNORECASE):
            if dtype_name not in tflops:
                return None
            # a GPU with bf16 tensor cores (Ampere on) has TF32 ones too: its float32 rate is TF32's
            what = "TF32" if dtype_name == "float32" and "bfloat16" in tflops else dtype_name
            return float(round(tflops[dtype_name] * 1e12)), f"{source}, {what} dense ({name})"
    return None


def device_peak(peak_tflops, device, dtype_name):
    """(one device's peak FLOP/s, its source) for the MFU, or None: the peak_tflops setting, or the
    GPU's datasheet figure (peak_flops)."""
    if peak_tflops > 0:
        return peak_tflops * 1e12, "the peak_tflops setting"
    return peak_flops(device, dtype_name)


class Meter:
    """Training speed for the progress lines: tokens/s and the MFU (model FLOPs utilization, the model's
    FLOPs per second against the devices' peak) since the last reading, and the time left: the steps left at
    the mean time of a step so far, and the evaluations left at the mean time of one so far (an evaluation is
    not training: the loop says when one ended, `evaluated`, and the clock of the speed restarts)."""

    def __init__(self, peak, world, state, total_iters, eval_every=math.inf):
        """`state`: the run's (train.RunState), where it starts: its step, and a resumed run's time before."""
        self.peak, self.world, self.total_iters, self.eval_every = peak, world, total_iters, eval_every
        self.t_start, self.iters_at_start, self.seconds_before = time.time(), state.iter_num, state.train_seconds
        self.eval_seconds, self.evals = 0.0, 0
        self.restart()

    def restart(self):
        self.t = self.t_step = time.time()
        self.tokens, self.flops = 0, 0.0

    def add(self, tokens, flops):
        self.tokens, self.flops, self.t_step = self.tokens + tokens, self.flops + flops, time.time()

    def evaluated(self):
        """An evaluation (and its checkpoints) ended: the time since the last step counts as its, not training's."""
        self.eval_seconds += time.time() - self.t_step
        self.evals += 1
        self.restart()

    def read(self, iter_num):
        """{'tok_per_s', 'eta_min', and 'mfu' when the peak is known} since the last reading; restarts."""
        now = time.time()
        dt = now - self.t  # the device has caught up: it had to, for the loss the caller read
        per_step = (now - self.t_start - self.eval_seconds) / (iter_num - self.iters_at_start)
        evals_left = 0
        if self.evals and self.total_iters < math.inf:  # the evaluations still ahead (this step's too, which
            # follows its progress line; the last step's always), and the test split's scoring, about one more
            every = self.eval_every if self.eval_every < math.inf else self.total_iters
            evals_left = self.total_iters // every - (iter_num - 1) // every + (self.total_iters % every > 0) + 1
        eta = (self.total_iters - iter_num) * per_step + evals_left * self.eval_seconds / max(self.evals, 1)
        speed = {"tok_per_s": self.tokens / dt, "eta_min": eta / 60}
        if self.peak:
            speed["mfu"] = self.flops / dt / (self.peak[0] * self.world)
        self.restart()
        return speed

    def seconds(self):
        """The run's wall time: this process's, and a resumed run's before it."""
        return self.seconds_before + time.time() - self.t_start

    def minutes(self):
        return self.seconds() / 60
