"""
The GPU check: every GPU feature of the lab run once on the device, in under 7 minutes, each figure written down
the moment it is measured, and a verdict for every target of docs/speed.md's GPU table. Run it first whenever a
GPU is at hand, as one command whose --out folder is the one that comes back:

    python3 -m bench.gpu_check --prepare --data data       # where $DATA_MIRROR is: the data folder to carry (8 MB)
    python3 -m bench.gpu_check --data data --out $OUT      # CUDA: every section, under 7 minutes on one H100/H200
    python3 -m bench.gpu_check --data data --out DIR --cpu # the rehearsal: the same command, tiny sizes, on a CPU

(python3, not python: the device's image has no `python`. Every process the check starts is sys.executable.)

Sections (SECTIONS below, in the order they run; their code is bench/gpu_sections.py; each its own process, its
own time budget and its own failure):
    sst2     config/sst2_recurrent.py as it is, timed from its process's start to its best checkpoint; each
             evaluation recorded as it lands (when each ckpt.pt was written), so a cut run keeps its figures
    kernels  every Triton kernel compiled and run, forward and backward, against its reference in float64, on
             inputs in float32 and in bfloat16; then each against its PyTorch op, timed (bench.kernel_speed.time_triton)
    scan     Mamba's selective scan: the Triton kernel against the sequential, parallel and chunked PyTorch scans
             at T = 1,024 and 4,096, forward and backward: time, memory beyond inputs/gradients/output, agreement
    decode   stories260K greedy: llama2.c's golden text from the eager and the CUDA-graph step; CUDA-graph
             recordings, caches and graphs across 10 more generate calls (0 expected); tokens/s at batch 1, eager
             and compiled, float32; as extras on time left over, Hugging Face's LlamaForCausalLM's row, bf16
    ddp      NCCL: a one-rank process group, an all_reduce, a barrier and DistributedDataParallel's gradients
             on it; train.py under torchrun (one process per GPU) against one plain process: the same losses
    train    the SST-2 recurrent encoder and the char GPT: float32 (TF32 off) as the reference, then bf16 with the
             Triton kernels, compile off and on (tokens/s, the first steps' losses against float32's, graph breaks)
    mfu      the baseline encoder's training step in bf16 at batch 64 x 256 tokens, eager and compiled: MFU

What comes back goes under --out, four files and no folder, within what a borrowed GPU machine returns (at most
8 files): gpu_check.json (conditions, every section's record, the verdicts) and gpu_check.md (the verdicts' table,
then each section's), rewritten after each section; figures.jsonl, one JSON line per figure, check and note,
appended the moment it lands (what a check cut off mid-section still has); sections.log, what each section
printed, appended as it prints. The sections' runs and scratch go to --work (default: a temporary folder, removed
at the end); an --out that holds an earlier check's files is refused, never written over. Data comes from
--data, read as the data mirror (nothing is downloaded); a --data that lacks something is prepared from
$DATA_MIRROR when it is set, else refused in one line.

Each section runs in a process of its own under a time budget: an exception, a crash, a CUDA error that
poisons its process, or a hang costs that section alone, which records its error in one line (and, stopped at
its budget, the step it was in), and the check goes on. A section's processes die with the check: stopped
(SIGTERM, Ctrl-C) it stops the running section's process group, writes what it has and exits; killed outright,
the section's process is told by the kernel (PR_SET_PDEATHSIG) and stops its group. Exit status: 0 when every
check passed, 1 when one failed, 2 when this machine cannot run the check (no GPU without --cpu, data missing and
no mirror), 128 + the signal's number when it was stopped.

This file is tooling, not the lesson: what it runs lives in kernels.py (the Triton kernels), model.py (their
references), bench/kernel_speed.py (their timing), bench/speed.py (the generation benchmark), hardware/devices.py
(the device helpers) and train.py (training).
"""

import argparse
import ctypes
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from bench.gpu_sections import (
    DDP_LOSS_TOLERANCE,
    ROOT,
    SIZES,
    SST2_FOLDER,
    SST2_PROTOCOL,
    Run,
    one_line,
    section_ddp,
    section_decode,
    section_kernels,
    section_mfu,
    section_scan,
    section_sst2,
    section_train,
)

# -----------------------------------------------------------------------------
# the sections, and the check that runs them


@dataclass(frozen=True)
class Section:
    run: object  # fn(Run)
    budget_s: dict  # {'gpu': s, 'cpu': s}: the process is stopped past it
    what: str


