"""
evaluation/piglatin_errors.py on a study made by hand: a prepared folder of a few words and two models' records,
two seeds each, whose wrong translations were chosen to be of known kinds, so that every count the command reports
is known in advance. Also: a record whose figure does not come back is refused, and so are missing folders, in one
line. Well under a second.
"""

import json
import os
import shutil
from collections import Counter

import numpy as np
import pytest

import data
from corpora import piglatin
from evaluation import piglatin_errors as E
from tokenizer import CharCodec

TRAIN = ["good", "day", "rhythm"]  # good-day's parts are taught; blue-tinted's and cotton-mouthed's are not
TEST = ["quite", "equal", "a-b"]
UNSEEN = ["brown", "strength", "is", "mr", "good-day", "blue-tinted", "cotton-mouthed"]
# the unseen truths: ownbray, engthstray, isway, mray, oodgay-ayday, ueblay-intedtay, ottoncay-outhedmay

PREDICTED = {  # model -> seed -> split -> translations, in the split's order; None: the truth
    "mamba": {
        1: {"test": [None, None, "abway"],  # a-b as one word, its hyphen dropped
            "unseen": [None,
                       "engthstay",  # the moved 'str' cut at its 'r': first error in the moved letters
                       "is",  # stopped before its ending 'way': a prefix of the truth
                       None,
                       "oodgay",  # stopped after the first part, no hyphen at all
                       "ue-tintedblay",  # as one word, its hyphen read as a consonant: 'bl' moved past the hyphen
                       None]},
        2: {"test": [None, None, None],
            "unseen": ["ownbrayy",  # did not stop: past the end
                       None, None,
                       "may",  # the word without a vowel, its 'r' lost: the moved letters (all of mr)
                       None,
                       "ueblay-inted",  # stopped early, after the hyphen
                       "ottonway-outhedcay"]}},  # 'c' moved past the hyphen, the first part given 'way'
    "transformer": {
        1: {"test": [None, None, None],
            "unseen": [None, None, None, None, None, "ueblay-intedbay", None]},  # the second part's cluster wrong
        2: {"test": [None, None, None],
            "unseen": [None, None, None, None, "oodgay-ay-ay", None, None]}},  # a hyphen added
}


def rule_figures(words, predicted):
    """The figures a run record holds for one split, computed here plainly (by pig_latin_rule and by hand for the
    compounds' parts), not by the code under test."""
    right = [p == piglatin.pig_latin(w) for w, p in zip(words, predicted)]
    out = {"word_accuracy": sum(right) / len(right)}
    for rule in ("consonant", "vowel", "no vowel", "hyphenated"):
        oks = [ok for w, ok in zip(words, right) if piglatin.pig_latin_rule(w) == rule]
        if oks:
            out[f"word_accuracy_{rule.replace(' ', '_')}"] = sum(oks) / len(oks)
    for group, members in (("known_parts", {"good-day"}), ("new_parts", {"blue-tinted", "cotton-mouthed", "a-b"})):
        oks = [ok for w, ok in zip(words, right) if w in members]
        if oks:
            out[f"word_accuracy_hyphenated_{group}"] = sum(oks) / len(oks)
    return out


@pytest.fixture
def study(tmp_path):
    """(records folder, data folder) of the hand-made study."""
    folder = tmp_path / "piglatin"
    folder.mkdir()
    codec = CharCodec(piglatin.PIG_LATIN_VOCAB)
    for name, words in (("train", TRAIN), ("val", ["yellow"]), ("test", TEST), ("unseen", UNSEEN)):
        data.write_seqs(str(folder), f"{name}_src", [codec.encode(w) for w in words], np.uint16)
        data.write_seqs(str(folder), f"{name}_tgt", [codec.encode(piglatin.pig_latin(w)) for w in words], np.uint16)
    data.write_meta(str(folder), {"dataset": "piglatin", "task": "seq2seq", "vocab": piglatin.PIG_LATIN_VOCAB,
                                  "vocab_size": len(piglatin.PIG_LATIN_VOCAB)})
    records = tmp_path / "runs"
    for model, seeds in PREDICTED.items():
        for seed, splits in seeds.items():
            summary = {}
            for name, words in (("test", TEST), ("unseen", UNSEEN)):
                text = [p or piglatin.pig_latin(w) for w, p in zip(words, splits[name])]
                summary |= {f"{name}_{k}": v for k, v in rule_figures(words, text).items()}
                summary[f"{name}_predictions"] = [codec.encode(t).tolist() for t in text]
            (records / model / f"seed{seed}").mkdir(parents=True)
            (records / model / f"seed{seed}" / "summary.json").write_text(json.dumps(summary))
    return str(records), str(folder)


