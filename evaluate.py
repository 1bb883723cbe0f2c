"""
Evaluate trained checkpoints: one evaluator per task (classification: loss, accuracy, F1, precision, recall, MCC
and per-example predictions; language modelling: loss, perplexity, next-token accuracy and the embedding norm;
seq2seq: loss per character, greedy word accuracy, the translations; masked-language modelling: masked-token loss
and accuracy), plus size, FLOPs and speed; classify your own text or sample from a language model. train.py uses
the same evaluators during training; this file never imports train.py.

    python evaluate.py --ckpt out/sst2_recurrent/ckpt.pt                     # test split, latency: a table
    python evaluate.py --ckpt out/sst2_baseline/ckpt.pt out/sst2_recurrent/ckpt.pt --json results.json
    python evaluate.py --ckpt out/sst2_recurrent/ckpt.pt --text "a gorgeous, witty film"
    python evaluate.py --ckpt out/sst2_recurrent/ckpt.pt --file my_reviews.tsv   # sentence<TAB>label
    python evaluate.py --ckpt out/shakespeare_char_baseline/ckpt.pt --prompt "ROMEO:" --max_new_tokens 500
    python evaluate.py --ckpt out/shakespeare_char_baseline/ckpt.pt --prompt "ROMEO:" --metrics --timing  # and scored
    python evaluate.py --ckpt stories260K.bin --prompt "Once upon a time" --temperature 0   # a llama2.c model
    python evaluate.py --ckpt stories260K --zero_shot sst5 --split val    # a Llama LM as a classifier, no training
    python evaluate.py config/llama_sst5_prompt.py                        # a config file sets the options
    python evaluate.py --ckpt out/piglatin_transformer/ckpt.pt --plots out/piglatin_plots   # seq2seq: word accuracy,
                                              # errors by rule and length, attention maps, embedding projection

Read in order: the metrics, the evaluators (what train.py scores with), the speed of a checkpoint, loading, the
reports (one per task: every figure of one checkpoint, with sampling beside the language models'), and the command
line. Beside it, evaluation/ declares the options (options.py: their help and checks, and the files, words,
tokenizer and zero-shot prompts they name), prints the table (table.py) and draws --plots (seq2seq_plots.py);
evaluation/piglatin_errors.py groups the seq2seq figures by rule (accuracy_by) and reads where a Pig Latin model
fails from a study's predictions. The benchmark against other implementations is bench/speed.py.

A checkpoint alone gets its whole report, timing included (--no_timing leaves it out); a sample (--prompt),
--text and --file give their answer alone, without scoring the split or timing anything unless asked (--metrics,
--timing: timing_asked).

Bad input (an option out of its range, a device this machine lacks, a file that is not there, an option
that does not suit the checkpoint) ends in one line, `error: ...`, before any long work; anything else is
a bug and keeps its traceback.

Timing follows bookkeeping/timing.py's rules for honest numbers: warm-up passes first, device synchronization around
every timed region, the median of several repeats, and the conditions printed and stored with the figures.
"""

import argparse
import math
import os
import statistics
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

import configurator
import data
from bookkeeping.checkpoints import CheckpointError, load_checkpoint
from bookkeeping.flops import forward_flops
from bookkeeping.records import describe
from bookkeeping.timing import timed
from cli.help import reader_may_stop
from corpora import llama2c, piglatin
from evaluation import options
from evaluation.piglatin_errors import accuracy_by
from evaluation.seq2seq_plots import seq2seq_plots
from evaluation.table import print_table
from export import read_llama2c
from hardware import devices
from model import LlamaConfig, raw_model
from tokenizer import CharCodec, LlamaTextEncoder, TextEncoder

# -----------------------------------------------------------------------------
# metrics: what each evaluator reports, how tables name it, and which way is better


@dataclass(frozen=True)
class Metric:
    label: str  # how tables name it
    better: str  # 'higher' | 'lower' | 'neither' (a measurement with no better side, such as a norm)
    short: str = ""  # its name in train.py's progress lines; '' leaves it out of them


CLASSIFICATION_METRICS = {
    "loss": Metric("loss", "lower", "loss"), "accuracy": Metric("accuracy", "higher", "acc"),
    "f1": Metric("F1", "higher"), "precision": Metric("precision", "higher"), "recall": Metric("recall", "higher"),
    "mcc": Metric("MCC", "higher"),
}
LM_METRICS = {
    "loss": Metric("loss", "lower", "loss"), "accuracy": Metric("next-token accuracy", "higher", "acc"),
    "ppl": Metric("perplexity", "lower", "ppl"),
    "emb_norm": Metric("mean ||X|| (block 1 input)", "neither", "emb norm"),
}

SEQ2SEQ_METRICS = {
    "loss": Metric("loss per character", "lower", "loss"),
    "word_accuracy": Metric("word accuracy (greedy, whole word exact)", "higher", "word acc"),
    "char_accuracy": Metric("next-character accuracy (teacher-forced)", "higher", "char acc"),
    # Pig Latin: word accuracy by the rule a word falls under (piglatin.pig_latin_rule), where the split has such words
    **{f"word_accuracy_{r.replace(' ', '_')}": Metric(f"word accuracy, {r} words", "higher")
       for r in ("consonant", "vowel", "no vowel", "hyphenated")},
    # and its hyphenated words by whether every part occurs in training (piglatin.hyphen_parts), on a held-out split
    **{f"word_accuracy_hyphenated_{g.replace(' ', '_')}": Metric(f"word accuracy, hyphenated words of {g}", "higher")
       for g in ("known parts", "new parts")},
}
MLM_METRICS = {
    "loss": Metric("masked-token loss", "lower", "loss"), "accuracy": Metric("masked-token accuracy", "higher", "acc"),
    "ppl": Metric("masked-token perplexity", "lower", "ppl"),
}


METRICS = {"classification": CLASSIFICATION_METRICS, "lm": LM_METRICS, "seq2seq": SEQ2SEQ_METRICS, "mlm": MLM_METRICS}


