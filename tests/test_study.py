"""
study.py: the statistics against independent computations, the plan (names, grids, what counts as
finished), whole studies of tiny classification and language-model runs (trained as subprocesses,
collected, resumed after an interruption), and the import layering that puts study.py on top.
"""

import ast
import glob
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import bookkeeping.records
import configurator
import data
import lab.plan
import lab.runs
import lab.stats
import study
import train
from conftest import REPO_ROOT, RunInProcess

# -----------------------------------------------------------------------------
# statistics


def t_quantile_by_integration(df):
    """t_{0.975, df} computed here from scratch: bisection on the integral of Student's t density from 0
    to q (Simpson's rule), which must reach 0.475."""
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def mass(q, n=20001):
        x = np.linspace(0.0, q, n)
        y = np.exp(log_c - (df + 1) / 2 * np.log1p(x * x / df))
        return (q / (n - 1) / 3) * (y[0] + y[-1] + 4 * y[1:-1:2].sum() + 2 * y[2:-1:2].sum())

    lo, hi = 0.0, 20.0
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mass(mid) < 0.475 else (lo, mid)
    return (lo + hi) / 2


@pytest.mark.parametrize("df", [1, 2, 4, 9, 19, 30, 31, 40, 120])
def test_t_quantile_matches_the_t_distribution(df):
    """The table (3 decimals, df <= 30) and the expansion beyond it, against the quantile of the density."""
    assert lab.stats.t_quantile_975(df) == pytest.approx(t_quantile_by_integration(df), abs=1e-3)


def test_mean_ci():
    mean, half = lab.stats.mean_ci([1, 2, 3, 4, 5])
    assert mean == 3 and half == pytest.approx(t_quantile_by_integration(4) * math.sqrt(2.5) / math.sqrt(5), abs=1e-3)
    with pytest.raises(ValueError):
        lab.stats.mean_ci([1.0])


def test_paired_bootstrap_known_cases():
    # a constant difference: every resample has mean c
    assert lab.stats.paired_bootstrap([1, 2, 3], [1.5, 2.5, 3.5]) == pytest.approx((0.5, 0.5, 0.5))
    # differences (0, 1): resampled means are 0, 0.5, 1 with probabilities 1/4, 1/2, 1/4, so the
    # 2.5th and 97.5th percentiles are the extremes
    d, lo, hi = lab.stats.paired_bootstrap([0, 0], [0, 1], n_boot=20000)
    assert (d, lo, hi) == (0.5, 0.0, 1.0)
    # pairing matters: a large shared per-seed spread cancels out
    base = [10.0, 20.0, 30.0, 40.0, 50.0]
    d, lo, hi = lab.stats.paired_bootstrap(base, [b + 1 + 0.01 * i for i, b in enumerate(base)])
    assert 1.0 <= lo < d < hi <= 1.04


def test_paired_t_interval_and_why_the_verdict_uses_it():
    """Three seeds whose differences share a sign: the bootstrap interval excludes 0 (it cannot leave
    the range of the three), the paired t-interval (t_{0.975,2} = 4.303) does not."""
    base, variant = [0.80, 0.81, 0.82], [0.801, 0.83, 0.821]  # differences +0.001, +0.02, +0.001
    d, lo, hi = lab.stats.paired_t(base, variant)
    diffs = np.array(variant) - np.array(base)
    assert d == pytest.approx(diffs.mean())
    assert hi - d == pytest.approx(4.303 * diffs.std(ddof=1) / math.sqrt(3))
    assert lo < 0 < hi and lab.stats.verdict(lo, hi, "higher") == "no significant difference"
    _, b_lo, _ = lab.stats.paired_bootstrap(base, variant)
    assert b_lo > 0


def test_verdict_follows_the_metric_direction():
    assert lab.stats.verdict(1.0, 2.0, "lower") == "worse" and lab.stats.verdict(1.0, 2.0, "higher") == "better"
    assert lab.stats.verdict(-2.0, -1.0, "lower") == "better" and lab.stats.verdict(-2.0, -1.0, "higher") == "worse"
    assert lab.stats.verdict(-1.0, 2.0, "higher") == "no significant difference"
    assert lab.stats.verdict(1.0, 2.0, "neither") == "higher" and lab.stats.verdict(-2.0, -1.0, "neither") == "lower"
    with pytest.raises(ValueError, match="better='up'"):
        lab.stats.verdict(1.0, 2.0, "up")


# -----------------------------------------------------------------------------
# the plan


