"""
The GPU check: every GPU feature of the lab run once on the device, in minutes, with what it measured written
down. Run it first whenever a GPU is at hand:

    python -m bench.gpu_check                             # CUDA: every section, under 8 minutes on one H100 or H200
    python -m bench.gpu_check --cpu                       # the rehearsal: the same sections at tiny sizes on the CPU
    python -m bench.gpu_check --sections kernels scan     # some sections only

Sections (SECTIONS below; their code is bench/gpu_sections.py; each its own process, its own time budget and its
own failure):
    kernels  every Triton kernel compiled and run, forward and backward, against its reference in float64, on
             inputs in float32 and in bfloat16 (the interpreter tests of tests/test_triton_kernels.py, on the
             device); then each against its PyTorch op, timed (bench.kernel_speed.time_triton)
    scan     Mamba's selective scan: the Triton kernel against the sequential, parallel and chunked PyTorch scans
             at T = 1,024 and 4,096, forward and backward: time, peak memory, agreement
    decode   stories260K greedy: llama2.c's golden text from the eager and the CUDA-graph step; CUDA-graph
             recordings and cache allocations across 10 more generate calls (0 expected); tokens/s at batch 1
             and 32, eager, compiled and Hugging Face's LlamaForCausalLM, in float32 and under bf16 autocast
             (bench.speed.generation_bench)
    ddp      torchrun, one process per GPU (NCCL), against one plain process: the same logged losses
    train    the SST-2 recurrent and baseline encoders and the char GPT, a few hundred steps each: float32 as
             the reference, then bf16 with the Triton kernels, compile off and on (tokens/s, MFU, the losses of
             the first steps against float32's); config/sst2_recurrent.py as it is, timed to its best checkpoint

Data comes from --data (default data/, git-ignored), a folder holding the prepared sst2_glue_compact/ and
shakespeare_char/ (python data.py sst2; python data.py shakespeare_char) and tinyllamas/stories260K/ (the
checkpoint and tok512.bin), read as the data mirror: nothing is downloaded. docs/speed.md's GPU section gives the
commands. Figures go to results/gpu_check.json (each with its conditions: device, driver, versions, dtype,
repetitions) and results/gpu_check.md (the tables docs/speed.md's GPU section is written from); a --cpu
rehearsal writes out/gpu_check_cpu.{json,md} instead, and every run's logs and scratch files go to
out/gpu_check/.

Each section runs in a process of its own under a time budget: an exception, a crash, a CUDA error that
poisons its process, or a hang costs that section alone, which records its error in one line, and the check
goes on. A section writes its figures as it goes, so one stopped at its budget keeps what it measured. Exit
status: 0 when every check passed, 1 when one failed, 2 when this machine cannot run the check.

This file is tooling, not the lesson: what it runs lives in kernels.py (the Triton kernels), model.py (their
references), bench/kernel_speed.py (their timing), bench/speed.py (the generation benchmark), configurator.py (the
device helpers) and train.py (training).
"""

import argparse
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from bench.gpu_sections import (ROOT, SIZES, Run, one_line, section_ddp, section_decode, section_kernels, section_scan,
                                section_train)


# -----------------------------------------------------------------------------
# the sections, and the check that runs them


@dataclass(frozen=True)
class Section:
    run: object  # fn(Run)
    budget_s: dict  # {'gpu': s, 'cpu': s}: the process is stopped past it
    what: str


SECTIONS = {  # in the order they run. The GPU budgets add up to 440 s, the processes' starts included; a section
    # may also use what the ones before it left unused, and one still running GRACE_S past its budget is stopped:
    # 7.8 minutes at the very most, even if all five were
    "kernels": Section(section_kernels, {"gpu": 70, "cpu": 40}, "Triton kernels against their references"),
    "scan": Section(section_scan, {"gpu": 30, "cpu": 20}, "the selective scan, Triton against PyTorch"),
    "decode": Section(section_decode, {"gpu": 130, "cpu": 40}, "stories260K decoding, eager and CUDA graphs"),
    "ddp": Section(section_ddp, {"gpu": 25, "cpu": 30}, "torchrun against one process"),
    "train": Section(section_train, {"gpu": 185, "cpu": 60}, "training in float32 and bf16, compile off and on"),
}
GRACE_S = 5  # a section ends itself at its budget (before a step it could not finish); past this, it is killed


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