def confusion_matrix(y_true, y_pred, n_classes):
    """cm[i, j] = number of examples of true class i predicted as class j."""
    cm = np.zeros((n_classes, n_classes), dtype=np.int64)
    np.add.at(cm, (np.asarray(y_true), np.asarray(y_pred)), 1)
    return cm


def classification_metrics(y_true, y_pred, n_classes):
    """Accuracy; precision, recall and F1 of the positive class (label 1) for binary tasks, and
    their unweighted means over classes (macro) otherwise; Matthews correlation (Gorodkin's
    multi-class form, which equals the usual (TP*TN - FP*FN)/sqrt(...) for two classes). Undefined
    ratios (0/0) are reported as 0, as scikit-learn does."""
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
    accuracy = float(correct / n) if n else 0.0
    return {"accuracy": accuracy, "precision": pick(prec), "recall": pick(rec),
            "f1": pick(f1), "mcc": float(cov / denom) if denom > 0 else 0.0,
            "confusion_matrix": cm.astype(np.int64).tolist()}


# -----------------------------------------------------------------------------
# the evaluators, one per task: (model, split, device, autocast context) -> figures, 'loss' first


def score_split(model, split, task, device, ctx, eval_windows=0):
    """The figures of `task` (METRICS[task], 'loss' first, with `n`) of the model on a split: what
    train.py validates with, and scores the kept checkpoint's test split with. eval_windows: a
    language model's."""
    if task == "lm":
        return evaluate_lm(model, split, device, ctx, eval_windows)
    evaluator = {"classification": evaluate_classification, "seq2seq": evaluate_seq2seq,
                 "mlm": evaluate_mlm}[task]
    return evaluator(model, split, device, ctx)


def score_held_out(best_path, dataset, cfg, device, ctx, summary, best_val):
    """Add the kept checkpoint's figures on each held-out split (test, and Pig Latin's unseen words)
    to a run's summary as <split>_<figure>, their labels in its `metrics`, and the per-example
    answers for paired tests across runs (McNemar's, study.py); nothing without a test split."""
    if "test" not in dataset.splits or not os.path.isfile(best_path):
        return
    best, _ = load_checkpoint(best_path, device)
    metrics = METRICS[dataset.task]
    for name in [s for s in dataset.splits if s not in ("train", "val")]:
        split = dataset.splits[name]
        figures = score_split(best, split, dataset.task, device, ctx, cfg["eval_windows"])
        summary.update({f"{name}_{k}": figures[k] for k in metrics if k in figures},
                       **{f"{name}_n": figures["n"]})
        if "predictions" in figures:
            summary[f"{name}_predictions"] = figures["predictions"]
        summary["metrics"].update({f"{name}_{k}": {"label": f"{name} {m.label} (best checkpoint)",
                                                   "better": m.better}
                                   for k, m in metrics.items() if k in figures})
        print(f"best checkpoint: val {cfg['select_on']} {best_val:.4f}; {name} "
              f"{describe(figures, metrics)}")


@torch.no_grad()
def predict(model, split, batch_size, device, ctx):
    """Logits for every example of a labelled split, in order (batched by length for speed)."""
    model.eval()
    order = np.argsort(split.lengths, kind="stable")
    out = torch.empty(len(split), raw_model(model).cfg.n_classes)
    for i in range(0, len(order), batch_size):
        chunk = order[i:i + batch_size]
        idx, mask, _ = data.collate([split[j] for j in chunk], "cpu")
        mask = data.mask_if_padded(mask)  # sorted by length, most have none: SDPA's flash kernel
        with ctx:
            mask = None if mask is None else data.to_device(mask, device)
            logits, _ = model(data.to_device(idx, device), mask)
        out[torch.from_numpy(chunk)] = logits.float().cpu()
    return out


def evaluate_classification(model, split, device, ctx, batch_size=256):
    """Mean cross-entropy and CLASSIFICATION_METRICS over a labelled split, with the confusion
    matrix, the number of examples `n` and the per-example `predictions` (argmax class, in split
    order)."""
    logits = predict(model, split, batch_size, device, ctx)
    labels = torch.from_numpy(np.asarray(split.labels, dtype=np.int64))
    n_classes = logits.size(-1)
    if len(split) == 0:
        raise data.DataError("the split to evaluate is empty")
    if labels.max() >= n_classes or labels.min() < 0:
        raise data.DataError(f"labels must be in 0..{n_classes - 1} for this model")
    predictions = logits.argmax(-1)
    res = {"loss": F.cross_entropy(logits, labels).item()}
    res.update(classification_metrics(labels.numpy(), predictions.numpy(), n_classes))
    res.update(n=len(split), predictions=predictions.tolist())
    return res


@torch.no_grad()
def evaluate_lm(model, split, device, ctx, max_windows=0, batch_size=64):
    """Mean next-token cross-entropy, perplexity exp(loss), next-token accuracy (argmax = target) and
    the mean L2 norm of the first block's input X (over all positions), on the fixed validation
    windows of `data.lm_eval_starts` (block_size = the model's context); `n` is the number of targets."""
    model.eval()
    tokens, block_size = split.tokens, raw_model(model).cfg.block_size
    starts = data.lm_eval_starts(len(tokens), block_size, max_windows)
    loss_sum, correct, norm_sum, n = 0.0, 0, 0.0, 0
    for i in range(0, len(starts), batch_size):
        x, y = data.lm_windows(tokens, starts[i:i + batch_size], block_size, device)
        with ctx:
            logits, _ = model(x)
            emb = raw_model(model).embed(x)  # (B, T, C): what the first block reads
        logits = logits.float()
        loss_sum += F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1), reduction="sum").item()
        correct += (logits.argmax(-1) == y).sum().item()
        norm_sum += emb.float().norm(dim=-1).sum().item()
        n += y.numel()
    loss = loss_sum / n
    return {"loss": loss, "accuracy": correct / n, "ppl": math.exp(loss), "emb_norm": norm_sum / n, "n": n}


