"""
What the GPT-2 BPE classification sets share (SST-2, IMDB, Yelp polarity, the two three-domain
sets): a seeded holdout, the subsets of the study's data-size and length sensitivity (SUBSETS), and
the step from labelled texts to a folder's contents (classification_set: [CLS] + BPE ids in our
vocabulary, the counts and meta.json's dict), which data.py writes. Each source's own module says
where its texts and labels come from.
"""

import re

import numpy as np

from tokenizer import CLS, N_SPECIAL, PAD, PREPROCESSING, UNK, DataError, bpe, cls_ids, get_tokenizer, id_map_from_vocab


def holdout(n, n_val, seed):
    """Indices 0..n-1 cut by one seeded permutation: (the rest, sorted; its first n_val, sorted)."""
    order = np.random.default_rng(seed).permutation(n)
    return sorted(order[n_val:]), sorted(order[:n_val])


SUBSETS = ("'' (all of it), frac<P> (P % of train, seeded and nested: frac10 is inside frac50), short<P> / "
           "long<P> (the P % shortest / longest of every split by word count), sample<N> (at most N examples "
           "of every split, seeded)")
_SUBSET = re.compile(r"(frac|short|long|sample)(\d+)")


def subset_splits(splits, subset, seed):
    """{split: (texts, labels)} cut to a subset (SUBSETS), keeping the order within each split.
    frac<P> draws train by one seeded permutation, so a smaller fraction is a prefix of a larger one
    (nested) and val/test stay whole. short<P>/long<P> rank each split by its own word counts, so
    train and test come from the same length regime (ties go to the earlier example)."""
    if not subset:
        return splits
    m = _SUBSET.fullmatch(subset)
    if not m or int(m[2]) < 1 or (m[1] != "sample" and int(m[2]) > 100):
        raise DataError(f"subset {subset!r}: expected {SUBSETS}")
    kind, n = m[1], int(m[2])
    out = {}
    for k, (texts, labels) in splits.items():
        if kind == "frac" and k != "train":
            keep = range(len(texts))
        elif kind == "frac":
            order = np.random.default_rng([seed, 1]).permutation(len(texts))
            keep = sorted(order[:round(n / 100 * len(texts))])
        elif kind == "sample":
            keep = sorted(np.random.default_rng([seed, 2]).permutation(len(texts))[:n])
        else:
            order = np.argsort([len(t.split()) for t in texts], kind="stable")
            count = round(n / 100 * len(texts))
            keep = sorted(order[:count] if kind == "short" else order[len(texts) - count:])
        out[k] = ([texts[i] for i in keep], [labels[i] for i in keep])
    return out


def classification_set(splits, label_names, vocab, max_len, out_dir, verbose=True, **record):
    """Tokenize {split: (texts, labels)} (tokenizer.cls_ids of the GPT-2 BPE ids) into
    ({split: (ids, labels)}, meta.json's dict with `record`: dataset, protocol, seed, sources ...),
    for data.py to write into out_dir (named in the report printed with verbose)."""
    enc = get_tokenizer()
    bpe_ids = {k: [bpe(enc, s) for s in texts] for k, (texts, _) in splits.items()}
    if vocab == "compact":
        kept = sorted({t for ids in bpe_ids["train"] for t in ids})
    elif vocab == "full":
        kept = list(range(enc.n_vocab))
    else:
        raise ValueError(f"unknown vocab {vocab!r}: expected 'compact' or 'full'")
    id_map = id_map_from_vocab(kept, enc.n_vocab)
    vocab_size = N_SPECIAL + len(kept)

    out, counts = {}, {}
    for k, (_, labels) in splits.items():
        seqs, keep_labels, truncated, dropped = [], [], 0, 0
        for ids, lab in zip(bpe_ids[k], labels):
            if not ids:  # nothing left after cleaning (does not happen in SST-2, but be safe)
                dropped += 1
                continue
            truncated += len(ids) > max_len - 1
            seqs.append(cls_ids(id_map, ids, max_len))
            keep_labels.append(lab)
        if not seqs:
            raise DataError(f"the {k} split is empty; choose a larger subset")
        out[k] = (seqs, keep_labels)
        lengths = [len(s) for s in seqs]
        counts[k] = {"n": len(seqs), "labels": np.bincount(keep_labels, minlength=len(label_names)).tolist(),
                     "tokens": int(sum(lengths)), "max_len": int(max(lengths)), "truncated": int(truncated),
                     "dropped_empty": dropped, "unk": int(sum(int((s == UNK).sum()) for s in seqs))}
    meta = {"task": "classification", **record, "tokenizer": "tiktoken:gpt2", "preprocessing": PREPROCESSING,
            "max_len": max_len, "specials": {"pad": PAD, "unk": UNK, "cls": CLS}, "vocab_mode": vocab,
            "vocab_size": vocab_size, "vocab": "full" if vocab == "full" else kept, "label_names": label_names,
            "counts": counts}
    if verbose:
        what = ", ".join(f"{k} {meta[k]}" for k in ("protocol", "subset") if meta.get(k))
        print(f"{meta.get('dataset')} ({what + ', ' if what else ''}{vocab} vocab: {vocab_size:,} ids, "
              f"max_len {max_len}) -> {out_dir}")
        for k, c in counts.items():
            print(f"  {k:5s} {c['n']:6,d} texts  labels {'/'.join(f'{x:,}' for x in c['labels'])}  "
                  f"{c['tokens']:,} tokens  max {c['max_len']}  truncated {c['truncated']:,}  [UNK] {c['unk']:,}")
    return out, meta
