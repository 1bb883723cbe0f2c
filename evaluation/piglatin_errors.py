"""
Where a Pig Latin model goes wrong, read from its greedy translations: a command that reads a study's committed run
records and compares one model's failures with other models', word by word, on the same words; and accuracy_by,
the grouping of words by a key that evaluate.py scores a checkpoint's words with too.

    python -m evaluation.piglatin_errors --records results/piglatin/runs --data data/piglatin
    python -m evaluation.piglatin_errors --records results/piglatin/runs --data data/piglatin --out errors.md
    python -m evaluation.piglatin_errors --records results/piglatin/tuned results/piglatin/runs \
        --model piglatin_mamba_tuned --against piglatin_transformer_tuned piglatin_mamba_large

The command reads each run's summary.json (`test_predictions`, `unseen_predictions`: the translations as token
ids, in split order) and the prepared words (`python data.py piglatin`). First it checks that every accuracy the
record holds (overall, by rule, compounds by known and new parts) comes back from the predictions and the words:
if one does not, the words are not the ones the run was scored on, and the command stops. Then it counts, over
words x seeds:
  - word accuracy by group (vowel words; consonant words by how many letters move; no vowel; compounds of known
    and of new parts) and, for words without a hyphen, by length;
  - where a wrong translation first goes wrong: in the letters copied from the first vowel on (the rest), in the
    moved consonants, in the ending ("ay", "way"), or past the truth's end (the model did not stop);
  - a wrong compound's type: the hyphens dropped or added, which parts are right, stopped early or too long,
    translated as one word; and how often its first part is right, by the length of what follows it;
  - each word and seed of two models side by side (both right, one, neither), and examples drawn at random.
Nothing is trained and no model is loaded: it reads JSON and the prepared .bin files, in seconds.

Read top to bottom: the grouping (accuracy_by) -> the groups and the pieces of a translation -> reading the
records, and the check -> what goes wrong in one translation -> the counts over a study -> the report -> the
command line.
"""

import argparse
import glob
import json
import os
import re
import sys
from collections import Counter

import numpy as np

import configurator
import data
from cli.help import HelpFormatter
from corpora import piglatin
from evaluation.ranges import AT_LEAST_0, check_new_file, check_ranges
from tokenizer import CharCodec

# -----------------------------------------------------------------------------
# the grouping evaluate.py scores a checkpoint's words with (evaluate_seq2seq, error_analysis), and this command too


def accuracy_by(keys, right):
    """{key: {'n': words, 'accuracy': share right}} for the words grouped by their key, in key order."""
    groups = {}
    for k, ok in zip(keys, right):
        groups.setdefault(k, []).append(ok)
    return {k: {"n": len(v), "accuracy": sum(v) / len(v)} for k, v in sorted(groups.items())}


# -----------------------------------------------------------------------------
# the report's groups, and the pieces of a translation

# A consonant word's cluster is the letters that move: brown moves 'br', strengthening 'str', quite 'qu'
GROUPS = ["vowel", "consonant, 1 moved", "consonant, 2 moved", "consonant, 3+ moved", "no vowel",
          "hyphenated, known parts", "hyphenated, new parts"]
LENGTHS = [(1, 3), (4, 5), (6, 7), (8, 9), (10, 11), (12, 13), (14, 99)]  # letters of a word without a hyphen
FIRST_LENGTHS = [(1, 3), (4, 5), (6, 99)]  # letters of a compound's first part
AFTER_LENGTHS = [(1, 4), (5, 7), (8, 99)]  # characters after a compound's first hyphen
SPLITS = ("test", "unseen")  # the held-out splits a run record keeps predictions of


def word_group(word, parts=None):
    """A word's group in GROUPS: its rule (piglatin.pig_latin_rule), a consonant word by how many letters move
    (pig_latin_pieces), a compound by whether its parts were taught (`parts`: piglatin.hyphen_parts)."""
    rule = piglatin.pig_latin_rule(word)
    if rule == "consonant":
        moved = len(piglatin.pig_latin_pieces(word)[1])
        return f"consonant, {moved if moved < 3 else '3+'} moved"
    return f"hyphenated, {parts}" if rule == "hyphenated" else rule


