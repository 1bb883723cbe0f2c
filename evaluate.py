"""
Evaluate trained checkpoints: classification metrics, size, FLOPs and speed; or classify your own text.
Language-model checkpoints get validation loss, perplexity, next-token accuracy, embedding norm, and a
sample. The multi-seed study runs (or collects) several configs x seeds and compares them.

    python evaluate.py --ckpt out/sst2_recurrent/ckpt.pt                     # test split, table on stdout
    python evaluate.py --ckpt out/sst2_baseline/ckpt.pt out/sst2_recurrent/ckpt.pt --json results.json
    python evaluate.py --ckpt out/sst2_recurrent/ckpt.pt --text "a gorgeous, witty film"
    python evaluate.py --ckpt out/sst2_recurrent/ckpt.pt --file my_reviews.tsv   # sentence<TAB>label
    python evaluate.py --ckpt out/shakespeare_char_baseline/ckpt.pt --prompt "ROMEO:" --max_new_tokens 500
    python evaluate.py --study config/shakespeare_char_{baseline,layernorm,rmsnorm}.py --seeds 1 2 3 4 5

Timing follows the usual rules for honest numbers: warm-up passes first, device synchronization
around every timed region, the median of several repeats, and the conditions (device, dtype, torch
version, threads) printed and stored with the figures.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import configurator
import data
import train
from model import CheckpointError, load_checkpoint

# -----------------------------------------------------------------------------
# metrics


def confusion_matrix(y_true, y_pred, n_classes):
    """cm[i, j] = number of examples of true class i predicted as class j."""
    cm = np.zeros((n_classes, n_classes), dtype=np.int64)
    np.add.at(cm, (np.asarray(y_true), np.asarray(y_pred)), 1)
    return cm


def classification_metrics(y_true, y_pred, n_classes):
    """Accuracy; precision, recall and F1 of the positive class (label 1) for binary tasks, and their
    unweighted means over classes (macro) otherwise; Matthews correlation (Gorodkin's multi-class
    form, which equals the usual (TP*TN - FP*FN)/sqrt(...) for two classes). Undefined ratios
    (0/0) are reported as 0, as scikit-learn does."""
    cm = confusion_matrix(y_true, y_pred, n_classes).astype(np.float64)
    tp = np.diag(cm)
    predicted, actual = cm.sum(0), cm.sum(1)
    prec = np.divide(tp, predicted, out=np.zeros_like(tp), where=predicted > 0)
    rec = np.divide(tp, actual, out=np.zeros_like(tp), where=actual > 0)
    f1 = np.divide(2 * prec * rec, prec + rec, out=np.zeros_like(tp), where=(prec + rec) > 0)
    n, correct = cm.sum(), tp.sum()
    cov = correct * n - predicted @ actual
    denom = math.sqrt(n * n - predicted @ predicted) * math.sqrt(n * n - actual @ actual)
    pick = (lambda a: float(a[1])) if n_classes == 2 else (lambda a: float(a.mean()))
    return {"accuracy": float(correct / n) if n else 0.0, "precision": pick(prec), "recall": pick(rec),
            "f1": pick(f1), "mcc": float(cov / denom) if denom > 0 else 0.0,
            "confusion_matrix": cm.astype(np.int64).tolist()}


# -----------------------------------------------------------------------------
# speed


def sync(device):
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


@torch.no_grad()
def latency_ms(model, split, device, ctx, n=200, repeats=3, warmup=10):
    """Median milliseconds per sample at batch size 1 over the first n examples of the split,
    after `warmup` untimed forwards; every forward is timed on its own, synchronized."""
    seqs = [torch.from_numpy(split[i][0])[None].to(device) for i in range(min(n, len(split)))]
    for s in seqs[:warmup]:
        model(s)
    def forward(s):
        with ctx:
            model(s)

    times = [timed(lambda: forward(s), device) for _ in range(repeats) for s in seqs]
    return 1000 * statistics.median(times)


@torch.no_grad()
def throughput(model, split, device, ctx, batch_size=256, n=1024, repeats=3):
    """Samples per second running the first n examples of the split in batches of batch_size
    (grouped by length, padded to the longest in each batch): one warm-up pass, median of repeats."""
    sub = ListSplit([split[i] for i in range(min(n, len(split)))])
    train.predict(model, sub, batch_size, device, ctx)  # warm-up
    times = [timed(lambda: train.predict(model, sub, batch_size, device, ctx), device) for _ in range(repeats)]
    return len(sub) / statistics.median(times)


class ListSplit:
    """An in-memory split with the interface of data.ClassificationSplit."""

    def __init__(self, items):
        self.items = items
        self.lengths = np.array([len(ids) for ids, _ in items])
        self.labels = np.array([lab for _, lab in items], dtype=np.int64)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


# -----------------------------------------------------------------------------
# loading


def load(path, device):
    """(model, checkpoint) or a clear error. Checks the checkpoint came from a classification run."""
    model, ckpt = load_checkpoint(path, device)
    if "data" not in ckpt or "config" not in ckpt:
        raise CheckpointError(f"{path} has no data/config record; it was not written by train.py")
    return model, ckpt


def checkpoint_split(ckpt, split_name):
    """The split the checkpoint's run was evaluated on, prepared again if the folder is gone."""
    folder, meta, splits = train.load_dataset(ckpt["config"])
    if meta["vocab"] != ckpt["data"]["vocab"] or meta["max_len"] != ckpt["data"]["max_len"]:
        raise data.DataError(f"{folder} was prepared with another vocabulary or max_len than this checkpoint; "
                             f"delete it (it is rebuilt) or set a matching data_dir")
    return splits[split_name]


