"""
The UCI sentiment sentences (Kotzias et al. 2015) as multidomain_uci: the three-domain task
(zhang_csv.DOMAINS) from a download of 3,000 sentences, where multidomain needs 850 MB of archives.
build_multidomain_uci returns ({split: (ids, labels)}, meta.json's dict); data.py writes them.
"""

import numpy as np

from corpora.classification import classification_set, subset_splits
from corpora.sources import SOURCES, fetch
from corpora.zhang_csv import DOMAINS

_UCI_DOMAINS = {"uci_sentiment_sentences/imdb_labelled.txt": 0, "uci_sentiment_sentences/yelp_labelled.txt": 1,
                "uci_sentiment_sentences/amazon_cells_labelled.txt": 2}  # file -> its index in DOMAINS


def build_multidomain_uci(vocab="compact", max_len=256, subset="", mirror=None, out_dir=None,
                          seed=1337, verbose=True, **_ignored):
    """The three-domain task from the UCI sentiment sentences (Kotzias et al. 2015): 1,000 review
    sentences each from IMDB (movie), Yelp (local business) and Amazon (online shopping), split 80/10/10
    within each domain (stratified, seeded): 2,400 / 300 / 300. Each line is `sentence<TAB>0|1`; the
    sentiment is dropped, the domain is the label. Lines are split on '\\n' alone (the IMDB file holds
    U+0085, which str.splitlines also breaks at) and on their last tab (it has unbalanced quotes)."""
    files = fetch("uci_sentences", mirror)
    splits = {"train": ([], []), "val": ([], []), "test": ([], [])}
    for rel, domain in _UCI_DOMAINS.items():
        texts = [line.rpartition("\t")[0] for line in files[rel].decode("utf-8").split("\n") if line.strip()]
        order = np.random.default_rng([seed, domain]).permutation(len(texts))
        n_val = n_test = len(texts) // 10
        parts = {"train": order[n_val + n_test:], "val": order[:n_val], "test": order[n_val:n_val + n_test]}
        for k, idx in parts.items():
            splits[k][0].extend(texts[i] for i in sorted(idx))
            splits[k][1].extend([domain] * len(idx))
    return classification_set(subset_splits(splits, subset, seed), DOMAINS, vocab, max_len, out_dir,
                              verbose, dataset="multidomain_uci", seed=seed, subset=subset,
                              sources=SOURCES["uci_sentences"])
