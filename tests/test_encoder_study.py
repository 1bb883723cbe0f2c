"""
The encoder study's tooling: McNemar's test and the claim verdicts on known cases, the Pareto frontier,
the subsets (sizes, nesting, no train/test overlap), the new datasets (IMDB, Yelp polarity and the
three-domain sets: download path on fixtures in their real formats, mirror path on the real UCI files),
test-time depth, and a whole study plan on tiny runs: trained, resumed as finished, judged and reported.
"""

import io
import json
import math
import os
import re
import shutil
import tarfile

import numpy as np
import pytest
import torch

import bookkeeping.records
import corpora.zhang_csv
import data
import evaluate
import lab.plan
import lab.report
import lab.runs
import lab.stats
import model
import study
import train
from conftest import REPO_ROOT, fake_downloads, need_tokenizer
from corpora import classification, sources, uci
from hardware import devices
from test_study import write_tiny_configs

# -----------------------------------------------------------------------------
# statistics


def test_mcnemar_exact_p_on_known_cases():
    # 10 against 2: 2 * P(X <= 2), X ~ Bin(12, 1/2) = 2 * (1 + 12 + 66) / 4096
    assert lab.stats.mcnemar_p(10, 2) == pytest.approx(158 / 4096)
    assert lab.stats.mcnemar_p(2, 10) == lab.stats.mcnemar_p(10, 2)  # two-sided: symmetric
    assert lab.stats.mcnemar_p(0, 0) == 1.0 and lab.stats.mcnemar_p(5, 5) == 1.0  # capped at 1
    assert lab.stats.mcnemar_p(0, 6) == pytest.approx(2 / 64)  # all six disagreements one way
    # thousands of disagreements (a 6,823-example test set) do not underflow; the normal approximation
    # with continuity correction agrees closely there
    b, c = 1500, 1380
    z = (abs(b - c) - 1) / math.sqrt(b + c)
    assert lab.stats.mcnemar_p(b, c) == pytest.approx(math.erfc(z / math.sqrt(2)), rel=0.02)


def test_mcnemar_counts_only_the_disagreements():
    y = [0, 1, 1, 0, 1, 0, 1, 1]
    a = [0, 1, 1, 0, 0, 1, 1, 1]  # wrong on examples 4, 5
    b = [0, 1, 0, 1, 1, 0, 1, 0]  # wrong on examples 2, 3, 7
    only_a, only_b, p = lab.stats.mcnemar(y, a, b)
    assert (only_a, only_b) == (3, 2) and p == pytest.approx(lab.stats.mcnemar_p(3, 2))
    with pytest.raises(ValueError, match="same examples"):
        lab.stats.mcnemar(y, a, b[:-1])


def test_claim_verdicts():
    assert lab.stats.claim_verdict(0.01, 0.03, "higher") == "confirmed"
    assert lab.stats.claim_verdict(-0.03, -0.01, "higher") == "refuted"
    assert lab.stats.claim_verdict(-0.01, 0.03, "higher") == "inconclusive"
    assert lab.stats.claim_verdict(-0.03, -0.01, "lower") == "confirmed"  # a loss: lower is better


def test_t_quantiles_and_the_detectable_effect():
    # Student's t from its density agrees with the printed table, and with published t_{0.80} values
    assert [round(lab.stats.t_quantile(0.975, df), 3) for df in range(1, 31)] == lab.stats.T_975
    assert [round(lab.stats.t_quantile(0.8, df), 3) for df in (1, 2, 5, 10, 30)] == [1.376, 1.061, 0.920, 0.879, 0.854]
    assert lab.stats.t_cdf(0.0, 3) == pytest.approx(0.5) and lab.stats.t_cdf(-2.776, 4) == pytest.approx(0.025, abs=1e-4)
    # 3 seeds whose differences spread by 0.0105 (the 300-step GLUE cell): (4.303 + 1.061) * 0.0105 / sqrt(3)
    assert lab.stats.detectable_effect(0.0105, 3) == pytest.approx(5.364 * 0.0105 / math.sqrt(3), rel=1e-3)
    n = lab.stats.seeds_needed(0.0105, 0.01)
    assert n == 11 and lab.stats.detectable_effect(0.0105, n) <= 0.01 < lab.stats.detectable_effect(0.0105, n - 1)
    assert lab.stats.seeds_needed(0.0, 0.01) == 2 and lab.stats.seeds_needed(1.0, 0.001) is None