def bin_of(n, bins):
    """The label of the bin (lo, hi) that holds n: '4-5', or '14+' for the last, open one."""
    for lo, hi in bins:
        if lo <= n <= hi:
            return f"{lo}+" if hi == 99 else f"{lo}-{hi}"
    raise ValueError(f"{n} is in no bin of {bins}")


def bin_labels(bins):
    return [bin_of(lo, bins) for lo, _ in bins]


# -----------------------------------------------------------------------------
# the records and the words, read, and each recorded accuracy checked against them


class Words:
    """A prepared split's words: `words` (sources), `truths` (their Pig Latin, as the folder holds it), `groups`
    (word_group) and `split` itself."""

    def __init__(self, split):
        codec = CharCodec(piglatin.PIG_LATIN_VOCAB)
        self.split = split
        self.words = piglatin.source_words(split)
        self.truths = [codec.decode(split[j][1]) for j in range(len(split))]
        parts = piglatin.hyphen_part_groups(split) or [None] * len(split)
        self.groups = [word_group(w, p) for w, p in zip(self.words, parts)]


def read_words(folder):
    """{split: Words} of a prepared Pig Latin folder's test and unseen splits, or a DataError that says what to
    run."""
    dataset = data.Dataset(folder)
    if dataset.meta.get("vocab") != piglatin.PIG_LATIN_VOCAB:
        raise data.DataError(f"{folder} is not a Pig Latin folder (its vocabulary is not Pig Latin's characters)")
    missing = [s for s in SPLITS if s not in dataset.splits]
    if missing:
        raise data.DataError(f"{folder} has no {' or '.join(missing)} split: `python data.py piglatin --out_dir "
                             f"{folder}` adds it")
    return {s: Words(dataset.splits[s]) for s in SPLITS}


def read_runs(records, config):
    """{seed: summary} of one config's run records (<folder>/config/seed<N>/summary.json, in the one folder of
    `records` that holds them), or a DataError: none holds them, or two do (which would be read is not clear)."""
    found = {r: paths for r in records if (paths := glob.glob(os.path.join(r, config, "seed*", "summary.json")))}
    if len(found) > 1:
        raise data.DataError(f"{config}: run records in {' and '.join(found)}: name one of these folders in "
                             f"--records")
    paths = next(iter(found.values()), [])
    runs = {int(m.group(1)): p for p in paths if (m := re.search(r"seed(\d+)$", os.path.dirname(p)))}
    if not runs:
        raise data.DataError(f"{config}: no run records (seed<N>/summary.json) in {' or '.join(records)}")
    out = {}
    for seed in sorted(runs):
        with open(runs[seed]) as f:
            out[seed] = json.load(f)
        if any(f"{s}_predictions" not in out[seed] for s in SPLITS):
            raise data.DataError(f"{runs[seed]} holds no {' and '.join(f'{s}_predictions' for s in SPLITS)}: the "
                                 f"record was written before the predictions were kept")
    return out


def recorded_mismatches(summary, name, words, predicted):
    """How many of a record's figures for one split were checked, and those that the predictions and the words do
    not give back: ['test_word_accuracy: recorded 0.977, recomputed 0.975', ...]. The figures are recomputed as
    evaluate_seq2seq computes them (accuracy_by over pig_latin_rules and hyphen_part_groups), so they must be
    equal to the last bit."""
    right = [p == t for p, t in zip(predicted, words.truths)]
    figures = {"word_accuracy": sum(right) / len(right)}
    figures |= {f"word_accuracy_{rule.replace(' ', '_')}": v["accuracy"]
                for rule, v in accuracy_by(piglatin.pig_latin_rules(words.split) or [], right).items()}
    parts = piglatin.hyphen_part_groups(words.split) or []
    figures |= {f"word_accuracy_hyphenated_{g.replace(' ', '_')}": v["accuracy"]
                for g, v in accuracy_by([g for g in parts if g], [ok for g, ok in zip(parts, right) if g]).items()}
    checked = {k: v for k, v in figures.items() if f"{name}_{k}" in summary}  # an older record may lack some
    wrong = [f"{name}_{k}: recorded {summary[f'{name}_{k}']!r}, recomputed {v!r}" for k, v in checked.items()
             if summary[f"{name}_{k}"] != v]
    return len(checked), wrong


