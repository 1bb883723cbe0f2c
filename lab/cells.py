"""
A cell of a study, as the report and the plots see it: its rows (each config's test figures over its finished
seeds, with size, FLOPs and speed) and its data record (data.json beside its runs' records: the test labels
for McNemar's test and the per-example figures, the training lengths for the histograms, and which test
sentences hold the words of the plan's subsets), kept so that a clone without the data writes the same report.
"""

import json
import math
import os
import re

import numpy as np

import data
from corpora.classification import subset_splits
from corpora.sst2 import sst2_splits
from lab.plan import TEST_METRICS, StudyError
from lab.stats import mean_ci


def prepared_folder(cfg):
    """The folder of a run's prepared dataset if it is there (never prepared here), else None."""
    folder = cfg.get("data_dir") or data.dataset_dir(cfg["dataset"], cfg.get("protocol"), cfg.get("vocab"),
                                                     data.resolve_tokenizer(cfg["dataset"], cfg.get("tokenizer", "")),
                                                     cfg.get("subset", ""), cfg.get("max_len"))
    return folder if os.path.isfile(os.path.join(folder, "meta.json")) else None


def cell_data(folder, runs, summaries, plan=None):
    """What the report needs of a cell's prepared dataset, kept in folder/data.json (beside its run records)
    so that a clone without the data writes the same report: the training split's texts and tokens (the
    tokens a run saw), and for a labelled set the test labels (McNemar's test) and the count of training
    examples of each length (the length histograms). Written the first time the cell has a finished run and
    its data is prepared here; {} until then. For SST-2, also which test examples hold each of the plan's
    `subsets` words (test_subsets), added once the sentences can be read (data.py's mirror or download)."""
    path = os.path.join(folder, "data.json")
    cfg = next((cfg for key, (_, cfg, _) in runs.items() if summaries[key] is not None), None)
    written = os.path.isfile(path)
    if written:
        with open(path) as f:
            out = json.load(f)
    else:
        out = new_cell_data(cfg)
    subsets = (plan or {}).get("subsets")
    if out and subsets and out.get("test_labels") and cfg["dataset"] == "sst2" and \
            {k: v["words"] for k, v in out.get("test_subsets", {}).items()} != subsets:
        texts = sst2_test_texts(cfg)
        if texts is not None:
            if len(texts) != len(out["test_labels"]):
                raise StudyError(f"{path}: {len(out['test_labels'])} test labels, but SST-2 ({cfg['protocol']}, "
                                 f"subset {cfg['subset'] or 'none'}) has {len(texts)} test sentences")
            out["test_subsets"] = {name: {"words": words, "index": index} for (name, words), index in
                                   zip(subsets.items(), test_subsets(texts, subsets).values())}
            written = False
    if out and not written:
        os.makedirs(folder, exist_ok=True)
        data.write_json(path, out)
    return out


def sst2_test_texts(cfg, seed=1337):
    """A run's SST-2 test sentences in the order of its prepared split (data.py sst2, at its default seed),
    or None (with a line saying why) if the source files cannot be had here."""
    try:
        splits = sst2_splits(cfg["protocol"], seed, os.environ.get("DATA_MIRROR"))
        return subset_splits(splits, cfg.get("subset", ""), seed)["test"][0]
    except (data.DataError, OSError) as e:
        print(f"  the test subsets need SST-2's sentences: {e}")
        return None


def new_cell_data(cfg):
    """cell_data's figures of a prepared dataset; {} if cfg is None or its data is not prepared here."""
    prepared = cfg and cfg["dataset"] in data.DATASETS and prepared_folder(cfg)
    if not prepared:
        return {}
    dataset = data.Dataset(prepared)
    counts = dataset.meta.get("counts", {}).get("train", {})
    out = {"dataset": os.path.basename(prepared), "train_texts": counts.get("n", counts.get("texts")),
           "train_tokens": counts.get("tokens")}
    if dataset.task == "classification" and "test" in dataset.splits:
        lengths = np.bincount(dataset.splits["train"].lengths)
        out.update(test_labels=[int(y) for y in dataset.splits["test"].labels],
                   train_lengths={str(n): int(c) for n, c in enumerate(lengths) if c})
    return out


def finished_seeds(summaries, name):
    return [seed for (n, seed), s in summaries.items() if n == name and s is not None]


def subset_words(text, words):
    """Whether a text holds one of `words` (lower case): as a word of its own, and "n't" also as the end of a
    word ("doesn't" as well as SST-2's "does n't")."""
    tokens = re.findall(r"[a-z]+(?:'[a-z]+)?", text.lower())
    return any(t in words or ("n't" in words and t.endswith("n't")) for t in tokens)


def test_subsets(texts, subsets):
    """{subset name: the indices of the test texts that hold one of its words (subset_words)}."""
    return {name: [i for i, text in enumerate(texts) if subset_words(text, set(words))]
            for name, words in subsets.items()}


def cell_rows(name, results, timing):
    """Per config of a cell: the mean +- 95 % CI of the test metrics over its finished seeds, with its
    parameters, training time and steps, and the cell's measured size, FLOPs and speed."""
    cell, runs, summaries = results[name]
    rows = []
    for config in dict.fromkeys(n for n, _ in runs):
        seeds = finished_seeds(summaries, config)
        done = [summaries[(config, s)] for s in seeds]
        row = {"config": config, "seeds": seeds, "planned": sum(1 for n, _ in runs if n == config)}
        if done:
            row.update(params=done[0]["params"], params_non_embedding=done[0]["params_non_embedding"],
                       train_minutes=float(np.mean([s["train_minutes"] for s in done])),
                       train_flops=float(np.mean([s.get("train_flops", math.nan) for s in done])),
                       iters=sorted({s["iters"] for s in done}))
        if done and all(m in done[0] for m in TEST_METRICS):
            for m in TEST_METRICS:
                values = [s[m] for s in done]
                row[m] = mean_ci(values) if len(values) > 1 else (values[0], math.nan)
        elif done:  # a run without a test split (a pretraining run)
            row["best_val_loss"] = done[0]["best_val_loss"]
        row.update({k: timing.get(name, {}).get(config, {}).get(k) for k in
                    ("size_mb", "flops_per_sample", "latency_ms", "throughput")})
        rows.append(row)
    return rows
