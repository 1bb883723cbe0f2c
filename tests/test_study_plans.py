"""
study.py's checks and its report, none of which trains: a study plan is checked whole, in well under a
second, before its first run starts, and each mistake is one line that names the fix; so are the command
line's mistakes, while a bug keeps its traceback. A report is never replaced by one that holds fewer
finished runs (the committed RESULTS.md on a fresh clone), and is written together with its plots.
"""

import io
import os
import re
import shutil

import pytest

import lab.plan
import lab.plots
import lab.report
import study
from conftest import REPO_ROOT
from test_study import write_tiny_configs

# -----------------------------------------------------------------------------
# a plan's mistakes


def tiny_plan(tmp_path):
    """A valid plan of one cell of two tiny configs (nothing here trains them), as a dict of its settings."""
    configs = write_tiny_configs(tmp_path, str(tmp_path / "data"))
    return dict(out_root=str(tmp_path / "runs"), seeds=[1, 2],
                cells=[dict(name="a", configs=configs, set=["max_iters=4"], test_set="tiny", what="tiny")],
                labels={"tiny_plain": "plain"},
                verdicts=[dict(claim="looped beats plain", a="a/tiny_looped", b="a/tiny_plain")],
                depth=["a/tiny_looped"],
                targets=[dict(what="plain reaches 0", term="a/tiny_plain", at_least=0.0)])


def write_plan(path, plan, extra=""):
    """The plan file: one assignment a line, then `extra` lines as they are."""
    path.write_text("".join(f"{k} = {v!r}\n" for k, v in plan.items()) + extra)
    return str(path)


def another_tiny_plain(tmp_path):
    """A second config file named tiny_plain.py, in another folder."""
    os.makedirs(tmp_path / "other")
    shutil.copy(tmp_path / "tiny_plain.py", tmp_path / "other" / "tiny_plain.py")
    return str(tmp_path / "other" / "tiny_plain.py")


def cell(plan):
    return plan["cells"][0]