# In the order they run: the headline target first. How each GPU budget was sized (no GPU has run the check yet):
# a section's process start (Python, torch, Triton, CUDA's context) 6 s, then its steps, from the CPU rehearsal's
# and from known costs; each compile its estimate in COMPILE_S (bench/gpu_sections.py: a cold compile, and how the
# estimate was reached) times COMPILE_MARGIN, 1.3. A step that would not fit in what is left is not begun.
#   sst2     the goal itself: 60 s from the process's start to the best checkpoint; a run that meets it ends then
#            or soon after (its test split, its summary): 72 s. Each evaluation lands as it is written, so a run
#            cut at 72 s keeps them, and a best checkpoint written at 60 s or later already fails the goal
#   kernels  start 6 + Triton's compiles, as measured cross-compiling for sm_90 on the 2-core VM (slower than a
#            GPU host's CPU): norms and SwiGLU, 2 dtypes x 3 cases x 2 kernels (fwd, bwd) x 1.5 s 18, bf16
#            attention, 4 variants x 3 kernels (fwd, dK/dV, dQ) x 2 s 24, float32 attention, 1 variant x 3 x 7 s
#            21, the scan, 4 (discretization, dtype) x 2 kernels x 1.5 s 12 = 81 s. The timing against the
#            PyTorch ops (10 s) is an extra: it runs on time the sections before left
#   scan     start 6 + the sequential loop at T = 4,096, fwd+bwd ~1.5 s x 4 runs 6, at 1,024 2, the others 3 = 17 s
#            -> 22 s (each timing stops after 4 s of runs)
#   decode   start 6 + golden eager 1 + the CUDA-graph step's compile 25 x 1.3 = 33 + 10 more calls 2 + float32
#            speed, eager and compiled (2 rounds x 128 tokens) 4 = 46 s. Extras on time left over: Hugging Face's
#            row (importing transformers) 8 s, bf16 (another graph: a compile) 30 s, bf16 tokens 5 s
#   ddp      start 6 + NCCL's one-rank group, an all_reduce and DDP's two passes 4 + the plain run 3 + torchrun
#            (an interpreter for its agent and one for its process, the group joined, 40 steps) 12 = 25 s -> 28 s
#   train    start 6 + 4 runs of 100 steps and an evaluation, ~4 s each 16 + the compiled run 5 and its compile
#            50 x 1.3 = 65: 92 s
#   mfu      start 6 + eager, 13 steps and the model 5 + compiled, its compile 35 x 1.3 = 46 and 13 steps 2 = 59 s
# The budgets add up to 400 s; with the check's own start-up (STARTUP_S) and GRACE_S after the last, 415 s, within
# 7 minutes (420 s), which leaves the device's 10-minute limit 3 minutes for the machine's own start and copies.
# A section may also use what the ones before it left unused, but never past TOTAL_S from the start.
# CPU budgets (the rehearsal): the most each section took in 4 rehearsals on the 2-core VM with two trainings
# beside it (sst2 0.4 s, kernels 2.0, scan 1.6, decode 6.8, ddp 19.4 of which torchrun's two interpreters 18.9,
# train 0.9, mfu 3.1; docs/speed.md), 2-12x over, for a machine busier still.
SECTIONS = {
    "sst2": Section(section_sst2, {"gpu": 72, "cpu": 5}, "config/sst2_recurrent.py to its best checkpoint"),
    "kernels": Section(section_kernels, {"gpu": 81, "cpu": 8}, "Triton kernels against their references"),
    "scan": Section(section_scan, {"gpu": 22, "cpu": 6}, "the selective scan, Triton against PyTorch"),
    "decode": Section(section_decode, {"gpu": 46, "cpu": 16}, "stories260K decoding, eager and CUDA graphs"),
    "ddp": Section(section_ddp, {"gpu": 28, "cpu": 40}, "NCCL and DDP on one rank; train.py under torchrun"),
    "train": Section(section_train, {"gpu": 92, "cpu": 6}, "training in float32 and bf16, compile off and on"),
    "mfu": Section(section_mfu, {"gpu": 59, "cpu": 10}, "the baseline encoder's MFU in bf16, batch 64 x 256"),
}
GRACE_S = 5  # a section ends itself at its budget (before a step it could not finish); past this, it is stopped
STOP_S = 2  # ... by SIGTERM to its process group, and SIGKILL this long after (within GRACE_S)
# the sections' share of the check, counted from the first section's start: no section's budget reaches past it
TOTAL_S = {mode: sum(s.budget_s[mode] for s in SECTIONS.values()) + GRACE_S for mode in ("gpu", "cpu")}
STARTUP_S = 10  # the check's own process before its first section, on a GPU: Python, torch, CUDA's context,
# nvidia-smi, the commit (estimated; gpu_check.json records it as startup_s: the rehearsal's in docs/speed.md)
LIMIT_S = 420  # STARTUP_S + TOTAL_S['gpu'] stays within it (tests/test_gpu_check.py): 7 of the device's 10 minutes
FORK = True  # on a CPU, a section's process is a fork of this one (launch); False: a fresh interpreter, as on a GPU
RETURNED = ("gpu_check.json", "gpu_check.md", "figures.jsonl", "sections.log")  # all it writes under --out
# Data the check reads from --data, and where --prepare takes it from ($DATA_MIRROR)
NEEDED = (f"{SST2_FOLDER}/meta.json", "shakespeare_char/meta.json", "tinyllamas/stories260K/stories260K.bin",
          "tinyllamas/stories260K/tok512.bin")


def conditions(cpu):
    """What every figure depends on: the device, its driver, the versions, the code's commit."""
    from bookkeeping import records
    versions = {}
    for name, packages in (("triton", ("triton", "pytorch-triton")), ("transformers", ("transformers",)),
                           ("numpy", ("numpy",))):  # (PyTorch's own index ships Triton as pytorch-triton)
        versions[name] = None
        for package in packages:
            try:
                versions[name] = importlib.metadata.version(package)
                break
            except importlib.metadata.PackageNotFoundError:
                pass
    c = {"mode": "cpu rehearsal" if cpu else "gpu", "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
         "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(), **versions,
         "cpu": records.machine_conditions("cpu")["machine"], "cpu_count": os.cpu_count(),
         "commit": records.code_commit()}
    if not cpu:
        props = torch.cuda.get_device_properties(0)
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True) if shutil.which("nvidia-smi") else None
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception as e:  # a build without NCCL: the ddp section will say more
            nccl = f"none ({one_line(e)})"
        c.update(device=props.name, gpus=torch.cuda.device_count(), capability=f"{props.major}.{props.minor}",
                 memory_gb=round(props.total_memory / 2**30, 1), nccl=nccl,
                 driver=driver.stdout.strip().splitlines()[0] if driver and driver.returncode == 0 else "unknown")
    else:
        c.update(device="cpu", triton_interpreter=True)
    return c


def vouches_for(c):
    """What a CPU rehearsal vouches for, in a line: the kernels ran in this Triton's interpreter (on this NumPy, which
    the interpreter computes with), and no other Triton's; the GPU's Triton compiles them, which only the GPU shows."""
    return (f"A CPU rehearsal: the Triton kernels run in Triton {c['triton']}'s interpreter (NumPy {c['numpy']}), so "
            f"it vouches for Triton {c['triton']} alone; a GPU's Triton compiles them, which only the check on a GPU "
            "tests.")