def test_plan_names_grid_points_and_overrides(tmp_path):
    cfg_file = tmp_path / "tiny_enc.py"
    cfg_file.write_text("n_layer = 1\n")
    runs = lab.runs.plan_runs([str(cfg_file)], [1, 2], str(tmp_path / "s"), sets=["max_iters=3"],
                           grid=["n_loops=1,3", "pooling=cls,mean"])
    assert len(runs) == 8
    key = ("tiny_enc@n_loops=3,pooling=mean", 2)
    argv, cfg, _ = runs[key]
    assert (cfg["n_loops"], cfg["pooling"], cfg["max_iters"], cfg["seed"], cfg["n_layer"]) == (3, "mean", 3, 2, 1)
    assert cfg["out_dir"] == os.path.join(str(tmp_path / "s"), "tiny_enc@n_loops=3,pooling=mean", "seed2")
    assert list(dict.fromkeys(n for n, _ in runs))[0] == "tiny_enc@n_loops=1,pooling=cls"  # the grid in order
    with pytest.raises(Exception, match="KEY=V1,V2"):
        lab.runs.plan_runs([str(cfg_file)], [1, 2], "s", grid=["n_loops"])


def test_finished_means_same_config_and_not_interrupted(tmp_path):
    cfg = train.make_config([f"--out_dir={tmp_path}"])
    assert lab.runs.finished_summary(cfg) is None
    data.write_json(str(tmp_path / "summary.json"), {"stopped": "max_iters", "config": {**cfg, "init_from": "resume"}})
    assert lab.runs.finished_summary(cfg)["stopped"] == "max_iters"  # init_from says how, not what
    data.write_json(str(tmp_path / "summary.json"), {"stopped": "max_iters", "config": {**cfg, "init_from": "a.bin"}})
    assert lab.runs.finished_summary(cfg) is None  # starting from a checkpoint is another run
    data.write_json(str(tmp_path / "summary.json"), {"stopped": "max_iters", "config": {**cfg, "seed": 2}})
    assert lab.runs.finished_summary(cfg) is None
    # a run made before the fused norms and AdamW were the defaults (another path to the same function) counts
    old = {k: v for k, v in cfg.items() if k not in ("norm_impl", "ffn_impl")}
    data.write_json(str(tmp_path / "summary.json"), {"stopped": "max_iters", "config": {**old, "adamw_impl": "torch"}})
    assert lab.runs.finished_summary(cfg)["stopped"] == "max_iters"
    data.write_json(str(tmp_path / "summary.json"), {"stopped": "interrupted", "config": cfg})
    assert lab.runs.finished_summary(cfg) is None


def fake_run(cfg, finished=True):
    """The files train.py leaves for a run of cfg in its out_dir, without training it: a finished run's
    summary.json, or a stopped run's last.pt and the start record of its log."""
    os.makedirs(cfg["out_dir"], exist_ok=True)
    if finished:
        data.write_json(os.path.join(cfg["out_dir"], "summary.json"), {"stopped": "max_iters", "config": cfg})
    else:
        open(os.path.join(cfg["out_dir"], "last.pt"), "wb").close()
        with open(os.path.join(cfg["out_dir"], "log.jsonl"), "w") as f:
            f.write(json.dumps({"type": "start", "iter": 0, "config": cfg}) + "\n")


def test_a_record_written_meanwhile_by_another_study_is_kept(tmp_path, monkeypatch):
    """Two study.py on one plan may both record a run one of them finished: the one that renames its copy
    into place second keeps the first's record and goes on, rather than failing (and stopping its runs)."""
    cfg = train.make_config([f"--out_dir={tmp_path / 'run'}"])
    fake_run(cfg)
    with open(os.path.join(cfg["out_dir"], "log.jsonl"), "w") as f:
        f.write(json.dumps({"type": "start", "iter": 0, "config": cfg}) + "\n")
    record, rename = str(tmp_path / "records" / "seed1"), os.rename

    def other_study_first(src, dst):  # the other process's record lands between our copy and our rename
        if dst == record and not os.path.exists(record):
            shutil.copytree(src, record)
            with open(os.path.join(record, "theirs"), "w") as f:
                f.write("x")
        rename(src, dst)

    monkeypatch.setattr(os, "rename", other_study_first)
    assert lab.runs.save_record(cfg, record) is False
    assert sorted(os.listdir(record)) == ["config.py", "log.jsonl", "summary.json", "theirs"]
    assert os.listdir(os.path.dirname(record)) == ["seed1"]  # no staging folder left behind
    monkeypatch.setattr(os, "rename", rename)
    os.makedirs(tmp_path / "records" / "seed2")  # a folder that holds no record is still refused
    with pytest.raises(lab.plan.StudyError, match="holds no run record"):
        lab.runs.save_record(cfg, str(tmp_path / "records" / "seed2"))


