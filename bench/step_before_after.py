"""
What a change to the code did to one config's training step, measured side by side: the step of the model that a
config file names, under the code of an earlier commit ("before") and under this working tree ("after"), timed in
turns in one run, so that both meet the same machine, the same load and the same batch.

    OMP_NUM_THREADS=1 taskset -c 1 python -m bench.step_before_after 1712ecb config/piglatin_mamba_large.py \
        --rounds 11 --json results/piglatin/step_speed.json

The earlier commit's files are written to a temporary folder (`git archive`). Each side runs in a process of its
own (its own model.py and kernels.py, and its own version of the config file, so each takes the path its config
chose then), builds the model from the config's model settings and trains it on one random batch (batch x seq
tokens, the same seed on both sides): forward, backward and fused AdamW, as `bench.speed --cases mamba` times it.
After warm-up steps on each side (a compiled path compiles in the first), each round times one step of each side,
the first side alternating from round to round, while the other process waits; only one works at a time. The
figures are the medians over the rounds and the ratio before / after. A model whose forward is
`(idx, targets=...) -> (logits, loss)` (Mamba, GPT, Llama) can be timed; CPU only, float32.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import configurator
from bookkeeping.timing import _cpu_name
from evaluation.ranges import check_new_file

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Each side's process: runs in its code's folder (python -c puts that folder first on sys.path, so `import model`
# is that commit's), builds the config's model, warms up, then answers "step" with one step's seconds. Its answers
# start with "@@" (anything else it prints, compile warnings included, is passed on as it is).
WORKER = r'''
import dataclasses, json, os, pathlib, sys, time
import torch
import model
config, batch, seq, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
settings = {"__file__": os.path.abspath(config)}
exec(pathlib.Path(config).read_text(), settings)  # the config file as this commit has it (its path choices)
cfg_cls, model_cls = model.FAMILIES[settings["model"]]
names = {f.name for f in dataclasses.fields(cfg_cls)} - set(cfg_cls.data_fields)
fields = {k: settings[k] for k in sorted(names) if k in settings}
torch.manual_seed(0)
m = model_cls(cfg_cls(vocab_size=30, **fields))
m.train()
g = torch.Generator().manual_seed(0)
idx, tgt = (torch.randint(3, 30, (batch, seq), generator=g) for _ in range(2))
opt = torch.optim.AdamW(m.parameters(), lr=1e-4, fused=True)
def step():
    _, loss = m(idx, targets=tgt)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
t0 = time.perf_counter()
for _ in range(warmup):
    step()
ready = dict(fields=fields, params=sum(p.numel() for p in m.parameters()), warmup_s=time.perf_counter() - t0,
             torch=torch.__version__, threads=torch.get_num_threads(), cores=sorted(os.sched_getaffinity(0)))
print("@@" + json.dumps(ready, default=str), flush=True)
for line in sys.stdin:
    if line.strip() != "step":
        break
    t0 = time.perf_counter()
    step()
    print("@@" + json.dumps(time.perf_counter() - t0), flush=True)
'''


def git(*args):
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()


def answer(proc):
    """The next '@@' line of a side's process, read as JSON (other lines passed on to stderr)."""
    for line in proc.stdout:
        if line.startswith("@@"):
            return json.loads(line[2:])
        sys.stderr.write(line)
    raise RuntimeError(f"a side's process ended (exit {proc.wait()}) before it answered")