def read_study(records, configs, words):
    """{config: {seed: {split: [translations as text]}}} for the configs' run records, each recorded figure checked
    (recorded_mismatches); a DataError names the first that does not come back, or seeds that differ between
    configs (every count pairs the same seeds). Returns (the translations, the number of figures checked)."""
    codec = CharCodec(piglatin.PIG_LATIN_VOCAB)
    out, checked, seeds = {}, 0, None
    for config in configs:
        runs = read_runs(records, config)
        if seeds is not None and sorted(runs) != seeds:
            raise data.DataError(f"{config} has seeds {sorted(runs)}, {configs[0]} {seeds}: every count pairs the "
                                 f"same seeds")
        seeds = sorted(runs)
        out[config] = {}
        for seed, summary in runs.items():
            out[config][seed] = {}
            for name in SPLITS:
                ids = summary[f"{name}_predictions"]
                if len(ids) != len(words[name].words):
                    raise data.DataError(f"{config} seed {seed}: {len(ids):,} {name} predictions for "
                                         f"{len(words[name].words):,} words: the records and --data disagree")
                predicted = [codec.decode(p) for p in ids]
                n, wrong = recorded_mismatches(summary, name, words[name], predicted)
                if wrong:
                    raise data.DataError(f"{config} seed {seed}: {wrong[0]} (and {len(wrong) - 1} more): the words "
                                         f"in --data are not those the run was scored on")
                checked += n
                out[config][seed][name] = predicted
    return out, checked


# -----------------------------------------------------------------------------
# what goes wrong in one translation


def first_error(truth, predicted):
    """The index of the first character where a translation leaves the truth (len(truth) when the truth is a
    prefix of it: it did not stop), or None when it is right."""
    if predicted == truth:
        return None
    n = min(len(truth), len(predicted))
    return next((i for i in range(n) if truth[i] != predicted[i]), n)


def where_in_word(word, i):
    """Where character i of a word's translation lies (a word without a hyphen): 'rest: first letter', 'rest:
    first half', 'rest: second half' (the letters from the first vowel on, copied; the first letter apart, where
    the copy must start), 'moved' (the consonants before it), 'ending' ('ay' or 'way'), or 'past the end'."""
    rest, moved, ending = piglatin.pig_latin_pieces(word)
    if i >= len(rest) + len(moved) + len(ending):
        return "past the end"
    if i >= len(rest):
        return "moved" if i < len(rest) + len(moved) else "ending"
    return "rest: first letter" if i == 0 else "rest: first half" if 2 * i < len(rest) else "rest: second half"


def where_in_compound(word, i):
    """Where character i of a compound's translation lies: in its first part ('first part: rest', ': moved' or
    ': ending', as where_in_word), 'the first hyphen', 'after the first hyphen', or 'past the end'."""
    first = piglatin.pig_latin_part(word.split("-")[0])
    if i < len(first):
        return "first part: " + where_in_word(word.split("-")[0], i).split(":")[0]
    if i >= len(piglatin.pig_latin(word)):
        return "past the end"
    return "the first hyphen" if i == len(first) else "after the first hyphen"


WORD_PLACES = ["rest: first letter", "rest: first half", "rest: second half", "moved", "ending", "past the end"]
COMPOUND_PLACES = ["first part: rest", "first part: moved", "first part: ending", "the first hyphen",
                   "after the first hyphen", "past the end"]

COMPOUND_TYPES = ["first part right, a later part wrong", "first part wrong, later parts right",
                  "first part and a later part wrong", "a hyphen dropped", "a hyphen added"]