def run(study, tmp_path, *more):
    records, folder = study
    out = tmp_path / f"report{len(list(tmp_path.glob('report*.md')))}.md"  # a new file each time: one there is refused
    counts = E.main(["--records", records, "--data", folder, "--model", "mamba", "--against", "transformer",
                     "--out", str(out), *more])
    return counts, out.read_text()


def test_the_pieces_of_a_translation():
    assert piglatin.pig_latin_pieces("brown") == ("own", "br", "ay")
    assert piglatin.pig_latin_pieces("quite") == ("ite", "qu", "ay")
    assert piglatin.pig_latin_pieces("is") == ("is", "", "way")
    assert piglatin.pig_latin_pieces("mr") == ("", "mr", "ay")  # no vowel: all of it moves, the word + ay
    assert [E.where_in_word("strength", i) for i in (0, 1, 2, 4, 5, 8, 9, 10)] == [
        "rest: first letter", "rest: first half", "rest: first half", "rest: second half", "moved", "ending",
        "ending", "past the end"]
    assert [E.where_in_compound("blue-tinted", i) for i in (0, 2, 4, 6, 7, 15)] == [
        "first part: rest", "first part: moved", "first part: ending", "the first hyphen", "after the first hyphen",
        "past the end"]


def test_counts_of_a_study_made_by_hand(study, tmp_path):
    counts, text = run(study, tmp_path)
    unseen, test = counts["unseen"], counts["test"]
    assert unseen["groups"]["consonant, 2 moved"] == {"n": 1, "mamba": 0.5, "transformer": 1.0}  # brown
    assert unseen["groups"]["consonant, 3+ moved"] == {"n": 1, "mamba": 0.5, "transformer": 1.0}  # strength
    assert unseen["groups"]["hyphenated, new parts"] == {"n": 2, "mamba": 0.25, "transformer": 0.75}
    assert test["groups"]["hyphenated, new parts"] == {"n": 1, "mamba": 0.5, "transformer": 1.0}  # a-b
    assert unseen["lengths"]["1-3"] == {"n": 2, "mamba": 0.5, "transformer": 1.0}  # is, mr
    assert unseen["word_places"]["mamba"] == Counter({("consonant", "moved"): 1, ("vowel", "ending"): 1,
                                                      ("consonant", "past the end"): 1, ("no vowel", "moved"): 1})
    assert unseen["stopped"] == {"mamba": 1, "transformer": 0}  # is -> is
    assert unseen["word_places"]["transformer"] == Counter()
    assert unseen["compounds_wrong"] == {"mamba": 4, "transformer": 2}
    assert unseen["compound_types"]["mamba"] == Counter({"a hyphen dropped": 1, "first part right, a later part wrong": 1,
                                                         "first part and a later part wrong": 2})
    assert unseen["compound_types"]["transformer"] == Counter({"first part right, a later part wrong": 1,
                                                               "a hyphen added": 1})
    assert unseen["compound_traits"]["mamba"] == Counter({
        "first part right": 2, "no hyphen at all": 1, "stopped early (a prefix of the truth)": 2,
        "stopped after the first part": 1, "shorter than the truth": 3, "translated as one word": 1,
        "first part's cluster moved past the hyphen": 2})
    assert unseen["compound_traits"]["transformer"] == Counter({"first part right": 2})  # both the same length
    assert test["compound_traits"]["mamba"] == Counter({"no hyphen at all": 1, "shorter than the truth": 1,
                                                        "translated as one word": 1})
    assert unseen["compound_places"]["mamba"] == Counter({"the first hyphen": 1, "first part: moved": 2,
                                                          "after the first hyphen": 1})
    assert unseen["first_part"][("4-5", "1-4")] == {"n": 1, "mamba": 1.0, "transformer": 1.0}  # good-day
    assert unseen["first_part"][("4-5", "5-7")] == {"n": 1, "mamba": 0.5, "transformer": 1.0}  # blue-tinted
    assert unseen["first_part"][("6+", "5-7")] == {"n": 1, "mamba": 0.5, "transformer": 1.0}  # cotton-mouthed
    assert unseen["compounds"] == {"mamba": 2 / 6, "transformer": 4 / 6}
    # good-day (8 letters) is the only compound whose length a word without a hyphen has (strength)
    assert unseen["same_length"] == {"mamba": 0.5, "transformer": 1.0}
    assert unseen["paired"]["hyphenated, new parts"] == Counter({(False, False): 1, (True, True): 1,
                                                                 (False, True): 2})
    # what the report says: the check, then the tables
    assert "All 48 recorded accuracies" in text  # 2 models x 2 seeds x (7 unseen + 5 test figures)
    assert "| a hyphen dropped | 1 | 0 |" in text
    assert "| first part's cluster moved past the hyphen | 2 | 0 |" in text
    assert "| cotton-mouthed | ottoncay-outhedmay | ottoncay-outhedmay / ottonway-outhedcay | ottoncay-outhedmay |" in text


