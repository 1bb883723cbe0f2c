"""
SST-5 and CFIMDB, the sentiment sets of the NLP course's mini-Llama assignment
(neubig/minllama-assignment), in its `<label> ||| <text>` files (parse_minllama), tokenized for a
Llama (the mini-Llama study): build_minllama returns ({split: (ids, labels)}, meta.json's dict);
data.py writes them.
"""

import json
import os

import numpy as np

from corpora.classification import holdout
from corpora.llama2c import load_llama_tokenizer
from corpora.sources import SOURCES, fetch
from tokenizer import PAD, DataError


def parse_minllama(raw, name):
    """`<label> ||| <text>` lines -> (texts, labels). The text is kept as shipped (cased, tokenized
    with spaces around punctuation): the Llama tokenizer takes any text, and a pretrained model
    saw cased text."""
    texts, labels = [], []
    for n, line in enumerate(raw.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        label, sep, text = line.partition(" ||| ")
        if not sep or not label.strip().isdigit():
            raise DataError(f"{name} line {n}: expected `<label> ||| <text>`, got {line[:60]!r}")
        texts.append(text.strip())
        labels.append(int(label))
    return texts, labels


def build_minllama(dataset, tokenizer="llama2", max_len=256, mirror=None, out_dir=None, seed=1337,
                   verbose=True, **_ignored):
    """SST-5 or CFIMDB (dataset 'sst5' or 'cfimdb'), each text as [BOS] + Llama token ids, cut to
    max_len. SST-5: the course's train / dev / test as train / val / test (8,544 / 1,101 / 2,210).
    CFIMDB: the course's test file has no labels, so its dev set (245) is our test split, and a seeded
    245 of its train set (1,707) our validation split: model selection never sees the test."""
    files = {os.path.basename(k): v for k, v in fetch(dataset, mirror).items()}
    prefix = "sst" if dataset == "sst5" else "cfimdb"
    label_names = json.loads(files[f"{prefix}-label-mapping.json"])
    parts = {k: parse_minllama(files[f"{prefix}-{k}.txt"], f"{prefix}-{k}.txt")
             for k in ("train", "dev", "test") if f"{prefix}-{k}.txt" in files}
    if dataset == "sst5":
        parts = {"train": parts["train"], "val": parts["dev"], "test": parts["test"]}
    else:
        texts, labels = parts["train"]
        fit, val = holdout(len(texts), len(parts["dev"][0]), seed)
        pick = lambda idx: ([texts[i] for i in idx], [labels[i] for i in idx])  # noqa: E731
        parts = {"train": pick(fit), "val": pick(val), "test": parts["dev"]}
    tok = load_llama_tokenizer(tokenizer, mirror)
    splits, counts = {}, {}
    for k, (texts, labels) in parts.items():
        seqs = [tok.encode(t, bos=True) for t in texts]
        truncated = sum(len(q) > max_len for q in seqs)
        seqs = [np.asarray(q[:max_len]) for q in seqs]
        if min(labels) < 0 or max(labels) >= len(label_names):
            raise DataError(f"{dataset} {k}: labels must be 0..{len(label_names) - 1}")
        splits[k] = (seqs, labels)
        counts[k] = {"n": len(seqs), "labels": np.bincount(labels, minlength=len(label_names)).tolist(),
                     "tokens": int(sum(len(q) for q in seqs)), "max_len": int(max(len(q) for q in seqs)),
                     "truncated": int(truncated)}
    meta = {"dataset": dataset, "task": "classification", "tokenizer": f"llama2c:{tokenizer}",
            "vocab": tokenizer, "vocab_size": tok.vocab_size, "max_len": max_len, "seed": seed,
            "preprocessing": "none (text as shipped)", "specials": {"pad": PAD, "bos": tok.bos_id},
            "label_names": label_names, "counts": counts, "sources": SOURCES[dataset]}
    if verbose:
        print(f"{dataset} ({tokenizer} tokenizer, {tok.vocab_size:,} ids, max_len {max_len}) -> {out_dir}")
        for k, c in counts.items():
            print(f"  {k:5s} {c['n']:6,d} texts  labels {c['labels']}  {c['tokens']:,} tokens  "
                  f"max {c['max_len']}  truncated {c['truncated']:,}")
    return splits, meta
