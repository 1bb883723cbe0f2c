"""
Timing done honestly, in one place: a synchronized clock (`sync`), the median of a few timed runs after a
warm-up (`median_ms`), and the conditions every number is printed and saved with (`conditions`).

(Moved here from kernels.py, whose scan and Triton benchmarks were its first users, so that kernels.py holds
the fast paths alone and every benchmark times the same way.)
"""

import os
import platform
import statistics
import time

import torch


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def median_ms(fn, device, repeats, budget_s):
    """(median wall time of fn() in ms, number of timed runs). One untimed warm-up run first (it also
    compiles, under torch.compile), then up to `repeats` timed runs, stopping early once they have
    used `budget_s` seconds: a slow point gets fewer runs (at least one), which the tables mark.
    On CUDA, synchronize before and after each run so the time covers the kernels, not their launch."""
    fn()
    sync(device)
    times = []
    while len(times) < repeats and sum(times) < budget_s * 1e3:
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
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