def data_environment(args):
    """The environment a section runs in: --data as the data mirror (stories260K, tok512; nothing downloaded), its
    tiktoken cache if it has one, and on the CPU Triton's interpreter (read once, at triton's first import)."""
    env = {"DATA_MIRROR": os.path.abspath(args.data)}
    if os.path.isdir(os.path.join(args.data, "tiktoken_cache")):
        env["TIKTOKEN_CACHE_DIR"] = os.path.abspath(os.path.join(args.data, "tiktoken_cache"))
    if args.cpu:
        env["TRITON_INTERPRET"] = "1"
    return env


def run_sections(args, names):
    """Each section in a process of its own (or, --in_process, in this one), under its budget; the results
    written after each."""
    mode = "cpu" if args.cpu else "gpu"
    os.makedirs(args.work, exist_ok=True)
    env = data_environment(args)
    results = {"conditions": conditions(args.cpu), "sizes": SIZES[mode], "sections": {}}
    start, spare = time.time(), 0.0
    for name in names:
        section = SECTIONS[name]
        budget = round(section.budget_s[mode] + spare)  # its own, and what the sections before left
        partial = os.path.join(os.path.abspath(args.work), f"{name}.json")
        log = os.path.join(args.work, f"{name}.log")
        print(f"{name}: {section.what} (budget {budget} s; log {log})", flush=True)
        if os.path.exists(partial):
            os.remove(partial)  # an earlier run's record, which a section stopped before its first save would leave
        t0 = time.time()
        code, stopped = 0, None
        if args.in_process:  # no log of its own, no budget enforced: for a debugger, and the tests
            os.environ.update(env)
            run_section(name, args.cpu, os.path.abspath(args.data), os.path.abspath(args.work), partial, t0 + budget)
        else:
            cmd = [sys.executable, "-m", "bench.gpu_check", "--section", name, "--partial", partial, "--deadline",
                   str(t0 + budget), "--data", os.path.abspath(args.data), "--work", os.path.abspath(args.work)]
            with open(log, "w") as f:
                child = subprocess.Popen(cmd + (["--cpu"] if args.cpu else []), cwd=ROOT, stdout=f,
                                         env=dict(os.environ, **env, PYTHONUNBUFFERED="1"),  # the log as it happens
                                         stderr=subprocess.STDOUT, start_new_session=True)
                try:
                    code = child.wait(timeout=budget + GRACE_S)
                except subprocess.TimeoutExpired:
                    os.killpg(child.pid, signal.SIGKILL)  # torchrun's workers and inductor's compilers with it
                    child.wait()
                    code, stopped = None, f"stopped at its budget of {budget} s"
        record = {"figures": {}, "checks": [], "notes": [], "error": None}
        if os.path.exists(partial):
            with open(partial) as f:
                record = json.load(f)
        if record["error"] is None and (stopped or code not in (0, 1) or not record["checks"]):
            record["error"] = stopped or f"its process ended with status {code} and no check: {last_line(log)}"
        record.update(budget_s=budget, elapsed_s=round(time.time() - t0, 1), passed=passed(record))
        spare = max(0.0, budget - record["elapsed_s"])
        results["sections"][name] = record
        results["elapsed_s"] = round(time.time() - start, 1)
        results["passed"] = all(r["passed"] for r in results["sections"].values())
        write_results(args.out, results)
        verdict = "passed" if record["passed"] else "FAILED: " + (record["error"] or "; ".join(
            c["what"] for c in record["checks"] if not c["passed"]) or "no check ran")
        print(f"{name}: {verdict} ({record['elapsed_s']:.0f} s of {budget} s)", flush=True)
    print(f"all sections: {'passed' if results['passed'] else 'FAILED'} in {time.time() - start:.0f} s; "
          f"wrote {args.out}.json and {args.out}.md")
    return results


def passed(record):
    """A section passed: no error, and at least one check, every one of which held."""
    return record["error"] is None and bool(record["checks"]) and all(c["passed"] for c in record["checks"])