def test_a_plan_edited_under_a_running_study_stops_it(tmp_path, monkeypatch):
    """A study trains the plan it read. Edited since (a cell's settings changed), the runs it would start next
    may not be the plan's any more, or be runs it now counts as finished: it stops before the next run."""
    monkeypatch.chdir(tmp_path)
    configs = [os.path.basename(p) for p in write_tiny_configs(tmp_path, "data")]
    text = (f"out_root = 'out'\nseeds = [1]\ncells = [dict(name='a', configs={configs!r}, test_set='t', what='a'), "
            f"dict(name='b', configs={configs!r}, set=['max_iters=3'], test_set='t', what='b')]\n")
    (tmp_path / "plan.py").write_text(text)
    plan = lab.plan.load_plan("plan.py")
    started = []

    def run_pending(runs, todo, jobs, check=None, recorded=None):  # cell a's runs: the plan is edited while they train
        check()
        started.append(todo)
        (tmp_path / "plan.py").write_text(text.replace("max_iters=3", "max_iters=4"))

    monkeypatch.setattr(study, "run_pending", run_pending)
    with pytest.raises(lab.plan.StudyError, match="plan.py changed since this study read it"):
        study.run_plan(plan)
    assert started == [[("tiny_plain", 1), ("tiny_looped", 1)]]  # cell b's runs never started


def test_a_folder_holding_another_run_is_left_alone(tmp_path, capsys):
    """A run's planned folder that holds a run of other settings (a finished one, or a stopped one: the
    config file was edited since) is left as it is: the run goes to the first folder beside it that holds
    a run of its config, else to the first that holds no run, and collection finds it there."""
    configs = write_tiny_configs(tmp_path, str(tmp_path / "data"))[:1]
    out_root = str(tmp_path / "s")
    planned = {seed: cfg for (_, seed), (_, cfg, _) in lab.runs.plan_runs(configs, [1, 2, 3, 4], out_root).items()}
    before_the_edit = {seed: {**cfg, "max_iters": 5} for seed, cfg in planned.items()}
    fake_run(before_the_edit[1])
    fake_run(before_the_edit[2], finished=False)
    fake_run(before_the_edit[3])
    fake_run({**before_the_edit[3], "out_dir": planned[3]["out_dir"] + "-2"}, finished=False)
    fake_run({**planned[3], "out_dir": planned[3]["out_dir"] + "-3"})  # this config's run, made before
    fake_run({**planned[4], "out_dir": planned[4]["out_dir"] + "-2"})  # and again, its seed4 since emptied
    files = {os.path.join(d, f): open(os.path.join(d, f), "rb").read()
             for d, _, names in os.walk(out_root) for f in names}
    capsys.readouterr()

    runs = lab.runs.plan_runs(configs, [1, 2, 3, 4], out_root)
    folders = [runs[("tiny_plain", seed)][1]["out_dir"] for seed in (1, 2, 3, 4)]
    assert folders == [planned[1]["out_dir"] + "-2", planned[2]["out_dir"] + "-2", planned[3]["out_dir"] + "-3",
                       planned[4]["out_dir"] + "-2"]
    assert [runs[("tiny_plain", seed)][0][-1] for seed in (1, 2, 3, 4)] == [f"--out_dir={f}" for f in folders]
    assert all("--overwrite=False" in argv for argv, _, _ in runs.values())
    out = capsys.readouterr().out
    assert (f"  tiny_plain seed 1: {planned[1]['out_dir']} holds a run of other settings (max_iters 5 -> 6), left "
            f"as it is; this run goes in {folders[0]}\n") in out
    assert f"  tiny_plain seed 3: {planned[3]['out_dir']} holds a run of other settings (max_iters 5 -> 6), left as " \
           f"it is; this run is in {folders[2]}\n" in out
    assert f"  tiny_plain seed 4: this run is in {folders[3]} ({planned[4]['out_dir']} holds no run)\n" in out
    assert len(out.splitlines()) == 4  # one line for each seed
    assert lab.runs.finished_summary(runs[("tiny_plain", 3)][1]) is not None  # collected from seed3-3
    with pytest.raises(lab.plan.StudyError, match=re.escape(f"2 runs are not finished (first: {folders[0]})")):
        study.run_study(runs, collect_only=True)
    assert {p: open(p, "rb").read() for p in files} == files  # nothing of the old runs was touched


