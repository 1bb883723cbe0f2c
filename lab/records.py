"""
A run's bookkeeping, which train.py keeps beside its story rather than in it: where the run's files are and who
writes them, the lock that lets one process at a time write an out_dir, which configs describe the same run, and
the conditions and code commit a run's log holds. study.py and lab/runs.py read runs with the same helpers. In order:

    RUN_FILES, run_paths, existing_run, check_out_dir, RunFiles    the files of a run in its out_dir
    LOCK_FILE, try_lock, lock_holder, out_dir_busy, out_dir_lock   one writer per out_dir
    IMPLEMENTATION_KEYS, BOOKKEEPING_KEYS, run_differences, same_run, changes
                                                                   the same run: what a resume or a study may change
    code_commit, machine_conditions, run_conditions                what a run's log says it ran on

This module sits below train.py: it imports configurator, model and bench/timing.py, never train.py or
evaluate.py (the run identity takes train.py's DEFAULTS as an argument for that reason).
"""

import json
import os
import subprocess
from contextlib import contextmanager

import configurator
from bench import timing
from model import FAMILIES, family_settings, save_checkpoint

# -----------------------------------------------------------------------------
# the files of a run in its out_dir

RUN_FILES = {"best": "ckpt.pt", "last": "last.pt", "log": "log.jsonl", "summary": "summary.json"}


def run_paths(out_dir):
    """{'best', 'last', 'log', 'summary'}: the files of the run in out_dir."""
    return {k: os.path.join(out_dir, f) for k, f in RUN_FILES.items()}


def existing_run(out_dir):
    """The files in out_dir that make it hold a run (a checkpoint or a summary), or []."""
    return [f for k, f in RUN_FILES.items() if k != "log" and os.path.isfile(os.path.join(out_dir, f))]


def check_out_dir(cfg):
    """A new run never replaces a run already in out_dir unless overwrite=True: checked before any data
    is prepared or model built, so a mistyped out_dir or a forgotten --init_from=resume costs nothing."""
    found = existing_run(cfg["out_dir"])
    if found and cfg["init_from"] != "resume" and not cfg["overwrite"]:
        raise configurator.ConfigError(
            f"{cfg['out_dir']} already holds a run ({', '.join(found)}): continue it with --init_from=resume, "
            f"replace it with --overwrite=True (its files are deleted), or give another --out_dir")


def log_jsonl(path, record):
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


class RunFiles:
    """The files of the run in out_dir (RUN_FILES: ckpt.pt, last.pt, log.jsonl, summary.json). Only the
    writer (rank 0 of a DDP run) writes them; for the others these calls do nothing."""

    def __init__(self, out_dir, writer=True):
        os.makedirs(out_dir, exist_ok=True)
        self.paths, self.writer = run_paths(out_dir), writer

    def log(self, record):
        if self.writer:
            log_jsonl(self.paths["log"], record)

    def save(self, which, model, **contents):
        if self.writer:
            save_checkpoint(self.paths[which], model, **contents)


# -----------------------------------------------------------------------------
# one writer per out_dir

LOCK_FILE = "train.lock"  # in out_dir: held by the process that writes the run (out_dir_lock)


def try_lock(f):
    """An exclusive, non-blocking lock on the open file f (fcntl.flock): True if taken, False if another
    process holds it. Where there is no fcntl (Windows), always True: no lock."""
    try:
        import fcntl
    except ImportError:
        return True
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def lock_holder(f):
    """The pid its holder wrote in the open lock file f ('?' if none yet)."""
    f.seek(0)
    return f.read().strip() or "?"


def out_dir_busy(out_dir):
    """The pid of the process that holds out_dir's lock (a run going on there), or None."""
    path = os.path.join(out_dir, LOCK_FILE)
    if not os.path.isfile(path):
        return None
    with open(path, "r+") as f:
        if try_lock(f):
            return None  # taken and, as the file closes, let go
        return lock_holder(f)


@contextmanager
def out_dir_lock(cfg, writer=True):
    """One run at a time in an out_dir: the writing process (`writer`; not the other ranks of a DDP run) holds an
    exclusive lock on out_dir/train.lock while it runs, so a second train.py there (the same run started
    twice, two study.py on one plan) stops at once with a clear error instead of writing the same
    checkpoints. The lock goes with the process, however it ends (a killed run leaves a train.lock that
    nobody holds, which the next run takes); a run that ends removes the file. Under the lock, check_out_dir
    again: a run another process finished in between counts."""
    if not writer:
        yield
        return
    created = not os.path.isdir(cfg["out_dir"])
    os.makedirs(cfg["out_dir"], exist_ok=True)
    path = os.path.join(cfg["out_dir"], LOCK_FILE)
    while True:
        f = open(path, "a+")
        if not try_lock(f):
            holder = lock_holder(f)
            f.close()
            raise configurator.UserError(f"{cfg['out_dir']} is being written by another run (process {holder}): "
                                         f"wait for it to end, or give another --out_dir")
        if os.path.exists(path) and os.path.samestat(os.fstat(f.fileno()), os.stat(path)):
            break
        f.close()  # its holder removed the file as we took the lock on it: take the one there now
    try:
        f.truncate(0)
        f.write(str(os.getpid()))
        f.flush()
        check_out_dir(cfg)
        yield
    finally:
        os.remove(path)  # removed while held, then let go (closed): the folder keeps only the run's files
        f.close()
        if created and not os.listdir(cfg["out_dir"]):
            os.rmdir(cfg["out_dir"])  # a run that stopped before it wrote anything (a bad device) leaves no folder


