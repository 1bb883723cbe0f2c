"""
Is training the same before and after a change that should only move code? Train a few short runs, keep what
they computed (final weights, optimizer state, every logged figure), and compare two such records bit for bit.

    python -m bench.same_training record out/same/before     # on the code before the change
    python -m bench.same_training record out/same/after      # on the code after it
    python -m bench.same_training compare out/same/before out/same/after

The runs (CPU, float32, a few dozen steps each, every family and the paths a refactoring can break): the SST-2
recurrent and baseline encoders (the cosine schedule), the char GPT, the Pig Latin transformer and Mamba, a Llama
LoRA run, and a 2-process DDP run (gloo, torchrun). They need the prepared datasets (data.py, with DATA_MIRROR
for the sources) and the tinyllamas checkpoint. What is compared: every tensor of last.pt and ckpt.pt (weights,
optimizer, scheduler and RNG state), summary.json, and log.jsonl, leaving out what measures the machine rather
than the computation (speeds, times, the code's commit, the conditions line).
"""

import argparse
import json
import os
import subprocess
import sys

import torch

STEPS = "--max_iters=24 --eval_interval=8 --log_interval=4 --device=cpu --dtype=float32 --compile=False"
RUNS = {  # name -> (launcher, config file, overrides)
    "sst2_recurrent": ("python", "config/sst2_recurrent.py", "--warmup_iters=4"),
    "sst2_baseline": ("python", "config/sst2_baseline.py", "--warmup_iters=4"),
    "char_gpt": ("python", "config/shakespeare_char_baseline.py", ""),
    "piglatin_transformer": ("python", "config/piglatin_transformer.py", ""),
    "piglatin_mamba": ("python", "config/piglatin_mamba.py", ""),
    "llama_lora": ("python", "config/llama_sst5_lora.py", "--max_iters=8 --eval_interval=4 --batch_size=8"),
    "ddp_2_processes": ("torchrun", "config/sst2_recurrent.py", "--warmup_iters=4 --grad_accum=2"),
}
# figures of the machine and the folder, not of the computation: they differ between any two runs
MACHINE = {"tok_per_s", "eta_min", "mfu", "train_minutes", "train_seconds", "minutes", "commit", "machine", "out_dir",
           "threads", "cores", "torch", "python"}


def record(folder):
    os.makedirs(folder, exist_ok=False)  # a record is never written over
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for name, (launcher, config, extra) in RUNS.items():
        out = os.path.join(folder, name)
        cmd = ([sys.executable] if launcher == "python" else
               [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"])
        cmd += ["train.py", config, *STEPS.split(), *extra.split(), "--seed=1", f"--out_dir={out}"]
        print(f"{name}: {' '.join(cmd[1:])}", flush=True)
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"error: {name} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")


def tensors(obj, prefix=""):
    """{path: tensor} of every tensor in a checkpoint's nested dicts and lists."""
    out = {}
    if isinstance(obj, torch.Tensor):
        out[prefix] = obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            out.update(tensors(v, f"{prefix}/{k}"))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out.update(tensors(v, f"{prefix}/{i}"))
    return out


def plain(obj):
    """A checkpoint or a JSON record without its tensors and without the machine's figures."""
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items() if k not in MACHINE and not isinstance(v, torch.Tensor)}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj if not isinstance(v, torch.Tensor)]
    return obj


def differences(a, b):
    """The differences between two runs' folders, as lines; none if they computed the same."""
    lines = []
    for file in ("last.pt", "ckpt.pt"):
        x, y = (torch.load(os.path.join(f, file), map_location="cpu", weights_only=False) for f in (a, b))
        tx, ty = tensors(x), tensors(y)
        lines += [f"{file}: {k} only in one" for k in sorted(set(tx) ^ set(ty))]
        lines += [f"{file}: {k} differs" for k in sorted(set(tx) & set(ty))
                  if tx[k].dtype != ty[k].dtype or tx[k].shape != ty[k].shape or not torch.equal(tx[k], ty[k])]
        if plain(x) != plain(y):
            lines.append(f"{file}: its settings or state differ")
    for file in ("summary.json", "log.jsonl"):
        records = []
        for folder in (a, b):
            with open(os.path.join(folder, file)) as f:
                text = f.read()
            records.append(plain(json.loads(text)) if file.endswith(".json") else
                           [plain(json.loads(line)) for line in text.splitlines() if line.strip()])
        if records[0] != records[1]:
            lines.append(f"{file} differs")
    return lines


def compare(before, after):
    bad = 0
    for name in RUNS:
        lines = differences(os.path.join(before, name), os.path.join(after, name))
        print(f"{name}: {'the same' if not lines else 'DIFFERENT'}")
        for line in lines[:10]:
            print(f"  {line}")
        bad += bool(lines)
    return bad


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench.same_training", description=__doc__.strip(),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, help="record, then compare")
    r = sub.add_parser("record", help="train the runs and keep their "
                       "record in FOLDER")
    r.add_argument("folder", help="where the record goes (a new folder)")
    c = sub.add_parser("compare", help="compare two records bit for "
                       "bit; exit status 1 if they differ")
    c.add_argument("before", help="the record made before the change")
    c.add_argument("after", help="the record made after it")
    args = p.parse_args(argv)
    if args.command == "record":
        record(args.folder)
    else:
        sys.exit(1 if compare(args.before, args.after) else 0)


if __name__ == "__main__":
    main()
