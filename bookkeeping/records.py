"""
A run's bookkeeping, which train.py keeps beside its story rather than in it: where the run's files are and who
writes them, the lock that lets one process at a time write an out_dir, a stop asked for by a signal, the join of
torchrun's processes within a time limit, which configs describe the same run, the summary record, and the
conditions and code commit a run's log holds. study.py and lab/runs.py read runs with the same helpers. In order:

    RUN_FILES, run_paths, existing_run, check_out_dir, RunFiles    the files of a run in its out_dir
    LOCK_FILE, try_lock, lock_holder, out_dir_busy, out_dir_lock   one writer per out_dir
    StopRequest, join_processes                                    Ctrl-C and SIGTERM; torchrun's group, joined
    IMPLEMENTATION_KEYS, BOOKKEEPING_KEYS, run_differences, same_run, changes
                                                                   the same run: what a resume or a study may change
    describe, summarize                                            the summary record (summary.json)
    setup_line, say_setup, progress, eval_record, budget_line      what a run prints and logs as it goes
    code_commit, machine_conditions, run_conditions                what a run's log says it ran on

This module sits below train.py: it imports configurator, model, hardware/devices.py, and checkpoints.py and
timing.py beside it, never train.py or evaluate.py (the run identity takes train.py's DEFAULTS as an argument for
that reason).
"""

import json
import math
import os
import signal
import subprocess
import time
from contextlib import contextmanager
from datetime import timedelta

import torch

import configurator
from bookkeeping import timing
from bookkeeping.checkpoints import RETIRED_FIELDS, save_checkpoint
from hardware import devices
from model import FAMILIES, family_settings

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
    is prepared or model built, so a mistyped out_dir or a forgotten --init_from=resume costs nothing. An
    out_dir that is a file, or lies under one, is refused too (configurator.not_a_folder)."""
    problem = configurator.not_a_folder(cfg["out_dir"])
    if problem:
        raise configurator.ConfigError(f"out_dir={cfg['out_dir']!r}: {problem}; a run writes its checkpoints and "
                                       f"log into a folder: give a new or existing one")
    found = existing_run(cfg["out_dir"])
    if found and cfg["init_from"] != "resume" and not cfg["overwrite"]:
        raise configurator.ConfigError(
            f"{cfg['out_dir']} already holds a run ({', '.join(found)}): continue it with --init_from=resume, "
            f"replace it with --overwrite=True (its files are deleted), or give another --out_dir")


def log_jsonl(path, record):
    """One JSON line. A figure that is not finite (the best validation loss of a run stopped before its first
    evaluation: inf) is written null (timing.finite), so that any JSON reader reads the log, not Python's alone."""
    with open(path, "a") as f:
        f.write(json.dumps(timing.finite(record), allow_nan=False) + "\n")


class RunFiles:
    """The files of the run in out_dir (RUN_FILES: ckpt.pt, last.pt, log.jsonl, summary.json). Only the
    writer (rank 0 of a DDP run) writes them; for the others these calls do nothing."""

    def __init__(self, out_dir, writer=True):
        os.makedirs(out_dir, exist_ok=True)
        self.paths, self.writer = run_paths(out_dir), writer

    def start(self, record):
        """A new run's first log line. What an earlier run left here goes first: its files, where overwrite=True
        let this run replace it (check_out_dir), or only its log, of a run stopped before its first checkpoint,
        which is kept beside (log-1.jsonl, ...): nothing of a run is deleted unasked."""
        earlier_run = existing_run(os.path.dirname(self.paths["log"]))
        for key, path in self.paths.items():
            if not self.writer or not os.path.exists(path):
                continue
            if key == "log" and not earlier_run:
                k = 1
                while os.path.exists(path.replace(".jsonl", f"-{k}.jsonl")):
                    k += 1
                kept = path.replace(".jsonl", f"-{k}.jsonl")
                os.replace(path, kept)
                print(f"kept the log of an earlier run that stopped before its first checkpoint as {kept}")
            else:
                os.remove(path)
                print(f"deleted {path} (of the run this one replaces)")
        self.log(record)

    def log(self, record):
        if self.writer:
            log_jsonl(self.paths["log"], record)

    def write_summary(self, summary):
        """summary.json: a finished run's, or an interrupted one's (stopped 'interrupted', no test figures), which
        says how far it came; --init_from=resume continues it and writes its own."""
        if self.writer:
            timing.write_json(self.paths["summary"], summary, indent=1)

    def save(self, which, model, **contents):
        if self.writer:
            save_checkpoint(self.paths[which], model, **contents)


# -----------------------------------------------------------------------------
# the run's processes: one writer per out_dir (the lock), a stop asked for by a signal, torchrun's group joined

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