def data_environment(args):
    """The environment a section runs in: --data as the data mirror (stories260K, tok512; nothing downloaded), its
    tiktoken cache if it has one, and on the CPU Triton's interpreter (read once, at triton's first import)."""
    env = {"DATA_MIRROR": os.path.abspath(args.data)}
    if os.path.isdir(os.path.join(args.data, "tiktoken_cache")):
        env["TIKTOKEN_CACHE_DIR"] = os.path.abspath(os.path.join(args.data, "tiktoken_cache"))
    if args.cpu:
        env["TRITON_INTERPRET"] = "1"
    return env


def section_command(argv):
    """The command of a section's fresh interpreter: this Python (sys.executable: `python` may not exist where
    `python3` does), this module, the section's arguments."""
    return [sys.executable, "-m", "bench.gpu_check"] + argv


def launch(args, name, partial, log, deadline, env):
    """Start section `name` in a process of its own; its pid, the leader of a process group of its own (torchrun's
    agent and inductor's compilers in it), which dies with this one (die_with_parent). On a CPU the process is a
    fork of this one, which has imported torch and the lesson's files already (a new interpreter takes seconds to
    import them on a busy 2-core machine); on a GPU a fresh interpreter, since a fork cannot use CUDA once its
    parent has, and conditions() has."""
    cmd = ["--section", name, "--partial", partial, "--deadline", str(deadline), "--started", str(time.time()),
           "--parent", str(os.getpid()), "--data", os.path.abspath(args.data), "--out", os.path.abspath(args.out),
           "--work", args.work] + (["--cpu"] if args.cpu else [])
    if not (args.cpu and FORK):
        with open(log, "a") as f:
            return subprocess.Popen(section_command(cmd), cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
                                    start_new_session=True,
                                    env=dict(os.environ, **env, PYTHONUNBUFFERED="1")).pid  # the log as it happens
    sys.stdout.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:  # the child: its own session, its output to its log, and out by os._exit, never back into the parent's code
        os.setsid()
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.environ.update(env)
        code = child(parse_args(cmd))
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>: the signal a process gets when its parent dies


def die_with_parent(parent):
    """In a section's process: on SIGTERM, stop the section's whole process group (torchrun's agent, which stops
    its workers in their own sessions; inductor's compile workers) and exit; and get that SIGTERM from the kernel
    when the check's process `parent` dies, however it dies, SIGKILL included (Linux's PR_SET_PDEATHSIG; where
    there is none, only a stopped check stops its sections)."""
    def stop_group(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # (this process is in the group it signals)
        print(f"[stopped by signal {signum}: the check stopped, or its process died]", flush=True)
        os.killpg(0, signal.SIGTERM)
        sys.stderr.flush()
        os._exit(128 + signum)
    signal.signal(signal.SIGTERM, stop_group)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # (a fork has the check's handler)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if parent is not None and os.getppid() != parent:  # the check died before the kernel was asked to tell
        stop_group(signal.SIGTERM, None)


class Stopped(BaseException):
    """The check's process was asked to stop (SIGTERM, SIGINT): it stops the running section, writes what it has
    and exits."""
    def __init__(self, signum):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def stopped_by_signals():
    """SIGTERM and SIGINT raise Stopped in this process, once (a second one while it cleans up is ignored); the
    handlers before are restored after."""
    def handler(signum, frame):
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, signal.SIG_IGN)
        raise Stopped(signum)
    before = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h)


def stop(pid):
    """Stop section `pid`'s process group: SIGTERM (the section stops its group, torchrun's agent its workers), and
    SIGKILL to whatever of the group is left STOP_S seconds later; the section's process reaped."""
    def send(sig):  # False once no process is left in the group (signal 0: only the asking)
        try:
            os.killpg(pid, sig)
            return True
        except ProcessLookupError:
            return False
    reaped = False
    send(signal.SIGTERM)
    end = time.time() + STOP_S
    while time.time() < end:
        reaped = reaped or os.waitpid(pid, os.WNOHANG)[0] != 0
        if reaped and not send(0):
            return
        time.sleep(0.05)
    send(signal.SIGKILL)
    if not reaped:
        os.waitpid(pid, 0)


def wait(pid, timeout):
    """The exit status of section `pid`, or None once `timeout` seconds have passed (its group then stopped). Any
    exception here (Stopped: the check was stopped) stops the section's group before it goes on up: a section
    never outlives the check."""
    end = time.time() + timeout
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            if time.time() > end:
                stop(pid)
                return None
            time.sleep(0.05)
    except BaseException:
        stop(pid)
        raise