def compound_type(truth, predicted):
    """A wrong compound's type (COMPOUND_TYPES, one each): a hyphen dropped or added, else which of its parts,
    taken between the hyphens, are wrong."""
    if predicted.count("-") != truth.count("-"):
        return "a hyphen dropped" if predicted.count("-") < truth.count("-") else "a hyphen added"
    t, p = truth.split("-"), predicted.split("-")
    if t[0] == p[0]:
        return "first part right, a later part wrong"
    return "first part wrong, later parts right" if t[1:] == p[1:] else "first part and a later part wrong"


def cluster_crossed(word, truth, predicted):
    """Whether a compound's translation ends in its first part's moved consonants + "ay" where the truth does not,
    and its first part (before the first hyphen) does not end in them."""
    moved = piglatin.pig_latin_pieces(word.split("-")[0])[1]
    end = moved + "ay"
    return bool(moved) and predicted.endswith(end) and not truth.endswith(end) \
        and not predicted.split("-")[0].endswith(end)


def one_word(word):
    """A compound translated as if it were one word: the rule for one word applied to it whole, its hyphen read as
    a consonant (blue-tinted -> ue-tintedblay) or dropped (uetintedblay)."""
    return {"".join(piglatin.pig_latin_pieces(word)), piglatin.pig_latin_part(word.replace("-", ""))}


COMPOUND_TRAITS = {  # (word, truth, predicted) -> bool: what a wrong compound's translation shows, any number each
    "first part right": lambda w, t, p: p.split("-")[0] == t.split("-")[0],
    "no hyphen at all": lambda w, t, p: "-" not in p,
    "letters right, a hyphen wrong": lambda w, t, p: p.replace("-", "") == t.replace("-", ""),
    "stopped early (a prefix of the truth)": lambda w, t, p: t.startswith(p),
    "stopped after the first part": lambda w, t, p: p == t.split("-")[0],
    "shorter than the truth": lambda w, t, p: len(p) < len(t),
    "longer than the truth": lambda w, t, p: len(p) > len(t),
    "translated as one word": lambda w, t, p: p in one_word(w),
    # the first part's cluster carried past the hyphen to the end of the word, as the rule for one word would carry
    # it (cotton-mouthed -> ottonway-othedcay), its own part ending without it
    "first part's cluster moved past the hyphen": lambda w, t, p: "-" in p and cluster_crossed(w, t, p),
}


# -----------------------------------------------------------------------------
# the counts over a study: one split, each model's translations {seed: [text]}; every count is over words x seeds


def share(oks):
    oks = list(oks)
    return sum(oks) / len(oks) if oks else float("nan")


def binned(idx, key, bins):
    """{bin label: the indices in idx whose key (a function of the index) falls in it}, every bin listed."""
    out = {label: [] for label in bin_labels(bins)}
    for j in idx:
        out[bin_of(key(j), bins)].append(j)
    return out


