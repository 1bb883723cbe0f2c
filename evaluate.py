"""
Evaluate trained checkpoints: classification metrics, size, FLOPs and speed; or classify your own text.

    python evaluate.py --ckpt out/sst2_recurrent/ckpt.pt                     # test split, table on stdout
    python evaluate.py --ckpt out/sst2_baseline/ckpt.pt out/sst2_recurrent/ckpt.pt --json results.json
    python evaluate.py --ckpt out/sst2_recurrent/ckpt.pt --text "a gorgeous, witty film"
    python evaluate.py --ckpt out/sst2_recurrent/ckpt.pt --file my_reviews.tsv   # sentence<TAB>label

Timing follows the usual rules for honest numbers: warm-up passes first, device synchronization
around every timed region, the median of several repeats, and the conditions (device, dtype, torch
version, threads) printed and stored with the figures.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

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


@torch.no_grad()
def latency_ms(model, split, device, ctx, n=200, repeats=3, warmup=10):
    """Median milliseconds per sample at batch size 1 over the first n examples of the split,
    after `warmup` untimed forwards; every forward is timed on its own, synchronized."""
    seqs = [torch.from_numpy(split[i][0])[None].to(device) for i in range(min(n, len(split)))]
    for s in seqs[:warmup]:
        model(s)
    times = []
    for _ in range(repeats):
        for s in seqs:
            sync(device)
            t0 = time.perf_counter()
            with ctx:
                model(s)
            sync(device)
            times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


@torch.no_grad()
def throughput(model, split, device, ctx, batch_size=256, n=1024, repeats=3):
    """Samples per second running the first n examples of the split in batches of batch_size
    (grouped by length, padded to the longest in each batch): one warm-up pass, median of repeats."""
    sub = ListSplit([split[i] for i in range(min(n, len(split)))])
    train.predict(model, sub, batch_size, device, ctx)  # warm-up
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        train.predict(model, sub, batch_size, device, ctx)
        sync(device)
        times.append(time.perf_counter() - t0)
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


ROWS = [  # (key, label, format)
    ("accuracy", "accuracy", "{:.4f}"), ("precision", "precision", "{:.4f}"), ("recall", "recall", "{:.4f}"),
    ("f1", "F1", "{:.4f}"), ("mcc", "MCC", "{:.4f}"), ("loss", "loss", "{:.4f}"), ("n", "examples", "{:,}"),
    ("params_total", "params total", "{:,}"), ("params_embedding", "params embedding", "{:,}"),
    ("params_non_embedding", "params non-embedding", "{:,}"), ("size_mb", "size fp32 (MB)", "{:.2f}"),
    ("ckpt_bytes", "checkpoint bytes", "{:,}"), ("effective_depth", "effective depth", "{}"),
    ("flops_per_sample", "FLOPs/sample (fwd)", "{:.3e}"), ("latency_ms", "latency bs=1 (ms)", "{:.3f}"),
    ("throughput", "throughput (samples/s)", "{:,.0f}"),
]


def print_table(results):
    names = [os.path.basename(os.path.dirname(os.path.abspath(r["ckpt"]))) or r["ckpt"] for r in results]
    width = max(12, *(len(n) for n in names)) + 2
    print(f"{'':24s}" + "".join(f"{n:>{width}s}" for n in names))
    for key, label, fmt in ROWS:
        if all(key in r for r in results):
            print(f"{label:24s}" + "".join(f"{fmt.format(r[key]):>{width}s}" for r in results))
    for name, r in zip(names, results):
        cm = r["confusion_matrix"]
        print(f"confusion matrix of {name} (rows true {r['label_names']}, columns predicted): {cm}")


def main(argv=None):
    p = argparse.ArgumentParser(description="Evaluate checkpoints or classify text.")
    p.add_argument("--ckpt", nargs="+", required=True, help="one or more ckpt.pt files (side by side)")
    p.add_argument("--split", default="test", choices=["train", "val", "test"])
    p.add_argument("--json", help="write the figures to this file")
    p.add_argument("--text", help="classify this sentence and print the label probabilities")
    p.add_argument("--truncate", action="store_true", help="with --text: cut an over-long sentence instead of refusing")
    p.add_argument("--file", help="evaluate on a labelled file: sentence<TAB>label per line, header allowed")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--batch_size", type=int, default=256, help="batch size for metrics and throughput")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats (the median is reported)")
    p.add_argument("--no_timing", action="store_true", help="skip latency and throughput")
    args = p.parse_args(argv)

    device = train.resolve_device(args.device)
    ctx = train.autocast_context(device.split(":")[0], args.dtype)
    try:
        if args.text is not None:
            for path in args.ckpt:
                model, ckpt = load(path, device)
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
        print(f"evaluated on {conditions['split']}: device {device} ({threads} threads), {args.dtype}, "
              f"torch {torch.__version__}; timing: median of {args.repeats} repeats")
        print_table(results)
        if args.json:
            for r in results:
                r["conditions"] = conditions
            with open(args.json, "w") as f:
                json.dump(results[0] if len(results) == 1 else results, f, indent=2)
            print(f"wrote {args.json}")
    except (CheckpointError, data.DataError, ValueError, OSError) as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