def test_a_failed_run_is_a_user_error_naming_its_train_out(tmp_path):
    """train.py refusing a run (here a schedule it does not know) stops the study with one line that says
    where to read why (a UserError: a plan goes on with its next cell)."""
    configs = write_tiny_configs(tmp_path, str(tmp_path / "data"))[:1]
    runs = lab.runs.plan_runs(configs, [1, 2], str(tmp_path / "s"), sets=["scheduler='sometimes'"])
    out_dir = runs[("tiny_plain", 1)][1]["out_dir"]
    failed = f"tiny_plain seed 1 failed (exit 1); see {out_dir}/train.out"
    with pytest.raises(configurator.UserError, match=re.escape(failed)):
        study.run_study(runs)
    assert "error: scheduler='sometimes'" in open(os.path.join(out_dir, "train.out")).read()


def train_until_interrupted(cfg, monkeypatch):
    """Train cfg and stop it by a Ctrl-C after its third step, as a user would (last.pt is saved)."""
    real_lr = train.scheduled_lr

    def lr_then_interrupt(cfg, it, total_iters):
        if it == 2:
            signal.getsignal(signal.SIGINT)(signal.SIGINT, None)
        return real_lr(cfg, it, total_iters)

    with monkeypatch.context() as m:
        m.setattr(train, "scheduled_lr", lr_then_interrupt)
        assert train.train(cfg)["stopped"] == "interrupted"


def test_a_resumed_fine_tuning_run_is_the_run_it_continues(tiny_cfg, tmp_path, monkeypatch):
    """A run that starts from a checkpoint, stopped and resumed (--init_from=resume), records the
    checkpoint it started from in its log and summary, so the study runner finds it finished (or
    resumable again) as the run it planned."""
    train.train(tiny_cfg(out_dir=str(tmp_path / "pre"), max_epochs=1))
    planned = tiny_cfg(out_dir=str(tmp_path / "ft"), init_from=str(tmp_path / "pre" / "ckpt.pt"), max_epochs=2)
    train_until_interrupted(planned, monkeypatch)
    assert lab.runs.can_resume(planned) and lab.runs.finished_summary(planned) is None
    train.train({**planned, "init_from": "resume"})
    assert lab.runs.finished_summary(planned)["config"]["init_from"] == planned["init_from"]
    starts = [json.loads(line) for line in open(tmp_path / "ft" / "log.jsonl")]
    assert [r["config"]["init_from"] for r in starts if r["type"] == "start"] == [planned["init_from"]] * 2


# -----------------------------------------------------------------------------
# whole studies


def write_tiny_configs(tmp_path, data_dir):
    """Two tiny classification configs that differ in the number of loops."""
    common = (f"data_dir = {data_dir!r}\ndevice = 'cpu'\ndtype = 'float32'\nn_layer = 1\nn_embd = 16\nn_head = 2\n"
              "ffn_hidden = 32\ndropout = 0.0\nbatch_size = 8\nmax_iters = 6\neval_interval = 2\nlog_interval = 2\n"
              "scheduler = 'constant'\nlearning_rate = 1e-2\nearly_stop_patience = 0\n")
    paths = []
    for name, loops in (("tiny_plain", 1), ("tiny_looped", 2)):
        path = tmp_path / f"{name}.py"
        path.write_text(f"# a tiny classifier for the study tests\n{common}n_loops = {loops}\n")
        paths.append(str(path))
    return paths


def test_a_run_another_process_trains_is_skipped_not_started_again(tiny_dataset, tmp_path, capsys):
    """Two study.py on one plan: a run whose out_dir another process is training (its train.lock held) is
    left to it (its train.out not reopened, nothing started there), and the other runs go on."""
    configs = write_tiny_configs(tmp_path, tiny_dataset)
    runs = lab.runs.plan_runs(configs[:1], [1, 2], str(tmp_path / "study"))
    theirs, ours = runs[("tiny_plain", 1)][1], runs[("tiny_plain", 2)][1]
    with bookkeeping.records.out_dir_lock(theirs):
        with open(os.path.join(theirs["out_dir"], "train.out"), "w") as f:
            f.write("the other study's run\n")
        study.run_pending(runs, list(runs), jobs=1)
        out = capsys.readouterr().out
        assert f"skipped tiny_plain seed 1: process {os.getpid()} is training it" in out
        assert "started tiny_plain seed 2" in out and "finished tiny_plain seed 2" in out
        assert "started tiny_plain seed 1" not in out
        assert sorted(os.listdir(theirs["out_dir"])) == ["train.lock", "train.out"]  # no run started there
        assert open(os.path.join(theirs["out_dir"], "train.out")).read() == "the other study's run\n"
    assert os.path.isfile(os.path.join(ours["out_dir"], "summary.json"))
    # a run the other process finished after this one drew up its list is not started again
    summary = open(os.path.join(ours["out_dir"], "summary.json"), "rb").read()
    study.run_pending(runs, [("tiny_plain", 2)], jobs=1)
    assert "tiny_plain seed 2" not in capsys.readouterr().out
    assert open(os.path.join(ours["out_dir"], "summary.json"), "rb").read() == summary


