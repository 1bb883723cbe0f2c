"""
Devices, CPU threads and precision: train.py, evaluate.py and the benchmarks resolve theirs here, before any work.

    resolve_device(name)                 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps' -> a device this machine has
    set_cpu_threads(device)              one torch thread on a CPU, unless OMP_NUM_THREADS says how many
    threads_note()                       those threads and what set them, for a run's opening line
    resolve_dtype(name, device_type)     'auto' -> bfloat16 on a GPU that has it, else float32
    autocast_context(device_type, dtype_name)
                                         mixed precision for that dtype (none for float32)

A device or dtype that cannot be had is a configurator.ConfigError, one line, like any other bad setting.
"""

import os
from contextlib import nullcontext

import torch

from configurator import ConfigError


def resolve_device(name):
    """'auto' picks cuda, then mps, then cpu; 'cpu', 'cuda', 'cuda:N' and 'mps' are taken as given when this
    machine has them. A device it lacks is a ConfigError that lists the devices it has, raised here, before
    any work: torch's own complaint would come later, as "Torch not compiled with CUDA enabled", or under
    torchrun as an AttributeError from torch.cuda.set_device (train.py's processes() calls this first)."""
    gpus = [f"cuda:{i}" for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0)]
    mps = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    have = ["cpu", *gpus, *(["mps"] if mps else [])]  # the devices this machine has, as --device names them
    if name == "auto":
        return "cuda" if "cuda:0" in have else "mps" if "mps" in have else "cpu"
    if name in have or (name == "cuda" and "cuda:0" in have):
        return name
    here = f"the devices here: {', '.join(have)}"
    kind, _, index = str(name).partition(":")
    if kind == "cuda" and (not index or index.isdigit()):
        build = "" if torch.version.cuda else ", a build without CUDA"
        n_gpus = sum(d.startswith("cuda") for d in have)
        raise ConfigError(f"device={name!r}: " + (f"this machine has {n_gpus} CUDA GPU(s)" if n_gpus else
                          f"torch sees no CUDA GPU on this machine (torch {torch.__version__}{build})") + f"; {here}")
    if name == "mps":
        raise ConfigError(f"device='mps': this machine has no Apple GPU that torch can use; {here}")
    raise ConfigError(f"device={name!r}: expected 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'; {here}")


def set_cpu_threads(device):
    """One torch thread for a command on the CPU (train.py's and evaluate.py's main, before any work), unless
    OMP_NUM_THREADS says how many (torch read it at import, and it is left as it is). torch's own default is a
    thread per core, which suits large matrices. These models are small: an op split over two threads gains
    little, and the threads wait for each other at the end of every op, so a core that another program holds (a
    training run, a browser) holds every op up. Measured side by side on the 2-core VM with two training runs
    beside it (README, Set up): `evaluate.py --ckpt` of an SST-2 classifier took 156 and 299 s with torch's 2
    threads, 85 and 74 s with one; a 500-token sample 33 and 58 s against 10 and 10 s. On a GPU the CPU's threads
    only feed it: torch's default stays."""
    if device.startswith("cpu") and not os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(1)


def threads_note():
    """torch's threads now and what set them, for a run's opening line: '1 thread, OMP_NUM_THREADS=N sets more',
    '4 threads, from OMP_NUM_THREADS'."""
    n = torch.get_num_threads()
    why = "from OMP_NUM_THREADS" if os.environ.get("OMP_NUM_THREADS") else "OMP_NUM_THREADS=N sets more" if n == 1 \
        else "torch's default"
    return f"{n} thread{'s' * (n != 1)}, {why}"


def resolve_dtype(name, device_type):
    """'auto' is bfloat16 on a GPU that has it, else float32."""
    if name not in ("auto", "float32", "bfloat16", "float16"):
        raise ConfigError(f"dtype={name!r}: expected 'auto', 'float32', 'bfloat16' or 'float16'")
    return name if name != "auto" else "bfloat16" if device_type == "cuda" and torch.cuda.is_bf16_supported() \
        else "float32"


def autocast_context(device_type, dtype_name):
    """Mixed precision: matmuls in bf16/fp16, the rest (norm statistics, softmax, loss) in fp32."""
    return nullcontext() if dtype_name == "float32" else torch.autocast(device_type, getattr(torch, dtype_name))


COMPILE_BACKEND = "inductor"  # compile=True's; tests and `gpu_check.py --cpu` take dynamo's
# 'eager': the same graph capture and guards, no code generated (inductor takes minutes on a CPU)


def compiled(model, compile, fixed_shape):
    """torch.compile(model) when `compile` (the setting) is True, else the model. Batches padded to
    their bucket's longest sequence change length: dynamic=True traces one graph with symbolic sizes,
    where the default would specialize on the first length and recompile on the next (past dynamo's
    limit, a shape runs uncompiled). Batches of one shape (a language model's windows) keep the
    default, a graph specialized to that shape."""
    if not compile:
        return model
    return torch.compile(model, dynamic=None if fixed_shape else True, backend=COMPILE_BACKEND)


FLOAT32_MATMULS = "high"  # on CUDA: TF32 tensor cores; gpu_check's float32 reference sets 'highest'


def precision(dtype, device_type):
    """(dtype name, autocast context) of a run: the `dtype` setting resolved (resolve_dtype) and its mixed
    precision (autocast_context). On CUDA, float32 matmuls (the float32 runs', and what autocast leaves in
    float32) take TF32's tensor cores (FLOAT32_MATMULS), a setting of the process."""
    name = resolve_dtype(dtype, device_type)
    if device_type == "cuda":
        torch.set_float32_matmul_precision(FLOAT32_MATMULS)
    return name, autocast_context(device_type, name)