MLM_EVAL_SEED = 0  # the seed of the validation masks: the same positions in every evaluation of every run


def scored_token_sums(logits, targets):
    """(summed cross-entropy, correct argmaxes, count) over the positions whose target is not -100: the
    per-token figures that the masked-LM and seq2seq evaluators add up over a split."""
    scored = targets != -100
    logits, targets = logits.float()[scored], targets[scored]
    return (F.cross_entropy(logits, targets, reduction="sum").item(), (logits.argmax(-1) == targets).sum().item(),
            targets.numel())


@torch.no_grad()
def evaluate_mlm(model, split, device, ctx, batch_size=64):
    """Masked-token cross-entropy, perplexity exp(loss) and accuracy (argmax = the original token) over a
    split, each sequence j masked once by data.mlm_mask with a generator seeded by (MLM_EVAL_SEED, j): the
    same positions and replacements in every evaluation of every run, however the split is batched. `n` is
    the number of masked tokens."""
    model.eval()
    vocab_size = raw_model(model).cfg.vocab_size
    order = np.argsort(split.lengths, kind="stable")  # similar lengths together: less padding
    loss_sum, correct, n = 0.0, 0, 0
    for i in range(0, len(order), batch_size):
        rows = [data.mlm_mask(split[j][0][None], vocab_size, np.random.default_rng([MLM_EVAL_SEED, j]))
                for j in order[i:i + batch_size]]
        idx = data.pad_rows([x[0] for x, _ in rows], data.PAD).to(device)
        targets = data.pad_rows([y[0] for _, y in rows], -100).to(device)
        with ctx:
            logits, _ = model(idx, idx != data.PAD, mlm_targets=targets)  # the masked positions' logits
        loss, right, count = scored_token_sums(logits, targets[targets != -100])
        loss_sum, correct, n = loss_sum + loss, correct + right, n + count
    if n == 0:
        raise data.DataError("the split to evaluate has no word to mask")
    return {"loss": loss_sum / n, "accuracy": correct / n, "ppl": math.exp(loss_sum / n), "n": n}


@torch.no_grad()
def translate_split(model, split, device, ctx, batch_size=256):
    """Greedy translations of every source of a seq2seq split, in split order: token-id lists without
    [EOS]. Sources go in batches of one length, so no batch is padded (a decoder-only model reads the
    source as its prefix, where padding would be read too)."""
    m = raw_model(model)
    out = [None] * len(split)
    for length in np.unique(split.lengths):
        rows = np.flatnonzero(split.lengths == length)
        for i in range(0, len(rows), batch_size):
            chunk = rows[i:i + batch_size]
            src = torch.tensor(np.stack([np.append(split[j][0], data.EOS) for j in chunk]), device=device)
            with ctx:
                ids = m.translate(src, 3 * int(length) + 4, data.SOS, data.EOS).tolist()  # Pig Latin is shorter
            for j, row in zip(chunk, ids):
                out[j] = row[:row.index(data.EOS)] if data.EOS in row else row
    return out


@torch.no_grad()
def evaluate_seq2seq(model, split, device, ctx, batch_size=256):
    """The seq2seq figures of SEQ2SEQ_METRICS on a split: teacher-forced cross-entropy per target
    character (the translation and its [EOS]) and next-character accuracy; then greedy decoding and
    the word accuracy, a word counting only if its whole translation is right. `predictions` holds the
    greedy outputs (id lists), `n` the words, `n_chars` the scored characters."""
    model.eval()
    layout = raw_model(model).cfg.seq2seq_layout
    loss_sum, correct, n_chars = 0.0, 0, 0
    for i in range(0, len(split), batch_size):
        inputs = data.seq2seq_collate([split[j] for j in range(i, min(i + batch_size, len(split)))], layout, device)
        targets = inputs.pop("targets")
        with ctx:
            logits, _ = model(**inputs)
        loss, right, count = scored_token_sums(logits, targets)
        loss_sum, correct, n_chars = loss_sum + loss, correct + right, n_chars + count
    if n_chars == 0:
        raise data.DataError("the split to evaluate is empty")
    predictions = translate_split(model, split, device, ctx, batch_size)
    right = [pred == split[j][1].tolist() for j, pred in enumerate(predictions)]
    by_rule = accuracy_by(piglatin.pig_latin_rules(split) or [], right)  # Pig Latin words: each rule's words apart
    parts = piglatin.hyphen_part_groups(split) or []  # its compounds of known parts and of new ones apart
    by_parts = accuracy_by([g for g in parts if g], [ok for g, ok in zip(parts, right) if g])
    return {"loss": loss_sum / n_chars, "word_accuracy": sum(right) / len(split), "char_accuracy": correct / n_chars,
            **{f"word_accuracy_{k.replace(' ', '_')}": v["accuracy"] for k, v in by_rule.items()},
            **{f"word_accuracy_hyphenated_{k.replace(' ', '_')}": v["accuracy"] for k, v in by_parts.items()},
            "n": len(split), "n_chars": n_chars, "predictions": predictions}


@torch.no_grad()
def label_log_likelihoods(model, prompts, label_ids, device, batch_size=32):
    """Zero-shot scores: for each prompt (token ids) and each label (the token ids of its word), the
    log-likelihood of the label's tokens right after the prompt, log P(l_1..l_m | prompt) =
    sum_j log P(l_j | prompt, l_<j), from one forward of prompt + label. Returns (N, n_labels)."""
    model.eval()
    pairs = [(p, lab) for p in prompts for lab in label_ids]
    out = torch.empty(len(pairs))
    for i in range(0, len(pairs), batch_size):
        chunk = pairs[i:i + batch_size]
        T = max(len(p) + len(lab) for p, lab in chunk)
        idx = torch.zeros(len(chunk), T, dtype=torch.long)
        for b, (p, lab) in enumerate(chunk):
            idx[b, :len(p) + len(lab)] = torch.tensor(p + lab)
        logp = F.log_softmax(model(idx.to(device))[0].float(), -1).cpu()  # (B, T, V); right padding is never read
        for b, (p, lab) in enumerate(chunk):
            # the label's j-th token is predicted at position len(p) - 1 + j
            out[i + b] = sum(logp[b, len(p) - 1 + j, t] for j, t in enumerate(lab))
    return out.view(len(prompts), len(label_ids))