# name: (what changes the valid plan (it may return lines to append to the file), the error it makes)
MISTAKES = {
    "a cell's key misspelt": (lambda p, d: cell(p).update(sets=cell(p).pop("set")),
                              r"plan.py: cell 'a': unknown key 'sets' \(did you mean 'set'\?\)"),
    "a verdict's key misspelt": (lambda p, d: p["verdicts"][0].update(metrc="test_f1"),
                                 r"verdict 'looped beats plain': unknown key 'metrc' \(did you mean 'metric'\?\)"),
    "a target's key misspelt": (lambda p, d: p["targets"][0].update(at_lest=p["targets"][0].pop("at_least")),
                                r"target 'plain reaches 0': unknown key 'at_lest' \(did you mean 'at_least'\?\)"),
    "a target with two bounds": (lambda p, d: p["targets"][0].update(at_most=1.0),
                                 r"target 'plain reaches 0': give exactly one of at_least and at_most"),
    "a target with no bound": (lambda p, d: p["targets"][0].pop("at_least"), r"exactly one of at_least and at_most"),
    "a plan key misspelt": (lambda p, d: p.update(verdict=p.pop("verdicts")),
                            r"plan.py: unknown key 'verdict' \(did you mean 'verdicts'\?\)"),
    "a metric no run reports": (lambda p, d: p["verdicts"][0].update(metric="test_acuracy"),
                                r"no run reports a metric 'test_acuracy' \(did you mean 'test_accuracy'\?\)"),
    "a target's metric": (lambda p, d: p["targets"][0].update(metric="best_val_los"),
                          r"target 'plain reaches 0': no run reports a metric 'best_val_los' \(did you mean "
                          r"'best_val_loss'\?\)"),
    "depth of a config the cell lacks": (lambda p, d: p.update(depth=["a/tiny_lopped"]),
                                         r"depth 'a/tiny_lopped': cell a has no config 'tiny_lopped' \(did you mean "
                                         r"'tiny_looped'\?\)"),
    "depth of a difference": (lambda p, d: p.update(depth=["a/tiny_looped - a/tiny_plain"]),
                              r"depth 'a/tiny_looped - a/tiny_plain': expected one 'cell/config'"),
    "a verdict on a cell the plan lacks": (lambda p, d: p["verdicts"][0].update(b="a/tiny_looped - b/tiny_plain"),
                                           r"verdict 'looped beats plain': b 'a/tiny_looped - b/tiny_plain': the plan "
                                           r"has no cell 'b'"),
    "a cost of a config the plan lacks": (lambda p, d: p["verdicts"][0].update(cost="a/tiny_pretrain"),
                                          r"cost 'a/tiny_pretrain': cell a has no config 'tiny_pretrain'"),
    "a term without its cell": (lambda p, d: p["targets"][0].update(term="tiny_plain"),
                                r"term 'tiny_plain': expected 'cell/config' or 'cell/config - cell/config'"),
    "two cells of one name": (lambda p, d: p["cells"].append(dict(cell(p), what="again")),
                              r"plan.py: two cells are named 'a'"),
    "a cell without configs": (lambda p, d: cell(p).update(configs=[]), r"plan.py: cell 'a' has no configs"),
    "a config file that does not exist": (lambda p, d: cell(p)["configs"].append(str(d / "nope.py")),
                                          r"plan.py: cell 'a': config file .*nope.py not found"),
    "repeated seeds": (lambda p, d: p.update(seeds=[1, 2, 1]),
                       r"plan.py: seeds \[1, 2, 1\] name seed 1 more than once: each seed is one run"),
    "repeated seeds in a cell": (lambda p, d: cell(p).update(seeds=[3, 3]),
                                 r"plan.py: cell 'a': seeds \[3, 3\] name seed 3 more than once"),
    "two configs whose runs would share a folder": (
        lambda p, d: cell(p)["configs"].append(another_tiny_plain(d)),
        r"cell 'a': configs .*/tiny_plain.py and .*/other/tiny_plain.py have one name, tiny_plain, and their runs "
        r"would share its folders: rename one"),
    "an override train.py does not know": (lambda p, d: cell(p).update(set=["max_iter=4"]),
                                           r"plan.py: cell 'a': unknown config key 'max_iter' .*\(did you mean "
                                           r"'max_iters'\?\)"),
    "an override of what the study sets": (lambda p, d: cell(p).update(set=["seed=3"]),
                                           r"cell 'a': set: 'seed=3': the study sets seed itself"),
    "a conclusion's stand-in verdict misspelt": (
        lambda p, d: p.update(conclusions=[dict(claim="Looping wins", source="a test", verdict="looped beats plain",
                                                instead="looped beats plane")]),
        r"conclusion 'Looping wins': instead: no verdict 'looped beats plane' \(did you mean 'looped beats plain'\?\)"),
    "a label of no config": (lambda p, d: p.update(labels={"tiny_plane": "plain"}),
                             r"labels: no cell has a config 'tiny_plane' \(did you mean 'tiny_plain'\?\)"),
    # (the valid plan's file is its seven settings, lines 1-7; these lines come after them)
    "a Python error in the plan": (lambda p, d: "_budget = ['max_iters=4']\ncells[0]['set'] = _budgt\n",
                                   r"plan.py, line 9: NameError: name '_budgt' is not defined"),
    "a syntax error in the plan": (lambda p, d: "notes = ['one',\n", r"plan.py, line 8: '\[' was never closed"),
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_plan_mistake_stops_the_study_before_anything_runs(mistake, tmp_path, monkeypatch):
    """Each mistake is one line, `error: ...`, and nothing is trained or written."""
    edit, message = MISTAKES[mistake]
    plan = tiny_plan(tmp_path)
    extra = edit(plan, tmp_path)
    path = write_plan(tmp_path / "plan.py", plan, extra if isinstance(extra, str) else "")
    monkeypatch.setattr(study, "run_pending", lambda *a: pytest.fail("a run was started"))
    with pytest.raises(SystemExit) as stopped:
        study.main(["--plan", path, "--report", str(tmp_path / "RESULTS.md"), "--collect_only"])
    error = str(stopped.value.code)
    assert error.startswith("error: ") and "\n" not in error and re.search(message, error), error
    assert not os.path.exists(tmp_path / "RESULTS.md") and not os.path.exists(tmp_path / "runs")


def test_the_tiny_plan_itself_passes(tmp_path):
    """The plan the mistakes above are made in is valid: each of them is the one thing wrong."""
    plan = lab.plan.load_plan(write_plan(tmp_path / "plan.py", tiny_plan(tmp_path)))
    assert [c["name"] for c in plan["cells"]] == ["a"] and plan["depth"] == ["a/tiny_looped"]


def test_a_mistake_in_the_last_cell_stops_the_whole_plan(tmp_path, monkeypatch):
    """The encoder study with one override misspelt in its last cell: refused before its first cell trains
    or anything is written, naming the cell and the key it meant."""
    monkeypatch.chdir(REPO_ROOT)  # the plan names its config files from the repository's root
    path = tmp_path / "plan.py"
    path.write_text(f"exec(open({os.path.join(REPO_ROOT, 'config', 'encoders_study.py')!r}).read())\n"
                    f"out_root = {str(tmp_path / 'runs')!r}\n"
                    "cells[-1]['set'] = cells[-1]['set'] + ['warmup_iter=3']\n")
    monkeypatch.setattr(study, "run_pending", lambda *a: pytest.fail("a run was started"))
    with pytest.raises(SystemExit, match=r"cell 'multidomain': unknown config key 'warmup_iter' .*\(did you mean "
                                         r"'warmup_iters'\?\)"):
        study.main(["--plan", str(path), "--report", str(tmp_path / "RESULTS.md")])
    assert os.listdir(tmp_path) == ["plan.py"]  # no run folder, no report: refused before anything was written


# -----------------------------------------------------------------------------
# the command line's mistakes


@pytest.mark.parametrize("args, message", [
    (["{plain}", "--seeds", "1", "1", "2"], r"--seeds \[1, 1, 2\] name seed 1 more than once: each seed is one run"),
    (["{plain}", "{other}", "--seeds", "1", "2"], r"configs .*/tiny_plain.py and .*/other/tiny_plain.py have one "
                                                  r"name, tiny_plain, and their runs would share its folders"),
    (["{plain}", "{plain}", "--seeds", "1", "2"], r"config .*tiny_plain.py is given twice"),
    (["{plain}", "--seeds", "1", "2", "--grid", "n_loops=1,2,1"], r"--grid 'n_loops=1,2,1' repeats 1"),
    (["{plain}", "--seeds", "1", "2", "--set", "out_dir=x"], r"--set: 'out_dir=x': the study sets out_dir itself"),
    (["{plain}", "--seeds", "1", "2", "--set", "max_iter=3"], r"unknown config key 'max_iter' in --max_iter \(did "
                                                              r"you mean 'max_iters'\?\)"),
    (["{plain}", "--seeds", "1", "2", "--metrics", "test_acuracy"], r"did you mean 'test_accuracy'"),
    (["{plain}", "--seeds", "1", "2", "--json", "{tmp}/no/such/folder/s.json"], r"--json .*: there is no folder"),
    (["{plain}", "--seeds", "1", "2", "--json", "{tmp}/kept.json"], r"--json .*kept.json exists: give another file"),
    (["{plain}", "--seeds", "1", "2", "--report", "R.md"], r"--report: only with --plan"),
    (["--plan", "{plan}", "--seeds", "1", "2"], r"--seeds: not with --plan"),
])
def test_command_line_mistakes_are_one_line_before_anything_runs(args, message, tmp_path, monkeypatch):
    plain = write_tiny_configs(tmp_path, str(tmp_path / "data"))[0]
    names = dict(plain=plain, other=another_tiny_plain(tmp_path), tmp=str(tmp_path),
                 plan=write_plan(tmp_path / "plan.py", tiny_plan(tmp_path)))
    (tmp_path / "kept.json").write_text("{}")  # a result of the user's, which --json must not replace
    monkeypatch.setattr(study, "run_pending", lambda *a: pytest.fail("a run was started"))
    with pytest.raises(SystemExit) as stopped:
        study.main([a.format(**names) for a in args] + ["--out_root", str(tmp_path / "s")] * ("--plan" not in args))
    error = str(stopped.value.code)
    assert error.startswith("error: ") and re.search(message, error), error


def test_a_bug_keeps_its_traceback(tmp_path, monkeypatch):
    """Only bad input (a configurator.UserError) is turned into one line; any other exception is a bug in
    this code, and reaches the user whole."""
    def bug(*args, **kwargs):
        raise ValueError("a bug in plan_runs")

    monkeypatch.setattr(study, "plan_runs", bug)
    with pytest.raises(ValueError, match="a bug in plan_runs"):
        study.main([write_tiny_configs(tmp_path, "data")[0], "--seeds", "1", "2"])


# -----------------------------------------------------------------------------
# the report


def test_a_cell_s_overrides_are_shown_once_each_at_the_value_that_wins():
    """A cell's `set` joins shared lists (heldout_best_lr: the converged recipe's and the held-out protocol's,
    both with dtype=float32); its heading names each key once, at its last value, the one train.py keeps. So does
    every cell heading of the committed RESULTS.md (heldout_best and its sweep named dtype twice before)."""
    cell = {"set": ["dtype=float32", "max_epochs=30", "dtype=float32", "max_epochs=2", "protocol=glue_heldout"]}
    assert lab.report.overrides(cell) == ["dtype=float32", "max_epochs=2", "protocol=glue_heldout"]
    assert lab.report.overrides({}) == []
    with open(os.path.join(REPO_ROOT, "RESULTS.md")) as f:
        headings = [line.partition("Overrides: `")[2].partition("`")[0] for line in f if line.startswith("Test set")]
    assert any("max_epochs=30" in h and "select_on=accuracy" in h for h in headings)  # heldout_best's are read
    for heading in headings:
        keys = [setting.partition("=")[0] for setting in heading.split()]
        assert len(keys) == len(set(keys)), heading


# the first lines of a report study.py wrote, as report_lines writes them
REPORT_TOP = ("# Results: recurrent vs standard encoders\n\nWritten by `python study.py --plan plan.py --report "
              "RESULTS.md` from the run records under `records/` (do not edit by hand: run the command again).\n\n")

# files that --report may name by mistake. The first says it holds 0 runs, as many as a new report of the
# tiny plan would: the run-count guard alone let study.py replace it (and the others, read as 0 runs)
NOT_REPORTS = {
    "another tool's results": b"# Results\n\nMade by another tool.\n\nFinished runs: 0 of 4.\n",
    "a note": b"Notes for the write-up, by hand.\n",
    "an empty file": b"",
    "a binary file": bytes(range(256)),
}


@pytest.mark.parametrize("what", NOT_REPORTS)
def test_a_file_that_is_not_a_report_is_never_replaced(what, tmp_path, monkeypatch):
    """--report onto a file that study.py did not write is refused in one line that says how to go on,
    whatever the run counts (none of the plan's runs are there; --allow_fewer is given), before the plan's
    runs are even looked for, so a long study does not end by refusing; the file is left as it was."""
    plan = write_plan(tmp_path / "plan.py", tiny_plan(tmp_path))
    report = tmp_path / "notes.md"
    report.write_bytes(NOT_REPORTS[what])
    monkeypatch.setattr(study, "run_plan", lambda *a: pytest.fail("the plan was run"))
    with pytest.raises(SystemExit) as stopped:  # sys.exit with a message: exit status 1
        study.main(["--plan", plan, "--report", str(report), "--allow_fewer"])
    assert stopped.value.code == (
        f"error: --report {report}: that file is not a report study.py wrote (one begins with a title, then "
        f"'Written by `python study.py --plan ...'), so it is kept. Give another --report path, or move the "
        f"file away and run again")
    assert report.read_bytes() == NOT_REPORTS[what]
    assert sorted(os.listdir(tmp_path)) == ["notes.md", "plan.py", "tiny_looped.py", "tiny_plain.py"]


def test_a_folder_at_the_report_path_is_refused_before_anything_runs(tmp_path, monkeypatch):
    """A folder where the report is to go is refused at the start, not when the report is moved into place."""
    plan = write_plan(tmp_path / "plan.py", tiny_plan(tmp_path))
    os.makedirs(tmp_path / "RESULTS.md")
    monkeypatch.setattr(study, "run_plan", lambda *a: pytest.fail("the plan was run"))
    with pytest.raises(SystemExit) as stopped:
        study.main(["--plan", plan, "--report", str(tmp_path / "RESULTS.md")])
    assert stopped.value.code == (f"error: --report {tmp_path / 'RESULTS.md'}: that is not a file; give the path "
                                  f"of the report to write")


def test_a_report_study_py_wrote_is_replaced(tmp_path):
    """A report study.py wrote is replaced as before: the one it has just written, and one whose header is
    in each form the committed RESULTS.md has had (it named the runs' folder, later their records)."""
    plan = write_plan(tmp_path / "plan.py", tiny_plan(tmp_path))
    report = tmp_path / "RESULTS.md"
    study.main(["--plan", plan, "--report", str(report), "--collect_only"])
    written = report.read_text()
    committed = "".join(open(os.path.join(REPO_ROOT, "RESULTS.md")).readlines()[:4])
    oldest = ("# Results: recurrent vs standard encoders\n\nWritten by `python study.py --plan "
              "config/encoders_study.py --report RESULTS.md` from the finished runs under `out/encoders/` (do not "
              "edit by hand: run the command again).\n\n")
    for before in (written + "an edit by hand\n", committed + "Finished runs: 0 of 4.\n", oldest):
        report.write_text(before)
        study.main(["--plan", plan, "--report", str(report), "--collect_only"])
        assert report.read_text() == written


def test_a_report_with_more_finished_runs_is_kept(tmp_path, capsys):
    """A report that holds more finished runs than the new one would is not replaced (one line that gives
    both counts and the flag), unless --allow_fewer; the count is read back from the report itself."""
    plan = write_plan(tmp_path / "plan.py", tiny_plan(tmp_path))
    report = tmp_path / "RESULTS.md"
    report.write_text(REPORT_TOP + "Finished runs: 3 of 4.\n")
    with pytest.raises(SystemExit) as stopped:
        study.main(["--plan", plan, "--report", str(report), "--collect_only"])
    assert str(stopped.value.code) == (
        f"error: {report} reports 3 finished runs, and a new report would hold 0 (of 4 planned; read from "
        f"{tmp_path / 'runs'}/): it is kept. Train or bring back the missing runs, or give --allow_fewer to "
        f"replace it anyway")
    assert report.read_text() == REPORT_TOP + "Finished runs: 3 of 4.\n"
    study.main(["--plan", plan, "--report", str(report), "--collect_only", "--allow_fewer"])
    assert "\nFinished runs: 0 of 4.\n" in report.read_text() and lab.report.reported_runs(str(report)) == 0
    study.main(["--plan", plan, "--report", str(report), "--collect_only"])  # as many as before: written
    assert f"wrote {report}" in capsys.readouterr().out


def picture(png):
    """What a PNG (its bytes) shows: its mode, size, metadata (the dpi, the Matplotlib that drew it) and
    pixels. Not its compressed bytes: those can depend on the zlib Pillow is built with, not on the plot."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as im:
        return im.mode, im.size, im.info, im.tobytes()


def png_text(png):
    """A PNG's (its bytes') metadata, without decoding its pixels."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as im:
        return dict(im.info)


