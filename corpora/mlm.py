"""
The encoder's masked-language-model corpus (sst2_mlm): in-domain text to pretrain the encoder on
before it is fine-tuned on SST-2, SST-2's training sentences and the reviews of IMDB's train half,
in the GPT-2 BPE ids of the SST-2 folder the classifier reads. mlm_corpus returns ({split: (ids,
labels all 0)}, meta.json's dict); data.py gives it the SST-2 folder and writes what it returns.
MASK, the id a masked word becomes, is here too: data.py's mlm_mask and this corpus's meta.json name
it.
"""

import numpy as np

from corpora.classification import holdout
from corpora.imdb import read_imdb
from corpora.sources import SOURCES, archive_file
from corpora.sst2 import sst2_splits
from tokenizer import (
    CLS,
    PAD,
    PREPROCESSING,
    UNK,
    DataError,
    bpe,
    clean_text,
    cls_ids,
    get_tokenizer,
    id_map_from_vocab,
)

# The compact vocabulary is the set of ids in SST-2's training split, so [UNK] never occurs there, and
# it doubles as BERT's [MASK]: to the model both mean a word it cannot see and must infer from its
# context, which is what an unknown word at test time asks of it. No new row, so a pretrained
# checkpoint's embedding table is the classifier's, row for row.
MASK = UNK


def mlm_corpus(sst2_meta, sst2_dir, protocol="glue_heldout", vocab="compact", max_len=128, mirror=None,
               out_dir=None, seed=1337, n_val=1000, verbose=True, **_ignored):
    """Unlabelled text to pretrain the encoder on by masked-language modelling (data.py's MLMStream):
    the training sentences of SST-2's split of the same protocol and seed and the reviews of IMDB's
    train half (its test half is a classification test set elsewhere), a seeded n_val texts held out
    for val (labels all 0). A text whose cleaned form is an SST-2 val or test sentence is left out:
    GLUE's train file repeats some sentences, so 47 of the glue protocol's train sentences are also val
    or test sentences. The ids are those of the SST-2 folder sst2_dir (its meta.json: sst2_meta), which
    must hold the same split, so a pretrained checkpoint fine-tunes on SST-2 as it is (a word outside
    that vocabulary is [UNK])."""
    if sst2_meta.get("seed") != seed or sst2_meta.get("protocol") != protocol:
        raise DataError(f"{sst2_dir} was split with protocol {sst2_meta.get('protocol')!r}, seed "
                        f"{sst2_meta.get('seed')}; this corpus asks for {protocol!r}, {seed}, and needs "
                        f"the same split (its train sentences must be the classifier's)")
    sst2 = sst2_splits(protocol, seed, mirror)
    held_out = {clean_text(s) for k in ("val", "test") for s in sst2[k][0]}
    texts = [("sst2", s) for s in sst2["train"][0]]
    texts += [("imdb", text) for text, _, _ in read_imdb(archive_file("imdb", mirror), "train")]

    enc = get_tokenizer()
    kept = sst2_meta["vocab"]
    id_map = id_map_from_vocab(kept, enc.n_vocab)
    rows, left_out = [], {"sst2_val_or_test_sentence": 0, "empty": 0}  # rows: (source, BPE ids)
    for source, text in texts:
        if clean_text(text) in held_out:
            left_out["sst2_val_or_test_sentence"] += 1
        elif ids := bpe(enc, text):
            rows.append((source, ids))
        else:
            left_out["empty"] += 1
    if not 0 < n_val < len(rows):
        raise DataError(f"n_val={n_val}: the corpus holds {len(rows)} texts; keep some for training")
    parts = dict(zip(("train", "val"), holdout(len(rows), n_val, seed)))

    vocab_size = sst2_meta["vocab_size"]
    splits, counts = {}, {}
    for k, idx in parts.items():
        seqs = [cls_ids(id_map, rows[i][1], max_len) for i in idx]
        splits[k] = (seqs, np.zeros(len(seqs), np.int64))
        by_source = {src: {"texts": 0, "tokens": 0} for src in ("sst2", "imdb")}
        for i, s in zip(idx, seqs):
            by_source[rows[i][0]]["texts"] += 1
            by_source[rows[i][0]]["tokens"] += len(s)
        counts[k] = {"texts": len(seqs), "tokens": int(sum(len(s) for s in seqs)), "by_source": by_source,
                     "truncated": int(sum(len(rows[i][1]) > max_len - 1 for i in idx)),
                     "unk": int(sum(int((s == UNK).sum()) for s in seqs))}
    meta = {"dataset": "sst2_mlm", "task": "mlm", "protocol": protocol, "seed": seed,
            "tokenizer": "tiktoken:gpt2", "preprocessing": PREPROCESSING, "max_len": max_len,
            "specials": {"pad": PAD, "unk": UNK, "cls": CLS, "mask": MASK}, "vocab_mode": vocab,
            "vocab_size": vocab_size, "vocab": kept, "vocab_from": sst2_dir, "left_out": left_out,
            "counts": counts, "sources": {"sst2": SOURCES["sst2"], "imdb": SOURCES["imdb"]}}
    if verbose:
        print(f"sst2_mlm ({protocol} protocol, {vocab} vocab of {sst2_dir}: {vocab_size:,} ids, "
              f"max_len {max_len}) -> {out_dir}; left out: {left_out}")
        for k, c in counts.items():
            src = "  ".join(f"{s} {b['texts']:,} texts / {b['tokens']:,} tokens"
                            for s, b in c["by_source"].items())
            print(f"  {k:5s} {c['texts']:6,d} texts  {c['tokens']:,} tokens ({src})  "
                  f"truncated {c['truncated']:,}  [UNK] {c['unk']:,}")
    return splits, meta