class StopRequest:
    """First Ctrl-C (or SIGTERM, as a study runner sends) asks the loop to stop after the current step
    and save; a second one aborts. Under torchrun a Ctrl-C reaches every process twice, from the terminal
    and from torchrun's agent, which passes the signals it gets on to its processes: a second signal within
    `repeat_window` seconds of the first is the same request."""

    def __init__(self, repeat_window=0.0):
        self.requested, self.repeat_window, self.first = False, repeat_window, 0.0

    def __call__(self, signum, frame):
        if self.requested:
            if time.monotonic() - self.first < self.repeat_window:
                return
            raise KeyboardInterrupt
        self.requested, self.first = True, time.monotonic()
        print("\ninterrupt: finishing this step and saving last.pt (Ctrl-C again to abort)", flush=True)

    @contextmanager
    def installed(self):
        """Handle SIGINT and SIGTERM while the block runs, then restore the previous handlers."""
        old = {s: signal.signal(s, self) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for s, handler in old.items():
                signal.signal(s, handler)


def join_processes(rank, world, backend):
    """Join torchrun's process group as `rank` of `world` processes (torch.distributed.init_process_group with
    `backend`), or a UserError if the others have not all joined within DDP_JOIN_TIMEOUT seconds (a
    ConfigError if that is not a number of seconds). train.py's processes() calls it under torchrun."""
    # Joining waits for every process to arrive. Left to torch it would wait the collectives' timeout (30
    # minutes on gloo) for a process that failed on startup or was never started, so the join has a limit
    # of its own: DDP_JOIN_TIMEOUT seconds, by default 600, torchrun's own rendezvous join_timeout. It bounds
    # the join only; the collectives keep torch's timeout, because the other processes rightly wait at a
    # barrier while rank 0 prepares a missing dataset, which can take longer.
    text = os.environ.get("DDP_JOIN_TIMEOUT", "600")
    join_s = float(text) if text.replace(".", "", 1).isdigit() else 0.0
    if join_s <= 0:
        raise configurator.ConfigError(f"DDP_JOIN_TIMEOUT={text!r}: the seconds the processes may take to join, > 0")
    where = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
    started = time.monotonic()
    try:
        # The env:// rendezvous that init_process_group would do itself (MASTER_ADDR and MASTER_PORT; under
        # torchrun, its agent's store), with the join's limit on the store; then the group, under the keys
        # init_process_group would give it.
        store, _, _ = next(torch.distributed.rendezvous("env://", timeout=timedelta(seconds=join_s)))
        # Each process signs in on the store and waits, within the limit, for all the others to: under torchrun
        # every process only connects to the agent's store, and gloo would then wait the collectives' timeout
        # for a missing one (measured). The restart count keeps a restarted run apart from an earlier attempt.
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        store.set(f"ddp_join/{attempt}/{rank}", "1")
        store.wait([f"ddp_join/{attempt}/{r}" for r in range(world)])
        torch.distributed.init_process_group(backend, rank=rank, world_size=world,
                                             store=torch.distributed.PrefixStore("default_pg", store))
    except torch.distributed.DistError as e:
        reason = str(e).strip().splitlines()[0]
        if time.monotonic() - started < join_s:  # failed at once: MASTER_PORT taken, say
            raise configurator.UserError(f"rank {rank} could not join the process group at {where}: {reason}") from e
        raise configurator.UserError(
            f"the other processes did not join within {join_s:g} s (this is rank {rank} of {world}, the group is at "
            f"{where}): check that all {world} were started (torchrun --nproc_per_node, and --nnodes on every node), "
            f"that none failed before joining (its own error says why), and that each can reach {where}; "
            f"DDP_JOIN_TIMEOUT sets the limit in seconds ({reason})") from e


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
    (model.family_settings) over them. BOOKKEEPING_KEYS are not compared, nor a model field since removed at the
    value every run had (checkpoints.RETIRED_FIELDS)."""
    a, b = json.loads(json.dumps(a)), json.loads(json.dumps(b))  # as stored: tuples -> lists
    a, b = ({k: v for k, v in c.items() if k not in RETIRED_FIELDS or v != RETIRED_FIELDS[k]} for c in (a, b))
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
# what a run reports: its summary record


def describe(figures, metrics):
    """'loss 0.4123 acc 0.8160 ...' for the metrics that have a short name."""
    return " ".join(f"{m.short} {figures[k]:.4f}" for k, m in metrics.items() if m.short)


def summarize(state, metrics_of_task, dataset, counts, minutes):
    """The run's figures: the final validation figures (of the model as training left it), the best
    validation loss and the last gradient norm, with `metrics` saying how to label and compare each
    (`metrics_of_task`: evaluate.METRICS of the run's task)."""
    summary = {"task": dataset.task, "stopped": state.stopped, "iters": state.iter_num, "epochs": state.epoch,
               "best_val_loss": state.best_val_loss, "final_grad_norm": state.grad_norm, "train_minutes": minutes,
               "train_flops": state.train_flops,
               "params": counts["total"], "params_non_embedding": counts["non_embedding"]}
    metrics = {}
    if state.last_eval is not None:
        summary.update({f"final_val_{k}": v for k, v in state.last_eval.items() if k != "iter"},
                       final_eval_iter=state.last_eval["iter"])
        metrics = {f"final_val_{k}": {"label": f"final validation {m.label}", "better": m.better}
                   for k, m in metrics_of_task.items() if k in state.last_eval}
        print(f"final: val {describe(state.last_eval, metrics_of_task)} grad norm {state.grad_norm:.3f}  "
              f"({state.stopped}, {minutes:.1f} min)")
    metrics["best_val_loss"] = {"label": "best validation loss", "better": "lower"}
    metrics["final_grad_norm"] = {"label": "final gradient norm", "better": "lower"}
    summary["metrics"] = metrics
    return summary


# -----------------------------------------------------------------------------
# what a run says as it goes: its opening lines, its progress lines and its evaluations' log records


def setup_line(model, device, dtype_name, world, peak):
    """The line that opens a run: the model's size, the device and precision, the processes, the MFU's peak."""
    counts = model.param_counts()
    frozen = f", {counts['trainable']:,} trainable" if counts["trainable"] < counts["total"] else ""
    return (f"model: {counts['total']:,} parameters ({counts['non_embedding']:,} non-embedding{frozen}); "
            f"device {device}" + (f" ({devices.threads_note()})" if device == "cpu" else "")
            + f", dtype {dtype_name}" + (", TF32 matmuls" if device.startswith("cuda") else "")
            + (f"; {world} processes (DDP, {torch.distributed.get_backend()})" if world > 1 else "")
            + (f"; MFU of a peak {peak[0] / 1e12:,.1f} TFLOP/s per device ({peak[1]})" if peak else
               "; no MFU (no peak FLOP/s known for this device; peak_tflops sets one)"))


def say_setup(files, model, device, dtype_name, world, peak, iter_num):
    """Print the run's setup line and log the conditions it runs under (run_conditions)."""
    print(setup_line(model, device, dtype_name, world, peak))
    files.log({"type": "conditions", "iter": iter_num, **run_conditions(device, dtype_name, world)})


def progress(state, total_iters, epoch, epochs, loss, lr, speed):
    """Print a progress line; return its log record. `epoch`: the step's 1-based epoch, printed if
    the stream has `epochs` (random windows have none); `speed`: the Meter's reading."""
    mfu = f" MFU {100 * speed['mfu']:.1f}%" if "mfu" in speed else ""
    print(f"iter {state.iter_num}/{total_iters}{f' (epoch {epoch})' if epochs else ''} loss {loss:.4f} "
          f"grad norm {state.grad_norm:.3f} lr {lr:.2e} {speed['tok_per_s']:,.0f} tok/s{mfu} "
          f"ETA {speed['eta_min']:.1f} min", flush=True)
    return {"type": "train", "iter": state.iter_num, "epoch": epoch, "loss": loss,
            "grad_norm": state.grad_norm, "lr": lr, "tok_per_s": speed["tok_per_s"],
            **({"mfu": speed["mfu"]} if "mfu" in speed else {})}


def eval_record(state, epoch, optimizer, best):
    """An evaluation's log record: the epoch and rate it was taken at (the optimizer's, after the plateau
    schedule's step), whether it is the best so far, and the validation figures (state.last_eval) as val_<x>."""
    return {"type": "eval", "epoch": epoch, "lr": optimizer.param_groups[0]["lr"], "best": best,
            "grad_norm": state.grad_norm, "iter": state.iter_num,
            **{f"val_{k}": v for k, v in state.last_eval.items() if k != "iter"}}


def budget_line(cfg, total_iters, epoch_steps, eval_every):
    """The line that says where the run writes and how long it may train: its steps, epochs and evaluations."""
    n = total_iters / epoch_steps
    epochs = f" ({n:g} epoch{'s' * (n != 1)} of {epoch_steps:,} steps)" if epoch_steps < math.inf else ""
    stop = (f", or fewer: early stopping after {cfg['early_stop_patience']} evaluations without a gain in "
            f"validation {cfg['select_on']}" if cfg["early_stop_patience"] else "")
    every = f"every {eval_every:,} steps" if eval_every < total_iters else "once, at the end"
    return (f"run: writing to {cfg['out_dir']}; at most {total_iters:,} steps{epochs}{stop}; evaluated {every}, "
            f"the checkpoint of best validation {cfg['select_on']} kept as ckpt.pt")


# -----------------------------------------------------------------------------
# what a run ran on: its log's conditions record, and study.py's timing pass


def code_commit():
    """The git commit of this code's checkout, short, with '+changes' if tracked files of the code differ
    from it (results/ and the .md pages are records, not code: a study that commits its runs' records as
    they land changes them while its other runs train); 'unknown' outside a git checkout."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout's root, above bookkeeping/
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
    versions, and the code's commit: bookkeeping/timing.py's conditions under the names run records have always
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