def last_line(path):
    """The last line a section's process printed (its log), cut to 300 characters."""
    if not os.path.exists(path):  # (--in_process: no log of its own)
        return "(no log)"
    with open(path) as f:
        lines = [line.strip() for line in f if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


@contextmanager
def restored():
    """What the sections change in their process put back afterwards, for the next one in this process
    (--in_process): the decode step's shapes and backend and train's compile backend (a CPU rehearsal's), and
    the float32 matmul precision (the kernels', and train.py's on CUDA)."""
    import kernels
    import train
    saved = kernels.STATIC_DECODE, kernels.COMPILE_BACKEND, train.COMPILE_BACKEND, torch.get_float32_matmul_precision()
    try:
        yield
    finally:
        kernels.STATIC_DECODE, kernels.COMPILE_BACKEND, train.COMPILE_BACKEND, precision = saved
        torch.set_float32_matmul_precision(precision)


def run_section(name, cpu, data_dir, work, partial, deadline):
    """One section in this process; its record, also written to `partial` as it goes. An exception ends the
    section with its error in one line (its traceback printed, into the section's log)."""
    run = Run(name, cpu, data_dir, os.path.join(work, name), partial, deadline, SIZES["cpu" if cpu else "gpu"])
    os.makedirs(run.work, exist_ok=True)
    run.save()
    try:
        with restored():
            SECTIONS[name].run(run)
    except Exception as e:
        traceback.print_exc()
        run.record["error"] = one_line(e)
        run.save()
    return run.record


def child(args):
    """A section's own process: its exit status says whether it passed."""
    if args.cpu:
        torch.set_num_threads(1)  # tiny models: one thread beats two fighting over a shared machine's cores
    record = run_section(args.section, args.cpu, args.data, args.work, args.partial, args.deadline)
    return 0 if passed(record) else 1


# -----------------------------------------------------------------------------
# the results: JSON with everything, markdown with the tables


def write_results(out, results):
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out + ".json", "w") as f:
        json.dump(results, f, indent=1, default=str)
    with open(out + ".md", "w") as f:
        f.write("\n".join(markdown(results)) + "\n")


def fmt(x, spec=",.0f"):
    return "–" if x is None else format(x, spec)


def markdown(results):
    c = results["conditions"]
    lines = [f"# GPU check ({c['mode']}): {'passed' if results['passed'] else 'FAILED'}", "",
             f"Written by `python -m bench.gpu_check{' --cpu' if c['mode'] != 'gpu' else ''}` on {c['date']}, commit "
             f"{c['commit']}, in {results['elapsed_s']:.0f} s.",
             f"Device: {c['device']}" + (f" ({c['gpus']} GPU(s), compute capability {c['capability']}, "
                                          f"{c['memory_gb']} GB, driver {c['driver']}, NCCL {c['nccl']})"
                                          if c["mode"] == "gpu" else f", {c['cpu']}, {c['cpu_count']} cores") + ".",
             f"Versions: torch {c['torch']} (CUDA {c['cuda']}), Triton {c['triton']}, transformers "
             f"{c['transformers']}, Python {c['python']}.", ""]
    for name, r in results["sections"].items():
        lines += [f"## {name}: {'passed' if r['passed'] else 'FAILED'} ({r['elapsed_s']:.0f} s of a "
                  f"{r['budget_s']} s budget)", ""]
        if r["error"]:
            lines += [f"Error: `{r['error']}`", ""]
        lines += TABLES[name](r["figures"]) if r["figures"] else []
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
             "| T | scan | ms | speedup over sequential | peak MB | error vs sequential |",
             "|---:|---|---:|---:|---:|---:|"]
    for T, by_scan in f.get("results", {}).items():
        for name, r in by_scan.items():
            lines.append(f"| {T} | {name} | {r['ms']:.2f} | {fmt(r.get('speedup'), '.1f')} | "
                         f"{fmt(r.get('peak_mb'), ',.0f')} | {fmt(r.get('error_vs_sequential'), '.1e')} |")
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
             f"of the float32 run's, relative (later the runs part as two seeds do: the final validation losses are "
             f"shown, not compared); tokens/s and MFU are medians over the logged intervals after the first (which "
             f"holds any compilation).", "",
             "| run | steps | tokens/s | MFU | early losses vs float32 | final val loss | vs float32 | seconds | "
             "best checkpoint at s |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in f.get("runs", {}).items():
        mfu = f"{100 * r['mfu']:.1f} %" if r.get("mfu") is not None else "–"
        early = f"{100 * r['early_rel_diff']:.2f} %" if r.get("early_rel_diff") is not None else "–"
        lines.append(f"| {name} | {r['steps']} | {fmt(r['tok_per_s'])} | {mfu} | {early} | "
                     f"{fmt(r['final_val_loss'], '.4f')} | {fmt(r.get('delta_vs_float32'), '+.4f')} | "
                     f"{r['seconds']:.0f} | {fmt(r.get('best_checkpoint_s'), '.0f')} |")
    return lines + [""]


