"""
Config overrides, nanoGPT style but strict; then the device, CPU threads and precision every command resolves,
and the check of a folder it will write into:

    python train.py config/sst2_recurrent.py --batch_size=32 --learning_rate=1e-3

A config file is plain Python whose top-level assignments override the defaults; `--key=value`
arguments come after it and win. Every key must already exist among the defaults (a typo is an
error that names the closest valid key), and every value must have the default's type, except that
an int is accepted where a float is expected. A default of None accepts any value.

Some keys exist only under one value of another setting: each model family has its own settings,
present when `model` names that family. `apply_overrides` takes them as `depends`,
{setting: {value: {key: default}}}; a key of another family is an error that says whose it is.
"""

import ast
import difflib
import os
from contextlib import nullcontext

import torch


class UserError(Exception):
    """Bad input: a setting, an argument, a data file or a checkpoint that cannot be used, with what to do about
    it. Every command prints one as a single line, `error: ...`, and exits with status 1. Its family: ConfigError
    here, data.DataError and bookkeeping.checkpoints.CheckpointError. Any other exception is a bug, and keeps its traceback."""


class ConfigError(UserError, ValueError):
    """An unknown key, an ill-typed or out-of-range value, or an unreadable config file."""


def closest(key, valid):
    near = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    return f" (did you mean {near[0]!r}?)" if near else ""


def _check(key, value, defaults, source, elsewhere=None):
    """Return value coerced to the type of defaults[key], or raise ConfigError. `elsewhere` maps keys
    that are valid only under another choice to the words that say which."""
    if key not in defaults:
        if elsewhere and key in elsewhere:
            raise ConfigError(f"config key {key!r} in {source} is a setting of {elsewhere[key]}")
        raise ConfigError(f"unknown config key {key!r} in {source}{closest(key, list(defaults))}")
    default = defaults[key]
    if isinstance(default, float) and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)  # an int is accepted where a float is expected
    if default is None or isinstance(value, type(default)) and isinstance(value, bool) == isinstance(default, bool):
        return value  # a default of None takes anything; bool is a subclass of int, but True is no int, 1 no bool
    raise ConfigError(f"{key} must be of type {type(default).__name__} (the default is {default!r}), "
                      f"got {value!r} of type {type(value).__name__} from {source}")


def parse_value(text):
    """'3e-4' -> 0.0003, 'True' -> True, '32' -> 32, 'None' -> None; anything else stays a string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def read_settings(argv):
    """The assignments in argv, in order, unchecked: [(key, value, source)] from each config file's
    top-level names and each --key=value."""
    settings = []
    for arg in argv:
        if not arg.startswith("--"):
            if not os.path.isfile(arg):
                raise ConfigError(f"config file {arg} not found (arguments are config files or --key=value)")
            namespace = {}
            try:
                with open(arg) as f:  # __file__ lets a config file run a sibling first (see config/)
                    exec(compile(f.read(), arg, "exec"), {"__file__": os.path.abspath(arg)}, namespace)
            except Exception as e:
                raise ConfigError(f"could not run config file {arg}: {type(e).__name__}: {e}") from None
            # helpers and imports inside a config file are not settings
            settings += [(key, value, arg) for key, value in namespace.items()
                         if not (key.startswith("_") or callable(value) or type(value).__name__ == "module")]
        else:
            key, sep, text = arg[2:].partition("=")  # split on the first '=' only
            if not sep:
                raise ConfigError(f"argument {arg!r} must be --key=value")
            settings.append((key, parse_value(text), f"--{key}"))
    return settings


def apply_overrides(defaults, argv, depends=None):
    """Return a new config dict: defaults updated from the config files and --key=value items in argv.
    depends = {setting: {value: {key: default}}} adds the keys of the value each such setting ends
    up with (its last assignment, else its default)."""
    settings = read_settings(argv)
    full, elsewhere = dict(defaults), {}
    for name, choices in (depends or {}).items():
        chosen = _check(name, defaults[name], defaults, "the defaults")
        for key, value, source in settings:
            if key == name:
                chosen = _check(key, value, defaults, source)
        if chosen not in choices:
            raise ConfigError(f"{name}={chosen!r}: expected one of {sorted(choices)}")
        full.update(choices[chosen])
        for other, keys in choices.items():
            for key in set(keys) - set(choices[chosen]):
                elsewhere.setdefault(key, f"{name}={other!r}, not of {name}={chosen!r}")
    config = dict(full)
    for key, value, source in settings:
        config[key] = _check(key, value, full, source, elsewhere)
    return config


def not_a_folder(folder):
    """Why `folder` cannot be made and written into, or '': it is a file, or the nearest path above it that exists
    is one (os.makedirs would end in FileExistsError or NotADirectoryError). Commands check the folders they will
    write into with it before any work (train.py's out_dir, data.py's)."""
    path = os.path.normpath(folder)
    while not os.path.exists(path) and os.path.dirname(path) not in ("", path):
        path = os.path.dirname(path)
    if not os.path.exists(path) or os.path.isdir(path):
        return ""
    return "a file, not a folder" if path == os.path.normpath(folder) else f"{path} is a file, not a folder"


# -----------------------------------------------------------------------------
# devices, CPU threads and precision: train.py and evaluate.py resolve theirs here, before any work


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