def test_conclusion_lines_say_confirmed_refuted_or_not_settled():
    row = dict(a="c/r", b="c/b", metric="test_accuracy", n=5, verdict="inconclusive", mean=0.004, lo=-0.006,
               hi=0.014, detectable=0.0175, seeds_needed=11)
    claim = dict(claim="R beats B", source="001, Table 6", verdict="v")
    line = lab.report.conclusion_line(claim, row, 0.01)
    assert line.startswith("- **R beats B** (001, Table 6): **not settled**: A − B = +0.0040 in test_accuracy, 95 % "
                           "interval [-0.0060, +0.0140] over 5 seeds")
    assert "could see is 0.0175; 11 seeds would find a true difference of 0.01." in line
    assert "**confirmed**" in lab.report.conclusion_line(claim, {**row, "verdict": "confirmed", "lo": 0.001}, 0.01)
    # a verdict read before the planned seeds are all in says so (reading it as seeds land is optional stopping)
    early = lab.report.conclusion_line(claim, {**row, "verdict": "confirmed", "lo": 0.001, "planned": 11}, 0.01)
    assert "Interim: 5 of the 11 planned seeds; a verdict read before they are all in can still change." in early
    assert "Interim" not in lab.report.conclusion_line(claim, {**row, "verdict": "confirmed", "lo": 0.001, "planned": 5}, 0.01)
    assert "**refuted**" in lab.report.conclusion_line(claim, {**row, "verdict": "refuted", "hi": -0.001}, 0.01)
    # a claim that B beats A (reverse): A confirmed ahead refutes it, A refuted confirms it
    against = {**claim, "reverse": True}
    assert "**refuted**" in lab.report.conclusion_line(against, {**row, "verdict": "confirmed", "lo": 0.001}, 0.01)
    assert "**confirmed**" in lab.report.conclusion_line(against, {**row, "verdict": "refuted", "hi": -0.001}, 0.01)
    assert "**not settled**" in lab.report.conclusion_line(against, row, 0.01)
    # A keeps B's performance (non-inferiority, margin m): the whole interval above -m is confirmed, however
    # far above (A better is no contradiction), wholly below -m refuted, across -m not settled; the sentence
    # names the rule
    def keeps(lo, hi):
        return {**row, "lo": lo, "hi": hi, "rule": "non-inferiority", "margin": 0.005,
                "verdict": lab.stats.claim_verdict(lo, hi, "higher", "non-inferiority", 0.005)}
    line = lab.report.conclusion_line(claim, keeps(-0.004, 0.05), 0.01)
    assert "**confirmed**: " in line and "keeping B's performance means A − B ≥ −0.005)" in line
    assert "**refuted**: " in lab.report.conclusion_line(claim, keeps(-0.03, -0.006), 0.01)
    assert "**not settled**: " in lab.report.conclusion_line(claim, keeps(-0.006, 0.014), 0.01)  # crosses -0.005
    # and its negation (A does not keep B's performance) the other way round
    assert "**refuted**: " in lab.report.conclusion_line(against, keeps(-0.004, 0.05), 0.01)
    assert "**confirmed**: " in lab.report.conclusion_line(against, keeps(-0.03, -0.006), 0.01)
    assert "**not settled**: not run yet (paired seeds finished: 1; A = `c/r`" in lab.report.conclusion_line(
        claim, {**row, "verdict": "not run", "n": 1}, 0.01)
    # beside the status: the one with the test sentences resampled where it differs, the devices where the two
    # sides trained on different ones; after the figures, the rule history where it changed after the data began
    line = lab.report.conclusion_line(claim, {**row, "verdict": "confirmed", "lo": 0.001, "sent_lo": -0.002,
                                              "sent_hi": 0.02, "boot_lo": 0.001, "boot_hi": 0.01,
                                              "sent_verdict": "inconclusive", "across": "H200 TF32 vs CPU float32",
                                              "fixed": "changed after its data began (2026-11-25): seeds 3 → 5"}, 0.01)
    assert ("**confirmed** (not settled with the test sentences resampled; across devices: H200 TF32 vs CPU "
            "float32): ") in line and line.endswith(" Its rule and seeds: changed after its data began (2026-11-25): "
                                                     "seeds 3 → 5.")
    assert "refuted with the test sentences" in lab.report.conclusion_line(
        against, {**row, "verdict": "inconclusive", "sent_verdict": "confirmed"}, 0.01)
    # a stand-in verdict (a task built offline in place of one that needs a download) judges the claim while
    # the claim's own has not run, and the sentence says so; once the own one has run, it judges
    rows = {"v": {**row, "verdict": "not run", "n": 0}, "w": {**row, "verdict": "confirmed", "lo": 0.001},
            "x": {**row, "verdict": "not run", "n": 0}}
    stand_in = {**claim, "instead": "w"}
    line = lab.report.conclusion_line(stand_in, lab.report.conclusion_row(stand_in, rows), 0.01)
    assert "**confirmed**: " in line and line.endswith(" Judged by 'w' while 'v' has not run.")
    assert lab.report.conclusion_row({**claim, "instead": "x"}, rows) is rows["v"]  # neither has run: its own
    rows["v"] = row
    assert lab.report.conclusion_row(stand_in, rows) is row


def test_a_pretraining_cell_reports_its_held_out_masked_token_figures():
    """A masked-LM config has no test set: its cell says what its held-out evaluation measured, over seeds;
    a classifier in the same cell adds no line."""
    def mlm(loss, acc):
        return {"task": "mlm", "final_val_loss": loss, "final_val_accuracy": acc, "final_val_ppl": math.exp(loss),
                "final_val_n": 6174}

    summaries = {("pre", 1): mlm(4.5, 0.28), ("pre", 2): mlm(4.6, 0.29), ("pre", 3): None,
                 ("cls", 1): {"task": "classification", "test_accuracy": 0.8}}
    lines = lab.report.pretraining_lines(summaries, {"pre": "MLM pretraining"}.get)
    loss, acc, ppl = (lab.stats.mean_ci(v) for v in ([4.5, 4.6], [0.28, 0.29], [math.exp(4.5), math.exp(4.6)]))
    assert lines == [f"MLM pretraining, on the corpus's held-out texts at the end of training (6,174 masked tokens, "
                     f"masked the same way in every evaluation; 2 seeds): masked-token loss {loss[0]:.3f} ± "
                     f"{loss[1]:.3f}, accuracy {acc[0]:.4f} ± {acc[1]:.4f}, perplexity {ppl[0]:.1f} ± {ppl[1]:.1f}.", ""]
    assert lab.report.pretraining_lines({("cls", 1): summaries[("cls", 1)]}, str) == []


def test_pareto_front():
    # (cost, value): (1, .80) and (3, .85) and (5, .90) are on it; (2, .79) and (4, .84) are dominated
    points = [(3, 0.85), (2, 0.79), (5, 0.90), (1, 0.80), (4, 0.84), (5, 0.70)]
    assert lab.stats.pareto_front(points) == [3, 0, 2]


# -----------------------------------------------------------------------------
# subsets


def synthetic_splits():
    rng = np.random.default_rng(0)
    out = {}
    for k, n in (("train", 200), ("val", 40), ("test", 40)):
        texts = [" ".join(f"{k}{i}w{j}" for j in range(int(rng.integers(1, 30)))) for i in range(n)]
        out[k] = (texts, [i % 2 for i in range(n)])
    return out


def test_fractions_are_seeded_nested_and_leave_val_and_test_whole():
    splits = synthetic_splits()
    half, tenth = (classification.subset_splits(splits, s, seed=7) for s in ("frac50", "frac10"))
    assert len(half["train"][0]) == 100 and len(tenth["train"][0]) == 20
    assert set(tenth["train"][0]) <= set(half["train"][0]) <= set(splits["train"][0])  # nested
    assert half["val"] == splits["val"] and tenth["test"] == splits["test"]
    assert classification.subset_splits(splits, "frac10", seed=7) == tenth  # seeded
    assert classification.subset_splits(splits, "frac10", seed=8)["train"] != tenth["train"]
    order = [splits["train"][0].index(t) for t in tenth["train"][0]]
    assert order == sorted(order)  # the split's own order is kept
    labels = dict(zip(*splits["train"]))
    assert all(labels[t] == lab for t, lab in zip(*tenth["train"]))  # labels travel with their texts