def test_examples_are_drawn_from_the_words_the_model_gets_wrong(study, tmp_path):
    _, text = run(study, tmp_path, "--examples", "1")
    compounds = text.split("## Examples: unseen compounds")[1].split("## Examples")[0]
    assert sum(line.startswith("| ") for line in compounds.splitlines()) == 2  # the header and one word
    _, text = run(study, tmp_path, "--examples", "9")  # more than there are: all 3 compounds it gets wrong
    compounds = text.split("## Examples: unseen compounds")[1].split("## Examples")[0]
    rows = [line for line in compounds.splitlines() if line.startswith("| ")][1:]  # the header left out
    assert [row.split(" | ")[0] for row in rows] == ["| good-day", "| blue-tinted", "| cotton-mouthed"]


def test_a_figure_that_does_not_come_back_is_refused(study, tmp_path, capsys):
    records, _ = study
    path = os.path.join(records, "mamba", "seed2", "summary.json")
    summary = json.load(open(path))
    summary["unseen_word_accuracy_no_vowel"] = 1.0  # its mr is wrong: 0.0
    json.dump(summary, open(path, "w"))
    with pytest.raises(SystemExit) as e:
        run(study, tmp_path)
    assert str(e.value).startswith("error: mamba seed 2: unseen_word_accuracy_no_vowel: recorded 1.0, recomputed 0.0")


@pytest.mark.parametrize("which, message", [("--records", "error: --records {}: no such folder"),
                                            ("--data", "error: --data {}: no such folder")])
def test_missing_folders_are_one_line(study, tmp_path, which, message):
    records, folder = study
    args = {"--records": records, "--data": folder, which: str(tmp_path / "nowhere")}
    with pytest.raises(SystemExit) as e:
        E.main([*[x for kv in args.items() for x in kv], "--model", "mamba", "--against", "transformer"])
    assert str(e.value).startswith(message.format(tmp_path / "nowhere"))
    with pytest.raises(SystemExit) as e:
        E.main(["--records", records, "--data", folder, "--model", "mamba", "--against", "nobody"])
    assert str(e.value).startswith("error: ") and "nobody: no run records" in str(e.value)


def test_models_from_two_record_folders_are_read_together_and_a_config_in_both_is_refused(study, tmp_path):
    """Tuned runs sit in another folder than the first verdict's: --records takes both, and each config is read
    from the one that holds it; the same counts as from one folder. A config in two of them is refused."""
    records, folder = study
    other = tmp_path / "tuned"
    other.mkdir()
    shutil.move(os.path.join(records, "transformer"), other / "transformer")
    argv = ["--data", folder, "--model", "mamba", "--against", "transformer"]
    E.main(["--records", records, str(other), *argv, "--out", str(tmp_path / "apart.md")])
    apart = (tmp_path / "apart.md").read_text()
    assert "Records: `" + records + "`, `" + str(other) + "` (mamba, transformer; seeds " in apart
    shutil.copytree(other / "transformer", os.path.join(records, "transformer"))
    E.main(["--records", records, *argv, "--out", str(tmp_path / "together.md")])
    together = (tmp_path / "together.md").read_text()
    assert together == apart.replace(", `" + str(other) + "`", "") and together.count("\n|") > 40
    with pytest.raises(SystemExit) as e:
        E.main(["--records", records, str(other), *argv])
    assert str(e.value) == f"error: transformer: run records in {records} and {other}: name one of these folders in " \
                           f"--records"


def test_a_report_already_there_is_refused_before_anything_is_read(study, tmp_path):
    records, folder = study
    out = tmp_path / "errors.md"
    out.write_text("a report of mine")
    argv = ["--records", records, "--data", folder, "--model", "mamba", "--against", "transformer"]
    with pytest.raises(SystemExit) as e:
        E.main([*argv, "--out", str(out)])
    assert str(e.value) == f"error: --out {out} exists: give another file, or move it away first"
    assert out.read_text() == "a report of mine"
    with pytest.raises(SystemExit) as e:
        E.main([*argv, "--out", str(tmp_path / "no" / "r.md")])
    assert str(e.value).startswith(f"error: --out {tmp_path / 'no' / 'r.md'}: there is no folder")


def test_help_names_the_command_and_every_option(capsys):
    with pytest.raises(SystemExit):
        E.main(["--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m evaluation.piglatin_errors")
    for action in E.parser()._actions:
        assert action.help, action.dest