# -----------------------------------------------------------------------------
# speed: latency and throughput of a checkpoint (timed as bookkeeping/timing.py times everything)


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
def interleaved_timing(entries, device, ctx, rounds=3, batch_size=256, n=200, n_throughput=1024):
    """Latency and throughput of several classifiers [(model, its test split)], timed in turns: each round
    times every model once (batch 1 over its first n sentences, then its first n_throughput in batches),
    so that a slow spell of the machine falls on all of them alike instead of on whichever ran then.
    Returns [{latency_ms, throughput}]: the median ms per sentence over rounds x sentences, and sentences/s
    at the median round."""
    seqs = [[torch.from_numpy(split[i][0])[None].to(device) for i in range(min(n, len(split)))] for _, split in entries]
    subs = [options.ListSplit([split[i] for i in range(min(n_throughput, len(split)))]) for _, split in entries]
    for (model, _), s, sub in zip(entries, seqs, subs):  # warm-up, untimed
        model.eval()
        for x in s[:10]:
            model(x)
        predict(model, sub, batch_size, device, ctx)

    def forward(model, x):
        with ctx:
            model(x)

    latency = [[] for _ in entries]
    batch_times = [[] for _ in entries]
    for _ in range(rounds):
        for i, ((model, _), s, sub) in enumerate(zip(entries, seqs, subs)):
            latency[i] += [timed(lambda: forward(model, x), device) for x in s]
            batch_times[i].append(timed(lambda: predict(model, sub, batch_size, device, ctx), device))
    return [{"latency_ms": 1000 * statistics.median(lat), "throughput": len(sub) / statistics.median(bt)}
            for lat, bt, sub in zip(latency, batch_times, subs)]


def compiled_for_timing(model, device):
    """--compile for a checkpoint's timings: torch.compile with dynamic shapes (sentences differ in length),
    and on CUDA mode 'reduce-overhead', which replays CUDA graphs: a small model's batch-1 forward is bound
    by kernel launches, which a graph replay makes one. The metrics are computed on the plain model."""
    mode = "reduce-overhead" if str(device).startswith("cuda") else "default"
    return torch.compile(model, mode=mode, dynamic=True)


@torch.no_grad()
def throughput(model, split, device, ctx, batch_size=256, n=1024, repeats=3):
    """Samples per second running the first n examples of the split in batches of batch_size
    (grouped by length, padded to the longest in each batch): one warm-up pass, median of repeats."""
    sub = options.ListSplit([split[i] for i in range(min(n, len(split)))])
    predict(model, sub, batch_size, device, ctx)  # warm-up
    times = [timed(lambda: predict(model, sub, batch_size, device, ctx), device) for _ in range(repeats)]
    return len(sub) / statistics.median(times)


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


# -----------------------------------------------------------------------------
# loading


def load(path, device):
    """(model, checkpoint) or a clear error. Checks that train.py wrote it: it must hold the run's
    config and its data record, which say how to read the data the model was trained on. A llama2.c
    checkpoint (.bin, or .pt with model_args) loads too, as a model to generate from."""
    try:
        model, ckpt = load_checkpoint(path, device)
    except CheckpointError as ours:
        try:
            model = read_llama2c(path)
        except CheckpointError as theirs:
            raise (theirs if path.endswith(".bin") else ours) from None
        return model.to(device), {"data": {"task": "generate"}, "config": {}}
    if "data" not in ckpt or "config" not in ckpt:
        raise CheckpointError(f"{path} has no data/config record; it was not written by train.py")
    return model, ckpt


def checkpoint_dataset(ckpt, path):
    """The dataset the checkpoint's run trained on (prepared again if its folder is gone), checked to
    have the checkpoint's vocabulary and truncation."""
    dataset = data.load_dataset(ckpt["config"])
    dataset.check_matches(ckpt["data"], f"the checkpoint {path}")
    return dataset


def text_encoder(ckpt):
    """The checkpoint's own preprocessing, tokenizer and vocabulary, as a text -> token ids function:
    GPT-2 BPE with its dataset's vocabulary, or the Llama tokenizer its dataset was made with."""
    meta = ckpt["data"]
    if str(meta.get("tokenizer", "")).startswith("llama2c:"):
        name = meta["tokenizer"].removeprefix("llama2c:")
        return LlamaTextEncoder(meta, llama2c.load_llama_tokenizer(name))
    return TextEncoder(meta)


# -----------------------------------------------------------------------------
# the reports, one per task: all the figures for one loaded checkpoint, as a flat dict


def timing_asked(args):
    """Whether a report times its model (latency, throughput, tokens/s), which takes longer than its answer: a
    checkpoint's whole report does (the model card's figures) unless --no_timing; a sample (--prompt) or a --file
    gives its answer alone unless --timing, or an option that only means timing (--no_cache, --gen_batch N,
    --compile), asks for it too."""
    if args.no_timing:
        return False
    return (args.timing or args.no_cache or args.gen_batch > 1 or args.compile
            or (args.prompt is None and args.file is None))


def size_figures(model, path):
    counts = model.param_counts()
    return {"params_total": counts["total"], "params_embedding": counts["embedding"],
            "params_non_embedding": counts["non_embedding"], "size_mb": counts["total"] * 4 / 2**20,
            "ckpt_bytes": os.path.getsize(path), "effective_depth": model.depth}