def read_tsv(path, encoder):
    """A labelled file: one `sentence<TAB>label` per line, an optional header line. Sentences are
    cleaned, tokenized and truncated exactly as in training."""
    items, truncated = [], 0
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            text, sep, label = line.rpartition("\t")
            if not sep or not label.strip().lstrip("-").isdigit():
                if n == 1:
                    continue  # a header
                raise ValueError(f"{path}:{n}: expected `sentence<TAB>integer label`, got {line[:80]!r}")
            ids = encoder(text, truncate=True)
            truncated += encoder.was_truncated
            items.append((ids, int(label)))
    if not items:
        raise ValueError(f"{path} holds no labelled lines")
    return ListSplit(items), truncated


# -----------------------------------------------------------------------------
# the report


def text_encoder(ckpt):
    """The checkpoint's own preprocessing and vocabulary, as a text -> token ids function."""
    return data.TextEncoder({"vocab": ckpt["data"]["vocab"], "max_len": ckpt["data"]["max_len"]})


def evaluate_checkpoint(model, ckpt, path, split, args, device, ctx):
    """All the figures for one loaded checkpoint on one split, as a flat dict."""
    n_classes = model.cfg.n_classes
    if len(split) == 0:
        raise ValueError("the split to evaluate is empty")
    if split.labels.max() >= n_classes or split.labels.min() < 0:
        raise ValueError(f"labels must be in 0..{n_classes - 1} for this model")
    logits = train.predict(model, split, args.batch_size, device, ctx)
    labels = torch.from_numpy(np.asarray(split.labels, dtype=np.int64))
    res = {"ckpt": path, "n": len(split), "loss": F.cross_entropy(logits, labels).item()}
    res.update(classification_metrics(labels.numpy(), logits.argmax(-1).numpy(), n_classes))
    counts = model.param_counts()
    res.update(params_total=counts["total"], params_embedding=counts["embedding"],
               params_non_embedding=counts["non_embedding"], size_mb=counts["total"] * 4 / 2**20,
               ckpt_bytes=os.path.getsize(path),
               flops_per_sample=float(np.mean([model.flops_per_forward(int(t)) for t in split.lengths])),
               effective_depth=model.cfg.n_layer * model.cfg.n_loops)
    if not args.no_timing:
        res["latency_ms"] = latency_ms(model, split, device, ctx, repeats=args.repeats)
        res["throughput"] = throughput(model, split, device, ctx, batch_size=args.batch_size, repeats=args.repeats)
    res["label_names"] = ckpt["data"]["label_names"]
    res["trained"] = {"dataset": ckpt["data"]["dataset"], "protocol": ckpt["data"]["protocol"],
                      "iter_num": ckpt["iter_num"], "best_val_loss": ckpt["best_val_loss"]}
    return res