@pytest.mark.parametrize("kind", ["short", "long"])
def test_length_subsets_take_each_split_from_one_regime(kind):
    """Each split is ranked by its own word counts and cut on its own: a subset keeps examples of that split
    only, in their order, with their labels. Texts shared by train and test (on SST-2's standard split, 54 of
    short30's 2,047 test texts occur verbatim in train) stay shared: the subset neither makes nor hides them."""
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(12)]  # one small vocabulary for every split: texts repeat across splits
    splits = {k: ([" ".join(rng.choice(words, size=int(rng.integers(1, 30)))) for _ in range(n)], list(range(n)))
              for k, n in (("train", 200), ("val", 40), ("test", 40))}
    splits["test"][0][:3] = splits["train"][0][:3]  # three test texts occur verbatim in train
    sub = classification.subset_splits(splits, f"{kind}30", seed=7)
    for k, (texts, labels) in splits.items():
        kept, kept_labels = sub[k]
        assert len(kept) == round(0.3 * len(texts))
        assert kept_labels == sorted(kept_labels) and all(texts[i] == t for i, t in zip(kept_labels, kept))
        lengths = sorted(len(t.split()) for t in texts)
        n = len(kept)
        if kind == "short":
            assert max(len(t.split()) for t in kept) <= lengths[n - 1]
        else:
            assert min(len(t.split()) for t in kept) >= lengths[len(lengths) - n]
    shared = set(sub["train"][0]) & set(sub["test"][0])
    assert shared <= set(splits["train"][0]) & set(splits["test"][0])
    planted = [t for t in splits["train"][0][:3] if t in sub["train"][0] and t in sub["test"][0]]
    assert planted and set(planted) <= shared  # a text of both splits in the regime stays in both


@pytest.mark.parametrize("bad", ["frac0", "frac101", "half", "short", "sample0"])
def test_bad_subsets_are_refused(bad):
    with pytest.raises(data.DataError, match="expected"):
        classification.subset_splits(synthetic_splits(), bad, seed=1)


def test_folder_names_hold_subset_and_length():
    assert data.dataset_dir("sst2", "glue", "compact") == os.path.join("data", "sst2_glue_compact")
    assert data.dataset_dir("sst2", "standard", "compact", subset="short30", max_len=256) == \
        os.path.join("data", "sst2_standard_compact_short30")
    assert data.dataset_dir("imdb", vocab="compact", subset="sample1000", max_len=128) == \
        os.path.join("data", "imdb_compact_sample1000_len128")
    assert data.dataset_dir("sst5", tokenizer="llama2", max_len=128) == os.path.join("data", "sst5_llama2")


def test_a_subset_of_a_dataset_without_subsets_is_an_error(tmp_path):
    with pytest.raises(data.DataError, match="has no subsets"):
        data.load_dataset({"dataset": "shakespeare_char", "subset": "frac10", "data_dir": str(tmp_path)})
    with pytest.raises(SystemExit, match="shakespeare_char has no subsets"):  # the same check on the command line
        data.main(["shakespeare_char", "--subset", "frac10", "--out_dir", str(tmp_path)])


def test_sst2_subsets_on_the_fake_mirror(fixture_mirror, fixture_digests, tmp_path):
    need_tokenizer()
    with fixture_digests():
        full = data.prepare("sst2", "standard", mirror=fixture_mirror, out_dir=str(tmp_path / "all"), verbose=False)
        short = data.prepare("sst2", "standard", subset="short30", mirror=fixture_mirror, out_dir=str(tmp_path / "s"),
                             verbose=False)
    assert short["subset"] == "short30"
    for k in ("train", "val", "test"):
        assert short["counts"][k]["n"] == round(0.3 * full["counts"][k]["n"])
    assert short["counts"]["train"]["tokens"] < 0.3 * full["counts"]["train"]["tokens"]


# -----------------------------------------------------------------------------
# the new datasets


def zhang_csv(rows):
    """Rows in Zhang et al.'s CSV format: every field quoted, quotes doubled, line breaks as \\n."""
    def q(field):
        return '"' + field.replace('"', '""').replace("\n", "\\n") + '"'
    return "".join(",".join([q(str(label))] + [q(f) for f in fields]) + "\n" for label, *fields in rows).encode()


def tgz(files):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, payload in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


def yelp_archive(n_train=40, n_test=20):
    def rows(n, tag):
        return [(1 + i % 2, f'{"great" if i % 2 else "awful"} place number {i} in {tag}, "quoted"\nsecond line')
                for i in range(n)]
    return tgz({"yelp_review_polarity_csv/train.csv": zhang_csv(rows(n_train, "train")),
                "yelp_review_polarity_csv/test.csv": zhang_csv(rows(n_test, "test")),
                "yelp_review_polarity_csv/readme.txt": b"fixture\n"})


def test_zhang_csv_reader(tmp_path):
    path = tmp_path / "yelp.tgz"
    path.write_bytes(yelp_archive(4, 2))
    rows = corpora.zhang_csv.read_zhang_csv(str(path), "yelp_review_polarity_csv/train.csv", 2)
    assert rows[0] == ('awful place number 0 in train, "quoted"\nsecond line', 0)
    assert [lab for _, lab in rows] == [0, 1, 0, 1]
    with pytest.raises(data.DataError, match="expected 3 quoted fields"):
        corpora.zhang_csv.read_zhang_csv(str(path), "yelp_review_polarity_csv/train.csv", 3)
    with pytest.raises(data.DataError, match="no readable"):
        corpora.zhang_csv.read_zhang_csv(str(path), "yelp_review_polarity_csv/nothing.csv", 2)


def test_yelp_polarity_downloads_checks_and_standardizes(tmp_path, monkeypatch):
    """The download path: the canonical URL, once; the archive's sha256 checked; the source paper's sizes
    (scaled down here) drawn with train and val from train.csv and test from test.csv."""
    need_tokenizer()
    payload = yelp_archive()
    monkeypatch.setitem(sources.SOURCES["yelp_polarity"], "sha256", sources.sha256(payload))
    monkeypatch.setattr(corpora.zhang_csv, "STANDARD_SIZES", {"train": 24, "val": 6, "test": 10})
    calls = fake_downloads(monkeypatch, payload)
    monkeypatch.chdir(tmp_path)
    meta = data.prepare("yelp_polarity", verbose=False)
    assert calls == ["https://s3.amazonaws.com/fast-ai-nlp/yelp_review_polarity_csv.tgz"]
    assert {k: c["n"] for k, c in meta["counts"].items()} == {"train": 24, "val": 6, "test": 10}
    assert meta["label_names"] == ["negative", "positive"] and meta["dataset"] == "yelp_polarity"
    ds = data.Dataset(os.path.join("data", "yelp_polarity_compact"))
    assert set(ds.splits["train"].labels) == {0, 1}
    data.prepare("yelp_polarity", verbose=False, out_dir=str(tmp_path / "again"))
    assert len(calls) == 1  # downloaded once
    monkeypatch.setitem(sources.SOURCES["yelp_polarity"], "sha256", "0" * 64)
    with pytest.raises(data.DataError, match="expected 0000"):
        data.prepare("yelp_polarity", verbose=False, out_dir=str(tmp_path / "bad"))