def classification_report(model, ckpt, path, args, device, ctx):
    """The classifier on its run's test split (or --split, or a labelled --file)."""
    names = ckpt["data"]["label_names"]
    if args.file:
        split, n_trunc = options.read_tsv(args.file, text_encoder(ckpt))
        if n_trunc:
            print(f"{args.file}: {n_trunc} sentences truncated to {ckpt['data']['max_len']} tokens, as in training")
        wrong = sorted({int(y) for y in split.labels} - set(range(len(names))))
        if wrong:
            raise data.DataError(f"{args.file} has labels {wrong}; {path} knows 0..{len(names) - 1} "
                                 f"({', '.join(names)})")
    else:
        split = checkpoint_dataset(ckpt, path).splits[args.split]
    res = {"ckpt": path, "task": "classification",
           **evaluate_classification(model, split, device, ctx, batch_size=args.batch_size)}
    res.update(size_figures(model, path))
    res["flops_per_sample"] = float(np.mean([forward_flops(model, int(t)) for t in split.lengths]))
    if timing_asked(args):
        fast = compiled_for_timing(model, device) if args.compile else model
        res["latency_ms"] = latency_ms(fast, split, device, ctx, repeats=args.repeats)
        res["throughput"] = throughput(fast, split, device, ctx, batch_size=args.batch_size, repeats=args.repeats)
        res["timed_compiled"] = bool(args.compile)
    if args.loops:
        res["loops"] = depth_sweep(model, split, args.loops, device, ctx, args.batch_size)
    res["label_names"] = names
    res["trained"] = {"dataset": ckpt["data"]["dataset"], "protocol": ckpt["data"].get("protocol"),
                      "iter_num": ckpt["iter_num"], "best_val_loss": ckpt["best_val_loss"]}
    return res


def depth_sweep(model, split, loops, device, ctx, batch_size=256):
    """Test-time depth: a looped encoder scored with each number of loops in `loops` (its weights as
    trained; only how many times the shared stack is applied changes). Returns one row per count:
    n_loops, the classification metrics and the forward FLOPs per sample at that depth. (The command
    line checks the counts, options.check_args, and the model, options.check_fits, before it gets here.)"""
    raw = raw_model(model)
    trained = raw.cfg.n_loops
    rows = []
    try:
        for k in loops:
            raw.cfg.n_loops, raw.depth = k, raw.cfg.n_layer * k
            res = evaluate_classification(model, split, device, ctx, batch_size)
            rows.append({"n_loops": k, "trained_loops": trained,
                         **{m: res[m] for m in ("loss", "accuracy", "f1", "precision", "recall", "mcc")},
                         "flops_per_sample": float(np.mean([forward_flops(raw, int(t)) for t in split.lengths]))})
    finally:
        raw.cfg.n_loops, raw.depth = trained, raw.cfg.n_layer * trained
    return rows


def generate_compiled(run, mode, auto):
    """run(mode) -> result, with the compiled step built on the first call: if torch.compile cannot build it
    (no C++ compiler, say), an --decode auto falls back to the eager step, an explicit --decode compiled is
    an error that says so. Returns (result, mode used, seconds of the first call)."""
    import torch._dynamo  # (its exceptions)
    if mode == "compiled":
        print("compiling the decode step (once per batch size: about half a minute the first time, seconds once "
              "inductor's cache holds it)")
    start = time.perf_counter()
    try:
        out = run(mode)
    except torch._dynamo.exc.BackendCompilerFailed as e:
        if not auto:
            raise configurator.UserError(f"--decode compiled: torch.compile could not build the decode step ({e}); "
                                         f"use --decode eager") from None
        print(f"note: the compiled decode step could not be built ({type(e.__cause__).__name__}); decoding eagerly")
        mode, start = "eager", time.perf_counter()
        out = run(mode)
    return out, mode, time.perf_counter() - start


def sample_text(model, ckpt, prompt, args, device):
    """A sample from a language model: the prompt, continued by max_new_tokens generated tokens (a Llama:
    with its tokenizer and all its sampling options, stopping at EOS; a character GPT: characters), with the
    decode step --decode picks, and where timing is asked (timing_asked) its speed: tokens/s at batch 1 with the
    KV cache and, with --no_cache, without it. Returns (text, figures)."""
    if isinstance(model.cfg, LlamaConfig):
        _, tok = options.llama_tokenizer_for(model, ckpt["data"]["dir"], ckpt["data"]["vocab"])
        ids = tok.encode(prompt or "", bos=True)

        def run(mode, use_cache=True):  # the same sample every time: the generator starts from the seed
            gen = torch.Generator(device=device).manual_seed(args.seed)
            return ids + model.generate([ids], args.max_new_tokens, args.temperature, args.top_k, args.top_p,
                                        args.epsilon, eos_id=tok.eos_id, generator=gen, use_cache=use_cache,
                                        mode=mode)[0]
        text, n_prompt = tok.decode, len(ids)
    else:
        codec = CharCodec(ckpt["data"]["vocab"])
        try:
            ids = codec.encode("\n" if prompt is None else prompt)
        except ValueError as e:  # a character the model never saw
            raise configurator.ConfigError(f"--prompt {prompt!r}: {e}") from None
        if len(ids) == 0:
            raise configurator.ConfigError("--prompt '' is empty: a character model continues at least one character "
                                           "(without --prompt it starts from a newline)")
        idx = torch.from_numpy(ids)[None].to(device)

        def run(mode, use_cache=True):  # the same sample every time: the generator starts from the seed
            gen = torch.Generator(device=device).manual_seed(args.seed)
            return model.generate(idx, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                                  generator=gen, use_cache=use_cache, mode=mode)[0].tolist()
        text, n_prompt = codec.decode, len(ids)

    timing = timing_asked(args)
    mode = options.decode_mode(args, args.max_new_tokens * (1 + args.repeats * timing))
    out, mode, first = generate_compiled(run, mode, args.decode == "auto")
    figures = {"decode": mode}
    if timing:  # the sample's own speed: batch 1, the KV cache (a Llama's sample may stop early, at EOS)
        new = len(out) - n_prompt
        secs = statistics.median(timed(lambda: run(mode), device) for _ in range(args.repeats))
        figures["tokens_per_s"] = new / secs
        if mode == "compiled":
            figures["compile_s"] = max(0.0, first - secs)
        if args.no_cache:  # the reference: every token runs the context again
            secs = statistics.median(timed(lambda: run("eager", False), device) for _ in range(args.repeats))
            figures["tokens_per_s_no_cache"] = new / secs
    return text(out), figures