def lm_val_tokens(ckpt):
    """The validation tokens of the corpus the checkpoint's run trained on (prepared again if gone)."""
    folder, meta, splits = train.load_dataset(ckpt["config"])
    if meta["vocab"] != ckpt["data"]["vocab"]:
        raise data.DataError(f"{folder} has another character vocabulary than this checkpoint; "
                             f"delete it (it is rebuilt) or set a matching data_dir")
    return splits["val"].tokens


def sample_text(model, ckpt, prompt, args, device):
    """A sample from a language model: the prompt, continued by max_new_tokens generated characters."""
    codec = data.CharCodec(ckpt["data"]["vocab"])
    idx = torch.from_numpy(codec.encode(prompt))[None].to(device)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    out = model.generate(idx, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k, generator=gen)
    return codec.decode(out[0].tolist())


@torch.no_grad()
def generation_speed(model, device, ctx, block_size, n_tokens=50, repeats=3):
    """(latency: median ms per generated token at batch 1 with a full context window, as generate()
    runs it without a key/value cache; throughput: tokens/s of a batch-64 full-window forward)."""
    x1 = torch.zeros(1, block_size, dtype=torch.long, device=device)
    xb = torch.zeros(64, block_size, dtype=torch.long, device=device)

    def forward(x, times=1):
        with ctx:
            for _ in range(times):
                model(x)

    forward(x1), forward(xb)  # warm-up
    lat = [timed(lambda: forward(x1, n_tokens), device) / n_tokens for _ in range(repeats)]
    thr = [xb.numel() / timed(lambda: forward(xb), device) for _ in range(repeats)]
    return 1000 * statistics.median(lat), statistics.median(thr)


def evaluate_lm_checkpoint(model, ckpt, path, args, device, ctx):
    """All the figures for one language-model checkpoint on its validation windows, plus a sample."""
    cfg = ckpt["config"]
    m = train.lm_evaluate(model, lm_val_tokens(ckpt), cfg["block_size"], device, ctx, cfg["eval_windows"])
    res = {"ckpt": path, "task": "lm", "loss": m["loss"], "ppl": m["ppl"], "accuracy": m["acc"],
           "emb_norm": m["emb_norm"], "n": m["tokens"]}
    counts = model.param_counts()
    T = model.cfg.block_size
    res.update(params_total=counts["total"], params_embedding=counts["embedding"],
               params_non_embedding=counts["non_embedding"], size_mb=counts["total"] * 4 / 2**20,
               ckpt_bytes=os.path.getsize(path), flops_per_token=model.flops_per_forward(T) / T,
               effective_depth=model.cfg.n_layer)
    if not args.no_timing:
        res["latency_ms"], res["throughput"] = generation_speed(model, device, ctx, T, repeats=args.repeats)
    res["trained"] = {"dataset": ckpt["data"]["dataset"], "iter_num": ckpt["iter_num"],
                      "best_val_loss": ckpt["best_val_loss"], "emb_norm": model.cfg.emb_norm}
    res["sample"] = sample_text(model, ckpt, args.prompt, args, device)
    res["sample_args"] = {"prompt": args.prompt, "temperature": args.temperature, "top_k": args.top_k, "seed": args.seed}
    return res


# -----------------------------------------------------------------------------
# the multi-seed study: several configs x seeds, mean +- 95 % CI, paired bootstrap against the first