def test_yelp_polarity_not_in_the_mirror_says_what_to_do(tmp_path):
    with pytest.raises(data.DataError, match="yelp_review_polarity_csv.tgz: put a copy of https://s3"):
        data.prepare("yelp_polarity", mirror=str(tmp_path), out_dir=str(tmp_path / "out"), verbose=False)


def imdb_archive(n=12):
    files = {}
    for half in ("train", "test"):
        for i in range(n):
            pos = i % 2
            files[f"aclImdb/{half}/{'pos' if pos else 'neg'}/{i}_{8 if pos else 2}.txt"] = \
                f"A {'fine' if pos else 'dull'} film, review {i} of the {half} half.<br /><br />The end.".encode()
    return tgz(files)


def test_multidomain_from_three_downloaded_archives(tmp_path, monkeypatch):
    """The source paper's three-domain task: a third of every split from each source, the domain as the label,
    test drawn from each source's test file."""
    need_tokenizer()
    payloads = {sources.SOURCES["imdb"]["url"]: imdb_archive(), sources.SOURCES["yelp_polarity"]["url"]: yelp_archive(),
                sources.SOURCES["amazon_polarity"]["url"]: tgz({
                    f"amazon_review_polarity_csv/{h}.csv": zhang_csv([(1 + i % 2, f"title {i}", f"a {h} gadget {i}")
                                                                      for i in range(30)]) for h in ("train", "test")})}
    for name in ("imdb", "yelp_polarity", "amazon_polarity"):
        monkeypatch.setitem(sources.SOURCES[name], "sha256", sources.sha256(payloads[sources.SOURCES[name]["url"]]))

    def download(url, dest, timeout=60):
        with open(dest, "wb") as f:
            f.write(payloads[url])

    monkeypatch.setattr(sources, "download", download)
    monkeypatch.setattr(corpora.zhang_csv, "STANDARD_SIZES", {"train": 15, "val": 6, "test": 9})
    monkeypatch.chdir(tmp_path)
    meta = data.prepare("multidomain", verbose=False)
    assert meta["label_names"] == corpora.zhang_csv.DOMAINS
    assert {k: c["labels"] for k, c in meta["counts"].items()} == {"train": [5, 5, 5], "val": [2, 2, 2],
                                                                   "test": [3, 3, 3]}
    test = data.ClassificationSplit(os.path.join("data", "multidomain_compact"), "test")
    assert len(test) == 9


def test_multidomain_uci_on_the_real_mirror(real_mirror, tmp_path):
    meta = data.prepare("multidomain_uci", mirror=real_mirror, out_dir=str(tmp_path / "uci"), verbose=False)
    assert {k: c["labels"] for k, c in meta["counts"].items()} == {"train": [800, 800, 800], "val": [100] * 3,
                                                                   "test": [100] * 3}
    # the three splits partition each file's 1,000 lines
    files = sources.fetch("uci_sentences", real_mirror)
    per_file = [len([x for x in files[rel].decode().split("\n") if x.strip()]) for rel in uci._UCI_DOMAINS]
    assert per_file == [1000, 1000, 1000]


def test_uci_zip_download_path(tmp_path, monkeypatch, real_mirror):
    """Downloaded, the UCI sentences come as a zip whose folder name has spaces; each file is checked."""
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for rel in sources.SOURCES["uci_sentences"]["files"]:
            z.writestr(f"sentiment labelled sentences/{os.path.basename(rel)}",
                       open(os.path.join(real_mirror, rel), "rb").read())
        z.writestr("__MACOSX/._imdb_labelled.txt", b"debris")
    calls = fake_downloads(monkeypatch, buf.getvalue())
    files = sources.fetch("uci_sentences", cache_dir=str(tmp_path))
    assert calls == [sources.SOURCES["uci_sentences"]["url"]] and len(files) == 3


def test_imdb_classification_from_an_archive(tmp_path, monkeypatch):
    need_tokenizer()
    payload = imdb_archive(20)
    (tmp_path / "aclImdb_labelled.tar.gz").write_bytes(payload)
    monkeypatch.setitem(sources.SOURCES["imdb"], "mirror_sha256", sources.sha256(payload))
    meta = data.prepare("imdb", mirror=str(tmp_path), n_val=4, max_len=8, out_dir=str(tmp_path / "imdb"), verbose=False)
    assert {k: c["n"] for k, c in meta["counts"].items()} == {"train": 16, "val": 4, "test": 20}
    assert meta["max_len"] == 8 and meta["counts"]["test"]["truncated"] == 20  # every review cut to 8 tokens
    ds = data.Dataset(str(tmp_path / "imdb"))
    assert max(ds.splits["test"].lengths) == 8


# -----------------------------------------------------------------------------
# test-time depth


def test_depth_sweep_scores_each_loop_count_and_restores_the_model(tiny_cfg):
    torch.manual_seed(0)
    cfg = tiny_cfg()
    ds = data.load_dataset(cfg)
    m = model.build_model("encoder", {**cfg, "n_loops": 2}, ds.facts())
    split = ds.splits["test"]
    rows = evaluate.depth_sweep(m, split, [1, 2, 3], "cpu", devices.autocast_context("cpu", "float32"))
    assert [r["n_loops"] for r in rows] == [1, 2, 3] and all(r["trained_loops"] == 2 for r in rows)
    assert m.cfg.n_loops == 2 and m.depth == 2 * m.cfg.n_layer  # restored
    as_trained = evaluate.evaluate_classification(m, split, "cpu", devices.autocast_context("cpu", "float32"))
    assert rows[1]["accuracy"] == as_trained["accuracy"] and rows[1]["loss"] == pytest.approx(as_trained["loss"])
    assert rows[0]["flops_per_sample"] < rows[1]["flops_per_sample"] < rows[2]["flops_per_sample"]
    with torch.no_grad():  # one loop by hand: the stack once, no cross-iteration residual
        ids = torch.from_numpy(split[0][0])[None]
        m.eval()
        m.cfg.n_loops, m.depth = 1, m.cfg.n_layer
        one = m(ids)[0]
        m.cfg.n_loops, m.depth = 2, 2 * m.cfg.n_layer
        assert not torch.allclose(one, m(ids)[0])


# -----------------------------------------------------------------------------
# a whole plan on tiny runs