def test_refill_queues_the_runs_a_finished_run_decides(tmp_path, monkeypatch, capsys):
    """run_pending's `refill` (the tuning's queue): asked each time a run ends, its runs, in its order, replace
    the queue, less those going already; so a run it ranks first starts before one queued earlier."""
    class Run:  # a run of seed N ends at its N-th poll
        def __init__(self, argv, log, cores, threads):
            self.polls, self.length, self.returncode = 0, int(argv[0].partition("=")[2]), None

        def poll(self):
            self.polls += 1
            self.returncode = 0 if self.polls >= self.length else None
            return self.returncode

    monkeypatch.setattr(study, "start_run", Run)
    monkeypatch.setattr(study, "save_record", lambda cfg, record: False)
    monkeypatch.setattr(study.time, "sleep", lambda s: None)
    run = lambda i: ([f"--seed={i}"], {"out_dir": str(tmp_path / f"run{i}")}, None)  # noqa: E731
    waves = iter([{("r", 6): run(6), ("r", 2): run(2), ("r", 4): run(4)},  # 6 is going: 2, then 4, queued
                  {("r", 6): run(6), ("r", 3): run(3), ("r", 4): run(4)},  # 3 now ranks before the queued 4
                  {("r", 4): run(4)}, {("r", 4): run(4)}, {}])  # 6 and 3 end at one poll
    asked = []

    def refill():
        asked.append(1)
        return next(waves)

    study.run_pending({("r", 1): run(1), ("r", 6): run(6)}, [("r", 1), ("r", 6)], jobs=2, refill=refill)
    out = capsys.readouterr().out
    started = [int(line.split()[3]) for line in out.splitlines() if "started" in line]
    assert started == [1, 6, 2, 3, 4] and out.count("finished") == 5
    assert len(asked) == 5  # once for each run that ended


def test_classification_study_runs_resumes_and_compares(tiny_dataset, tmp_path, monkeypatch, capsys):
    """Two tiny classification configs x 2 seeds. One run was stopped part-way (Ctrl-C) before the study
    started: the study continues it from its last.pt, trains the other three, and prints accuracy with
    a CI and a verdict. A second call finds all four finished and trains nothing."""
    configs = write_tiny_configs(tmp_path, tiny_dataset)
    out_root = str(tmp_path / "study")
    args = [*configs, "--seeds", "1", "2", "--out_root", out_root, "--jobs", "2"]

    # the interrupted run: the planned config, stopped by a Ctrl-C after its third step
    planned = lab.runs.plan_runs(configs, [1, 2], out_root)[("tiny_plain", 1)][1]
    train_until_interrupted(planned, monkeypatch)
    capsys.readouterr()

    study.main([*args, "--json", str(tmp_path / "s.json")])
    out = capsys.readouterr().out
    assert "4 runs, 0 finished, 4 to train" in out and "resumed tiny_plain seed 1" in out
    log = [json.loads(line) for line in open(os.path.join(planned["out_dir"], "log.jsonl"))]
    assert [r["iter"] for r in log if r["type"] == "start"] == [0, 3]  # continued, not restarted
    assert [r["iter"] for r in log if r["type"] == "eval"] == [2, 4, 6]
    row = next(line for line in out.splitlines() if line.startswith("test accuracy (best checkpoint)"))
    assert row.count("±") == 2
    verdicts = [line for line in out.splitlines() if "tiny_looped" in line and "test accuracy" in line]
    assert len(verdicts) == 1 and verdicts[0].rstrip().endswith(("better", "worse", "no significant difference"))

    result = json.loads((tmp_path / "s.json").read_text())
    acc = result["metrics"]["test_accuracy"]
    assert acc["better"] == "higher" and acc["tiny_plain"]["values"] == [
        result["runs"][f"tiny_plain/seed{s}"]["test_accuracy"] for s in (1, 2)]
    diff = result["differences"]["tiny_looped"]["test_accuracy"]
    assert diff["mean"] == pytest.approx(np.mean(acc["tiny_looped"]["values"]) - np.mean(acc["tiny_plain"]["values"]))

    study.main(args)
    assert "4 runs, 4 finished, 0 to train" in capsys.readouterr().out

    # --records: each finished run's record copied (no checkpoint); with out_root gone, the records are the runs
    records = tmp_path / "records"
    study.main([*args, "--collect_only", "--records", str(records)])
    assert capsys.readouterr().out.count("  recorded ") == 4
    assert sorted(os.listdir(records / "tiny_plain" / "seed1")) == ["config.py", "log.jsonl", "summary.json"]
    hidden = shutil.move(out_root, str(tmp_path / "hidden"))
    study.main([*args, "--collect_only", "--records", str(records), "--json", str(tmp_path / "r.json")])
    assert "4 runs, 4 finished, 0 to train" in capsys.readouterr().out
    assert json.loads((tmp_path / "r.json").read_text())["metrics"] == result["metrics"]
    shutil.move(hidden, out_root)

    # the config file edited: its new runs go beside the old ones, which train.py would refuse to replace
    # (and which stay as they were); trained in this process (the subprocesses are tested above)
    monkeypatch.setattr(study, "start_run", RunInProcess)
    with open(configs[0], "a") as f:
        f.write("max_iters = 4\n")
    old = {p: open(p, "rb").read() for p in (os.path.join(planned["out_dir"], f) for f in ("summary.json", "ckpt.pt"))}
    study.main(args)
    out = capsys.readouterr().out
    moved = planned["out_dir"] + "-2"
    assert "4 runs, 2 finished, 2 to train" in out
    assert f"tiny_plain seed 1: {planned['out_dir']} holds a run of other settings (max_iters 6 -> 4)" in out
    assert f"started tiny_plain seed 1 -> {moved}/train.out" in out
    assert all(open(p, "rb").read() == b for p, b in old.items())
    assert json.load(open(os.path.join(moved, "summary.json")))["iters"] == 4
    study.main([*args, "--collect_only"])  # and collection finds them there
    assert "4 runs, 4 finished, 0 to train" in capsys.readouterr().out