def count_split(words, runs, models, pair):
    """One split's counts, model by model: word accuracy by group and by length (words without a hyphen), where
    wrong translations first leave the truth, the compounds' error types, traits and first errors, their first
    part by its length and by what follows it, and `pair` = (a, b): each word and seed of a beside the same of b."""
    single = [j for j, w in enumerate(words.words) if "-" not in w]
    compounds = [j for j, w in enumerate(words.words) if "-" in w]
    first, after = lambda j: len(words.words[j].split("-")[0]), lambda j: len(words.words[j].split("-", 1)[1])
    cells = {  # name -> {label: indices}: the cells where each model's accuracy is counted
        "groups": {g: [j for j, k in enumerate(words.groups) if k == g] for g in GROUPS},
        "lengths": binned(single, lambda j: len(words.words[j]), LENGTHS),
        "compound_lengths": binned(compounds, lambda j: len(words.words[j]), LENGTHS),
    }
    by_parts = {(f, a): [j for j in js if bin_of(after(j), AFTER_LENGTHS) == a]
                for f, js in binned(compounds, first, FIRST_LENGTHS).items() for a in bin_labels(AFTER_LENGTHS)}
    out = {"n": len(words.words), **{name: {k: {"n": len(v)} for k, v in c.items()} for name, c in cells.items()},
           "first_part": {k: {"n": len(v)} for k, v in by_parts.items()}, "compounds": {}, "same_length": {},
           "word_places": {}, "stopped": {}, "compounds_wrong": {}, "compound_types": {}, "compound_traits": {},
           "compound_places": {}}
    for m in models:
        right = {s: [p == t for p, t in zip(runs[m][s], words.truths)] for s in runs[m]}
        first_right = {s: [p.split("-")[0] == t.split("-")[0] for p, t in zip(runs[m][s], words.truths)]
                       for s in runs[m]}
        for name, c in cells.items():
            for k, idx in c.items():
                out[name][k][m] = share(right[s][j] for s in right for j in idx)
        for k, idx in cells["compound_lengths"].items():  # and their first part, whatever follows it
            out["compound_lengths"][k][m + ": first part"] = share(first_right[s][j] for s in right for j in idx)
        for k, idx in by_parts.items():
            out["first_part"][k][m] = share(first_right[s][j] for s in right for j in idx)
        out["compounds"][m] = share(right[s][j] for s in right for j in compounds)
        # what the compounds would score if each were as hard as a word without a hyphen of its length (its source's
        # length, hyphens counted): the mean over compounds of the model's accuracy on such words
        at = [out["lengths"][bin_of(len(words.words[j]), LENGTHS)][m] for j in compounds]
        out["same_length"][m] = share(x for x in at if x == x)  # x != x: nan, a length no plain word has
        places, stopped = Counter(), 0
        for s in runs[m]:
            for j in single:
                i = first_error(words.truths[j], p := runs[m][s][j])
                if i is not None:
                    places[(piglatin.pig_latin_rule(words.words[j]), where_in_word(words.words[j], i))] += 1
                    stopped += i == len(p) < len(words.truths[j])
        out["word_places"][m], out["stopped"][m] = places, stopped
        types, traits, cplaces = Counter(), Counter(), Counter()
        for s in runs[m]:
            for j in compounds:
                w, t, p = words.words[j], words.truths[j], runs[m][s][j]
                if p != t:
                    types[compound_type(t, p)] += 1
                    traits.update(k for k, f in COMPOUND_TRAITS.items() if f(w, t, p))
                    cplaces[where_in_compound(w, first_error(t, p))] += 1
        out["compound_types"][m], out["compound_traits"][m], out["compound_places"][m] = types, traits, cplaces
        out["compounds_wrong"][m] = sum(types.values())
    a, b = pair
    out["paired"] = {g: Counter((runs[a][s][j] == words.truths[j], runs[b][s][j] == words.truths[j])
                                for s in runs[a] for j in idx) for g, idx in cells["groups"].items()}
    return out


def examples(words, runs, models, n, seed, compound):
    """n words (compounds, or words without a hyphen) drawn at random (seeded) from those the first model gets
    wrong in at least one seed, in split order: [(word, truth, {model: [its translation per seed]})]."""
    m = models[0]
    pool = [j for j, w in enumerate(words.words) if ("-" in w) == compound
            and any(runs[m][s][j] != words.truths[j] for s in runs[m])]
    pick = sorted(np.random.default_rng(seed).choice(len(pool), size=min(n, len(pool)), replace=False))
    return [(words.words[pool[i]], words.truths[pool[i]], {k: [runs[k][s][pool[i]] for s in runs[k]] for k in models})
            for i in pick]


# -----------------------------------------------------------------------------
# the report: Markdown tables


def table(header, rows, left=1):
    """A Markdown table, its first `left` columns aligned left (names), the others right (figures)."""
    rule = "|" + "|".join("---" if i < left else "---:" for i in range(len(header))) + "|"
    return ["| " + " | ".join(header) + " |", rule] + ["| " + " | ".join(map(str, r)) + " |" for r in rows]


def acc(x):
    return "—" if x != x else f"{x:.3f}"  # nan: no words in the cell