def test_a_plan_trains_judges_and_reports(tiny_dataset, tmp_path, monkeypatch, capsys, runs_in_process):
    configs = write_tiny_configs(tmp_path, tiny_dataset)
    plan_path = tmp_path / "plan.py"
    plan_path.write_text(
        f"out_root = {str(tmp_path / 'runs')!r}\nseeds = [1, 2]\n"
        f"cells = [dict(name='a', configs={configs!r}, set=['max_iters=4'], test_set='tiny test', what='tiny'),\n"
        f"         dict(name='g', configs={configs[1:]!r}, set=['max_iters=2'], grid=['n_loops=1,2'], seeds=[1],\n"
        "              test_set='tiny test', what='a grid')]\n"
        "labels = {'tiny_plain': 'plain'}\n"
        "verdicts = [dict(claim='looped beats plain', a='a/tiny_looped', b='a/tiny_plain', cost='a/tiny_plain'),\n"
        "            dict(claim='difference of differences', a='a/tiny_looped - a/tiny_plain', "
        "b='a/tiny_plain - a/tiny_looped')]\n"
        "depth = ['a/tiny_looped']\ndepth_loops = [1, 2, 3]\n"
        "targets = [dict(what='plain reaches 0', term='a/tiny_plain', at_least=0.0)]\n")
    report = tmp_path / "RESULTS.md"
    study.main(["--plan", str(plan_path), "--report", str(report), "--jobs", "2"])
    text = report.read_text()
    assert "| looped beats plain | superiority | test_accuracy | 2 |" in text
    assert text.count("p=") == 2  # McNemar per seed, for the claim between two single runs on one test set
    rows = [line for line in text.splitlines() if line.startswith("| difference of differences")]
    # a difference of cells has no one test set to resample (–); the verdict, then what the plan's history says
    assert len(rows) == 1 and "p=" not in rows[0] and re.search(
        r"\| \[[-+.0-9]+, [-+.0-9]+\] \| \[[-+.0-9]+, [-+.0-9]+\] \| – \| .*\| \*\*(confirmed|refuted|inconclusive)\*\* \| as "
        r"planned when its "
        r"data began \(\d{4}-\d\d-\d\d: superiority, 2 seeds\) \|$", rows[0])
    looped = next(line for line in text.splitlines() if line.startswith("| looped beats plain"))
    sentences = re.findall(r"\[([-+.0-9]+), ([-+.0-9]+)\]", looped)[2]  # the seeds + sentences interval
    assert float(sentences[0]) <= float(sentences[1])
    assert "| plain | 2 of 2 |" in text and "| plain reaches 0 |" in text and "| yes |" in text
    assert "\nFinished runs: 6 of 6.\n" in text and lab.report.reported_runs(str(report)) == 6
    assert "## Test-time depth" in text and "(trained: 2)" in text
    # training FLOPs beside the gain, and the tokens seen: 4 steps of 8 of the 64 training texts
    assert re.search(r'Cost of "looped beats plain": `a/tiny_plain` spent \S+ training FLOPs \([0-9.]+ min, about '
                     r'\S+ tokens seen: 0\.50 epochs of [0-9,]+\)', text)
    trained_on = os.path.basename(tiny_dataset)  # one frontier per training set, and one per grid (its budget)
    for png in ("learning_curves.png", "test_time_depth.png", f"frontier_{trained_on}.png", "frontier_g.png"):
        assert f"(results/{png})" in text and os.path.isfile(tmp_path / "results" / png)
    # the figures a verdict may name (lab.plan.RUN_FIGURES, with the task's test_ and final_val_ ones) are the
    # ones train.py writes
    summary = json.loads((tmp_path / "runs" / "a" / "tiny_plain" / "seed1" / "summary.json").read_text())
    assert {*lab.plan.RUN_FIGURES, "test_accuracy", "test_mcc", "final_val_loss"} <= set(summary)
    figures = {k for k in summary if k.startswith(("test_", "final_val_"))}
    assert figures - {"test_n", "final_val_n", "test_predictions"} <= set(lab.plan.metric_names())
    timing = [json.loads((tmp_path / "runs_records" / "a" / n / "seed1" / "measure.json").read_text())
              for n in ("tiny_plain", "tiny_looped")]
    assert [r["ckpt"] for r in timing] == [str(tmp_path / "runs" / "a" / n / "seed1" / "ckpt.pt")
                                           for n in ("tiny_plain", "tiny_looped")]
    assert all(r["flops_per_sample"] > 0 and "latency_ms" not in r for r in timing)  # timed only by --time

    # the verdict row's figures, by hand from the summaries
    def acc(cell, name, seed):
        return json.loads((tmp_path / "runs" / cell / name / f"seed{seed}" / "summary.json").read_text())[
            "test_accuracy"]
    d = np.mean([acc("a", "tiny_looped", s) - acc("a", "tiny_plain", s) for s in (1, 2)])
    assert f"| looped beats plain | superiority | test_accuracy | 2 | {d:+.4f} |" in text
    assert f"| difference of differences | superiority | test_accuracy | 2 | {2 * d:+.4f} |" in text

    # again: everything is finished and measured, so nothing is trained or timed
    capsys.readouterr()
    monkeypatch.setattr(study, "run_pending", lambda *a: pytest.fail("trained again"))
    monkeypatch.setattr(study, "evaluate_script", lambda *a: pytest.fail("measured again"))
    study.main(["--plan", str(plan_path), "--report", str(report)])
    assert "6 of 6 runs finished" in capsys.readouterr().out
    plan = lab.plan.load_plan(str(plan_path))
    results = study.run_plan(plan, collect_only=True)
    with pytest.raises(ValueError, match="do not report 'test_acuracy'"):
        lab.report.judge(dict(claim="typo", a="a/tiny_looped", b="a/tiny_plain", metric="test_acuracy"), results, {})
    # a model against the same runs (as where a search chose the fixed budget itself): a difference of 0 in every
    # seed, and the row says A and B are alike instead of a smallest detectable difference of 0.0000
    same = lab.report.judge(dict(claim="same", a="a/tiny_looped", b="a/tiny_looped"), results, {})
    assert same["alike"] and same["mean"] == 0 and same["verdict"] == "inconclusive"
    assert lab.report.power_cells(same) == "none: A and B alike on every sentence, seed by seed | –"
    line = lab.report.conclusion_line(dict(claim="same", source="-"), same, 0.01)
    assert "**not settled**" in line and "there is no difference to see" in line and "could see is" not in line
    apart = lab.report.judge(dict(claim="apart", a="a/tiny_looped", b="a/tiny_plain"), results, {})
    assert apart["alike"] == (not any(only_a or only_b for only_a, only_b, _ in apart["mcnemar"]))
    assert lab.report.power_cells(dict(detectable=0.01234, seeds_needed=None)) == "0.0123 | > 1,000"
    assert lab.report.power_cells(dict(detectable=0.01234, seeds_needed=9, alike=False)) == "0.0123 | 9"