def test_a_killed_study_stops_its_runs(tiny_dataset, tmp_path):
    """`kill <study>` (SIGTERM) stops the study as Ctrl-C does: each running train.py gets SIGTERM and
    saves its last.pt. (Before, the study died alone and its runs went on, orphaned.)"""
    configs = write_tiny_configs(tmp_path, tiny_dataset)[:1]
    out_root = str(tmp_path / "study")
    # a run that would go on for a long time and saves nothing before its first evaluation
    args = [*configs, "--seeds", "1", "2", "--out_root", out_root, "--set", "max_iters=100000", "eval_interval=100000",
            "max_epochs=100000"]
    proc = subprocess.Popen([sys.executable, "study.py", *args], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    run_dir = os.path.join(out_root, "tiny_plain", "seed1")
    deadline = time.time() + 60
    while not (os.path.isfile(os.path.join(run_dir, "log.jsonl")) and "iter 2/" in open_or_empty(run_dir)):
        assert time.time() < deadline and proc.poll() is None, "the run did not start"
        time.sleep(0.2)
    proc.terminate()
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "study interrupted" in out
    assert os.path.isfile(os.path.join(run_dir, "last.pt"))  # the run got SIGTERM and saved
    assert "interrupt: finishing this step" in open_or_empty(run_dir)


def open_or_empty(run_dir):
    path = os.path.join(run_dir, "train.out")
    return open(path).read() if os.path.isfile(path) else ""

def test_language_model_study(char_mirror, char_digest, tmp_path, capsys, runs_in_process):
    """The embedding-norm configs x 2 seeds on a fake corpus, then collected; the metrics and their
    directions come from the runs' summaries."""
    folder = str(tmp_path / "chars")
    data.prepare("shakespeare_char", mirror=char_mirror, out_dir=folder, verbose=False)
    configs = [os.path.join(REPO_ROOT, "config", f"shakespeare_char_{v}.py") for v in ("baseline", "rmsnorm")]
    sets = [f"data_dir={folder!r}", "device='cpu'", "max_iters=3", "eval_interval=3", "block_size=16", "n_layer=1",
            "n_embd=16", "n_head=2", "log_interval=1"]
    args = [*configs, "--seeds", "1", "2", "--out_root", str(tmp_path / "study"), "--jobs", "2", "--set", *sets]
    out = str(tmp_path / "study.json")
    study.main([*args, "--json", out])
    assert "4 to train" in capsys.readouterr().out
    result = json.loads(open(out).read())
    assert {"final_val_loss", "final_val_ppl", "final_val_accuracy", "final_val_emb_norm",
            "final_grad_norm"} <= set(result["metrics"])
    diff = result["differences"]["shakespeare_char_rmsnorm"]["final_val_emb_norm"]
    assert diff["verdict"] == "higher" and diff["lo"] > 0  # RMSNorm lifts ||X|| from ~0.3 to ~sqrt(16)
    study.main([*args, "--collect_only", "--metrics", "final_val_ppl"])
    printed = capsys.readouterr().out
    assert "0 to train" in printed and "final validation perplexity" in printed and "emb" not in printed
    # log_interval changes nothing a run computes (records.BOOKKEEPING_KEYS): these are still the planned runs
    study.main([*args[:-len(sets)], *sets[:-1], "log_interval=2", "--collect_only"])
    assert "4 finished, 0 to train" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="not finished"):  # max_iters does: those runs are not made yet
        study.main([*args, "max_iters=4", "--collect_only"])