def run(args):
    before = git("rev-parse", args.commit)
    after = git("rev-parse", "HEAD")
    changed = git("status", "--porcelain", "--", "model.py", "kernels.py", args.config)
    print(f"timing the training step of {args.config} (batch {args.batch} x {args.seq}), before = {before[:10]}, "
          f"after = this working tree ({after[:10]}{', with uncommitted changes' if changed else ''}): {args.warmup} "
          f"warm-up steps each (a compiled path compiles there: minutes), then {args.rounds} rounds of one step each",
          flush=True)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "archive", before], cwd=REPO, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        sides = {}
        for name, folder in (("before", tmp), ("after", REPO)):
            proc = subprocess.Popen([sys.executable, "-c", WORKER, args.config, str(args.batch), str(args.seq),
                                     str(args.warmup)], cwd=folder, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    text=True)
            sides[name] = dict(proc=proc, **answer(proc))  # one side warms up at a time
            print(f"{name}: {sides[name]['params']:,} parameters, warm-up {sides[name]['warmup_s']:.1f} s, "
                  f"{sides[name]['fields']}", flush=True)
        times = {name: [] for name in sides}
        for r in range(args.rounds):
            for name in (("before", "after") if r % 2 == 0 else ("after", "before")):
                sides[name]["proc"].stdin.write("step\n")
                sides[name]["proc"].stdin.flush()
                times[name].append(answer(sides[name]["proc"]))
            print(f"round {r + 1}: before {times['before'][-1]:.3f} s, after {times['after'][-1]:.3f} s", flush=True)
        for side in sides.values():
            side["proc"].stdin.close()
            side["proc"].wait()
    med = {name: statistics.median(t) for name, t in times.items()}
    per_round = [b / a for b, a in zip(times["before"], times["after"])]
    print(f"median step: before {med['before']:.3f} s, after {med['after']:.3f} s: before / after "
          f"{med['before'] / med['after']:.2f} (per round {min(per_round):.2f} to {max(per_round):.2f})")
    record = {
        "what": f"the training step (forward, backward, fused AdamW) of {args.config}'s model, under the code of "
                f"{before} (before) and of {after} (after), timed in turns in one run",
        "conditions": {"device": "cpu", "cpu": _cpu_name(), "dtype": "float32", "torch": sides["after"]["torch"],
                       "python": platform.python_version(), "threads": sides["after"]["threads"],
                       "cores": sides["after"]["cores"], "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                       "load_average_before": load_before, "load_average_after": os.getloadavg(),
                       "date": time.strftime("%Y-%m-%d %H:%M %Z")},
        "config": args.config, "batch": args.batch, "seq": args.seq, "warmup_steps": args.warmup,
        "rounds": args.rounds, "order": "one step of each side a round, the first side alternating",
        "after_uncommitted_changes": bool(changed),
        **{name: {"commit": before if name == "before" else after, "fields": s["fields"], "params": s["params"],
                  "warmup_s": s["warmup_s"], "step_s": times[name], "median_step_s": med[name]}
           for name, s in sides.items()},
        "ratio_of_medians": med["before"] / med["after"], "ratio_per_round": per_round,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=2, default=str)
            f.write("\n")
    return record


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench.step_before_after", description=__doc__.strip(),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("commit", help="the earlier commit, whose code is 'before' (any name git knows)")
    p.add_argument("config", help="the config file (its path in both trees) whose model is timed")
    p.add_argument("--batch", type=int, default=128, help="batch size (default: 128, the Pig Latin configs')")
    p.add_argument("--seq", type=int, default=40, help="tokens a row (default: 40, about a Pig Latin batch's)")
    p.add_argument("--warmup", type=int, default=2, help="warm-up steps on each side (default: 2)")
    p.add_argument("--rounds", type=int, default=11, help="rounds of one step each side (default: 11)")
    p.add_argument("--json", help="write the record (every step's time and the conditions) to this new file")
    args = p.parse_args(argv)
    if min(args.batch, args.seq, args.warmup, args.rounds) < 1:
        sys.exit("error: --batch, --seq, --warmup and --rounds must each be at least 1")
    try:
        if args.json:
            check_new_file(args.json, "--json")
        git("rev-parse", "--verify", args.commit + "^{commit}")
    except subprocess.CalledProcessError:
        sys.exit(f"error: {args.commit}: not a commit of this repository")
    except configurator.UserError as e:
        sys.exit(f"error: {e}")
    if not os.path.exists(os.path.join(REPO, args.config)):
        sys.exit(f"error: {args.config}: no such config file")
    return run(args)


if __name__ == "__main__":
    main()