def table_ddp(f):
    s, losses = f.get("setup", {}), f.get("losses")
    lines = [f"{s.get('what')}, {s.get('steps')} steps, {s.get('dtype')}, grad_accum {s.get('grad_accum')}: "
             f"{s.get('processes')} process(es) under torchrun ({s.get('backend')}) against one plain process."]
    if losses:
        lines += [f"Best validation loss {losses['best_val_loss'][0]:.6f} (one process) and "
                  f"{losses['best_val_loss'][1]:.6f} (torchrun); largest relative difference of a logged loss "
                  f"{losses['max_rel_diff']:.1e}."]
    return lines + [""]


TABLES = {"kernels": table_kernels, "scan": table_scan, "decode": table_decode, "train": table_train,
          "ddp": table_ddp}


def parse_args(argv):
    p = argparse.ArgumentParser(description="Run every GPU feature once on the device and write what it measured "
                                "(results/gpu_check.json and .md). --cpu rehearses the same sections at tiny sizes.")
    p.add_argument("--cpu", action="store_true", help="the rehearsal: tiny sizes on the CPU, Triton in its "
                   "interpreter, torch.compile capturing graphs without generating code (under a minute)")
    p.add_argument("--data", default="data", help="the folder holding sst2_glue_compact/, shakespeare_char/ and "
                   "tinyllamas/stories260K/ (default: data, this checkout's git-ignored data folder)")
    p.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=list(SECTIONS), help="which sections "
                   "(default: all, in this order)")
    p.add_argument("--out", default=None, help="the results' path without its extension (default: "
                   "results/gpu_check, or out/gpu_check_cpu with --cpu)")
    p.add_argument("--work", default="out/gpu_check", help="scratch: each section's log and its runs")
    p.add_argument("--in_process", action="store_true", help="run the sections in this process, one after the "
                   "other, not each in its own: no isolation and no budget enforced (for a debugger, and the tests)")
    p.add_argument("--section", help=argparse.SUPPRESS)  # a child process: run this one section
    p.add_argument("--partial", help=argparse.SUPPRESS)
    p.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.out = args.out or ("out/gpu_check_cpu" if args.cpu else "results/gpu_check")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.section:
        return child(args)
    if args.cpu:  # before anything imports triton, which reads it once (tests/conftest.py sets it so too)
        os.environ.setdefault("TRITON_INTERPRET", "1")
    if not args.cpu and not torch.cuda.is_available():
        print(f"the GPU check needs a CUDA GPU, and torch {torch.__version__} sees none here; rehearse it on the CPU "
              f"with `python -m bench.gpu_check --cpu` (the same sections at tiny sizes, Triton in its interpreter)")
        return 2
    missing = [p for p in ("sst2_glue_compact/meta.json", "shakespeare_char/meta.json",
                           "tinyllamas/stories260K/stories260K.bin", "tinyllamas/stories260K/tok512.bin")
               if not os.path.isfile(os.path.join(args.data, p))]
    if missing:
        print(f"note: {args.data} lacks {', '.join(missing)}: the sections that read them will fail (the README's GPU "
              f"section says how to prepare the folder)")
    results = run_sections(args, [n for n in SECTIONS if n in args.sections])
    return 0 if results["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