# -----------------------------------------------------------------------------
# layering


# Every module of ours, by the layer it sits on: a module imports only modules of lower layers (on layer 0, any
# other module of layer 0). The lesson's files at the bottom with the packages they import at run time (corpora/,
# evaluation/, bookkeeping/, cli/, hardware/), the tooling (bench/, lab/) above them, study.py on top.
# (bench.same_training runs train.py in subprocesses only: it imports nothing of ours.)
PACKAGES = ("lab", "bench", "bookkeeping", "corpora", "evaluation", "cli", "hardware")
LAYERS = {"configurator": 0, "model": 0, "kernels": 0, "tokenizer": 0, "bookkeeping.timing": 0,
          "corpora.sources": 0, "corpora.classification": 0, "corpora.imdb": 0, "corpora.llama2c": 0,
          "corpora.minllama": 0, "corpora.mlm": 0, "corpora.piglatin": 0, "corpora.shakespeare": 0,
          "corpora.sst2": 0, "corpora.uci": 0, "corpora.zhang_csv": 0,
          "evaluation.table": 0, "evaluation.seq2seq_plots": 0, "cli.help": 0, "data": 1,
          "bookkeeping.checkpoints": 1, "bookkeeping.flops": 1, "bookkeeping.records": 2, "evaluation.ranges": 1, "export": 2,
          "evaluation.options": 2, "bookkeeping.checks": 3, "hardware.devices": 1,
          "evaluation.piglatin_errors": 2, "evaluate": 3,
          "train": 4,
          "bench.same_training": 0, "bench.hugging_face": 1, "bench.kernel_speed": 2, "bench.step_before_after": 2, "bench.speed": 4, "bench.gpu_sections": 5,
          "bench.gpu_check": 6,
          "lab.stats": 0, "lab.plan": 5, "lab.runs": 6, "lab.cells": 6, "lab.plots": 7, "lab.report": 8,
          "lab.tuning": 9, "study": 10}
# The units the imports are drawn between: each package and each top-level file is one folder-level unit, and
# these make up the larger ones: the lesson (every top-level file but study.py, and every package not named here),
# the tooling (bench/, lab/), and study.py on top.
TOOLING = {"bench": "bench", "lab": "lab", "study": "study"}


def module_imports(path, ours=LAYERS):
    """The modules of ours a file imports, by dotted name ('lab.stats' for `from lab import stats` too)."""
    names = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return names & set(ours)


def test_imports_run_one_way():
    """configurator, model, kernels, tokenizer, bookkeeping.timing, corpora, evaluation's table and plots,
    cli.help <- data, bookkeeping.checkpoints, evaluation.ranges, hardware.devices <- bookkeeping.records, export,
    evaluation.options, evaluation.piglatin_errors <- evaluate, bookkeeping.checks <- train <- bench, lab <- study:
    a module imports only modules of a lower layer (evaluate.py never imports train.py; model.py never imports
    export.py; evaluation/ never imports evaluate.py; nothing imports study.py), and every module of ours is in
    LAYERS."""
    ours = {os.path.relpath(p, REPO_ROOT)[:-3].replace(os.sep, ".") for p in
            glob.glob(os.path.join(REPO_ROOT, "*.py"))
            + [p for pkg in PACKAGES for p in glob.glob(os.path.join(REPO_ROOT, pkg, "*.py"))]}
    ours -= {f"{pkg}.__init__" for pkg in PACKAGES}  # packages' docstrings
    ours -= {"lab.plan_history_from_git"}  # a script run once
    assert ours == set(LAYERS), sorted(ours ^ set(LAYERS))
    for name, layer in LAYERS.items():
        imported = module_imports(os.path.join(REPO_ROOT, *name.split(".")) + ".py")
        assert all(LAYERS[m] < layer or (layer == 0 and m != name) for m in imported), (name, imported)
    assert "bookkeeping.records" in module_imports(os.path.join(REPO_ROOT, "study.py"))  # it sees real imports


