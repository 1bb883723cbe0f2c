"""
Zhang et al.'s (2015) review-polarity archives, Yelp's and Amazon's, read out of their CSV files
(read_zhang_csv), drawn to the source paper's standardized sizes (standard_draw), and the datasets
made of them: yelp_polarity (build_yelp_polarity) and the three-domain task of movie, local-business
and online-shopping reviews with IMDB's (build_multidomain; DOMAINS, its labels). Each build_
returns ({split: (ids, labels)}, meta.json's dict); data.py writes them.
"""

import csv
import io
import tarfile

import numpy as np

from corpora.classification import classification_set, subset_splits
from corpora.imdb import read_imdb
from corpora.sources import SOURCES, archive_file
from tokenizer import DataError

STANDARD_SIZES = {"train": 54_576, "val": 6_822, "test": 6_823}  # the source paper's (SST-2 standard)
DOMAINS = ["movie", "local business", "online shopping"]  # the three-domain task's labels, in this order


def read_zhang_csv(path, member, fields):
    """The rows of one CSV file (member) of Zhang et al.'s text-classification archives (Yelp and Amazon
    polarity): `"label","text"` or `"label","title","text"`, labels 1 (negative) and 2 (positive), quotes
    doubled, line breaks written as the two characters \\n. Returns [(text, label 0/1)]; a title is
    joined to its text with a line break."""
    rows = []
    try:
        with tarfile.open(path, "r:gz") as tar:
            f = tar.extractfile(member)
            if f is None:
                raise KeyError(member)
            for n, row in enumerate(csv.reader(io.TextIOWrapper(f, encoding="utf-8", newline="")), start=1):
                if len(row) != fields or row[0] not in ("1", "2"):
                    raise DataError(f"{path}:{member} line {n}: expected {fields} quoted fields, label 1 or 2")
                text = "\n".join(row[1:]).replace("\\n", "\n")
                rows.append((text, int(row[0]) - 1))
    except (tarfile.TarError, EOFError, OSError, KeyError) as e:
        raise DataError(f"{path} is not the expected archive (no readable {member}: {e}); delete it and "
                        f"run again") from None
    return rows


def draw(rows, n, rng):
    """n rows drawn at random without replacement (all of them if there are fewer), in their order."""
    return [rows[i] for i in sorted(rng.permutation(len(rows))[:n])]


def standard_draw(train_rows, test_rows, seed, sizes=None):
    """The source paper's standardized sizes (STANDARD_SIZES, or `sizes`) from a source's own train and test
    files: train and val drawn from its train file (disjoint), test from its test file, all seeded."""
    sizes = sizes or STANDARD_SIZES
    rng = np.random.default_rng(seed)
    pool = draw(train_rows, sizes["train"] + sizes["val"], rng)
    cut = np.random.default_rng([seed, 3]).permutation(len(pool))
    n_val = round(len(pool) * sizes["val"] / (sizes["train"] + sizes["val"]))
    return {"train": [pool[i] for i in sorted(cut[n_val:])], "val": [pool[i] for i in sorted(cut[:n_val])],
            "test": draw(test_rows, sizes["test"], rng)}


def build_yelp_polarity(vocab="compact", max_len=256, subset="", mirror=None, out_dir=None,
                        seed=1337, verbose=True, **_ignored):
    """Yelp review polarity (Zhang et al. 2015: 560,000 train / 38,000 test reviews, 1-2 stars negative,
    4-5 positive), standardized to the source paper's 54,576 / 6,822 / 6,823 by a seeded draw."""
    path = archive_file("yelp_polarity", mirror)
    rows = {half: read_zhang_csv(path, f"yelp_review_polarity_csv/{half}.csv", 2) for half in ("train", "test")}
    splits = {k: ([t for t, _ in r], [lab for _, lab in r])
              for k, r in standard_draw(rows["train"], rows["test"], seed).items()}
    return classification_set(subset_splits(splits, subset, seed), ["negative", "positive"], vocab,
                              max_len, out_dir, verbose, dataset="yelp_polarity", seed=seed,
                              subset=subset, sources=SOURCES["yelp_polarity"])


def build_multidomain(vocab="compact", max_len=256, subset="", mirror=None, out_dir=None, seed=1337,
                      verbose=True, **_ignored):
    """The source paper's three-domain task: which kind of review is it, a movie's (IMDB), a local
    business's (Yelp polarity) or an online purchase's (Amazon polarity)? Each split draws a third of
    the source paper's standardized size from each source (its train file for train and val, its test
    file for test). The Yelp and Amazon archives (166 MB and 688 MB) are downloaded; offline,
    multidomain_uci (corpora/uci.py) is the same task."""
    imdb = archive_file("imdb", mirror)
    yelp, amazon = archive_file("yelp_polarity", mirror), archive_file("amazon_polarity", mirror)
    sources = [([r[:2] for r in read_imdb(imdb, "train")], [r[:2] for r in read_imdb(imdb, "test")]),
               tuple(read_zhang_csv(yelp, f"yelp_review_polarity_csv/{h}.csv", 2) for h in ("train", "test")),
               tuple(read_zhang_csv(amazon, f"amazon_review_polarity_csv/{h}.csv", 3) for h in ("train", "test"))]
    splits = {"train": ([], []), "val": ([], []), "test": ([], [])}
    for domain, (train_rows, test_rows) in enumerate(sources):
        sizes = {k: n // 3 + (domain < n % 3) for k, n in STANDARD_SIZES.items()}
        for k, rows in standard_draw(train_rows, test_rows, seed + domain, sizes).items():
            splits[k][0].extend(text for text, _ in rows)
            splits[k][1].extend([domain] * len(rows))
    cited = {k: SOURCES[k] for k in ("imdb", "yelp_polarity", "amazon_polarity")}
    return classification_set(subset_splits(splits, subset, seed), DOMAINS, vocab, max_len, out_dir,
                              verbose, dataset="multidomain", seed=seed, subset=subset, sources=cited)