def report(counts, models, seeds, checked, args, samples):
    """The report's text (Markdown): the conditions, then per split the tables of count_split, then the examples."""
    a, b = models[0], models[1]
    lines = [f"# Where {a} fails, from its predictions", "",
             f"Records: {', '.join(f'`{r}`' for r in args.records)} ({', '.join(models)}; seeds "
             f"{', '.join(map(str, seeds))}); words: "
             f"`{args.data}`. Every count is over words x seeds ({len(seeds)} seeds); an accuracy is the mean over "
             f"seeds. All {checked:,} recorded accuracies (overall, by rule, compounds by known and new parts, test "
             f"and unseen) come back exactly from the recorded predictions and these words.", ""]

    def accuracies(title, cells, label):
        return [title, "", *table([label, "words", *models], [[k, f"{v['n']:,}", *(acc(v[m]) for m in models)]
                                                               for k, v in cells.items()]), ""]

    def counted(title, label, keys, per_model, total=None):
        rows = ([[total[0], *(f"{total[1][m]:,}" for m in models)]] if total else [])
        return [title, "", *table([label, *models], rows + [[k, *(f"{per_model[m][k]:,}" for m in models)]
                                                            for k in keys]), ""]

    for name, c in counts.items():
        lines += [f"## {name} ({c['n']:,} words)", ""]
        lines += accuracies("Word accuracy by group (consonant words by how many letters move):", c["groups"], "group")
        lines += accuracies("Words without a hyphen, word accuracy by length (letters):", c["lengths"], "letters")
        lines += [f"Paired, word by word and seed by seed: {a} against {b} (words x seeds):", ""]
        lines += table(["group", "both right", f"{b} only", f"{a} only", "neither"],
                       [[g, *(f"{p[k]:,}" for k in ((True, True), (False, True), (True, False), (False, False)))]
                        for g, p in c["paired"].items()]) + [""]
        lines += ["Words without a hyphen, where a wrong translation first leaves the truth (words x seeds; rest: "
                  "the letters from the first vowel on, copied, its first letter apart and then by halves; moved: "
                  "the consonants before it; ending: ay or way; past the end: the truth is a prefix of it):", ""]
        rows = []
        for m in models:
            for rule in ("vowel", "consonant", "no vowel"):
                p = {k: v for (r, k), v in c["word_places"][m].items() if r == rule}
                rows.append([m, rule, f"{sum(p.values()):,}", *(f"{p.get(k, 0):,}" for k in WORD_PLACES)])
        lines += table(["model", "rule", "wrong", *WORD_PLACES], rows, left=2)
        lines += ["", "Of them, stopped early (the translation a prefix of the truth): "
                  + "; ".join(f"{m} {c['stopped'][m]:,}" for m in models) + ".", ""]
        wrong = ("wrong compounds", c["compounds_wrong"])
        lines += counted("Compounds, the wrong translations by type (words x seeds; one type each):", "type",
                         COMPOUND_TYPES, c["compound_types"], wrong)
        lines += counted("Compounds, what the wrong translations show (any number each):", "trait",
                         list(COMPOUND_TRAITS), c["compound_traits"], wrong)
        lines += counted("Compounds, where a wrong translation first leaves the truth:", "place", COMPOUND_PLACES,
                         c["compound_places"], wrong)
        lines += ["Compounds, first part right (the text before the first hyphen, whatever follows it), by the "
                  "first part's letters and the characters after the first hyphen:", ""]
        lines += table(["first part", "after the hyphen", "compounds", *models],
                       [[f, r, f"{v['n']:,}", *(acc(v[m]) for m in models)] for (f, r), v in c["first_part"].items()],
                       left=2)
        lines += ["", "Compounds by their length (characters, hyphens counted): first part right / the whole "
                  "compound right, beside words without a hyphen of that length (the table above):", ""]
        lines += table(["characters", "compounds", *models],
                       [[k, f"{v['n']:,}", *(f"{acc(v[m + ': first part'])} / {acc(v[m])} (plain words "
                                             f"{acc(c['lengths'][k][m])})" for m in models)]
                        for k, v in c["compound_lengths"].items()])
        lines += ["", "Compounds' word accuracy, against what it would be if each were as hard as a word without a "
                  "hyphen of its length (the model's accuracy on those, averaged over the compounds): "
                  + "; ".join(f"{m} {acc(c['compounds'][m])} against {acc(c['same_length'][m])}" for m in models)
                  + ".", ""]
    for compound, label in ((True, "compounds"), (False, "words without a hyphen")):
        rows = [[w, t, " / ".join(out[a]), *(out[m][0] for m in models[1:])] for w, t, out in samples[compound]]
        lines += [f"## Examples: unseen {label}", "",
                  f"{len(rows)} drawn at random (--seed {args.seed}) from those {a} gets wrong in at least one seed; "
                  f"{a}'s translation in each seed, the others' in seed {seeds[0]}:", ""]
        lines += table(["word", "truth", f"{a} (seeds {', '.join(map(str, seeds))})", *models[1:]], rows,
                       left=len(models) + 2) + [""]
    return "\n".join(lines)