def cycle(edges):
    """A cycle of the directed graph {(a, b)}, as [a, b, ..., a]; [] if it has none."""
    after = {}
    for a, b in edges:
        after.setdefault(a, set()).add(b)
    state = {}  # node -> 'open' while on the current path, 'done' after

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(after.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt, path + [nxt])):
                return found
        state[node] = "done"
        return []

    for node in sorted(after):
        if node not in state and (found := visit(node, [node])):
            return found
    return []


def test_units_import_one_way():
    """Imports run one way between folders too, each package taken as one unit: the graph of imports between the
    top-level files and the packages has no cycle (no train.py <-> bench/, lab/ <-> bench/); the lesson imports no
    tooling package (bench/, lab/) and nothing imports study.py; bench/ and lab/ import the lesson, and each other
    one way at most. Every package and top-level file is found on disk, so a new one is held to this as well."""
    packages = sorted(os.path.basename(os.path.dirname(p))
                      for p in glob.glob(os.path.join(REPO_ROOT, "*", "__init__.py")))
    assert set(PACKAGES) <= set(packages), packages
    files = {os.path.relpath(p, REPO_ROOT)[:-3].replace(os.sep, ".") for p in glob.glob(os.path.join(REPO_ROOT, "*.py"))
             + [p for pkg in packages for p in glob.glob(os.path.join(REPO_ROOT, pkg, "*.py"))]}
    modules = files | set(packages)
    unit = lambda name: name.split(".")[0]  # noqa: E731  (a package's modules are the package's unit)
    edges = {(unit(m), unit(i)) for m in files
             for i in module_imports(os.path.join(REPO_ROOT, *m.split(".")) + ".py", modules) if unit(i) != unit(m)}
    assert not cycle(edges), " -> ".join(cycle(edges))
    larger = lambda name: TOOLING.get(name, "lesson")  # noqa: E731
    between = {(larger(a), larger(b)) for a, b in edges if larger(a) != larger(b)}
    assert not {e for e in between if e[0] == "lesson" or e[1] == "study"}, sorted(between)
    assert not cycle(between), " -> ".join(cycle(between))
    assert {("bench", "lesson"), ("lab", "lesson"), ("study", "lesson")} <= between  # it sees real imports


def test_remeasure_replaces_the_record_s_measurement_through_a_new_file(tmp_path, monkeypatch):
    """study.py --remeasure measures a run again although its record holds a measurement: evaluate.py refuses to
    replace a file, so the study has it write a new one beside it (a stale one from a stopped measurement
    removed first) and moves that in; a failed measurement keeps the old one."""
    out_dir, record = tmp_path / "run", tmp_path / "record"
    out_dir.mkdir()
    record.mkdir()
    (out_dir / "ckpt.pt").write_bytes(b"a checkpoint")
    (record / "summary.json").write_text("{}")
    (record / "measure.json").write_text('[{"latency_ms": 1.0}]')
    (record / "measure.json.new").write_text("left by a stopped measurement")
    written = []

    def evaluate_script(argv, json_path):
        assert not os.path.exists(json_path)  # evaluate.py would refuse it
        written.append(json_path)
        open(json_path, "w").write('[{"latency_ms": 2.0}]')
        return [{"latency_ms": 2.0}]

    monkeypatch.setattr(study, "evaluate_script", evaluate_script)
    cfg = {"out_dir": str(out_dir)}
    assert study.run_measurement(cfg, str(record), "measure.json", [], "measuring") == {"latency_ms": 1.0}
    assert written == []  # there already, and not asked to remeasure
    assert study.run_measurement(cfg, str(record), "measure.json", [], "measuring", remeasure=True) == \
        {"latency_ms": 2.0}
    assert json.loads((record / "measure.json").read_text()) == [{"latency_ms": 2.0}]
    assert sorted(os.listdir(record)) == ["measure.json", "summary.json"]
    monkeypatch.setattr(study, "evaluate_script", lambda argv, json_path: None)  # a measurement that failed
    assert study.run_measurement(cfg, str(record), "measure.json", [], "measuring", remeasure=True) is None
    assert json.loads((record / "measure.json").read_text()) == [{"latency_ms": 2.0}]