def process_started():
    """time.time() when this process started (Linux's /proc), or None elsewhere."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # starttime, field 22: clock ticks after boot
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def run_sections(args, names):
    """Each section in a process of its own, under its budget; the results written after each, and every figure,
    check and note the moment it lands (figures.jsonl, by the sections). Stopped by a signal, it stops the
    running section, writes what it has (results['stopped']: the signal) and returns."""
    mode = "cpu" if args.cpu else "gpu"
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.work, exist_ok=True)
    log = os.path.join(args.out, "sections.log")  # every section's output, one after the other
    env = data_environment(args)
    results = {"conditions": conditions(args.cpu), "sizes": SIZES[mode], "sections": {}, "stopped": None}
    if args.cpu:
        print(vouches_for(results["conditions"]), flush=True)
    start, spare = time.time(), 0.0
    born = process_started()
    results["startup_s"] = None if born is None else round(start - born, 1)  # (STARTUP_S on a GPU)
    stream = os.path.join(args.out, "figures.jsonl")
    with open(stream, "a") as f:
        f.write(json.dumps({"check": "start", "conditions": results["conditions"], "startup_s": results["startup_s"]},
                           default=str) + "\n")
    try:
        for name in names:
            section = SECTIONS[name]
            budget = round(min(section.budget_s[mode] + spare, TOTAL_S[mode] - (time.time() - start) - GRACE_S))
            partial = os.path.join(args.work, f"{name}.json")
            record = {"figures": {}, "checks": [], "notes": [], "error": None, "reached": None}
            t0, signalled = time.time(), None
            if budget < 1:
                code, stopped = None, f"not run: the check's {TOTAL_S[mode]} s were spent"
            else:
                print(f"{name}: {section.what} (budget {budget} s; log {log})", flush=True)
                with open(log, "a") as f:
                    f.write(f"{'=' * 20} {name}: {section.what} (budget {budget} s)\n")
                if os.path.exists(partial):
                    os.remove(partial)  # an earlier run's record, which a section stopped before its first save leaves
                try:
                    code = wait(launch(args, name, partial, log, t0 + budget, env), budget + max(GRACE_S - STOP_S, 0))
                    stopped = None if code is not None else f"stopped at its budget of {budget} s"
                except Stopped as e:
                    code, signalled = None, e
                    stopped = f"the check was stopped ({e}) after {time.time() - t0:.0f} s of this section"
            if os.path.exists(partial):
                with open(partial) as f:
                    record = json.load(f)
            if stopped and record.get("reached"):
                stopped += f", during '{record['reached']}' (not reached: that step and any after it)"
            if record["error"] is None and (stopped or code not in (0, 1) or not record["checks"]):
                record["error"] = stopped or f"its process ended with status {code} and no check: {last_line(log)}"
            record.update(budget_s=budget, elapsed_s=round(time.time() - t0, 1), passed=passed(record))
            spare = max(0.0, budget - record["elapsed_s"])
            results["sections"][name] = record
            results["elapsed_s"] = round(time.time() - start, 1)
            results["passed"] = all(r["passed"] for r in results["sections"].values())
            results["verdicts"] = verdicts(results, mode)
            write_results(args.out, results)
            verdict = "passed" if record["passed"] else "FAILED: " + (record["error"] or "; ".join(
                c["what"] for c in record["checks"] if not c["passed"]) or "no check ran")
            print(f"{name}: {verdict} ({record['elapsed_s']:.0f} s of {budget} s)", flush=True)
            if signalled:
                raise signalled
    except Stopped as e:
        results.update(stopped=str(e), passed=False, elapsed_s=round(time.time() - start, 1),
                       verdicts=verdicts(results, mode))
        write_results(args.out, results)
        print(f"the check was stopped ({e}): the sections after it did not run; wrote what it had under {args.out}",
              flush=True)
        return results
    print("\nthe GPU table's targets" + (" (a CPU rehearsal: its figures are not a GPU's)" if args.cpu else "") + ":")
    for v in results["verdicts"]:
        print(f"  {v['verdict']:<12} {v['target']}: {v['figure']} (threshold {v['threshold']})")
    print(f"all sections: {'passed' if results['passed'] else 'FAILED'} in {time.time() - start:.0f} s; wrote "
          f"{os.path.join(args.out, 'gpu_check.json')}, gpu_check.md, figures.jsonl and sections.log")
    return results


def passed(record):
    """A section passed: no error, and at least one check, every one of which held."""
    return record["error"] is None and bool(record["checks"]) and all(c["passed"] for c in record["checks"])


def last_line(path):
    """The last line a section's process printed (its log), cut to 300 characters."""
    if not os.path.exists(path):
        return "(no log)"
    with open(path) as f:
        lines = [line.strip() for line in f if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def run_section(name, cpu, data_dir, out, work, partial, deadline, started):
    """One section in this process; its record, also written to `partial` as it goes. An exception ends the
    section with its error in one line (its traceback printed, into the section's log)."""
    run = Run(name, cpu, data_dir, os.path.join(work, name), partial, deadline, SIZES["cpu" if cpu else "gpu"],
              stream=os.path.join(out, "figures.jsonl"), started=started)
    os.makedirs(run.work, exist_ok=True)
    run.save()
    try:
        SECTIONS[name].run(run)
    except Exception as e:
        traceback.print_exc()
        run.record["error"] = one_line(e)
        run.save("error", run.record["error"])
    return run.record


def child(args):
    """A section's own process: its exit status says whether it passed."""
    die_with_parent(args.parent)
    if args.cpu:
        torch.set_num_threads(1)  # tiny models: one thread beats two fighting over a shared machine's cores
    record = run_section(args.section, args.cpu, args.data, args.out, args.work, args.partial, args.deadline,
                         args.started)
    return 0 if passed(record) else 1


# -----------------------------------------------------------------------------
# the verdicts: each target of docs/speed.md's GPU table, pass / fail / not measured, with its figure and threshold


def verdicts(results, mode):
    """[{'target', 'verdict', 'figure', 'threshold'}]: one per target of the GPU table, from the sections'
    figures. 'not measured' where a section did not run or did not reach the figure (or, in a CPU rehearsal,
    where the figure only means something on a GPU: speed, memory, MFU, time)."""
    sections = results["sections"]
    fig = lambda name: sections.get(name, {}).get("figures", {})  # noqa: E731
    out = []

    def verdict(target, ok, figure, threshold, gpu_only=False):
        """ok: True, False, or None where the figure was not measured; a CPU's figure of a GPU-only target is
        shown, but not judged."""
        if ok is None:
            v, figure = "not measured", figure or "not reached"
        elif gpu_only and mode == "cpu":
            v, figure = "not measured", f"{figure} (a CPU's figure)"
        else:
            v = "pass" if ok else "FAIL"
        out.append({"target": target, "verdict": v, "figure": figure, "threshold": threshold})

    # kernels: the worst normwise error per input dtype, against that dtype's tolerance
    errors = fig("kernels").get("errors", {})
    tol = fig("kernels").get("tolerance", {})
    kernel_checks = [c for c in sections.get("kernels", {}).get("checks", [])
                     if c["what"] != "timing against the PyTorch ops"]
    for dtype in ("float32", "bfloat16"):
        mine = {w: max(v for k, v in e.items() if k != "seconds") for w, e in errors.items() if w.endswith(dtype)}
        failed = [c["what"] for c in kernel_checks if c["what"].endswith(dtype) and not c["passed"]]
        worst = max(mine, key=mine.get) if mine else None
        verdict(f"Triton kernels equal their float64 references, {dtype} inputs",
                None if not mine else not failed,
                f"{len(mine)} case{'s' * (len(mine) != 1)}, worst {mine[worst]:.1e} ({worst})"
                + (f"; failed: {', '.join(failed)}" if failed else "") if mine else "",
                f"normwise error <= {tol.get(dtype, '?')}")
    # scan: speed at T = 1,024, and memory beyond inputs, gradients and output flat in T
    scan = {int(T): r for T, r in fig("scan").get("results", {}).items()}
    short = min(scan, default=None)
    triton_short = scan.get(1024 if mode == "gpu" else short, {}).get("triton", {})
    speedup = triton_short.get("speedup")
    verdict("Triton scan >= 10x the sequential scan at T = 1,024", None if speedup is None else speedup >= 10,
            f"{speedup:.1f}x" if speedup is not None else "", ">= 10x", gpu_only=True)
    extra = {T: r.get("triton", {}).get("extra_mb") for T, r in scan.items()}
    extra = {T: mb for T, mb in extra.items() if mb is not None}
    if len(extra) >= 2:
        lo, hi = min(extra), max(extra)
        verdict("Triton scan's memory beyond inputs, gradients and output flat in T", extra[hi] <= 1.25 * extra[lo] + 1,
                f"{extra[lo]:.1f} MB at T = {lo:,}, {extra[hi]:.1f} MB at T = {hi:,}",
                f"at T = {hi:,} <= 1.25x T = {lo:,}'s + 1 MB")
    else:
        verdict("Triton scan's memory beyond inputs, gradients and output flat in T", None, "",
                "at the longest T <= 1.25x the shortest's + 1 MB", gpu_only=True)
    # sst2: time to the best checkpoint from the process's start; from the evaluations it reached, for a run cut
    # before its end: a best written at 60 s or later fails, one earlier may yet be followed by a better one
    s = fig("sst2").get("run", {}).get("best_checkpoint_s")
    bests = [e["s"] for e in fig("sst2").get("evaluations", []) if e["best"]]
    if s is not None or not bests:
        ok, figure = None if s is None else s < 60, f"{s:.1f} s" if s is not None else ""
    else:
        ok = False if bests[-1] >= 60 else None
        figure = (f"cut before the run ended: its last best checkpoint so far written at {bests[-1]:.1f} s "
                  f"({len(fig('sst2')['evaluations'])} evaluations)")
    verdict("config/sst2_recurrent.py to its best checkpoint, from its process's start", ok, figure, "< 60 s",
            gpu_only=True)
    # mfu: the best of eager and compiled
    m = {k: r["mfu"] for k, r in fig("mfu").get("results", {}).items() if r.get("mfu") is not None}
    best = max(m, key=m.get) if m else None
    ms = {k: r["step_ms"] for k, r in fig("mfu").get("results", {}).items()}
    verdict("MFU of the baseline encoder, bf16, batch 64 x 256 tokens, a training step",
            None if not m else m[best] >= 0.30, f"{m[best]:.1%} ({best})" if m else ", ".join(
                f"{k} {v:.1f} ms a step, no peak FLOP/s known" for k, v in ms.items()), ">= 30 %", gpu_only=True)
    # decode: the CUDA-graph step against the eager one at batch 1 (float32), with the golden text
    table = fig("decode").get("speed", {}).get("tables", {}).get("float32", {})
    one = table.get("1", table.get(1, {}))
    golden = [c for c in sections.get("decode", {}).get("checks", []) if c["what"] == "golden text, compiled step"]
    ratio = None
    if "ours, compiled" in one and "ours, eager" in one:
        ratio = one["ours, compiled"]["tokens_per_s"] / one["ours, eager"]["tokens_per_s"]
    ok = None if ratio is None or not golden else ratio >= 5 and golden[0]["passed"]
    verdict("CUDA-graph decode >= 5x eager at batch 1, float32, with llama2.c's golden text", ok,
            f"{ratio:.1f}x, golden text {'yes' if golden and golden[0]['passed'] else 'NO'}" if ok is not None else "",
            ">= 5x and the golden text", gpu_only=True)
    r = fig("decode").get("rerecord")
    captures = None if r is None else r.get("graph_captures")
    verdict(f"no CUDA-graph re-recording over {r['generate_calls'] if r else 10} generate calls",
            None if captures is None else captures == 0 and r["graphs_compiled"] == 0,
            f"{'no' if captures is None else captures} CUDA graph captures, {r['graphs_compiled']} graphs compiled"
            if r else "",
            "0 captures, 0 graphs compiled", gpu_only=True)
    # graph breaks: every compiled figure's count
    counts = {"decode step": fig("decode").get("graph_breaks", {}).get("decode step")}
    counts.update({f"train: {k}": v.get("graph_breaks") for k, v in fig("train").get("runs", {}).items()
                   if "compiled" in k})
    counts.update({"mfu: compiled": fig("mfu").get("results", {}).get("compiled", {}).get("graph_breaks")})
    counted = {k: v for k, v in counts.items() if v is not None}
    verdict("graph breaks, counted for every compiled figure", None if not counted else
            len(counted) == len(counts) and not any(counted.values()),
            ", ".join(f"{k} {v}" for k, v in counts.items()), "0 in each, every one counted")
    # ddp: NCCL's communicator and collective; the DDP losses with 2+ GPUs
    ddp = fig("ddp")
    c = ddp.get("collective")
    verdict(f"{'gloo' if mode == 'cpu' else 'NCCL'}: a communicator and an all_reduce on one device",
            None if c is None else c["equal"], f"{c['seconds']:.1f} s, sum {'right' if c['equal'] else 'WRONG'}"
            if c else "", "the all_reduce's sum is its input")
    losses = ddp.get("losses")
    n = ddp.get("setup", {}).get("processes")
    m = ddp.get("module")
    verdict(f"DistributedDataParallel on a one-rank {'gloo' if mode == 'cpu' else 'NCCL'} group: the plain module's "
            f"gradients", None if m is None else m["error"] <= 1e-5,
            f"{m['error']:.1e} over {m['parameters']} gradients" if m else "", "normwise <= 1e-5")
    verdict("DDP (torchrun, NCCL) logs one process's losses", None if losses is None else
            losses["max_rel_diff"] <= DDP_LOSS_TOLERANCE,
            f"{losses['max_rel_diff']:.1e} ({n} process{'es' if n != 1 else ''} under torchrun)" if losses else "",
            f"relative difference <= {DDP_LOSS_TOLERANCE:g}")
    return out


# -----------------------------------------------------------------------------
# the results: JSON with everything, markdown with the tables


def write_results(out, results):
    """out/gpu_check.json (everything) and out/gpu_check.md (the verdicts, then each section's table)."""
    os.makedirs(out, exist_ok=True)
    for name, text in (("gpu_check.json", json.dumps(results, indent=1, default=str)),
                       ("gpu_check.md", "\n".join(markdown(results)) + "\n")):
        with open(os.path.join(out, name + ".tmp"), "w") as f:
            f.write(text)
        os.replace(os.path.join(out, name + ".tmp"), os.path.join(out, name))


def fmt(x, spec=",.0f"):
    return "–" if x is None else format(x, spec)


def markdown(results):
    c = results["conditions"]
    lines = [f"# GPU check ({c['mode']}): {'passed' if results['passed'] else 'FAILED'}", "",
             f"Written by `python3 -m bench.gpu_check{' --cpu' if c['mode'] != 'gpu' else ''} --out DIR` on "
             f"{c['date']}, commit {c['commit']}, in {results['elapsed_s']:.0f} s.",
             f"Device: {c['device']}" + (f" ({c['gpus']} GPU(s), compute capability {c['capability']}, "
                                          f"{c['memory_gb']} GB, driver {c['driver']}, NCCL {c['nccl']})"
                                          if c["mode"] == "gpu" else f", {c['cpu']}, {c['cpu_count']} cores") + ".",
             f"Versions: torch {c['torch']} (CUDA {c['cuda']}), Triton {c['triton']}, transformers "
             f"{c['transformers']}, Python {c['python']}." + (f" {vouches_for(c)}" if c["mode"] != "gpu" else ""),
             f"The check's own start-up before its first section: {fmt(results.get('startup_s'), '.1f')} s."
             + (f" STOPPED by {results['stopped']}: the sections after the last below did not run."
                if results.get("stopped") else ""), "",
             "| target | verdict | figure | threshold |", "|---|---|---|---|"]
    lines += [f"| {v['target']} | {v['verdict']} | {v['figure'] or '–'} | {v['threshold']} |"
              for v in results.get("verdicts", [])]
    lines += [""]
    for name, r in results["sections"].items():
        lines += [f"## {name}: {'passed' if r['passed'] else 'FAILED'} ({r['elapsed_s']:.0f} s of a "
                  f"{r['budget_s']} s budget)", ""]
        if r["error"]:
            lines += [f"Error: `{r['error']}`", ""]
        try:  # a table that cannot be drawn from what a section left must not lose the rest of the file
            lines += TABLES[name](r["figures"]) if r["figures"] else []
        except Exception as e:
            lines += [f"(no table: {one_line(e)}; the figures are in gpu_check.json)", ""]
        costs = r["figures"].get("compile_s", {})
        if costs:
            each = [f"{k} {v['seconds']:.1f} s (estimated {v['estimate']} s, budgeted {v['budgeted']} s)"
                    for k, v in costs.items()]
            lines += ["Compiles (cold): " + ", ".join(each) + ".", ""]
        failed = [ch for ch in r["checks"] if not ch["passed"]]
        lines += [f"- {len(r['checks']) - len(failed)} of {len(r['checks'])} checks passed"]
        lines += [f"- FAILED: {ch['what']}{': ' + ch['detail'] if ch['detail'] else ''}" for ch in failed]
        lines += [f"- note: {n}" for n in r["notes"]] + [""]
    return lines


def table_kernels(f):
    lines = [f"Errors against the float64 reference, normwise (max |x - ref| / max(max |ref|, 1)); tolerance "
             f"{f['tolerance']['float32']:g} in float32, {f['tolerance']['bfloat16']:g} in bfloat16.", "",
             "| kernel, input dtype | output | worst gradient |", "|---|---:|---:|"]
    for what, e in f.get("errors", {}).items():
        grads = {k: v for k, v in e.items() if k.startswith("d")}  # every case has inputs with gradients
        worst = max(grads, key=grads.get)
        lines.append(f"| {what} | {e['y']:.1e} | {worst} {grads[worst]:.1e} |")
    t = f.get("timing")
    if t:
        lines += ["", f"Against the PyTorch ops, {t['dtype']}, batch {t['batch']}, T {t['T']}, width {t['n_embd']}, "
                      f"{t['n_head']} heads, FFN {t['ffn']}; median ms of up to {t['repeats']} runs"
                      + (" (Triton's interpreter: these times measure Python, not the kernels)" if t["interpreter"]
                         else "") + ":", "",
                  "| kernel | torch op | torch fwd+bwd | Triton fwd+bwd | speedup |", "|---|---|---:|---:|---:|"]
        for name, r in t["results"].items():
            lines.append(f"| {name} | {r['torch_op']} | {r['torch_fwd_bwd']:.3f} | {r['triton_fwd_bwd']:.3f} | "
                         f"{r['torch_fwd_bwd'] / r['triton_fwd_bwd']:.2f}x |")
    return lines + [""]


def table_scan(f):
    s = f.get("shape", {})
    lines = [f"B {s.get('B')}, D {s.get('D')}, N {s.get('N')}, float32, {s.get('discretization')}; forward + "
             f"backward, median ms of up to {s.get('repeats')} runs; peak memory above the inputs. Goal: "
             f"{f.get('goal', '')}.", "",
             "| T | scan | ms | speedup over sequential | peak MB | beyond inputs, gradients, output MB | "
             "error vs sequential |", "|---:|---|---:|---:|---:|---:|---:|"]
    for T, by_scan in f.get("results", {}).items():
        for name, r in by_scan.items():
            lines.append(f"| {T} | {name} | {r['ms']:.2f} | {fmt(r.get('speedup'), '.1f')} | "
                         f"{fmt(r.get('peak_mb'), ',.0f')} | {fmt(r.get('extra_mb'), ',.1f')} | "
                         f"{fmt(r.get('error_vs_sequential'), '.1e')} |")
    return lines + [""]


def table_decode(f):
    lines = []
    if "rerecord" in f:
        r = f["rerecord"]
        lines += [f"Across {r['generate_calls']} more generate calls (batch 1, the CUDA-graph step, lengths that "
                  f"vary): {fmt(r['graph_captures'], 'd')} CUDA graph captures, {r['caches_allocated']} KV caches "
                  f"allocated, {r['graphs_compiled']} graphs compiled.", ""]
    s = f.get("speed")
    if s:
        lines += [f"Greedy, {s['tokens']} new tokens after {s['prompt']!r}, tokens/s in aggregate, median of "
                  f"{s['rounds']} rounds taken in turns:", "",
                  "| dtype | batch | contestant | tokens/s | same tokens as ours eager | compile s |",
                  "|---|---:|---|---:|---|---:|"]
        for dtype, tables in s["tables"].items():
            for batch, table in tables.items():
                for name, r in table.items():
                    lines.append(f"| {dtype} | {batch} | {name} | {r['tokens_per_s']:,.0f} | "
                                 f"{'yes' if r['same_tokens'] else 'no'} | {fmt(r.get('compile_s'), '.1f')} |")
    return lines + [""]


def table_train(f):
    lines = [f"A bf16 run's training losses over the first eighth of its steps within {f.get('tolerance', 0):.0%} "
             f"of the float32 run's (TF32 off), relative (later the runs part as two seeds do: the final validation "
             f"losses are shown, not compared); tokens/s and MFU are medians over the logged intervals after the "
             f"first (which holds any compilation).", "",
             "| run | steps | tokens/s | MFU | early losses vs float32 | final val loss | vs float32 | seconds | "
             "graph breaks |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in f.get("runs", {}).items():
        mfu = f"{100 * r['mfu']:.1f} %" if r.get("mfu") is not None else "–"
        early = f"{100 * r['early_rel_diff']:.2f} %" if r.get("early_rel_diff") is not None else "–"
        lines.append(f"| {name} | {r['steps']} | {fmt(r['tok_per_s'])} | {mfu} | {early} | "
                     f"{fmt(r['final_val_loss'], '.4f')} | {fmt(r.get('delta_vs_float32'), '+.4f')} | "
                     f"{r['seconds']:.0f} | {fmt(r.get('graph_breaks'), 'd')} |")
    return lines + [""]


def table_mfu(f):
    s = f.get("setup", {})
    lines = [f"{s.get('model')}, batch {s.get('batch')} x {s.get('T')} tokens, {s.get('dtype')}, a training step "
             f"(forward, backward, fused AdamW), mean of {s.get('steps')} after 3 of warm-up; peak "
             f"{fmt((s.get('peak_flops') or [None])[0], '.3g')} FLOP/s.", "",
             "| mode | ms a step | tokens/s | MFU | warm-up s | graph breaks |", "|---|---:|---:|---:|---:|---:|"]
    for mode, r in f.get("results", {}).items():
        mfu = f"{100 * r['mfu']:.1f} %" if r.get("mfu") is not None else "–"
        lines.append(f"| {mode} | {r['step_ms']:.1f} | {fmt(r['tokens_per_s'])} | {mfu} | {r['warmup_s']:.1f} | "
                     f"{fmt(r.get('graph_breaks'), 'd')} |")
    return lines + [""]


def table_sst2(f):
    r, evals = f.get("run"), f.get("evaluations", [])
    lines = []
    if r:
        lines += [f"`{r['config']}` as configured ({r['steps']} steps): best checkpoint written "
                  f"{fmt(r.get('best_checkpoint_s'), '.1f')} s after the section's process started; the run took "
                  f"{r['seconds']:.0f} s inside it; the kept checkpoint (best validation accuracy, the config's "
                  f"select_on) scores test accuracy {r.get('test_accuracy')}.", ""]
    if evals:
        lines += ["Each evaluation as it landed (seconds after the section's process started; a new best is a write "
                  "of ckpt.pt, by validation accuracy):", "", "| step | val loss | val accuracy | new best | s |",
                  "|---:|---:|---:|---|---:|"]
        lines += [f"| {e['iter']} | {fmt(e['val_loss'], '.4f')} | {fmt(e.get('val_accuracy'), '.4f')} | "
                  f"{'yes' if e['best'] else ''} | {e['s']:.1f} |" for e in evals]
    return lines + [""]


def table_ddp(f):
    s, losses, c, m = f.get("setup", {}), f.get("losses"), f.get("collective"), f.get("module")
    lines = []
    if c:
        lines += [f"A one-rank {c['backend']} group on {c['device']}: communicator, all_reduce and barrier in "
                  f"{c['seconds']:.1f} s; the sum {'is' if c['equal'] else 'is NOT'} the input."]
    if m:
        lines += [f"DistributedDataParallel over {m['model']} on that group, batch {m['batch']} x {m['T']}, two "
                  f"backward passes: {m['parameters']} gradients, normwise {m['error']:.1e} from the plain module's "
                  f"at most ({m['seconds']:.1f} s)."]
    if s:
        lines += [f"{s.get('what')}, {s.get('steps')} steps, {s.get('dtype')}, grad_accum {s.get('grad_accum')}: "
                  f"{s.get('processes')} process{'es' if s.get('processes') != 1 else ''} under torchrun "
                  f"({s.get('backend')}) against one plain process."]
    if losses:
        lines += [f"Best validation loss {losses['best_val_loss'][0]:.6f} (one process) and "
                  f"{losses['best_val_loss'][1]:.6f} (torchrun); largest relative difference of a logged loss "
                  f"{losses['max_rel_diff']:.1e}."]
    return lines + [""]


TABLES = {"kernels": table_kernels, "scan": table_scan, "decode": table_decode, "train": table_train,
          "ddp": table_ddp, "mfu": table_mfu, "sst2": table_sst2}


def prepare(folder, mirror):
    """--prepare: the folder the check reads, made from the data mirror (nothing downloaded): the tiktoken cache
    (SST-2's tokenizer), SST-2 (data.py sst2: sst2_glue_heldout_compact/), tinyshakespeare (data.py shakespeare_char:
    shakespeare_char/) and stories260K (tinyllamas/stories260K/: the checkpoint and tok512.bin), about 8 MB."""
    import data
    for source in ("tiktoken_cache", "tinyllamas/stories260K"):
        if not os.path.isdir(os.path.join(folder, source)):
            shutil.copytree(os.path.join(mirror, source), os.path.join(folder, source))
    os.environ["TIKTOKEN_CACHE_DIR"] = os.path.abspath(os.path.join(folder, "tiktoken_cache"))
    if not os.path.isfile(os.path.join(folder, SST2_FOLDER, "meta.json")):
        data.prepare("sst2", protocol=SST2_PROTOCOL, mirror=mirror, out_dir=os.path.join(folder, SST2_FOLDER))
    if not os.path.isfile(os.path.join(folder, "shakespeare_char", "meta.json")):
        data.prepare("shakespeare_char", mirror=mirror, out_dir=os.path.join(folder, "shakespeare_char"))


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python3 -m bench.gpu_check",
                                description="Run every GPU feature once on the device, write each figure the moment it "
                                "is measured, and give every target of docs/speed.md's GPU table a verdict (pass, FAIL "
                                "or not measured). Everything it writes goes under --out. --cpu rehearses the same "
                                "sections at tiny sizes (it needs Triton, for its interpreter). Stopped (SIGTERM, "
                                "Ctrl-C), it stops the running section, writes what it has and exits 128 + the signal.")
    p.add_argument("--out", default=None, help="a new folder for what comes back, four files: gpu_check.json and "
                   ".md (the results and verdicts), figures.jsonl (each figure, check and note as it lands) and "
                   "sections.log (what each section printed); one holding an earlier check's files is refused "
                   "(default: out/gpu_check, or out/gpu_check_cpu with --cpu)")
    p.add_argument("--work", default=None, help="the folder for the sections' runs and scratch, kept (default: a "
                   "temporary folder, removed when the check ends)")
    p.add_argument("--data", default="data", help="the folder holding sst2_glue_heldout_compact/, shakespeare_char/, "
                   "tinyllamas/stories260K/ and tiktoken_cache/, read as the data mirror: nothing is downloaded "
                   "(default: data, this checkout's git-ignored data folder)")
    p.add_argument("--prepare", action="store_true", help="make --data from $DATA_MIRROR (the shared data mirror) "
                   "and stop; a check whose --data lacks something prepares it so when $DATA_MIRROR is set")
    p.add_argument("--cpu", action="store_true", help="the rehearsal: tiny sizes on the CPU, Triton in its "
                   "interpreter, torch.compile capturing graphs without generating code (under a minute)")
    p.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=list(SECTIONS), help="which sections "
                   "(default: all, in this order)")
    p.add_argument("--section", help=argparse.SUPPRESS)  # a child process: run this one section
    p.add_argument("--partial", help=argparse.SUPPRESS)
    p.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    p.add_argument("--started", type=float, help=argparse.SUPPRESS)
    p.add_argument("--parent", type=int, help=argparse.SUPPRESS)  # the check's pid
    args = p.parse_args(argv)
    args.out = os.path.abspath(args.out or ("out/gpu_check_cpu" if args.cpu else "out/gpu_check"))
    args.work = args.work and os.path.abspath(args.work)
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.section:
        return child(args)
    if args.cpu:  # before anything imports triton, which reads it once (tests/conftest.py sets it so too)
        os.environ.setdefault("TRITON_INTERPRET", "1")
    mirror = os.environ.get("DATA_MIRROR")
    missing = [p for p in NEEDED if not os.path.isfile(os.path.join(args.data, p))]
    if args.prepare or missing:
        if not mirror or not os.path.isdir(os.path.join(mirror, "tinyllamas")):
            print(f"{args.data} lacks {', '.join(missing) or 'nothing'}, and $DATA_MIRROR (the data mirror to prepare "
                  f"it from) is {'not set' if not mirror else 'without tinyllamas/'}: run `python3 -m bench.gpu_check "
                  f"--prepare --data {args.data}` where the mirror is, and carry the folder (docs/speed.md, "
                  f"'On a GPU')")
            return 2
        print(f"preparing {args.data} from {mirror}: {', '.join(missing) or 'checked'}", flush=True)
        prepare(args.data, mirror)
        if args.prepare:
            return 0
    if not args.cpu and not torch.cuda.is_available():
        print(f"error: the GPU check needs a CUDA GPU, and torch {torch.__version__} sees none here; rehearse it on "
              f"the CPU with `python3 -m bench.gpu_check --cpu` (the same sections at tiny sizes, Triton in its "
              f"interpreter)")
        return 2
    if args.cpu and {"kernels", "scan"} & set(args.sections) and importlib.util.find_spec("triton") is None:
        print("error: the rehearsal runs the Triton kernels in Triton's interpreter, and Triton is not installed here: "
              "pip install triton (Linux; requirements-test.txt installs it)")
        return 2
    earlier = [f for f in RETURNED if os.path.exists(os.path.join(args.out, f))]
    if earlier:
        print(f"error: --out {args.out} holds an earlier check's {', '.join(earlier)}: name a new folder (or move "
              f"them away first); a check never writes over another's results")
        return 2
    if args.cpu:  # imported once here, for every section's forked process
        for module in ("torch._dynamo", "bench.kernel_speed", "bench.speed", "export", "train"):
            importlib.import_module(module)
    scratch = None if args.work else tempfile.mkdtemp(prefix="gpu_check_work_")
    args.work = args.work or scratch
    try:
        with stopped_by_signals():
            results = run_sections(args, [n for n in SECTIONS if n in args.sections])
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    if results["stopped"]:
        return 128 + signal.Signals[results["stopped"]]
    return 0 if results["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