# -----------------------------------------------------------------------------
# the command line


def parser():
    p = argparse.ArgumentParser(
        prog="python -m evaluation.piglatin_errors", formatter_class=HelpFormatter,
        description="Where a Pig Latin model fails, read from its committed predictions: checks that each recorded "
        "accuracy comes back from the predictions and the words, then counts, over words x seeds and beside other "
        "models on the same words, accuracy by rule, cluster size and length, where wrong translations first go "
        "wrong, the compounds' error types, and examples. Reads JSON and the prepared words; trains nothing.")
    p.add_argument("--records", nargs="+", default=["results/piglatin/runs"], help="the folders of run records: "
                   "<config>/seed<N>/summary.json with test_predictions and unseen_predictions (study.py --records "
                   "writes them); each config is read from the one folder that holds it")
    p.add_argument("--data", default="data/piglatin", help="the prepared Pig Latin folder the runs were scored on "
                   "(`python data.py piglatin` writes it)")
    p.add_argument("--model", default="piglatin_mamba_large", help="the config whose failures are read")
    p.add_argument("--against", nargs="+", default=["piglatin_transformer", "piglatin_transformer_compounds"],
                   help="the configs it is compared with; the first is paired with it word by word and seed by seed")
    p.add_argument("--examples", type=AT_LEAST_0, default=8,
                   help="unseen words of each kind (compounds, words without a hyphen) shown with every model's "
                   "translations, drawn at random from those --model gets wrong")
    p.add_argument("--seed", type=AT_LEAST_0, default=0,
                   help="seed of the examples' draw")
    p.add_argument("--out", help="write the report (Markdown) to this new file instead of printing it (a file "
                   "already there is refused, never replaced)")
    return p


def main(argv=None):
    """The command line. Bad input (a missing folder, a record without predictions, a figure that does not come
    back) ends in one line, `error: ...`, and exit status 1."""
    try:
        p = parser()
        args = p.parse_args(argv)
        check_ranges(p, args)
        models = [args.model, *[m for m in args.against if m != args.model]]
        if len(models) < 2:
            raise configurator.ConfigError("--against: name at least one config other than --model")
        for folder in args.records:
            if not os.path.isdir(folder):
                raise data.DataError(f"--records {folder}: no such folder")
        if not os.path.isdir(args.data):
            raise data.DataError(f"--data {args.data}: no such folder (`python data.py piglatin` writes data/piglatin)")
        if args.out:
            check_new_file(args.out, "--out")
        print(f"reading {', '.join(models)} from {', '.join(args.records)} and the words of {args.data} ...",
              file=sys.stderr)
        words = read_words(args.data)
        runs, checked = read_study(args.records, models, words)
        seeds = sorted(runs[models[0]])
        by_split = {name: {m: {s: runs[m][s][name] for s in seeds} for m in models} for name in SPLITS}
        counts = {name: count_split(words[name], by_split[name], models, models[:2]) for name in SPLITS}
        samples = {c: examples(words["unseen"], by_split["unseen"], models, args.examples, args.seed, c)
                   for c in (True, False)}
        text = report(counts, models, seeds, checked, args, samples)
    except configurator.UserError as e:
        sys.exit(f"error: {e}")
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        print(text)
    return counts


if __name__ == "__main__":
    main()