# -----------------------------------------------------------------------------
# the same run: which configs describe one run (train.py resumes only the same run; study.py counts a
# finished run of the same config as done, and continues a stopped one)

# Settings that choose how the same function is computed, not what is trained: the attention, norm, SwiGLU
# and AdamW paths (each tested equal to its reference) and compilation. They change results only by float
# rounding, so a run may resume under another of them (it says which), and a run made under another is the
# same run (runs made before the fused norms and the fused AdamW became the defaults count as finished).
IMPLEMENTATION_KEYS = ("attn_impl", "norm_impl", "ffn_impl", "adamw_impl", "compile")
# Settings that change nothing a run computes: where its files are (a run folder may be moved), how often it
# prints, the MFU's denominator, and whether it was allowed to replace a run in its out_dir.
BOOKKEEPING_KEYS = ("out_dir", "log_interval", "peak_tflops", "overwrite")


def run_differences(a, b, defaults):
    """The settings two run configs differ in, as (implementation keys, other keys), each sorted. A config
    with init_from 'resume' was started by continuing a run, which is the run it continues: it matches any
    init_from. A setting one config lacks (added to train.py after that run was made) counts as its
    default, which that run had: `defaults` are train.py's (train.DEFAULTS), with the model family's
    (model.family_settings) over them. BOOKKEEPING_KEYS are not compared."""
    a, b = json.loads(json.dumps(a)), json.loads(json.dumps(b))  # as stored: tuples -> lists
    if "resume" in (a.get("init_from"), b.get("init_from")):
        a.pop("init_from", None), b.pop("init_from", None)
    family = a.get("model", defaults["model"])
    defaults = {**defaults, **(family_settings(family) if family in FAMILIES else {})}
    unset = object()  # a key that neither the config nor the defaults know differs from any value
    value = lambda c, k: c[k] if k in c else defaults.get(k, unset)  # noqa: E731
    differ = sorted(k for k in (set(a) | set(b)) - set(BOOKKEEPING_KEYS) if value(a, k) != value(b, k))
    implementation = [k for k in differ if k in IMPLEMENTATION_KEYS]
    return implementation, [k for k in differ if k not in IMPLEMENTATION_KEYS]


def same_run(a, b, defaults):
    """Whether two run configs describe the same run: they differ at most in IMPLEMENTATION_KEYS."""
    return not run_differences(a, b, defaults)[1]


def changes(a, b, keys):
    """'key old -> new, ...' for the keys in which config a and config b differ."""
    return ", ".join(f"{k} {a.get(k, '(unset)')!r} -> {b.get(k, '(unset)')!r}" for k in keys)


# -----------------------------------------------------------------------------
# what a run ran on: its log's conditions record, and study.py's timing pass


def code_commit():
    """The git commit of this code's checkout, short, with '+changes' if tracked files of the code differ
    from it (results/ and the .md pages are records, not code: a study that commits its runs' records as
    they land changes them while its other runs train); 'unknown' outside a git checkout."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout's root, above lab/
    try:
        git = lambda *a: subprocess.run(["git", *a], capture_output=True, text=True, cwd=here, timeout=10)  # noqa: E731
        head = git("rev-parse", "--short", "HEAD")
        if head.returncode != 0:
            return "unknown"
        changed = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results",
                      ":(exclude)*.md").stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head.stdout.strip() + ("+changes" if changed else "")


def machine_conditions(device):
    """The processor (or the GPU of a CUDA device), the cores this process may use and its threads, the
    versions, and the code's commit: bench/timing.py's conditions under the names run records have always
    stored (machine is its device_name), with the cores this process may use (its affinity, which a study
    pins; not the machine's cpu_count) and the commit."""
    c = timing.conditions(device, "float32")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"machine": c["device_name"], "cores": cores, "threads": c["threads"], "torch": c["torch"],
            "python": c["python"], "commit": code_commit()}


def run_conditions(device, dtype_name, processes):
    """Where and how a run runs, for its log: study.py reports a study's conditions from its runs, not from
    the machine that writes the report. The machine's conditions, then the device, the precision and the
    number of processes."""
    return {**machine_conditions(device), "device": device, "dtype": dtype_name, "processes": processes}