def lm_report(model, ckpt, path, args, device, ctx):
    """The language model on its corpus's fixed validation windows, plus a sample (drawn first: a bad
    --prompt is refused before the evaluation runs). A sample asked for (--prompt) is the answer: the
    validation windows are scored with --metrics too, and it is timed with --timing (timing_asked)."""
    sample, speed = sample_text(model, ckpt, args.prompt, args, device)
    res = {"ckpt": path, "task": "lm", **speed}
    if args.prompt is None or args.metrics:
        val = checkpoint_dataset(ckpt, path).splits["val"]
        res.update(evaluate_lm(model, val, device, ctx, ckpt["config"].get("eval_windows", 0)))
    res.update(size_figures(model, path))
    T = model.cfg.block_size
    res["flops_per_token"] = forward_flops(model, T) / T
    if timing_asked(args):
        res["latency_ms"], res["throughput"] = generation_speed(model, device, ctx, T, repeats=args.repeats)
    res["trained"] = {"dataset": ckpt["data"]["dataset"], "iter_num": ckpt["iter_num"],
                      "best_val_loss": ckpt["best_val_loss"], "emb_norm": model.cfg.emb_norm}
    res["sample"] = sample
    res["sample_args"] = {"prompt": args.prompt, "temperature": args.temperature, "top_k": args.top_k,
                          "seed": args.seed}
    return res


def generation_report(model, ckpt, path, args, device, ctx):
    """A Llama checkpoint from llama2.c: generate from --prompt (BOS alone by default, as run.c does)
    with the KV cache, and where timing is asked (timing_asked: without --prompt, or with --timing) time it:
    tokens/s at batch 1, the median of --repeats generations; with
    --gen_batch N also N copies of the prompt at once (tokens/s in aggregate), and with --no_cache
    both again without the cache."""
    name, tok = options.llama_tokenizer_for(model, path, args.tokenizer)
    ids = tok.encode(args.prompt or "", bos=True)

    def run(batch=1, use_cache=True, mode="eager"):  # the same sample every time: the generator starts from the seed
        gen = torch.Generator(device=device).manual_seed(args.seed)
        with ctx:
            return model.generate([ids] * batch, args.max_new_tokens, args.temperature, args.top_k, args.top_p,
                                  args.epsilon, eos_id=tok.eos_id, generator=gen, use_cache=use_cache, mode=mode)

    timing = timing_asked(args)
    mode = options.decode_mode(args, args.max_new_tokens * (1 + timing * (1 + args.repeats) * (
        1 + (args.gen_batch if args.gen_batch > 1 else 0))))
    out, mode, first = generate_compiled(lambda m: run(mode=m), mode, args.decode == "auto")  # also the warm-up
    out = out[0]
    res = {"ckpt": path, "task": "generate", "new_tokens": len(out), "decode": mode, **size_figures(model, path)}
    if timing:
        plan = [(1, True)] + ([(args.gen_batch, True)] if args.gen_batch > 1 else [])
        plan += [(batch, False) for batch, _ in plan] if args.no_cache else []
        compile_s = 0.0
        for batch, cache in plan:
            warm = time.perf_counter()
            n = sum(map(len, run(batch, cache, mode)))  # warm-up (a new batch size compiles); rows may stop at EOS
            warm = time.perf_counter() - warm if batch > 1 else first
            secs = statistics.median(timed(lambda: run(batch, cache, mode), device) for _ in range(args.repeats))
            res[f"tokens_per_s{'' if batch == 1 else '_batch'}{'' if cache else '_no_cache'}"] = n / secs
            compile_s += max(0.0, warm - secs) if mode == "compiled" and cache else 0.0
        res["gen_batch"] = args.gen_batch
        if mode == "compiled":
            res["compile_s"] = compile_s  # the first call's time beyond a timed one: dynamo's capture + inductor
    res["sample"] = tok.decode(ids + out)
    res["sample_args"] = {"prompt": args.prompt, "temperature": args.temperature, "top_k": args.top_k,
                          "top_p": args.top_p, "epsilon": args.epsilon, "seed": args.seed, "tokenizer": name}
    return res


def error_analysis(words, truths, predictions):
    """What the write-up did by hand: the wrong translations, and word accuracy by word length and by
    Pig Latin rule (piglatin.pig_latin_rule: consonant cluster, vowel, hyphenated, no vowel)."""
    right = [p == t for p, t in zip(predictions, truths)]
    lengths = [f"{n:02d}" if n < 12 else "12+" for n in map(len, words)]
    by_rule = accuracy_by(map(piglatin.pig_latin_rule, words), right)
    errors = [dict(word=w, truth=t, predicted=p) for w, t, p, ok in zip(words, truths, predictions, right) if not ok]
    return {"by_length": accuracy_by(lengths, right), "by_rule": by_rule, "errors": errors}


@torch.no_grad()
def translation_speed(model, split, device, ctx, repeats=3, n=64):
    """(latency: median ms to translate one word at batch 1, greedily, over the first n words of the
    split; throughput: words/s translating the whole split in batches of 256, the median of repeats)."""
    sub = piglatin.PairList([split[j] for j in range(min(n, len(split)))])
    translate_split(model, sub, device, ctx, batch_size=1)  # warm-up
    lat = [timed(lambda: translate_split(model, sub, device, ctx, batch_size=1), device) / len(sub)
           for _ in range(repeats)]
    thr = [len(split) / timed(lambda: translate_split(model, split, device, ctx), device) for _ in range(repeats)]
    return 1000 * statistics.median(lat), statistics.median(thr)


PER_WORD = ("words", "predictions", "errors")  # a seq2seq split's lists, one entry per (wrong) word


