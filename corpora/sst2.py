"""
SST-2 (GLUE's Stanford Sentiment Treebank, binary: 67,349 training rows, 872 dev), read from GLUE's
tsv files (parse_sst2_tsv) and split into train / val / test under one of three protocols
(split_sst2; glue_heldout holds validation out by whole sentence, sentence_holdout). sst2_splits
returns {split: (sentences, labels)}; data.py turns them into the study's SST-2 folder (build_sst2)
and the MLM corpus takes its training sentences.
"""

import numpy as np

from corpora.sources import fetch
from tokenizer import DataError


def parse_sst2_tsv(data):
    """GLUE SST-2 tsv bytes -> (sentences, labels). Header `sentence\\tlabel`."""
    lines = data.decode("utf-8").split("\n")
    if lines[0].strip() != "sentence\tlabel":
        raise DataError(f"unexpected SST-2 header {lines[0]!r}")
    sents, labels = [], []
    for n, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        s, _, lab = line.rpartition("\t")
        if lab not in ("0", "1"):
            raise DataError(f"SST-2 line {n}: label {lab!r} is not 0 or 1")
        sents.append(s)
        labels.append(int(lab))
    return sents, labels


def sentence_holdout(texts, n_val, seed):
    """GLUE train's rows cut into (train, val, dropped) index lists so that validation is held out by sentence,
    the way GLUE's own dev split was made. GLUE train holds every phrase of every training sentence (67,349 rows
    from 6,885 texts that no other row contains: the sentences, and the pieces of neutral sentences that kept a
    label). Validation draws n_val of those whole texts (seeded); training keeps every row that a remaining whole
    text holds as a run of its words, so "good" stays though validation sentences hold it too, and drops the
    rows only the validation sentences hold (and repeats of a validation sentence). No validation text then
    occurs inside a training text."""
    words = [" ".join(t.split()) for t in texts]  # containment is judged on whole words
    rows = set(words)
    contained, pieces = set(), {}  # pieces: each whole text -> the rows it holds, itself included
    for text in sorted(rows, key=lambda s: (-len(s.split()), s)):  # longest first: a contained text is skipped
        if text not in contained:
            pieces[text] = {piece for piece in word_spans(text) if piece in rows}
            contained |= pieces[text]
            pieces[text].add(text)
    whole = list(pieces)
    val_texts = {whole[i] for i in np.random.default_rng(seed).permutation(len(whole))[:n_val]}
    kept = set().union(*(held for text, held in pieces.items() if text not in val_texts))
    val, train, dropped, seen = [], [], [], set()
    for i, w in enumerate(words):
        if w in val_texts and w not in seen:
            seen.add(w)
            val.append(i)
        else:
            (train if w in kept else dropped).append(i)
    return train, val, dropped


def word_spans(text):
    """Every run of whole words of `text` shorter than all of it."""
    w = text.split()
    return (" ".join(w[i:j]) for i in range(len(w)) for j in range(i + 1, len(w) + 1) if j - i < len(w))


def split_sst2(train, dev, protocol, seed):
    """Index the pooled examples into train/val/test, exactly and reproducibly.
    glue_heldout: validation = 872 whole GLUE train sentences (as many as GLUE dev holds), training = the rest of
              GLUE train less the phrases only those sentences hold (sentence_holdout); test = GLUE dev (872).
    glue:     train = GLUE train minus a seeded 5 % validation split of its rows; test = GLUE dev (872). Those
              validation rows are mostly pieces of training sentences: it selects for memorised phrases.
    standard: GLUE train + dev pooled (68,221), shuffled, split 80/10/10 -> 54,576 / 6,822 / 6,823 (the seed
              paper's; validation and test both hold pieces of training sentences).
    `train` and `dev` are (sentences, labels); returns {split: (sentences, labels)}."""
    rng = np.random.default_rng(seed)
    if protocol == "glue_heldout":
        keep, val, _ = sentence_holdout(train[0], len(dev[0]), seed)
        parts = {"train": (train, keep), "val": (train, val), "test": (dev, np.arange(len(dev[0])))}
    elif protocol == "glue":
        perm = rng.permutation(len(train[0]))
        n_val = round(0.05 * len(perm))
        parts = {"train": (train, perm[n_val:]), "val": (train, perm[:n_val]), "test": (dev, np.arange(len(dev[0])))}
    elif protocol == "standard":
        pooled = (train[0] + dev[0], train[1] + dev[1])
        perm = rng.permutation(len(pooled[0]))
        n_train, n_val = int(0.8 * len(perm)), int(0.1 * len(perm))
        parts = {"train": (pooled, perm[:n_train]), "val": (pooled, perm[n_train:n_train + n_val]),
                 "test": (pooled, perm[n_train + n_val:])}
    else:
        raise ValueError(f"unknown protocol {protocol!r}: expected {' / '.join(PROTOCOLS)}")
    return {k: ([src[0][i] for i in idx], [src[1][i] for i in idx]) for k, (src, idx) in parts.items()}


PROTOCOLS = ("glue_heldout", "glue", "standard")


def sst2_splits(protocol, seed, mirror=None):
    """SST-2's {split: (sentences, labels)} under a protocol: the verified source files, parsed and split."""
    files = fetch("sst2", mirror)
    train, dev = parse_sst2_tsv(files["SST-2/train.tsv"]), parse_sst2_tsv(files["SST-2/dev.tsv"])
    return split_sst2(train, dev, protocol, seed)