def test_a_plan_with_unknown_keys_or_no_cells_is_refused(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("cells = [dict(name='a', configs=[])]\nverdict = []\n")
    with pytest.raises(ValueError, match="unknown key 'verdict' \\(did you mean 'verdicts'\\?\\)"):
        lab.plan.load_plan(str(bad))
    bad.write_text("seeds = [1, 2]\n")
    with pytest.raises(ValueError, match="plans no cells"):
        lab.plan.load_plan(str(bad))


def test_the_encoder_study_plan_loads(monkeypatch):
    monkeypatch.chdir(REPO_ROOT)  # its config files are named from the repository's root
    plan = lab.plan.load_plan("config/encoders_study.py")  # and checked whole
    cells = {}
    for cell in plan["cells"]:
        cells[cell["name"]] = study.plan_cell(plan, cell, cells)
    assert "sst2_glue" in cells and len(cells["sst2_glue"][1]) == 33  # 3 configs x 11 seeds
    with pytest.raises(ValueError, match="--cells \\['nope'\\]"):
        study.run_plan(plan, only=["nope"])
    names = {c["name"] for c in plan["cells"]}
    for v in plan["verdicts"]:
        for term in (v["a"], v["b"]):
            assert all(part.strip().split("/")[0] in names for part in term.split(" - "))


def test_a_fresh_clone_writes_the_same_report_from_the_run_records(tiny_dataset, tmp_path, monkeypatch, runs_in_process):
    """Each finished run of a plan leaves its record (summary.json, log.jsonl, config.py; no checkpoint) in
    the plan's records folder, and each cell its measurements and test labels. A clone that has the plan and
    the records but no out/ and no data counts every run as finished (nothing is trained or measured) and
    writes the same report and plots, byte for byte, with --collect_only or without."""
    work, clone = tmp_path / "work", tmp_path / "clone"
    os.makedirs(work)
    monkeypatch.chdir(work)
    shutil.copytree(tiny_dataset, "data")
    configs = [os.path.basename(p) for p in write_tiny_configs(work, "data")]
    plan = (f"out_root = 'out/s'\nrecords = 'results/runs'\nseeds = [1, 2]\n"
            f"cells = [dict(name='a', configs={configs!r}, set=['max_iters=4'], test_set='tiny test', what='tiny')]\n"
            "verdicts = [dict(claim='looped beats plain', a='a/tiny_looped', b='a/tiny_plain')]\n"
            "depth = ['a/tiny_looped']\ndepth_loops = [1, 2]\neffect = 0.05\n"
            "conclusions = [dict(claim='Looping wins', source='a test', verdict='looped beats plain')]\n")
    (work / "plan.py").write_text(plan)
    study.main(["--plan", "plan.py", "--jobs", "2"])
    assert "Timing: not measured yet" in open("RESULTS.md").read()
    monkeypatch.setattr(study, "machine_load", lambda: 1.7)  # another process on each core: no timing
    with pytest.raises(SystemExit, match="the machine is busy \\(load average 1.70"):
        study.main(["--plan", "plan.py", "--time"])
    monkeypatch.setattr(study, "machine_load", lambda: 0.05)
    os.rename("out/s/a/tiny_looped/seed1/ckpt.pt", "ckpt.pt")  # trained in an earlier session, say
    study.main(["--plan", "plan.py", "--time"])  # its architecture is timed with fresh weights, in turns
    looped = json.loads(open("results/runs/a/tiny_looped/seed1/measure.json").read())
    assert looped["untrained"] and looped["latency_ms"] > 0 and "accuracy" in looped  # its measured figures stay
    plain = json.loads(open("results/runs/a/tiny_plain/seed1/measure.json").read())
    assert "untrained" not in plain and plain["latency_ms"] > 0 and plain["timed_interleaved"]
    os.rename("ckpt.pt", "out/s/a/tiny_looped/seed1/ckpt.pt")
    records = sorted(os.path.relpath(os.path.join(d, f), "results/runs") for d, _, fs in os.walk("results/runs")
                     for f in fs)
    measured = {("tiny_looped", 1): ["depth.json", "measure.json"], ("tiny_looped", 2): ["depth.json"],
                ("tiny_plain", 1): ["measure.json"], ("tiny_plain", 2): []}  # first seeds; depth: every seed
    assert records == ["a/data.json", *[f"a/{n}/seed{s}/{f}" for n in ("tiny_looped", "tiny_plain") for s in (1, 2)
                                        for f in sorted(["config.py", "log.jsonl", "summary.json", *measured[n, s]])],
                       "plan_history.jsonl", "timing.json"]
    record = "results/runs/a/tiny_looped/seed2"
    summary = json.loads(open(f"{record}/summary.json").read())
    assert summary == json.loads(open("out/s/a/tiny_looped/seed2/summary.json").read())
    assert bookkeeping.records.same_run(train.make_config([f"{record}/config.py"]), summary["config"], train.DEFAULTS)
    with open("results/runs/a/data.json") as f:
        assert json.load(f)["test_labels"] == [int(y) for y in data.Dataset("data").splits["test"].labels]
    text = open("RESULTS.md").read()
    assert "p=" in text  # McNemar's test, from the recorded labels
    assert re.search(r"## Conclusions\n\n.*\n\n- \*\*Looping wins\*\* \(a test\): \*\*(confirmed|refuted|not settled)", text)
    assert re.search(r"  - 4 runs: .*, cpu, float32, 1 thread\(s\) on 1 core\(s\); torch ", text)
    assert "on a quiet machine (load average 0.05 before, 0.05 after)" in text
    assert re.search(r"\| \d+\.\d\d ms \(1\.00×\) \|", text) and re.search(r"\| \d+\.\d\d ms \(\d\.\d\d×\) \|", text)
    monkeypatch.setattr(study, "machine_load", lambda: 0.07)  # a later pass of the cell's own (--cells)
    study.main(["--plan", "plan.py", "--time", "--cells", "a"])
    with open("results/runs/a/timing.json") as f:
        assert json.load(f)["load_before"] == 0.07  # its conditions in the cell's folder, the plan's pass kept
    text = open("RESULTS.md").read()
    assert "on a quiet machine (load average 0.05 before, 0.05 after)" in text
    assert ("Timed in a pass of their own (study.py --time --cells), so their latencies compare only within it: "
            "a (load average 0.07 before, 0.07 after; ") in text
    monkeypatch.setattr(study, "machine_load", lambda: 0.05)
    study.main(["--plan", "plan.py", "--time"])  # the whole plan again: no cell's own pass stands any longer
    text = open("RESULTS.md").read()
    assert not os.path.exists("results/runs/a/timing.json") and "of their own" not in text

    os.makedirs(clone)
    for name in ("plan.py", *configs, "RESULTS.md", "results"):
        (shutil.copytree if os.path.isdir(name) else shutil.copy)(name, clone / name)
    monkeypatch.chdir(clone)
    monkeypatch.setattr(study, "run_pending", lambda *a: pytest.fail("trained again"))
    monkeypatch.setattr(study, "evaluate_script", lambda *a: pytest.fail("measured again"))
    for flags in (["--collect_only"], []):
        study.main(["--plan", "plan.py", *flags])
        for d, _, files in os.walk("results"):
            for f in files:
                path = os.path.join(d, f)
                assert open(path, "rb").read() == open(work / path, "rb").read(), path
        assert open("RESULTS.md").read() == text
    assert not os.path.exists("out") and not os.path.exists("data")


def test_a_tuned_cell_takes_what_its_sweep_chose_on_validation_and_the_history_notes_it(tiny_dataset, tmp_path, runs_in_process):
    """A sweep cell's grid over learning_rate chooses, per config, the rate whose best checkpoints score highest
    on validation; the tuned cell waits until then, then trains each config at its rate in the same study. The
    plan's history gets a line when each cell's first run is recorded, and one when the plan's rules or seeds
    change; none when nothing changed."""
    plain = write_tiny_configs(tmp_path, tiny_dataset)[:1]
    plan_path = tmp_path / "plan.py"
    cells = (f"cells = [dict(name='s', configs={plain!r}, grid=['learning_rate=1e-4,3e-2'], seeds=[7]),\n"
             f"         dict(name='t', configs={plain!r}, tune=dict(sweep='s', key='learning_rate'))]\n")
    verdicts = ("verdicts = [dict(claim='tuned keeps the slow rate', a='t/tiny_plain', "
                "b='s/tiny_plain@learning_rate=1e-4', rule='non-inferiority', margin=0.5)]\n")
    plan_path.write_text(f"out_root = {str(tmp_path / 'runs')!r}\nseeds = [1]\n{cells}{verdicts}")
    plan = lab.plan.load_plan(str(plan_path))
    earlier = {"s": study.plan_cell(plan, plan["cells"][0], {})}
    waiting, _ = study.plan_cell(plan, plan["cells"][1], earlier)
    assert waiting["waiting"] == {"tiny_plain": "waits for its sweep, s, to finish its runs"}
    assert study.run_plan(plan, only=["t"])["t"][2] == {("tiny_plain", 1): None}  # nothing trained while it waits

    results = study.run_plan(plan, jobs=2)
    best = {}  # the choice, by hand from the sweep's logs
    for rate in ("1e-4", "3e-2"):
        log = tmp_path / "runs_records" / "s" / f"tiny_plain@learning_rate={rate}" / "seed7" / "log.jsonl"
        kept = [e for e in map(json.loads, log.read_text().splitlines()) if e["type"] == "eval" and e["best"]][-1]
        best[rate] = (kept["val_accuracy"], -kept["val_loss"])
    chosen = max(best, key=best.get)
    assert lab.runs.tuned_value(results["s"][1], "tiny_plain", "learning_rate")[0] == chosen
    assert results["t"][2][("tiny_plain", 1)]["config"]["learning_rate"] == float(chosen)
    path = str(tmp_path / "runs_records" / "plan_history.jsonl")
    history = lab.runs.read_history(path)
    assert [(h["event"], h.get("cell")) for h in history] == [("first run", "s"), ("first run", "t")]
    assert history[0]["plan"] == lab.runs.plan_snapshot(plan) and history[0]["commit"]
    # every rule that decides a verdict: each cell's grid and sweeps, and the settings its runs take (which
    # checkpoint is kept among them); and the runs recorded when the line was written
    assert history[0]["plan"]["cells"]["s"]["grid"] == ["learning_rate=1e-4,3e-2"]
    assert history[0]["plan"]["cells"]["t"]["tune"] == {"sweep": "s", "key": "learning_rate"}
    assert history[0]["plan"]["cells"]["t"]["configs"]["tiny_plain"]["select_on"] == "loss"
    assert history[0]["recorded"] == {"s": 1} and history[1]["recorded"] == {"s": 2, "t": 1}  # noted as each lands
    assert history[0]["plan"]["verdicts"]["tuned keeps the slow rate"] == {
        "a": "t/tiny_plain", "b": "s/tiny_plain@learning_rate=1e-4", "rule": "non-inferiority", "margin": 0.5}
    study.run_plan(plan, collect_only=True)  # nothing new: nothing noted
    assert len(lab.runs.read_history(path)) == 2
    plan_path.write_text(plan_path.read_text().replace("margin=0.5", "margin=0.25"))
    study.run_plan(lab.plan.load_plan(str(plan_path)), collect_only=True)
    history = lab.runs.read_history(path)
    assert [h["event"] for h in history] == ["first run", "first run", "plan changed"]
    assert history[-1]["recorded"] == {"s": 2, "t": 1}  # the data seen before the change
    assert history[-1]["plan"]["verdicts"]["tuned keeps the slow rate"]["margin"] == 0.25


def test_a_tuned_cell_trains_the_configs_its_unfinished_sweep_does_not_decide(tiny_dataset, tmp_path, runs_in_process,
                                                                              capsys):
    """Only the configs an unfinished sweep holds wait: the cell's others train meanwhile, so a core does not sit
    idle while the sweep's last run ends (a second study.py on the plan takes them)."""
    plain, looped = write_tiny_configs(tmp_path, tiny_dataset)
    plan_path = tmp_path / "plan.py"
    plan_path.write_text(f"out_root = {str(tmp_path / 'runs')!r}\nseeds = [1]\n"
                         f"cells = [dict(name='s', configs={[plain]!r}, grid=['learning_rate=1e-4,3e-2']),\n"
                         f"         dict(name='t', configs={[plain, looped]!r}, tune=dict(sweep='s', key='learning_rate'))]\n")
    plan = lab.plan.load_plan(str(plan_path))
    summaries = study.run_plan(plan, only=["t"])["t"][2]  # the sweep has trained nothing
    assert summaries[("tiny_plain", 1)] is None
    assert summaries[("tiny_looped", 1)]["config"]["learning_rate"] == train.make_config([looped])["learning_rate"]
    assert "cell t: tiny_plain not trained: it waits for its sweep, s, to finish its runs" in capsys.readouterr().out


@pytest.mark.parametrize("inside", [True, False])
def test_a_tuned_cell_waits_while_its_sweep_chose_an_edge_of_the_grid(inside, tiny_dataset, tmp_path, monkeypatch):
    """With tune's inside=True the best may lie beyond a choice at the grid's edge: the cell waits, saying to extend
    the grid; a choice strictly inside is taken. Without it, an edge is taken as it is."""
    plain = write_tiny_configs(tmp_path, tiny_dataset)[:1]
    plan_path = tmp_path / "plan.py"
    plan_path.write_text(f"cells = [dict(name='s', configs={plain!r}, grid=['learning_rate=1e-4,3e-3,3e-2']),\n"
                         f"         dict(name='t', configs={plain!r}, "
                         f"tune=dict(sweep='s', key='learning_rate', inside={inside}))]\n")
    plan = lab.plan.load_plan(str(plan_path))
    earlier = {"s": study.plan_cell(plan, plan["cells"][0], {})}
    means = {"1e-4": (0.9, 0.3), "3e-3": (0.8, 0.3), "3e-2": (0.7, 0.3)}
    for chosen in ("1e-4", "3e-2", "3e-3"):
        monkeypatch.setattr(study, "tuned_value", lambda runs, config, key, v=chosen: (v, means))
        cell, runs = study.plan_cell(plan, plan["cells"][1], earlier)
        if inside and chosen != "3e-3":
            assert cell["waiting"] == {"tiny_plain": f"waits: in its sweep, s, it chose learning_rate={chosen}, an "
                                                     "edge of the grid; extend that grid past it so the choice is "
                                                     "strictly inside"}
        else:
            assert "waiting" not in cell
            assert all(cfg["learning_rate"] == float(chosen) for _, cfg, _ in runs.values())


def test_a_cell_takes_one_setting_from_each_of_its_sweeps(tiny_dataset, tmp_path, monkeypatch):
    """tune=[...]: each sweep chooses its key for the configs it swept; the cell waits for the sweeps not finished,
    and a config whose key two sweeps would choose is refused."""
    plain, looped = write_tiny_configs(tmp_path, tiny_dataset)
    plan_path = tmp_path / "plan.py"
    plan_path.write_text(f"cells = [dict(name='r', configs={[plain, looped]!r}, grid=['learning_rate=1e-4,3e-2']),\n"
                         f"         dict(name='w', configs={[plain]!r}, grid=['weight_decay=0,0.1']),\n"
                         f"         dict(name='t', configs={[plain, looped]!r}, tune=[dict(sweep='r', key='learning_rate'),"
                         f" dict(sweep='w', key='weight_decay')])]\n")
    plan = lab.plan.load_plan(str(plan_path))
    earlier = {c["name"]: study.plan_cell(plan, c, {}) for c in plan["cells"][:2]}
    chosen = {"learning_rate": "3e-2", "weight_decay": None}
    monkeypatch.setattr(study, "tuned_value", lambda runs, config, key: (chosen[key], {}))
    cell, _ = study.plan_cell(plan, plan["cells"][2], earlier)
    assert cell["waiting"] == {"tiny_plain": "waits for its sweep, w, to finish its runs"}
    chosen["weight_decay"] = "0.1"
    cell, runs = study.plan_cell(plan, plan["cells"][2], earlier)
    assert "waiting" not in cell
    got = {name: (cfg["learning_rate"], cfg["weight_decay"]) for (name, _), (_, cfg, _) in runs.items()}
    assert got == {"tiny_plain": (3e-2, 0.1), "tiny_looped": (3e-2, train.DEFAULTS["weight_decay"])}
    plan_path.write_text(plan_path.read_text().replace("dict(sweep='w', key='weight_decay')",
                                                       "dict(sweep='r', key='learning_rate')"))
    with pytest.raises(ValueError, match="two sweeps choose learning_rate for tiny_"):
        lab.plan.load_plan(str(plan_path))


@pytest.mark.parametrize("tune, message", [
    ("dict(sweep='z', key='learning_rate')", "sweep 'z' is not a cell before this one"),
    ("dict(sweep='s', key='n_loops')", "sweep s's grid axes must be the tuned keys, n_loops, in that order"),
    ("dict(sweep='s', key=['learning_rate'], inside=True, by='x')", "unknown key 'by'"),
    ("dict(sweep='s', key='learning_rate', by='x')", "unknown key 'by'"),
])
def test_a_tune_that_cannot_work_is_refused(tune, message, tiny_dataset, tmp_path):
    configs = write_tiny_configs(tmp_path, tiny_dataset)
    plan_path = tmp_path / "plan.py"
    plan_path.write_text(f"cells = [dict(name='s', configs={configs!r}, grid=['learning_rate=1e-4,3e-2']),\n"
                         f"         dict(name='t', configs={configs!r}, tune={tune})]\n")
    with pytest.raises(ValueError, match=re.escape(message)):
        lab.plan.load_plan(str(plan_path))


def test_rules_judge_an_interval():
    # superiority: which side of 0; non-inferiority: above -margin on the better side; equivalence: within +-margin
    assert lab.stats.claim_verdict(0.001, 0.02, "higher") == "confirmed"
    assert lab.stats.claim_verdict(-0.004, 0.02, "higher", "non-inferiority", 0.005) == "confirmed"
    assert lab.stats.claim_verdict(-0.006, 0.02, "higher", "non-inferiority", 0.005) == "inconclusive"
    assert lab.stats.claim_verdict(-0.03, -0.006, "higher", "non-inferiority", 0.005) == "refuted"
    assert lab.stats.claim_verdict(-0.02, 0.004, "lower", "non-inferiority", 0.005) == "confirmed"  # a loss: lower is better
    assert lab.stats.claim_verdict(0.006, 0.03, "lower", "non-inferiority", 0.005) == "refuted"
    assert lab.stats.claim_verdict(-0.004, 0.004, "higher", "equivalence", 0.005) == "confirmed"
    assert lab.stats.claim_verdict(-0.004, 0.02, "higher", "equivalence", 0.005) == "inconclusive"
    assert lab.stats.claim_verdict(0.006, 0.02, "higher", "equivalence", 0.005) == "refuted"
    with pytest.raises(ValueError, match="rule='better'"):
        lab.stats.claim_verdict(0, 1, "higher", "better", 0.1)