def seq2seq_report(model, ckpt, path, args, device, ctx):
    """A seq2seq model (Pig Latin) on --split and, beside the test split, on the words from outside the
    novel (the dataset's `unseen` split), or on the words of --file: for each, loss per character, word
    and character accuracy and the error analysis (by rule, by length, the wrong words); once, size,
    FLOPs, translation speed on the first, and with --plots DIR its pictures. The first split's figures
    are also the report's own (word_accuracy, by_rule, ...); every split's, with its words, predictions
    and errors, are in `splits`."""
    codec = CharCodec(ckpt["data"]["vocab"])
    if args.file:
        splits = {os.path.basename(args.file): options.read_word_list(args.file, codec, raw_model(model).cfg.block_size)}
    else:
        dataset = checkpoint_dataset(ckpt, path)
        how = (f"{dataset.folder} has no unseen split (words from outside the novel): `python data.py piglatin "
               f"--out_dir {dataset.folder}` adds it, its train, val and test words unchanged")
        if args.split not in dataset.splits:
            raise data.DataError(how)
        splits = {args.split: dataset.splits[args.split]}
        if args.split == "test" and "unseen" in dataset.splits:
            splits["unseen"] = dataset.splits["unseen"]
        elif args.split == "test":
            print(how)
    res = {"ckpt": path, "task": "seq2seq", "splits": {}, **size_figures(model, path)}
    for name, split in splits.items():
        figures = evaluate_seq2seq(model, split, device, ctx, args.batch_size)
        words = [codec.decode(split[j][0]) for j in range(len(split))]
        truths = [codec.decode(split[j][1]) for j in range(len(split))]
        predicted = [codec.decode(p) for p in figures.pop("predictions")]
        res["splits"][name] = {**figures, **error_analysis(words, truths, predicted), "predictions": predicted,
                               "words": words}
    # the first split's figures are the report's own; its per-word lists stay in `splits` alone (once in --json)
    first = next(iter(res["splits"].values()))
    res.update({k: v for k, v in first.items() if k not in PER_WORD}, split=next(iter(splits)))
    if "unseen" in res["splits"]:
        res.update(unseen_word_accuracy=res["splits"]["unseen"]["word_accuracy"],
                   unseen_loss=res["splits"]["unseen"]["loss"])
    split = next(iter(splits.values()))
    mean_len = float(np.mean(split.lengths)) + 1  # a word and its [EOS]
    res["flops_per_sample"] = forward_flops(model, round(mean_len))  # one teacher-forced word, both halves
    if timing_asked(args):
        res["latency_ms"], res["throughput"] = translation_speed(model, split, device, ctx, args.repeats)
    if args.plots:
        words = options.seq2seq_words(args.words, "--words", ",")
        res["plots"] = seq2seq_plots(args.plots, attention_weights(model, codec, words, device),
                                     raw_model(model).tok_emb.weight, codec.itos)
    return res


@torch.no_grad()
def attention_weights(model, codec, words, device):
    """What --plots draws of an encoder-decoder (evaluation/seq2seq_plots.py): for each word, its greedy translation
    and the attention weights of the forward that reads it back, [(word, translation, {'encoder': [(1, n_head,
    T_src, T_src)], 'cross': [(1, n_head, T_out, T_src)]}, one per layer)]; [] for a model without an encoder."""
    m = raw_model(model)
    if not hasattr(m, "encoder"):
        return []
    out = []
    for word in words:
        (ids,) = translate_split(m, piglatin.PairList([(codec.encode(word), [])]), device, nullcontext())
        src = torch.tensor([[*codec.encode(word), data.EOS]], device=device)
        idx = torch.tensor([[data.SOS, *ids]], device=device)  # the decoder's input as it translated
        out.append((word, codec.decode(ids), m(src, idx, need_weights=True)[2]))
    return out


def zero_shot_report(model, ckpt, path, args, device, ctx):
    """A language model as a classifier with no training (--zero_shot DATASET): each text of the split
    becomes the prompt options.ZERO_SHOT_TEMPLATE, and the label whose word is most likely to come next wins
    (log P(word | prompt), summed over the word's tokens). A text can be cut twice, and both counts are
    reported: when the data was prepared, to its max_len (corpora/minllama.py; meta.json's counts say
    how many of each split), and here, from its end, so that prompt and label fit the model's context.
    (options.check_fits has made sure the model is a Llama language model.)"""
    name, tok = options.llama_tokenizer_for(model, path, args.tokenizer or ckpt["data"].get("vocab"))
    dataset = data.load_dataset({"dataset": args.zero_shot, "tokenizer": name})  # as prepared (default: 256)
    split, names = dataset.splits[args.split], dataset.meta["label_names"]
    prompts, label_ids, y_true, cut = options.zero_shot_inputs(tok, split, names, model.cfg.block_size)
    with ctx:
        scores = label_log_likelihoods(model, prompts, label_ids, device)
    y_pred = scores.argmax(1).tolist()
    res = {"ckpt": path, "task": "zero-shot", "dataset": args.zero_shot, "split": args.split,
           **classification_metrics(y_true, y_pred, len(names)), "n": len(y_true),
           "prepared_max_len": dataset.meta["max_len"], "context": model.cfg.block_size, "texts_cut": cut,
           **size_figures(model, path), "label_names": names,
           "prompt": options.ZERO_SHOT_TEMPLATE.format(text="<text>", labels=options.label_list(names)), "tokenizer": name,
           "predictions": y_pred, "labels": y_true, "label_log_likelihoods": scores.tolist()}
    prepared = dataset.meta.get("counts", {}).get(args.split, {})
    if "truncated" in prepared:  # a folder prepared before the counts were kept has no record of it
        res["texts_cut_at_preparation"] = prepared["truncated"]
    return res