def differing_pixels(a, b):
    """The box (left, top, right, bottom) of the pixels in which two PNGs (their bytes) differ, or their sizes."""
    from PIL import Image, ImageChops

    with Image.open(io.BytesIO(a)) as x, Image.open(io.BytesIO(b)) as y:
        if x.size != y.size:
            return f"size {x.size} against {y.size}"
        return ImageChops.difference(x.convert("RGB"), y.convert("RGB")).getbbox()


@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory):
    """`python study.py --plan config/encoders_study.py --collect_only` run once in a copy of the repository's
    report and records (a fresh clone: no out/, no data/), training and measuring nothing; shared by the
    tests below, since writing the report from 258 runs' records takes a while. Returns the folder, the
    files before and after ({path: bytes}) and the plots each savefig drew ({png: what it draws})."""
    folder = tmp_path_factory.mktemp("fresh_clone")
    shutil.copy(os.path.join(REPO_ROOT, "RESULTS.md"), folder / "RESULTS.md")
    shutil.copytree(os.path.join(REPO_ROOT, "results"), folder / "results")
    os.symlink(os.path.join(REPO_ROOT, "config"), folder / "config")
    with pytest.MonkeyPatch.context() as m:
        m.chdir(folder)
        m.setattr(study, "run_pending", lambda *a: pytest.fail("trained"))
        m.setattr(study, "evaluate_script", lambda *a: pytest.fail("measured"))
        files = ["RESULTS.md", *(os.path.join(d, f) for d, _, fs in os.walk("results") for f in fs)]
        before = {p: open(p, "rb").read() for p in files}
        study.main(["--plan", "config/encoders_study.py", "--collect_only"])
        after = {os.path.join(d, f) for d, _, fs in os.walk("results") for f in fs} | {"RESULTS.md"}
        now = {p: open(p, "rb").read() for p in sorted(after)}
    return dict(folder=folder, before=before, now=now)


