"""
IMDB's movie reviews (Maas et al. 2011: aclImdb, 25,000 labelled reviews in each of its train and
test halves), read out of the archive (read_imdb), and the two datasets made of them alone: imdb, a
sentiment task of long texts in GPT-2 BPE ids (build_imdb), and imdb_lm, a corpus of reviews in a
Llama tokenizer's ids to pretrain a Llama on (build_imdb_lm). Each build_ returns ({split: its ids},
meta.json's dict); data.py writes them. The three-domain task, Pig Latin's unseen words and the
encoder's MLM corpus read reviews here too.
"""

import re
import tarfile

import numpy as np

from corpora.classification import classification_set, holdout, subset_splits
from corpora.llama2c import load_llama_tokenizer
from corpora.sources import SOURCES, archive_file
from tokenizer import DataError


def read_imdb(path, half):
    """The labelled reviews of one half ('train' or 'test') of an IMDB archive: [(text, label, rating)],
    label 1 = pos (rating >= 7), 0 = neg (rating <= 4), sorted by (label, review id) so the order does
    not depend on the archive's. '<br />' line breaks become newlines."""
    found = re.compile(rf"aclImdb/{half}/(pos|neg)/(\d+)_(\d+)\.txt")
    rows = []
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in tar:
                if member.isfile() and (m := found.fullmatch(member.name)):
                    text = tar.extractfile(member).read().decode("utf-8").replace("<br />", "\n")
                    rows.append((m[1] == "pos", int(m[2]), text, int(m[3])))
    except (tarfile.TarError, EOFError, OSError) as e:
        raise DataError(f"{path} is not a readable IMDB archive ({e}); delete it and run again") from None
    if not rows:
        raise DataError(f"{path} holds no aclImdb/{half}/{{pos,neg}}/<id>_<rating>.txt reviews")
    return [(text, int(pos), rating) for pos, _, text, rating in sorted(rows)]


def build_imdb(vocab="compact", max_len=256, subset="", mirror=None, out_dir=None, seed=1337,
               n_val=2500, verbose=True, **_ignored):
    """IMDB movie reviews as a sentiment task of long texts: train = the archive's train half less a
    seeded n_val for val, test = its test half (25,000 each half)."""
    path = archive_file("imdb", mirror)
    train, test = (read_imdb(path, half) for half in ("train", "test"))
    fit, val = holdout(len(train), n_val, seed)
    splits = {"train": [train[i] for i in fit], "val": [train[i] for i in val], "test": test}
    splits = {k: ([text for text, _, _ in rows], [label for _, label, _ in rows]) for k, rows in splits.items()}
    return classification_set(subset_splits(splits, subset, seed), ["negative", "positive"], vocab,
                              max_len, out_dir, verbose, dataset="imdb", seed=seed, subset=subset,
                              sources=SOURCES["imdb"])


def build_imdb_lm(tokenizer="tok512", mirror=None, out_dir=None, seed=1337, n_val=500, verbose=True,
                  **_ignored):
    """A language-modelling corpus of movie reviews for pretraining a Llama: each review as [BOS] +
    its Llama token ids, one after another (as llama2.c pretokenizes), a seeded n_val reviews for val
    and the rest for train. The reviews are IMDB's test half (25,000), not its train half: CFIMDB's
    reviews come from the train half (286 of its train and dev texts appear there verbatim, one of its
    unscored test texts in the test half), so a model pretrained here has not read the texts it is
    later fine-tuned and scored on."""
    reviews = [text for text, _, _ in read_imdb(archive_file("imdb", mirror), "test")]
    if not 0 < n_val < len(reviews):
        raise DataError(f"n_val={n_val}: the archive holds {len(reviews)} test-half reviews; keep some "
                        f"for training")
    parts = dict(zip(("train", "val"), holdout(len(reviews), n_val, seed)))
    tok = load_llama_tokenizer(tokenizer, mirror)
    splits, counts = {}, {}
    for k, idx in parts.items():
        ids = (t for i in idx for t in tok.encode(reviews[i], bos=True))
        splits[k] = np.fromiter(ids, dtype=np.uint16)
        counts[k] = {"reviews": len(idx), "tokens": len(splits[k])}
    meta = {"dataset": "imdb_lm", "task": "lm", "tokenizer": f"llama2c:{tokenizer}", "vocab": tokenizer,
            "vocab_size": tok.vocab_size, "seed": seed, "preprocessing": "'<br />' -> newline",
            "specials": {"bos": tok.bos_id}, "counts": counts, "sources": SOURCES["imdb"]}
    if verbose:
        print(f"imdb_lm ({tokenizer} tokenizer, {tok.vocab_size:,} ids) -> {out_dir}")
        for k, c in counts.items():
            print(f"  {k:5s} {c['reviews']:6,d} reviews  {c['tokens']:,} tokens")
    return splits, meta