def mlm_report(model, ckpt, path, args, device, ctx):
    """An encoder pretrained by masked-language modelling, on its corpus's validation split masked as in
    training's evaluations (evaluate_mlm's fixed seed), with its size and FLOPs (the MLM head included).
    No timing: what it is for is fine-tuning, and a fine-tuned classifier's report times that."""
    val = checkpoint_dataset(ckpt, path).splits["val"]
    res = {"ckpt": path, "task": "mlm", **evaluate_mlm(model, val, device, ctx), **size_figures(model, path)}
    masked = res["n"] / len(val)  # the head's cost is linear in it: the mean over texts is the exact mean
    res["flops_per_sample"] = float(np.mean([forward_flops(model, int(t), masked=masked) for t in val.lengths]))
    res["trained"] = {"dataset": ckpt["data"]["dataset"], "protocol": ckpt["data"].get("protocol"),
                      "iter_num": ckpt["iter_num"], "best_val_loss": ckpt["best_val_loss"]}
    return res


REPORTS = {"classification": classification_report, "lm": lm_report, "generate": generation_report,
           "seq2seq": seq2seq_report, "mlm": mlm_report}

def translate_text(model, ckpt, path, text, device, ctx):
    """--text for a seq2seq model: each word of the text (options.seq2seq_words) translated greedily, printed
    beside the rules' answer (piglatin.pig_latin)."""
    codec = CharCodec(ckpt["data"]["vocab"])
    words = options.seq2seq_words(text, "--text")
    out = [codec.decode(ids) for ids in translate_split(model, piglatin.PairList([(codec.encode(w), []) for w in words]),
                                                        device, ctx)]
    print(f"{path}: {' '.join(out)}  (the rules: {' '.join(map(piglatin.pig_latin, words))})")


def classify_text(paths, args, device, ctx):
    """--text: each classifier's label and class probabilities for each sentence given, in turn (a
    seq2seq model translates it instead)."""
    for path in paths:
        model, ckpt = load(path, device)
        options.check_fits(args, model, ckpt, path)
        for text in args.text:
            if ckpt["data"]["task"] == "seq2seq":
                translate_text(model, ckpt, path, text, device, ctx)
                continue
            enc = text_encoder(ckpt)
            ids = torch.from_numpy(enc(text, truncate=args.truncate))[None].to(device)
            with torch.no_grad(), ctx:
                probs = F.softmax(model(ids)[0].float(), -1)[0].tolist()
            names = ckpt["data"]["label_names"]
            best = max(range(len(probs)), key=probs.__getitem__)
            shown = ", ".join(f"{n} {q:.3f}" for n, q in zip(names, probs))
            print(f"{path}: {names[best]}  ({shown})" + ("  [truncated]" if enc.was_truncated else ""))


def parse_args(argv):
    """The options, checked (options.check_args): config files first, which set defaults; the command line wins."""
    p, argv, configs = options.parser(), list(argv), []
    while argv and not argv[0].startswith("-"):
        configs.append(argv.pop(0))
    p.set_defaults(**options.config_defaults(p, configs))
    args = p.parse_args(argv)
    options.check_args(p, args)
    if args.timing and args.no_timing:
        raise configurator.ConfigError("--timing and --no_timing: give one")
    return args


def evaluate_checkpoints(args, device):
    """Each --ckpt's report (by its task, or zero-shot), the table, and --json."""
    ctx = devices.autocast_context(device.split(":")[0], args.dtype)
    results, to_time = [], []
    for path in args.ckpt or []:
        if path in llama2c.PRETRAINED and not os.path.exists(path):  # a name: 'stories260K'
            path = llama2c.pretrained_file(path)
        model, ckpt = load(path, device)
        options.check_fits(args, model, ckpt, path)
        report = zero_shot_report if args.zero_shot else REPORTS[ckpt["data"]["task"]]
        if args.interleave:  # the figures now, the timing below, all models in turns
            if ckpt["data"]["task"] != "classification" or args.zero_shot or args.file:
                raise configurator.ConfigError(f"--interleave times classifiers on their test splits; {path} is a "
                                               f"{ckpt['data']['task']} checkpoint" + (" (and --file/--zero_shot "
                                               "are not for it)" if ckpt["data"]["task"] == "classification" else ""))
            results.append(report(model, ckpt, path, argparse.Namespace(**{**vars(args), "no_timing": True}), device,
                                  ctx))
            to_time.append((model, checkpoint_dataset(ckpt, path).splits[args.split]))
        else:
            results.append(report(model, ckpt, path, args, device, ctx))
    for path in args.untrained:  # a run's architecture with fresh weights, on its run's test split
        model, split = options.untrained(path, args.split, device)
        results.append({"ckpt": path, "task": "classification", "untrained": True,
                        **{k: v for k, v in size_figures(model, path).items() if k != "ckpt_bytes"},
                        "flops_per_sample": float(np.mean([forward_flops(model, int(t)) for t in split.lengths]))})
        to_time.append((model, split))
    for r, figures in zip(results, interleaved_timing(to_time, device, ctx, args.repeats, args.batch_size)):
        r.update(figures, timed_interleaved=True)
    conditions = {"device": device, "dtype": args.dtype, "torch": torch.__version__, "threads": torch.get_num_threads(),
                  "split": args.file or args.split, "repeats": args.repeats, "batch_size": args.batch_size}
    if device.startswith("cuda"):
        conditions["gpu"] = torch.cuda.get_device_name()
    print_table(results, conditions, args.max_errors)
    if args.json:
        for r in results:
            r["conditions"] = conditions
        data.write_json(args.json, results[0] if len(results) == 1 else results, indent=2)
        print(f"wrote {args.json}")
    return results


def main(argv=None):
    """The command line. Bad input (configurator.UserError: ConfigError, data.DataError, CheckpointError)
    ends in one line, `error: ...`, and exit status 1; any other exception is a bug and keeps its traceback."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = parse_args(argv)
        device = devices.resolve_device(args.device)
        devices.set_cpu_threads(device)  # one on a CPU, unless OMP_NUM_THREADS says
        if args.text is not None:
            ctx = devices.autocast_context(device.split(":")[0], args.dtype)
            return classify_text(args.ckpt, args, device, ctx)
        return evaluate_checkpoints(args, device)
    except configurator.UserError as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    with reader_may_stop():  # `python evaluate.py --help | head` ends quietly
        main()