def test_a_fresh_clone_writes_the_committed_results_again(fresh_clone, monkeypatch):
    """`python study.py --plan config/encoders_study.py --collect_only` on a fresh clone (no out/, no data/)
    writes the committed RESULTS.md again byte for byte, and its plots with the same data drawn (the digest
    each PNG carries, lab.plots.drawn_digest) and, under the Matplotlib that drew them, pixel for pixel, from
    the committed run records in results/runs/, training and measuring nothing. Without the records it would
    hold no run, and the committed report, which holds more, is kept (refused in one line). The plots are
    drawn the same on any CPU (lab.plots.tight_layout); another Matplotlib draws other pixels, and then only
    the data are compared (the test says so, skipped)."""
    import matplotlib

    before, now = fresh_clone["before"], fresh_clone["now"]
    assert set(now) == set(before)  # no file more, none less
    files = sorted(before)
    committed = lab.report.reported_runs(os.path.join(REPO_ROOT, "RESULTS.md"))
    assert committed > 0
    assert [p for p in files if not p.endswith(".png") and now[p] != before[p]] == []  # RESULTS.md, the records
    plots = [p for p in files if p.endswith(".png")]
    assert len(plots) >= 10
    # what each plot draws (lab.plots.drawn_digest, in the PNG), whichever Matplotlib draws it
    digests = {p: (png_text(before[p]).get(lab.plots.DRAWN_KEY), png_text(now[p]).get(lab.plots.DRAWN_KEY))
               for p in plots}
    assert all(old for old, _ in digests.values()) and {p: d for p, d in digests.items() if d[0] != d[1]} == {}
    redrawn = {p: differing_pixels(before[p], now[p]) for p in plots if picture(before[p]) != picture(now[p])}
    monkeypatch.chdir(fresh_clone["folder"])
    monkeypatch.setattr(study, "run_pending", lambda *a: pytest.fail("trained"))
    shutil.rmtree("results/runs")
    with pytest.raises(SystemExit, match=f"error: RESULTS.md reports {committed} finished runs, and a new report "
                                         f"would hold 0 "):
        study.main(["--plan", "config/encoders_study.py", "--collect_only"])
    assert open("RESULTS.md", "rb").read() == before["RESULTS.md"]
    drawn_by = sorted({png_text(before[p]).get("Software", "an unnamed program") for p in plots})
    here = f"Matplotlib version{matplotlib.__version__}, https://matplotlib.org/"
    if redrawn and drawn_by != [here]:
        pytest.skip(f"the committed plots were drawn by {' and '.join(drawn_by)}, this is {here}: they draw the "
                    f"same data, and {len(redrawn)} of them come out in other pixels, not compared")
    assert redrawn == {}  # {plot: the box of the pixels that differ}