# two-sided 95 % quantiles of Student's t, t_{0.975, df}, df = 1..30 (standard tables)
T_975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def t_quantile_975(df):
    """t_{0.975, df}: the table up to 30 degrees of freedom, then the Cornish-Fisher expansion around
    the normal quantile 1.959964, which is within 0.001 of the exact value from df = 30 on."""
    if df < 1:
        raise ValueError("a confidence interval needs at least two values")
    if df <= len(T_975):
        return T_975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def mean_ci(values):
    """(mean, half-width of the 95 % confidence interval of the mean): t_{0.975,n-1} * s / sqrt(n),
    with s the sample standard deviation."""
    v = np.asarray(values, dtype=np.float64)
    return float(v.mean()), t_quantile_975(len(v) - 1) * float(v.std(ddof=1)) / math.sqrt(len(v))


def paired_bootstrap(baseline, variant, n_boot=10000, seed=0):
    """Paired bootstrap of the mean difference variant - baseline (pairs matched by seed): resample the
    per-seed differences with replacement n_boot times and take the 2.5th and 97.5th percentiles of the
    resampled means. Returns (mean difference, lower, upper)."""
    d = np.asarray(variant, dtype=np.float64) - np.asarray(baseline, dtype=np.float64)
    if d.ndim != 1 or len(d) < 2:
        raise ValueError("the paired bootstrap needs two equally long lists of at least two values")
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(n_boot, len(d)))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(d.mean()), float(lo), float(hi)


# the study's metrics: (summary key, label, which way is better: -1 lower, +1 higher, 0 neither)
STUDY_METRICS = [("final_val_loss", "val loss", -1), ("final_val_ppl", "val perplexity", -1), ("final_grad_norm", "final grad norm", -1),
                 ("final_val_acc", "next-token accuracy", +1), ("final_val_emb_norm", "mean ||X|| (block 1 input)", 0)]


def verdict(lo, hi, better):
    """Words for a difference's CI: an interval that holds 0 is no evidence either way."""
    if lo <= 0 <= hi:
        return "no significant difference"
    up = lo > 0
    if better == 0:
        return "higher" if up else "lower"
    return "better" if (up == (better > 0)) else "worse"


def config_name(path):
    """A study's name for a config file: its stem (config/shakespeare_char_rmsnorm.py -> shakespeare_char_rmsnorm)."""
    return os.path.splitext(os.path.basename(path))[0]


def study_runs(configs, seeds, out_root, overrides):
    """The planned runs: {(name, seed): (argv, config dict)}, name = config_name(file). Each run writes
    to out_root/<name>/seed<seed>."""
    runs = {}
    for path in configs:
        name = config_name(path)
        for seed in seeds:
            argv = [path, *[f"--{o}" for o in overrides], f"--seed={seed}",
                    f"--out_dir={os.path.join(out_root, name, f'seed{seed}')}"]
            runs[(name, seed)] = (argv, configurator.apply_overrides(train.DEFAULTS, argv))
    return runs


def finished_summary(cfg):
    """The summary.json of a finished run with exactly this config, else None (then it must be run)."""
    path = os.path.join(cfg["out_dir"], "summary.json")
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        summary = json.load(f)
    same = summary.get("config") == json.loads(json.dumps(cfg))  # compare as stored (tuples -> lists)
    return summary if same and summary.get("stopped") != "interrupted" else None


def run_study(configs, seeds, out_root, overrides=(), jobs=1, collect_only=False):
    """Run the runs that are not finished yet (jobs at a time, as `python train.py` subprocesses
    with the cores split between them), then return {(name, seed): summary}."""
    runs = study_runs(configs, seeds, out_root, overrides)
    todo = [key for key, (_, cfg) in runs.items() if finished_summary(cfg) is None]
    if todo and collect_only:
        raise ValueError(f"{len(todo)} runs are not finished (first: {runs[todo[0]][1]['out_dir']}); "
                         f"run without --collect_only to train them")
    print(f"study: {len(runs)} runs, {len(runs) - len(todo)} finished, {len(todo)} to train ({jobs} at a time)")
    run_pending(runs, todo, jobs)
    summaries = {key: finished_summary(cfg) for key, (_, cfg) in runs.items()}
    missing = [k for k, v in summaries.items() if v is None]
    if missing:
        raise RuntimeError(f"runs {missing} finished without a matching summary.json")
    return summaries


