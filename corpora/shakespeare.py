"""
Tiny Shakespeare (karpathy/char-rnn's input.txt, about 1.1M characters) with characters as tokens,
the char-level GPT study's corpus: build_shakespeare_char returns ({split: its ids}, meta.json's
dict); data.py writes them.
"""

from corpora.sources import SOURCES, fetch
from tokenizer import CharCodec


def build_shakespeare_char(mirror=None, out_dir=None, verbose=True, **_ignored):
    """The sorted set of characters is the vocabulary (65 of them), the first 90 % of the text is the
    train split and the rest val."""
    (raw,) = fetch("shakespeare_char", mirror).values()
    text = raw.decode("utf-8")
    chars = sorted(set(text))
    codec = CharCodec(chars)
    n_train = int(0.9 * len(text))
    parts = {"train": text[:n_train], "val": text[n_train:]}
    meta = {"dataset": "shakespeare_char", "task": "lm", "tokenizer": "char", "vocab": chars,
            "vocab_size": len(chars), "counts": {k: len(v) for k, v in parts.items()},
            "sources": SOURCES["shakespeare_char"]}
    if verbose:
        print(f"Tiny Shakespeare: {len(text):,} characters, vocabulary {len(chars)} -> {out_dir}")
        print(f"  train {len(parts['train']):,} tokens, val {len(parts['val']):,} tokens")
    return {k: codec.encode(part) for k, part in parts.items()}, meta