def test_a_plots_digest_is_its_data_not_its_style():
    """lab.plots.drawn_digest changes with any number or text a plot draws, and not with how it is drawn
    (colours, widths, figure size, where the ticks fall), which is what another Matplotlib changes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def digest(points=((1, 0.8), (2, 0.9)), size=30, title="t", color="C0", figsize=(6, 4), hist=(1, 2, 2)):
        fig, (ax, bx) = plt.subplots(1, 2, figsize=figsize)
        ax.plot(*zip(*points), color=color, label="a")
        ax.scatter([1, 2], [0.8, 0.9], s=size)
        ax.errorbar([1, 2], [0.8, 0.9], yerr=[0.01, 0.02], fmt="none")
        ax.annotate("1", (1, 0.8))
        ax.set_title(title)
        ax.set_xscale("log")
        ax.legend()
        bx.hist(hist, bins=[1, 2, 3])
        fig.text(0.01, 0.01, "key")
        d = lab.plots.drawn_digest(fig)
        plt.close(fig)
        return d

    same = digest()
    assert digest(color="C3") == same and digest(figsize=(7, 5)) == same
    changed = [digest(points=((1, 0.8), (2, 0.91))), digest(size=31), digest(title="u"), digest(hist=(1, 1, 2))]
    assert len({same, *changed}) == 5


def test_a_latency_panel_shows_one_timing_pass(tmp_path):
    """Latencies of different timing passes do not compare: cells a --cells pass timed (their own timing.json)
    and cells of the whole plan's pass never share a latency panel; the pass that timed the most points stays,
    the others' cells are named."""
    for cell in ("new1", "new2"):
        os.makedirs(tmp_path / cell)
        (tmp_path / cell / "timing.json").write_text('{"load_before": 0.49, "commit": "a83a53e"}')
    timed = [("old", {"latency_ms": 18.5}), ("new1", {"latency_ms": 10.1}), ("new2", {"latency_ms": 9.3}),
             ("new1", {"latency_ms": 18.1})]
    kept, left_out = lab.plots.one_timing_pass(str(tmp_path), timed)
    assert kept == timed[1:] and left_out == ["old"]
    kept, left_out = lab.plots.one_timing_pass(str(tmp_path), timed[:1])  # one pass: every point stays
    assert kept == timed[:1] and left_out == []