def run_pending(runs, todo, jobs):
    """Train the runs `todo` as `python train.py` subprocesses, `jobs` at a time, each slot pinned to its
    own share of the cores; an error or Ctrl-C stops the runs still going (each can be rerun later)."""
    n_cpu = os.cpu_count() or 1
    per_job = max(1, n_cpu // jobs)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train.py")
    running = []  # (key, process, log file, slot)
    pending, free_slots = list(todo), list(range(jobs))
    try:
        while pending or running:
            while pending and free_slots:
                key, slot = pending.pop(0), free_slots.pop(0)
                argv, cfg = runs[key]
                os.makedirs(cfg["out_dir"], exist_ok=True)
                log = open(os.path.join(cfg["out_dir"], "train.out"), "w")
                cores = set(range(slot * per_job, (slot + 1) * per_job)) & set(range(n_cpu))

                def pin(cores=cores):  # one job per group of cores (on a 2-core VM, ~2x faster than unpinned)
                    if jobs > 1 and hasattr(os, "sched_setaffinity"):
                        os.sched_setaffinity(0, cores)

                env = {**os.environ, "OMP_NUM_THREADS": str(per_job)}
                proc = subprocess.Popen([sys.executable, script, *argv], stdout=log, stderr=subprocess.STDOUT,
                                        env=env, preexec_fn=pin)
                running.append((key, proc, log, slot))
                print(f"  started {key[0]} seed {key[1]} -> {cfg['out_dir']}/train.out", flush=True)
            time.sleep(1)
            for item in [r for r in running if r[1].poll() is not None]:
                key, proc, log, slot = item
                log.close()
                running.remove(item)
                free_slots.append(slot)
                if proc.returncode != 0:
                    raise RuntimeError(f"{key[0]} seed {key[1]} failed (exit {proc.returncode}); see "
                                       f"{runs[key][1]['out_dir']}/train.out")
                print(f"  finished {key[0]} seed {key[1]}", flush=True)
    finally:
        for _, proc, log, _ in running:
            proc.terminate()
            proc.wait()
            log.close()


def study_table(summaries, names, seeds, n_boot=10000):
    """The comparison as a dict (for --json) and as printable lines: mean +- 95 % CI of each metric per
    config, then each config's paired difference against the first (the baseline)."""
    base = names[0]
    result = {"configs": names, "seeds": list(seeds), "metrics": {}, "differences": {}}
    width = max(20, *(len(n) + 2 for n in names))
    lines = [f"{'metric (mean ± 95% CI, n=' + str(len(seeds)) + ')':30s}" + "".join(f"{n:>{width}s}" for n in names)]
    for key, label, _ in STUDY_METRICS:
        cells = []
        for name in names:
            mean, half = mean_ci([summaries[(name, s)][key] for s in seeds])
            result["metrics"].setdefault(key, {})[name] = {"mean": mean, "ci95": half,
                                                           "values": [summaries[(name, s)][key] for s in seeds]}
            cells.append(f"{mean:.4f} ± {half:.4f}")
        lines.append(f"{label:30s}" + "".join(f"{c:>{width}s}" for c in cells))
    lines.append("")
    lines.append(f"paired by seed, difference = config - {base}, bootstrap 95% CI ({n_boot:,} resamples):")
    for name in names[1:]:
        for key, label, better in STUDY_METRICS:
            d, lo, hi = paired_bootstrap([summaries[(base, s)][key] for s in seeds],
                                         [summaries[(name, s)][key] for s in seeds], n_boot)
            word = verdict(lo, hi, better)
            result["differences"].setdefault(name, {})[key] = {"mean": d, "lo": lo, "hi": hi, "verdict": word}
            lines.append(f"  {name:{width}s} {label:28s} {d:+.4f}  [{lo:+.4f}, {hi:+.4f}]  {word}")
    return result, lines


ROWS = [  # (key, label, format)
    ("accuracy", "accuracy", "{:.4f}"), ("precision", "precision", "{:.4f}"), ("recall", "recall", "{:.4f}"),
    ("f1", "F1", "{:.4f}"), ("mcc", "MCC", "{:.4f}"), ("loss", "loss", "{:.4f}"), ("ppl", "perplexity", "{:.3f}"),
    ("emb_norm", "mean ||X|| (block 1 input)", "{:.3f}"), ("n", "examples (LM: tokens)", "{:,}"),
    ("params_total", "params total", "{:,}"), ("params_embedding", "params embedding", "{:,}"),
    ("params_non_embedding", "params non-embedding", "{:,}"), ("size_mb", "size fp32 (MB)", "{:.2f}"),
    ("ckpt_bytes", "checkpoint bytes", "{:,}"), ("effective_depth", "effective depth", "{}"),
    ("flops_per_sample", "FLOPs/sample (fwd)", "{:.3e}"), ("flops_per_token", "FLOPs/token (fwd)", "{:.3e}"),
    ("latency_ms", "latency bs=1 (ms; LM: per token)", "{:.3f}"), ("throughput", "throughput (samples|tokens/s)", "{:,.0f}"),
]


def run_names(paths):
    """Short column names: each checkpoint's folder, with as many parent folders as it takes to tell
    them apart (out/study/A/seed1/ckpt.pt and out/study/B/seed1/ckpt.pt -> A/seed1, B/seed1)."""
    parts = [os.path.dirname(os.path.abspath(p)).split(os.sep) for p in paths]
    for depth in range(1, max(len(p) for p in parts) + 1):
        names = ["/".join(p[-depth:]) for p in parts]
        if len(set(names)) == len(names):
            return names
    return list(paths)  # the same file given twice


def print_table(results):
    names = run_names([r["ckpt"] for r in results])
    width = max(12, *(len(n) for n in names)) + 2
    print(f"{'':34s}" + "".join(f"{n:>{width}s}" for n in names))
    for key, label, fmt in ROWS:
        if any(key in r for r in results):
            print(f"{label:34s}" + "".join(f"{fmt.format(r[key]) if key in r else '-':>{width}s}" for r in results))
    for name, r in zip(names, results):
        if "confusion_matrix" in r:
            print(f"confusion matrix of {name} (rows true {r['label_names']}, columns predicted): {r['confusion_matrix']}")
        if "sample" in r:
            print(f"--- sample from {name} (temperature {r['sample_args']['temperature']}, top_k "
                  f"{r['sample_args']['top_k']}, seed {r['sample_args']['seed']}):\n{r['sample']}\n---")


def study_main(args):
    """--study: run or collect the runs, print the table, optionally write it as JSON."""
    names = [config_name(c) for c in args.study]
    if len(set(names)) != len(names) or len(args.seeds) < 2:
        raise ValueError("--study needs configs with distinct file names and at least two --seeds")
    summaries = run_study(args.study, args.seeds, args.out_root, args.set, args.jobs, args.collect_only)
    result, lines = study_table(summaries, names, args.seeds)
    first = summaries[(names[0], args.seeds[0])]
    print(f"\n{len(summaries)} runs ({len(names)} configs x seeds {args.seeds}); figures of the final model "
          f"after {first['iters']} iterations, on the fixed validation windows ({first.get('final_val_tokens')} "
          f"tokens)")
    print("\n".join(lines))
    if args.json:
        result["runs"] = {f"{n}/seed{s}": summaries[(n, s)] for n, s in summaries}
        data.write_json(args.json, result, indent=1)
        print(f"wrote {args.json}")


def main(argv=None):
    p = argparse.ArgumentParser(description="Evaluate checkpoints, classify text, sample from a language model, "
                                            "or run a multi-seed study.")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--ckpt", nargs="+", help="one or more ckpt.pt files (side by side)")
    what.add_argument("--study", nargs="+", metavar="CONFIG",
                      help="config files to compare over --seeds; the first is the baseline of the paired differences")
    p.add_argument("--split", default="test", choices=["train", "val", "test"], help="classifiers: the split to score")
    p.add_argument("--json", help="write the figures to this file")
    p.add_argument("--text", help="classify this sentence and print the label probabilities")
    p.add_argument("--truncate", action="store_true", help="with --text: cut an over-long sentence instead of refusing")
    p.add_argument("--file", help="evaluate on a labelled file: sentence<TAB>label per line, header allowed")
    p.add_argument("--prompt", default="\n", help="language models: the text a sample starts from (default a newline)")
    p.add_argument("--max_new_tokens", type=int, default=300, help="language models: characters to generate")
    p.add_argument("--temperature", type=float, default=0.8, help="0 = greedy (deterministic)")
    p.add_argument("--top_k", type=int, default=None, help="sample from the k most likely tokens only")
    p.add_argument("--seed", type=int, default=1337, help="seed of the sample")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5], help="--study: the seeds")
    p.add_argument("--out_root", default="out/study", help="--study: runs go to OUT_ROOT/<config name>/seed<N>")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="--study: config overrides for every run, e.g. --set device=cuda max_iters=600")
    p.add_argument("--jobs", type=int, default=1, help="--study: runs at a time (CPU: one per core, pinned)")
    p.add_argument("--collect_only", action="store_true", help="--study: only collect finished runs, never train")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--batch_size", type=int, default=256, help="batch size for metrics and throughput")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats (the median is reported)")
    p.add_argument("--no_timing", action="store_true", help="skip latency and throughput")
    args = p.parse_args(argv)

    device = train.resolve_device(args.device)
    ctx = train.autocast_context(device.split(":")[0], args.dtype)
    try:
        if args.study:
            return study_main(args)
        if args.text is not None:
            for path in args.ckpt:
                model, ckpt = load(path, device)
                if ckpt["data"].get("task") == "lm":
                    raise ValueError(f"{path} is a language model: give it a --prompt to continue, not --text")
                enc = text_encoder(ckpt)
                ids = torch.from_numpy(enc(args.text, truncate=args.truncate))[None].to(device)
                with torch.no_grad(), ctx:
                    probs = F.softmax(model(ids)[0].float(), -1)[0].tolist()
                names = ckpt["data"]["label_names"]
                best = max(range(len(probs)), key=probs.__getitem__)
                shown = ", ".join(f"{n} {q:.3f}" for n, q in zip(names, probs))
                print(f"{path}: {names[best]}  ({shown})" + ("  [truncated]" if enc.was_truncated else ""))
            return
        results = []
        for path in args.ckpt:
            model, ckpt = load(path, device)
            if ckpt["data"].get("task") == "lm":
                if args.file:
                    raise ValueError(f"{path} is a language model; --file takes labelled sentences for a classifier")
                results.append(evaluate_lm_checkpoint(model, ckpt, path, args, device, ctx))
                continue
            if args.file:
                split, n_trunc = read_tsv(args.file, text_encoder(ckpt))
                if n_trunc:
                    print(f"{args.file}: {n_trunc} sentences truncated to {ckpt['data']['max_len']} tokens, as in training")
            else:
                split = checkpoint_split(ckpt, args.split)
            results.append(evaluate_checkpoint(model, ckpt, path, split, args, device, ctx))
        threads = torch.get_num_threads()
        conditions = {"device": device, "dtype": args.dtype, "torch": torch.__version__, "threads": threads,
                      "split": args.file or args.split, "repeats": args.repeats, "batch_size": args.batch_size}
        if device.startswith("cuda"):
            conditions["gpu"] = torch.cuda.get_device_name()
        where = "the validation windows" if all(r.get("task") == "lm" for r in results) else conditions["split"]
        print(f"evaluated on {where}: device {device} ({threads} threads), {args.dtype}, "
              f"torch {torch.__version__}; timing: median of {args.repeats} repeats")
        print_table(results)
        if args.json:
            for r in results:
                r["conditions"] = conditions
            data.write_json(args.json, results[0] if len(results) == 1 else results, indent=2)
            print(f"wrote {args.json}")
    except (CheckpointError, data.DataError, configurator.ConfigError, ValueError, RuntimeError, OSError) as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