def test_the_plots_layout_does_not_depend_on_the_last_bit_of_log10(monkeypatch):
    """numpy's log10 rounds its last bit differently on different CPUs (its AVX-512 code and its AVX2 code),
    and tight_layout measures log axes through it: frontier_sst2_glue_compact.png came out with its right
    panel one pixel column apart on another machine. Two log panels with that plot's limits put the right
    panel's edge at exactly 1303.5 pixels, half way between two columns (checked below, unrounded), and
    there matplotlib's own layout moves when every log10 is one bit off (low on one CPU, high on another, as
    each rounds its own). lab.plots.tight_layout lays it out the same whether every log10 it takes is one bit
    low, one bit high, or either at random."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    def layout(tight=lab.plots.tight_layout):
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
        for ax, limits in zip(axes, [(0.07499233455977092, 51.43520487602974),
                                     (0.1722038826542939, 292368622.7277095)]):
            ax.set_xscale("log")
            ax.set_xlim(*limits)
        tight(fig, rect=(0, 0.04, 1, 1))
        p = fig.subplotpars
        plt.close(fig)
        return [p.left, p.right, p.bottom, p.top, p.wspace, p.hspace]

    log10, rng = np.log10, np.random.default_rng(0)
    low = lambda x, *a, **k: np.nextafter(np.asarray(log10(x, *a, **k)), -np.inf)  # noqa: E731
    high = lambda x, *a, **k: np.nextafter(np.asarray(log10(x, *a, **k)), np.inf)  # noqa: E731

    def either(x, *args, **kwargs):
        y = np.asarray(log10(x, *args, **kwargs))
        return np.where(rng.random(y.shape) < 0.5, np.nextafter(y, -np.inf), np.nextafter(y, np.inf))

    unrounded = layout(lambda fig, **kw: fig.tight_layout(**kw))
    # the half-pixel case itself (12 inches at savefig's 110 dpi); another Matplotlib's fonts may lay it out
    # elsewhere, and then this test would have nothing to catch: it says so
    assert abs(unrounded[1] * 12 * 110 - 1303.5) < 1e-9, f"the right edge is at {unrounded[1] * 1320} pixels"

    exact = layout()
    moved = []  # what the rounding is for: unrounded, a bit off in log10 moves the layout; which way moves it
    for off in (low, high):  # depends on the CPU's log10 (one bit high on an AVX-512 Xeon, one bit low on the EPYC)
        with monkeypatch.context() as m:
            m.setattr(np, "log10", off)
            moved.append(layout(lambda fig, **kw: fig.tight_layout(**kw)) != unrounded)
    assert any(moved), "neither a bit low nor a bit high in log10 moves matplotlib's own layout"
    for off in (low, high, either):
        monkeypatch.setattr(np, "log10", off)
        assert layout() == exact


def test_the_report_and_its_plots_are_written_together(tmp_path, monkeypatch):
    """The report and its plots are made in a temporary folder and moved into place only once all of them
    are there: a failure half-way leaves the old ones. The plots the old report showed and the new one does
    not are removed; nothing else in results/ is touched (results/runs/ holds committed run records)."""
    plan = lab.plan.load_plan(write_plan(tmp_path / "plan.py", tiny_plan(tmp_path)))
    results = study.run_plan(plan, collect_only=True)
    report, plots = tmp_path / "RESULTS.md", tmp_path / "results"
    os.makedirs(plots / "runs")
    old = {"old_cell.png": b"a plot of a cell the plan no longer has", "curves.png": b"the old learning curves",
           "runs/record.png": b"a committed run record", "mine.png": b"a plot no report made"}
    for name, content in old.items():
        (plots / name).write_bytes(content)
    old_report = "old\n\n![a](results/old_cell.png)\n\n![b](results/curves.png)\n\n![c](results/runs/record.png)\n"
    report.write_text(old_report)

    def draw_plots(plan, results, timing, depth, folder, label):  # one plot, made as lab.plots.draw_plots makes it
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "curves.png"), "wb") as f:
            f.write(b"the new learning curves")
        return [("Learning curves", os.path.join(folder, "curves.png"))]

    monkeypatch.setattr(lab.report, "draw_plots", draw_plots)
    with monkeypatch.context() as m:  # a failure after the plots are drawn
        m.setattr(lab.report, "run_conditions", lambda results: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            lab.report.write_report(plan, results, {}, {}, str(report))
    assert report.read_text() == old_report and {n: (plots / n).read_bytes() for n in old} == old
    assert sorted(os.listdir(tmp_path)) == ["RESULTS.md", "plan.py", "results", "tiny_looped.py", "tiny_plain.py"]

    lab.report.write_report(plan, results, {}, {}, str(report))
    assert "![Learning curves](results/curves.png)" in report.read_text()
    assert (plots / "curves.png").read_bytes() == b"the new learning curves"
    assert not (plots / "old_cell.png").exists()
    assert {n: (plots / n).read_bytes() for n in ("runs/record.png", "mine.png")} == {
        n: old[n] for n in ("runs/record.png", "mine.png")}


def test_the_committed_records_write_the_committed_report_again(tmp_path, monkeypatch):
    """tests/fixtures/study_records holds a plan of tiny runs, its run records (results/runs/, as a session
    commits them: no checkpoint, no out/, no data) and the report they made. In a copy, --collect_only writes
    that report again byte for byte, and trains and measures nothing. After a deliberate change of the
    report's form, run `python study.py --plan plan.py --collect_only` in that folder and review the diff."""
    shutil.copytree(os.path.join(REPO_ROOT, "tests", "fixtures", "study_records"), tmp_path / "f")
    monkeypatch.chdir(tmp_path / "f")
    monkeypatch.setattr(study, "run_pending", lambda *a: pytest.fail("trained"))
    monkeypatch.setattr(study, "evaluate_script", lambda *a: pytest.fail("measured"))
    committed = open("RESULTS.md", "rb").read()
    os.remove("RESULTS.md")
    study.main(["--plan", "plan.py", "--collect_only"])
    assert open("RESULTS.md", "rb").read() == committed
    assert b"Finished runs: 4 of 4." in committed and b"## Conclusions" in committed and b"p=" in committed
