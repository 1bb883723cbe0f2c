"""
The study runner: config files x overrides x seeds, trained by train.py and compared over seeds.

    python study.py config/sst2_recurrent.py config/sst2_baseline.py --seeds 1 2 3 --jobs 2
    python study.py config/shakespeare_char_{baseline,layernorm,rmsnorm}.py --seeds 1 2 3 4 5 --jobs 2
    python study.py config/sst2_recurrent.py --grid n_loops=1,2,3 --seeds 1 2 3 --set max_epochs=1
    python study.py ... --collect_only --json study.json     # only read finished runs; never train
    python study.py --plan config/encoders_study.py          # a study plan's cells, then RESULTS.md (see below)
    python study.py --plan config/encoders_study.py --time   # after the training: time the checkpoints, quietly

Each run is `python train.py CONFIG --KEY=VALUE... --seed=N --out_dir=OUT_ROOT/<name>/seed<N>`, where
<name> is the config file's stem, followed by @key=value,... for a --grid point. The runner works for
every task, because it never loads a model: it reads the runs' summary.json files, which carry their
figures and, for each, its label and which way is better (`metrics`, written by train.py from the
task's evaluator). It is resumable: a run whose summary.json holds the planned config (train.same_run)
is finished and is not run again; a run with a last.pt of the planned config (stopped by Ctrl-C, which
reaches each run as SIGTERM and makes it save) continues from there with --init_from=resume, which
gives the same weights as an uninterrupted run. A run is never replaced: if seed<N> holds a run of other
settings (the config file was edited since), that run is left as it is and this one goes beside it, to
seed<N>-2 (then -3, ...), where later calls find it.

A plan (--plan) also records each finished run in the repository (results/runs/<cell>/<config>/seed<N>:
summary, log, settings, measurements; never a checkpoint), counts a recorded run as finished, and writes
its report from the records alone, so a fresh clone writes the same RESULTS.md; latency comes from a
pass of its own on a quiet machine (--time).

Bad input (an unknown key, a repeated seed, a plan's mistake, a run that failed) is a
configurator.UserError, printed as one line `error: ...`; a study plan is checked whole before the
first run starts. Anything else is a bug, and keeps its traceback.

The table: each metric's mean +- the 95 % t-interval over seeds; then, for every config after the
first, its difference from the first paired by seed, with its 95 % paired t-interval, the 95 %
percentile bootstrap interval beside it, and a verdict (better / worse, or higher / lower for a
metric with no better side, if the t-interval excludes 0; otherwise no significant difference).
The verdict does not rest on the bootstrap: with few seeds its interval is too narrow (with 3 it
excludes 0 whenever the three differences share a sign, which chance alone does one time in four).
"""

import argparse
import itertools
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback

import numpy as np

import data
import train
from configurator import ConfigError, UserError, closest


class StudyError(UserError):
    """A study that cannot do what was asked: runs not finished under --collect_only, or a report that
    would replace one holding more finished runs."""


class RunFailed(StudyError):
    """A run's train.py exited with an error; its train.out says why."""


# -----------------------------------------------------------------------------
# statistics over seeds

# two-sided 95 % quantiles of Student's t, t_{0.975, df}, df = 1..30 (standard tables)
T_975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def t_quantile_975(df):
    """t_{0.975, df}: the table up to 30 degrees of freedom, then the Cornish-Fisher expansion around
    the normal quantile 1.959964, which is within 0.001 of the exact value from df = 30 on."""
    if df < 1:
        raise ValueError("a confidence interval needs at least two values")
    if df <= len(T_975):
        return T_975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def t_cdf(x, df):
    """P(T <= x) for Student's t with df degrees of freedom: 1/2 plus the density's integral from 0 to x
    (Simpson's rule on 2,000 intervals of the substitution x = tan(u), which keeps the tails short)."""
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    top = math.atan(abs(x))
    u = np.linspace(0.0, top, 2001)
    t = np.tan(u)
    f = np.exp(log_c - (df + 1) / 2 * np.log1p(t * t / df)) / np.cos(u) ** 2  # density * dx/du
    area = top / 6000 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())
    return 0.5 + math.copysign(float(area), x)


def t_quantile(p, df):
    """The p-quantile of Student's t with df degrees of freedom (0.5 < p < 1), by bisection on t_cdf."""
    lo, hi = 0.0, 1e3
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


def detectable_effect(sd, n, power=0.8):
    """The smallest true mean difference a paired t-test on n seeds (differences with standard deviation sd)
    finds at the 95 % level (two-sided) with probability `power`: (t_{0.975,n-1} + t_{power,n-1}) * sd /
    sqrt(n). A smaller effect, if there is one, the study would most likely call inconclusive."""
    return (t_quantile_975(n - 1) + t_quantile(power, n - 1)) * sd / math.sqrt(n)


def seeds_needed(sd, effect, power=0.8, most=1000):
    """How many seeds a paired comparison whose per-seed differences have standard deviation sd needs to
    find a true difference `effect` at the 95 % level with probability `power` (None if more than `most`)."""
    if sd == 0:
        return 2
    return next((n for n in range(2, most + 1) if detectable_effect(sd, n, power) <= effect), None)


def mean_ci(values):
    """(mean, half-width of the 95 % confidence interval of the mean): t_{0.975,n-1} * s / sqrt(n),
    with s the sample standard deviation."""
    v = np.asarray(values, dtype=np.float64)
    return float(v.mean()), t_quantile_975(len(v) - 1) * float(v.std(ddof=1)) / math.sqrt(len(v))


def paired_bootstrap(baseline, variant, n_boot=10000, seed=0):
    """Paired bootstrap of the mean difference variant - baseline (pairs matched by seed): resample the
    per-seed differences with replacement n_boot times and take the 2.5th and 97.5th percentiles of the
    resampled means. Returns (mean difference, lower, upper)."""
    d = np.asarray(variant, dtype=np.float64) - np.asarray(baseline, dtype=np.float64)
    if d.ndim != 1 or len(d) < 2:
        raise ValueError("the paired bootstrap needs two equally long lists of at least two values")
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(n_boot, len(d)))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(d.mean()), float(lo), float(hi)


def paired_t(baseline, variant):
    """The paired t-interval of the mean difference variant - baseline (pairs matched by seed):
    mean +- t_{0.975, n-1} * s_d / sqrt(n). Returns (mean difference, lower, upper)."""
    d = np.asarray(variant, dtype=np.float64) - np.asarray(baseline, dtype=np.float64)
    mean, half = mean_ci(d)
    return mean, mean - half, mean + half


def verdict(lo, hi, better):
    """Words for a difference's CI, given which way the metric is better ('higher', 'lower' or
    'neither'): an interval that holds 0 is no evidence either way."""
    if lo <= 0 <= hi:
        return "no significant difference"
    up = lo > 0
    if better == "neither":
        return "higher" if up else "lower"
    if better not in ("higher", "lower"):
        raise ValueError(f"better={better!r}: expected 'higher', 'lower' or 'neither'")
    return "better" if up == (better == "higher") else "worse"


def mcnemar_p(only_a, only_b):
    """McNemar's exact test: the two-sided p-value of `only_a` examples that A gets right and B wrong
    against `only_b` the other way round, under the null hypothesis that a disagreement goes either way
    with probability 1/2: 2 * P(X <= min) for X ~ Binomial(only_a + only_b, 1/2), at most 1. Summed in
    log space, so thousands of disagreements do not underflow."""
    n, k = only_a + only_b, min(only_a, only_b)
    if n == 0:
        return 1.0
    logs = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - n * math.log(2) for i in range(k + 1)]
    top = max(logs)
    return min(1.0, 2 * math.exp(top) * sum(math.exp(x - top) for x in logs))


def mcnemar(y_true, pred_a, pred_b):
    """Two classifiers' per-example predictions on the same test examples -> (right only by A, right
    only by B, McNemar's exact p-value). Examples both get right, or both wrong, carry no information
    about which is better, and are left out, as the test prescribes."""
    y, a, b = (np.asarray(v) for v in (y_true, pred_a, pred_b))
    if not len(y) == len(a) == len(b):
        raise ValueError(f"McNemar's test needs predictions of the same examples: {len(y)}, {len(a)}, {len(b)}")
    right_a, right_b = a == y, b == y
    only_a, only_b = int((right_a & ~right_b).sum()), int((~right_a & right_b).sum())
    return only_a, only_b, mcnemar_p(only_a, only_b)


def claim_verdict(lo, hi, better, rule="superiority", margin=0.0):
    """A claim about A against B, judged on the 95 % interval [lo, hi] of A - B in a metric whose better
    side is `better`, under its rule (RULES): 'confirmed', 'refuted' or 'inconclusive'.
    - superiority (A beats B): confirmed if the interval lies on the better side, refuted if on the worse
      side, inconclusive if it holds 0;
    - non-inferiority (A keeps B's performance): confirmed if A is at most `margin` worse anywhere in the
      interval (A better is no contradiction), refuted if A is more than `margin` worse everywhere in it;
    - equivalence (A matches B): confirmed if the whole interval lies within +-margin, refuted if it lies
      wholly outside, on either side."""
    if rule == "superiority":
        word = verdict(lo, hi, better)
        return {"better": "confirmed", "worse": "refuted"}.get(word, "inconclusive")
    if rule == "equivalence":
        return "confirmed" if -margin <= lo and hi <= margin else "refuted" if lo > margin or hi < -margin \
            else "inconclusive"
    if rule != "non-inferiority":
        raise ValueError(f"rule={rule!r}: expected one of {RULES}")
    lo, hi = (lo, hi) if better != "lower" else (-hi, -lo)  # A - B turned so that up is better
    return "confirmed" if lo >= -margin else "refuted" if hi < -margin else "inconclusive"


RULES = ("superiority", "non-inferiority", "equivalence")
RULE_WORDS = {"superiority": "", "non-inferiority": "; keeping B's performance means A − B ≥ −{m:g}",
              "equivalence": "; comparable means A − B within ±{m:g}"}


# -----------------------------------------------------------------------------
# the plan: which runs, in which folders, and which of them are finished


def config_name(path):
    """A study's name for a config file: its stem (config/shakespeare_char_rmsnorm.py -> shakespeare_char_rmsnorm)."""
    return os.path.splitext(os.path.basename(path))[0]


def grid_points(grid):
    """['n_loops=1,2', 'n_embd=128,256'] -> [['--n_loops=1', '--n_embd=128'], ['--n_loops=1', '--n_embd=256'], ...]
    (the product of the values, in the order given); no grid is one point with no overrides. A key given
    twice, or a value repeated, would make two points one run, and is refused."""
    axes, keys = [], []
    for item in grid:
        key, sep, text = item.partition("=")
        if not sep or not text:
            raise ConfigError(f"--grid {item!r} must be KEY=V1,V2,...")
        values = text.split(",")
        if key in keys:
            raise ConfigError(f"--grid names {key} twice: give its values once, as {key}=V1,V2,...")
        repeated = sorted({v for v in values if values.count(v) > 1})
        if repeated:
            raise ConfigError(f"--grid {item!r} repeats {', '.join(repeated)}: each value is one run")
        keys.append(key)
        axes.append([f"--{key}={v}" for v in values])
    return [list(p) for p in itertools.product(*axes)]


# The settings the study gives each run itself: an override of seed or out_dir would be lost (the study's
# comes after it), and overwrite would let a run replace another.
STUDY_KEYS = ("seed", "out_dir", "overwrite")


def check_overrides(items, where):
    """Overrides (--set, --grid, a cell's `set`) are 'KEY=VALUE' strings and leave the STUDY_KEYS alone.
    Whether a key exists and its value fits is train.make_config's to say."""
    for item in items:
        if not isinstance(item, str) or "=" not in item:
            raise ConfigError(f"{where}: {item!r} must be a string 'KEY=VALUE'")
        key = item.partition("=")[0]
        if key in STUDY_KEYS:
            raise ConfigError(f"{where}: {item!r}: the study sets {key} itself (the seed from the seeds, out_dir "
                              f"from the out_root, and it never overwrites a run)")


def check_seeds(seeds, where):
    """Seeds are distinct integers, one run each: a repeated seed would be one run counted twice."""
    if not isinstance(seeds, list) or not seeds or not all(type(s) is int for s in seeds):
        raise ConfigError(f"{where} {seeds!r}: expected a list of integers")
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise ConfigError(f"{where} {seeds} name seed {', '.join(map(str, repeated))} more than once: each seed "
                          f"is one run")


def run_names(configs, grid=()):
    """[(name, config file, grid point)] for every config file at every grid point. The name is the file's
    stem, with @key=value,... for a grid point, and it is the runs' folder: two files of one stem (c1/x.py
    and c2/x.py) would share their runs, so they are refused."""
    names, stems = [], {}
    for path in configs:
        stem = config_name(path)
        if stem in stems:
            if os.path.abspath(stems[stem]) == os.path.abspath(path):
                raise ConfigError(f"config {path} is given twice")
            raise ConfigError(f"configs {stems[stem]} and {path} have one name, {stem}, and their runs would share "
                              f"its folders: rename one")
        stems[stem] = path
        for point in grid_points(grid):
            names.append((stem + ("@" + ",".join(a[2:] for a in point) if point else ""), path, point))
    return names


def grid_settings(name):
    """The key=value settings of a grid point's run name (run_names: stem@key=value,...); [] for none."""
    return name.partition("@")[2].split(",") if "@" in name else []


def plan_runs(configs, seeds, out_root, sets=(), grid=(), records=None, tuned=None):
    """The planned runs, in order: {(name, seed): (train.py arguments, full config, record folder or None)},
    named by run_names. Each run writes to out_root/<name>/seed<seed>, or beside it if that folder holds
    another run (run_folder); with `records` (a plan's), its record goes to records/<name>/seed<seed> (or
    the same -2, -3 beside it). `tuned` ({config name: overrides}) gives a config settings of its own (the
    value a tuned cell's sweep chose), after the shared ones."""
    check_seeds(list(seeds), "seeds")
    names = run_names(configs, grid)  # checks the grid's form too
    check_overrides(sets, "--set")
    check_overrides(grid, "--grid")
    runs = {}  # seed by seed, so that a study stopped partway holds whole pairs of configs
    for seed in seeds:
        for name, path, point in names:
            # --overwrite=False whatever a config file says: a run the study starts never replaces another
            own = (tuned or {}).get(config_name(path), [])
            argv = [path, *[f"--{s}" for s in sets], *point, *[f"--{s}" for s in own], f"--seed={seed}",
                    "--overwrite=False"]
            cfg, record = run_folder(train.make_config(argv), os.path.join(out_root, name, f"seed{seed}"),
                                     f"{name} seed {seed}", records and os.path.join(records, name, f"seed{seed}"))
            runs[(name, seed)] = ([*argv, f"--out_dir={cfg['out_dir']}"], cfg, record)
    return runs


def run_folder(cfg, planned, what, record=None):
    """(cfg with the out_dir its run has, its record folder or None). That is the planned folder (.../seed<N>)
    if it holds no run (and `record`, the planned record folder, no record), or a run of this config
    (finished, or stopped and resumable). Otherwise the run there is another one (the config file was
    edited since, say): it is left as it is, and this run's folder is the first of planned-2, planned-3, ...
    that holds a run of this config, else the first that holds no run; its record folder takes the same
    ending. Printed when so."""
    record_of = lambda folder: record and record + folder[len(planned):]  # noqa: E731
    numbers = set()
    for start in (planned, record):
        parent, base = os.path.split(start) if start else ("", "")
        for f in os.listdir(parent) if start and os.path.isdir(parent) else []:
            if re.fullmatch(re.escape(base) + r"-\d+", f):
                numbers.add(int(f[len(base) + 1:]))
    candidates = [planned, *(f"{planned}-{k}" for k in sorted(numbers))]
    folder = next((f for f in candidates if holds_this_run({**cfg, "out_dir": f}, record_of(f))), None)
    found = folder is not None
    if not found:
        folder, k = planned, 1
        while train.existing_run(folder) or has_record(record_of(folder)):
            k += 1
            folder = f"{planned}-{k}"
    if folder != planned:
        held = other_run(planned, {**cfg, "out_dir": planned}, record_of(planned))
        print(f"  {what}: {planned} holds {held}, left as it is; this run {'is' if found else 'goes'} in {folder}"
              if held else f"  {what}: this run is in {folder} ({planned} holds no run)", flush=True)
    return {**cfg, "out_dir": folder}, record_of(folder)


def other_run(folder, cfg, record=None):
    """Words for the run `folder` (or its record) holds that is not cfg's (None if it holds none), for the
    line that says why cfg's run is elsewhere."""
    if not train.existing_run(folder) and not has_record(record):
        return None
    held = held_config(folder) if train.existing_run(folder) else held_config(record)
    if held is None:
        return "a run whose settings it does not record"
    other = train.run_differences(held, cfg)[1]
    if not other:
        return "a run of these settings that cannot be continued (no last.pt, or no log of its start)"
    return f"a run of other settings ({train.changes(held, cfg, other)})"


def holds_this_run(cfg, record=None):
    """Whether cfg's out_dir (or its record) holds a run of cfg: finished, or stopped and resumable."""
    return finished_summary(cfg, record) is not None or can_resume(cfg)


def finished_summary(cfg, record=None):
    """The summary.json of a finished run of this config (train.same_run), from its record if it has one,
    else from its out_dir; None if neither holds one (then it must be run)."""
    for folder in (record, cfg["out_dir"]):
        path = folder and os.path.join(folder, "summary.json")
        if not path or not os.path.isfile(path):
            continue
        with open(path) as f:
            summary = json.load(f)
        if train.same_run(summary.get("config", {}), cfg) and summary.get("stopped") != "interrupted":
            return summary
    return None


def log_records(path, kind):
    """The records of one type ('start', 'train', 'eval', 'summary') in a run's log.jsonl, in order; none if
    there is no log."""
    records = []
    if os.path.isfile(path):
        with open(path) as f:
            for line in f:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short when the run was killed
                if record.get("type") == kind:
                    records.append(record)
    return records


def started_config(out_dir):
    """The config of the latest start record in out_dir/log.jsonl (the run's, as resumed), or None."""
    starts = log_records(os.path.join(out_dir, "log.jsonl"), "start")
    return starts[-1].get("config") if starts else None


def held_config(out_dir):
    """The config of the run in out_dir: its summary's, else its log's latest start; None if neither says."""
    path = os.path.join(out_dir, "summary.json")
    if os.path.isfile(path):
        with open(path) as f:
            return json.load(f).get("config")
    return started_config(out_dir)


def can_resume(cfg):
    """Whether out_dir holds a stopped run of this config to continue: a last.pt, and a log whose
    latest start record has this config."""
    started = started_config(cfg["out_dir"])
    return (os.path.isfile(os.path.join(cfg["out_dir"], "last.pt")) and started is not None
            and train.same_run(started, cfg))


# -----------------------------------------------------------------------------
# run records: what a finished run of a plan leaves in the repository
#
# A plan's runs write their checkpoints under out_root, which git ignores. Each finished run's record goes
# to the plan's `records` folder (results/runs/<cell>/<config>/seed<N>, committed): its summary.json and
# log.jsonl as train.py wrote them, and config.py, its settings as train.py resolved them; later, what the
# report needs of its checkpoint, measured while the checkpoint is here (measure.json, depth.json). Beside
# a cell's runs lies what the report needs of their data (data.json). A run with a record is finished, so a fresh clone (no out/) continues a plan where the last
# session stopped, and --collect_only writes the same report from the records alone.

RECORD_FILES = ("summary.json", "log.jsonl", "config.py")


def has_record(record):
    return bool(record) and os.path.isfile(os.path.join(record, "summary.json"))


def save_record(cfg, record):
    """Copy the finished run in cfg's out_dir to its record folder (RECORD_FILES), whole or not at all (made
    in a temporary folder, then renamed). A record that is there already is kept, also one that another
    study.py on the plan wrote while this one was copying, and so is a folder of that name holding anything
    else (StudyError). Returns whether a record was written."""
    if not record or has_record(record) or finished_summary(cfg) is None:
        return False
    if os.path.exists(record):
        raise StudyError(f"{record} exists but holds no run record (no summary.json): move it away, and the "
                         f"record of {cfg['out_dir']} is written there")
    os.makedirs(os.path.dirname(record), exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".record-", dir=os.path.dirname(record))
    try:
        for name in RECORD_FILES[:2]:
            shutil.copyfile(os.path.join(cfg["out_dir"], name), os.path.join(staging, name))
        with open(os.path.join(staging, "summary.json")) as f:
            settings = json.load(f)["config"]
        with open(os.path.join(staging, "config.py"), "w") as f:
            f.write(config_file(settings))
        try:
            os.rename(staging, record)
        except OSError:
            if has_record(record):  # another study.py on this plan recorded the run meanwhile: theirs stays
                return False
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return True


def record_finished(runs):
    """save_record for every planned run: those that finished elsewhere (another core's queue, an earlier
    study without records) are recorded too; a record already there is kept."""
    for _, cfg, record in runs.values():
        if save_record(cfg, record):
            print(f"  recorded {cfg['out_dir']} in {record}")


def config_file(settings):
    """A run's settings as a train.py config file, which trains the run again (in another out_dir)."""
    lines = ["# The settings of this run as train.py resolved them (config file, overrides, seed). To train it",
             "# again: python train.py config.py --out_dir=<a new folder>", ""]
    return "\n".join([*lines, *(f"{k} = {v!r}" for k, v in settings.items() if k != "out_dir")]) + "\n"


def run_file(cfg, record, name):
    """A file of a finished run (log.jsonl, say): its record's copy if it has one, else out_dir's."""
    return os.path.join(record if has_record(record) else cfg["out_dir"], name)


# -----------------------------------------------------------------------------
# running


def run_pending(runs, todo, jobs, check=None, recorded=None):
    """Train the runs `todo` as `python train.py` subprocesses, `jobs` at a time, each slot pinned to its
    own share of the cores. A run that can resume does; any other starts in a folder that holds no run
    (run_folder saw to it), so none is ever started with --overwrite; one that another process is training
    (its out_dir's train.lock held: another study.py on the plan) is skipped, and so is one it has finished
    since `todo` was drawn up: two study.py share a plan's runs out. If a run fails (RunFailed) or the
    study is interrupted, the runs still going get SIGTERM, save their last.pt and stop; a later call
    continues them. `check`, if given, is called before each run starts (plan_unchanged); `recorded`, after
    each run's record is written (note_plan)."""
    # the cores this process may use (`taskset -c 1 python study.py ...` gives it one), shared out by slot
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    per_job = max(1, len(allowed) // jobs)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train.py")
    running = []  # (key, process, log file, slot)
    pending, free_slots = list(todo), list(range(jobs))
    try:
        while pending or running:
            while pending and free_slots:
                if check:
                    check()
                key = pending.pop(0)
                argv, cfg, record = runs[key]
                busy = train.out_dir_busy(cfg["out_dir"])
                if busy:  # another process trains it (another study.py on this plan): it is theirs to finish
                    print(f"  skipped {key[0]} seed {key[1]}: process {busy} is training it "
                          f"(run the plan again once it ends)", flush=True)
                    continue
                if finished_summary(cfg, record) is not None:  # that process finished it meanwhile
                    continue
                slot = free_slots.pop(0)
                resume = can_resume(cfg)
                os.makedirs(cfg["out_dir"], exist_ok=True)
                log = open(os.path.join(cfg["out_dir"], "train.out"), "a" if resume else "w")
                cores = set(allowed[slot * per_job:(slot + 1) * per_job]) or set(allowed)

                def pin(cores=cores):  # one job per group of cores (on a 2-core VM, ~2x faster than unpinned)
                    if jobs > 1 and hasattr(os, "sched_setaffinity"):
                        os.sched_setaffinity(0, cores)

                env = {**os.environ, "OMP_NUM_THREADS": str(per_job)}
                # a session of its own: a Ctrl-C at the terminal reaches the study, which passes it on once
                proc = subprocess.Popen([sys.executable, script, *argv, *(["--init_from=resume"] if resume else [])],
                                        stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=pin,
                                        start_new_session=True)
                running.append((key, proc, log, slot))
                print(f"  {'resumed' if resume else 'started'} {key[0]} seed {key[1]} -> {cfg['out_dir']}/train.out",
                      flush=True)
            time.sleep(0.5)
            for item in [r for r in running if r[1].poll() is not None]:
                key, proc, log, slot = item
                log.close()
                running.remove(item)
                free_slots.append(slot)
                if proc.returncode != 0:
                    raise RunFailed(f"{key[0]} seed {key[1]} failed (exit {proc.returncode}); see "
                                    f"{runs[key][1]['out_dir']}/train.out")
                print(f"  finished {key[0]} seed {key[1]}", flush=True)
                if save_record(*runs[key][1:]) and recorded:
                    recorded()
    finally:
        for _, proc, log, _ in running:
            proc.terminate()  # SIGTERM: train.py finishes its step, saves last.pt and exits
            proc.wait()
            log.close()


def run_study(runs, jobs=1, collect_only=False):
    """Run the planned runs that are not finished yet, then return {(name, seed): summary}."""
    todo = [key for key, (_, cfg, record) in runs.items() if finished_summary(cfg, record) is None]
    if todo and collect_only:
        raise StudyError(f"{len(todo)} runs are not finished (first: {runs[todo[0]][1]['out_dir']}); "
                         f"run without --collect_only to train them")
    print(f"study: {len(runs)} runs, {len(runs) - len(todo)} finished, {len(todo)} to train ({jobs} at a time)")
    run_pending(runs, todo, jobs)
    record_finished(runs)
    summaries = {key: finished_summary(cfg, record) for key, (_, cfg, record) in runs.items()}
    missing = [k for k, v in summaries.items() if v is None]
    if missing:
        raise StudyError(f"runs {missing} ended without a finished summary.json (interrupted?); run the study again")
    return summaries


# -----------------------------------------------------------------------------
# the table


def shared_metrics(summaries, wanted=None):
    """{key: {"label", "better"}} of the metrics every run reports (in the first run's order), or of the
    `wanted` ones, each of which must be reported by every run."""
    runs = list(summaries.values())
    declared = runs[0].get("metrics", {})
    common = {k: v for k, v in declared.items()
              if all(k in s.get("metrics", {}) and s.get(k) is not None for s in runs)}
    if not wanted:
        return common
    unknown = [k for k in wanted if k not in common]
    if unknown:
        raise ConfigError(f"metrics {unknown} are not reported by every run; available: {list(common)}")
    return {k: common[k] for k in wanted}


def study_table(summaries, names, seeds, metrics, n_boot=10000):
    """The comparison as a dict (for --json) and as printable lines: mean +- 95 % CI of each metric per
    config, then each config's paired difference against the first (the baseline)."""
    base = names[0]
    result = {"configs": names, "seeds": list(seeds), "metrics": {}, "differences": {}}
    width = max(20, *(len(n) + 2 for n in names))
    label_width = max(30, *(len(m["label"]) + 2 for m in metrics.values()))
    header = f"metric (mean ± 95% CI, n={len(seeds)})"
    lines = [f"{header:{label_width}s}" + "".join(f"{n:>{width}s}" for n in names)]
    for key, m in metrics.items():
        cells = []
        for name in names:
            values = [summaries[(name, s)][key] for s in seeds]
            mean, half = mean_ci(values)
            result["metrics"].setdefault(key, {"label": m["label"], "better": m["better"]})[name] = {
                "mean": mean, "ci95": half, "values": values}
            cells.append(f"{mean:.4f} ± {half:.4f}")
        lines.append(f"{m['label']:{label_width}s}" + "".join(f"{c:>{width}s}" for c in cells))
    if len(names) > 1:
        lines += ["", f"paired by seed, difference = config - {base}: 95% t-interval (decides the verdict), "
                      f"95% bootstrap interval ({n_boot:,} resamples)"]
    for name in names[1:]:
        for key, m in metrics.items():
            pair = ([summaries[(base, s)][key] for s in seeds], [summaries[(name, s)][key] for s in seeds])
            d, lo, hi = paired_t(*pair)
            _, b_lo, b_hi = paired_bootstrap(*pair, n_boot)
            word = verdict(lo, hi, m["better"])
            result["differences"].setdefault(name, {})[key] = {"mean": d, "lo": lo, "hi": hi, "boot_lo": b_lo,
                                                               "boot_hi": b_hi, "verdict": word}
            lines.append(f"  {name:{width}s} {m['label']:{label_width}s} {d:+.4f}  t [{lo:+.4f}, {hi:+.4f}]  "
                         f"boot [{b_lo:+.4f}, {b_hi:+.4f}]  {word}")
    return result, lines


# -----------------------------------------------------------------------------
# a study plan: named cells of runs, the claims to settle between them, and the report (RESULTS.md)
#
# A plan is a Python file (config/encoders_study.py) that sets (names starting with _ are its own helpers):
#   out_root   where the cells' runs go: OUT_ROOT/<cell>/<config name>/seed<N>
#   seeds      the seeds of every cell (a cell may set its own)
#   cells      [dict(name, configs, set, seeds, test_set, what, tune)]: each cell is a study of its config files
#              with the overrides `set`; test_set names the test examples (cells with the same one are compared on
#              a plot); run in order, so a cell may start from a checkpoint an earlier cell trained, or take a
#              setting an earlier cell chose: tune=dict(sweep=CELL, key=KEY) gives each config the value of KEY
#              that CELL's grid over KEY found best on validation (tuned_value)
#   labels     {config name: how tables call it}
#   verdicts   [dict(claim, a, b, metric, cost, rule, margin, subset)]: a and b are "cell/config", or
#              "cell/config - cell/config" (a difference per seed); the claim is judged under its rule (RULES:
#              superiority, that a beats b, unless it says non-inferiority or equivalence, with a margin);
#              subset: only the test examples of one of the plan's `subsets`; cost: a run A spent beyond B
#   subsets    {name: [words]}: test examples that hold one of the words (subset_words)
#   depth      ["cell/config"]: recurrent runs to score at test-time depths `depth_loops`
#   targets    [dict(what, term, metric, at_least or at_most)] and `budget_note`, `notes`: text for the report
# The whole plan is checked when it is loaded (check_plan), so that a mistake in its last cell stops the study
# before the first cell trains, not hours later.

PLAN_KEYS = {"out_root": str, "records": str, "seeds": list, "cells": list, "labels": dict, "verdicts": list,
             "depth": list, "depth_loops": list, "targets": list, "budget_note": str, "notes": list,
             "conclusions": list, "effect": (int, float), "subsets": dict}
CELL_KEYS = {"name": str, "configs": list, "set": list, "grid": list, "seeds": list, "test_set": str, "what": str,
             "tune": dict}
TUNE_KEYS = {"sweep": str, "key": str}
VERDICT_KEYS = {"claim": str, "a": str, "b": str, "metric": str, "cost": str, "rule": str, "margin": (int, float),
                "subset": str}
CONCLUSION_KEYS = {"claim": str, "source": str, "verdict": str, "instead": str, "reverse": bool, "note": str}
TARGET_KEYS = {"what": str, "term": str, "metric": str, "at_least": (int, float), "at_most": (int, float)}
TEST_METRICS = ["test_accuracy", "test_f1", "test_precision", "test_recall", "test_mcc"]
# the figures train.summarize writes for every run, beside its task's final validation and test figures
RUN_FIGURES = ("best_val_loss", "final_grad_norm", "train_minutes", "train_flops", "iters", "epochs", "params",
               "params_non_embedding")


def metric_names():
    """The figures a run's summary.json may hold, which a verdict or a target may compare: each task's
    (train.TASKS) as test_X (the best checkpoint on the test split) and final_val_X, and the RUN_FIGURES."""
    per_task = {f"{split}_{k}" for task in train.TASKS.values() for k in task.metrics
                for split in ("test", "final_val")}
    return sorted(per_task | set(RUN_FIGURES))


def load_plan(path):
    """The plan file's settings with the defaults of those it leaves out, checked whole (check_plan)."""
    plan, source = read_plan(path)
    check_entry(plan, PLAN_KEYS, (), path)  # before the defaults fill in: a misspelt key is not a missing one
    if not plan.get("cells"):
        raise ConfigError(f"{path} plans no cells")
    plan = {"out_root": "out/plan", "seeds": [1, 2, 3], "labels": {}, "verdicts": [], "depth": [],
            "depth_loops": [1, 2, 3, 4], "targets": [], "notes": [], "conclusions": [], "effect": 0.01,
            "subsets": {}, **plan}
    # a plan whose records are to be committed names their folder (config/encoders_study.py: results/runs)
    plan.setdefault("records", plan["out_root"].rstrip("/") + "_records")
    check_plan(plan, path)
    return {**plan, "path": path, "read": source}


def plan_unchanged(plan):
    """Raise StudyError if the plan file is no longer the one this study read: a study trains the runs
    of the plan it read, and a cell whose settings were edited since would train runs that the plan no
    longer holds (or again, runs that it now counts as finished)."""
    if plan.get("read") is None:  # a plan made in code, not read from a file
        return
    with open(plan["path"], "rb") as f:
        if f.read() != plan["read"]:
            raise StudyError(f"{plan['path']} changed since this study read it: the runs it would train next "
                             f"may not be the plan's now. The runs finished so far are recorded; run the command "
                             f"again to go on under the plan as it is")


def read_plan(path):
    """(The plan file's top-level names, from running it as Python, and its bytes as read); names starting
    with _, imports and functions are its own helpers. A Python error in it is one line that says where (a
    ConfigError)."""
    if not os.path.isfile(path):
        raise ConfigError(f"plan {path} not found")
    with open(path, "rb") as f:
        source = f.read()
    namespace = {"__file__": os.path.abspath(path)}  # one namespace: comprehensions see the plan's names
    try:
        exec(compile(source, path, "exec"), namespace)
    except SyntaxError as e:
        raise ConfigError(f"{path}, line {e.lineno}: {e.msg}") from None
    except Exception as e:  # whatever the plan's own code raised: the user's mistake, not this file's
        lines = [frame.lineno for frame in traceback.extract_tb(e.__traceback__) if frame.filename == path]
        raise ConfigError(f"{path}, line {lines[-1] if lines else '?'}: {type(e).__name__}: {e}") from None
    return {k: v for k, v in namespace.items()
            if not k.startswith("_") and not callable(v) and type(v).__name__ != "module"}, source


def check_entry(entry, keys, required, where):
    """A plan, or one of its cells, verdicts or targets: a dict of the `keys` ({key: type}) that has the
    `required` ones. An unknown key is refused with the closest known one: unchecked, a typo (`sets=` for
    `set=`) would be ignored, and its overrides with it."""
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be a dict(...), not {entry!r}")
    for key, value in entry.items():
        if key not in keys:
            raise ConfigError(f"{where}: unknown key {key!r}{closest(key, list(keys))} (known: {', '.join(keys)})")
        if not isinstance(value, keys[key]):
            kind = getattr(keys[key], "__name__", "number")
            raise ConfigError(f"{where}: {key} must be a {kind}, not {value!r}")
    missing = [k for k in required if k not in entry]
    if missing:
        raise ConfigError(f"{where} needs {' and '.join(missing)}")


def parse_term(term):
    """'cell/config' -> [(cell, config)]; 'cell/config - cell/config' -> both (a difference per seed)."""
    parts = [p.strip().partition("/") for p in term.split(" - ")]
    if len(parts) > 2 or any(not cell or not sep or not config for cell, sep, config in parts):
        raise ConfigError(f"term {term!r}: expected 'cell/config' or 'cell/config - cell/config'")
    return [(cell, config) for cell, _, config in parts]


def check_term(term, configs, where, single=False):
    """A term names cells of the plan and configs of those cells; `configs` is {cell: [config names]}."""
    parts = parse_term(term)
    if single and len(parts) > 1:
        raise ConfigError(f"{where} {term!r}: expected one 'cell/config'")
    for cell, config in parts:
        if cell not in configs:
            raise ConfigError(f"{where} {term!r}: the plan has no cell {cell!r}{closest(cell, list(configs))}")
        if config not in configs[cell]:
            raise ConfigError(f"{where} {term!r}: cell {cell} has no config {config!r}"
                              f"{closest(config, configs[cell])} (it has {', '.join(configs[cell])})")


def check_metric(metric, where):
    if metric not in metric_names():
        raise ConfigError(f"{where}: no run reports a metric {metric!r}{closest(metric, metric_names())}")


def check_cell(cell, where):
    """A cell's config files exist, have distinct names and take its overrides (train.make_config says
    which key it does not know, and the closest one it does); returns its config names."""
    if not cell["name"] or "/" in cell["name"] or cell["name"] in (".", ".."):
        raise ConfigError(f"{where}: a cell's name is a folder and the first half of 'cell/config': no '/' in it")
    if not cell["configs"]:
        raise ConfigError(f"{where} has no configs")
    for path in cell["configs"]:
        if not isinstance(path, str) or not os.path.isfile(path):
            raise ConfigError(f"{where}: config file {path} not found")
    if "seeds" in cell:
        check_seeds(cell["seeds"], f"{where}: seeds")
    check_overrides(cell.get("set", []), f"{where}: set")
    check_overrides(cell.get("grid", []), f"{where}: grid")
    try:
        names = [name for name, _, _ in run_names(cell["configs"], cell.get("grid", []))]
        for path, point in itertools.product(cell["configs"], grid_points(cell.get("grid", []))):
            train.make_config([path, *[f"--{s}" for s in cell.get("set", [])], *point])
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    return names


def check_tune(cell, earlier, where):
    """A tuned cell names an earlier cell (its sweep) whose one grid axis is the key to tune, and shares a
    config with it; the key is not also set by the tuned cell (the chosen value would be overridden or
    override it)."""
    tune = cell["tune"]
    check_entry(tune, TUNE_KEYS, ("sweep", "key"), f"{where}: tune")
    sweep = earlier.get(tune["sweep"])
    if sweep is None:
        raise ConfigError(f"{where}: tune: sweep {tune['sweep']!r} is not a cell before this one"
                          f"{closest(tune['sweep'], list(earlier))}")
    axes = [g.partition("=")[0] for g in sweep.get("grid", [])]
    if axes != [tune["key"]]:
        raise ConfigError(f"{where}: tune: sweep {tune['sweep']} must have one grid axis, {tune['key']}=V1,V2,... "
                          f"(it has {axes or 'none'})")
    if not {config_name(p) for p in cell["configs"]} & {config_name(p) for p in sweep["configs"]}:
        raise ConfigError(f"{where}: tune: no config of this cell is in sweep {tune['sweep']}")
    if any(item.partition("=")[0] == tune["key"] for item in cell.get("set", [])):
        raise ConfigError(f"{where}: tune: the cell also sets {tune['key']}; its sweep chooses it")


def entry_name(entry, key, i):
    """How an error names the i-th cell, verdict or target of a plan: by its name, claim or what, else by number."""
    return repr(entry[key]) if isinstance(entry, dict) and key in entry else str(i + 1)


def check_plan(plan, path):
    """Every mistake a plan (its keys checked, its defaults filled in) can hold that needs no run to find:
    unknown keys in its cells, verdicts and targets (with the closest known one), cells without configs,
    config files that do not exist, cells of one name, repeated seeds, two configs of one name in a cell,
    overrides train.py does not know, and verdicts, targets, depth and labels that name cells, configs or
    metrics the plan does not have. Raises ConfigError."""
    check_seeds(plan["seeds"], f"{path}: seeds")
    for name, words in plan["subsets"].items():
        if not isinstance(words, list) or not words or not all(isinstance(w, str) and w.strip() == w != "" for w in words):
            raise ConfigError(f"{path}: subsets: {name} must be a list of words, not {words!r}")
    configs = {}  # cell name -> its config names
    for i, cell in enumerate(plan["cells"]):
        where = f"{path}: cell {entry_name(cell, 'name', i)}"
        check_entry(cell, CELL_KEYS, ("name", "configs"), where)
        if cell["name"] in configs:
            raise ConfigError(f"{path}: two cells are named {cell['name']!r} (a cell's name is its runs' folder)")
        configs[cell["name"]] = check_cell(cell, where)
        if "tune" in cell:
            check_tune(cell, {c["name"]: c for c in plan["cells"][:i]}, where)
    every = sorted({name for names in configs.values() for name in names})
    for name in plan["labels"]:
        if name not in every:
            raise ConfigError(f"{path}: labels: no cell has a config {name!r}{closest(name, every)}")
    for i, claim in enumerate(plan["verdicts"]):
        where = f"{path}: verdict {entry_name(claim, 'claim', i)}"
        check_entry(claim, VERDICT_KEYS, ("claim", "a", "b"), where)
        for key in ("a", "b", "cost"):
            if key in claim:
                check_term(claim[key], configs, f"{where}: {key}")
        check_metric(claim.get("metric", "test_accuracy"), where)
        rule = claim.get("rule", "superiority")
        if rule not in RULES:
            raise ConfigError(f"{where}: rule {rule!r}: expected one of {', '.join(RULES)}{closest(rule, list(RULES))}")
        if (rule == "superiority") == ("margin" in claim) or claim.get("margin", 1) <= 0:
            raise ConfigError(f"{where}: a {rule} verdict takes " + ("no margin" if rule == "superiority" else
                                                                       "a margin > 0 (how far A may be from B)"))
        if "subset" in claim:
            if claim["subset"] not in plan["subsets"]:
                raise ConfigError(f"{where}: subset {claim['subset']!r}: the plan's subsets are "
                                  f"{sorted(plan['subsets'])}{closest(claim['subset'], list(plan['subsets']))}")
            if " - " in claim["a"] + claim["b"] or claim.get("metric", "test_accuracy") != "test_accuracy":
                raise ConfigError(f"{where}: a subset verdict compares two single terms in test_accuracy (the "
                                  f"accuracy on the subset's test examples, from each run's predictions)")
    for i, target in enumerate(plan["targets"]):
        where = f"{path}: target {entry_name(target, 'what', i)}"
        check_entry(target, TARGET_KEYS, ("what", "term"), where)
        if ("at_least" in target) == ("at_most" in target):
            raise ConfigError(f"{where}: give exactly one of at_least and at_most")
        check_term(target["term"], configs, f"{where}: term")
        check_metric(target.get("metric", "test_accuracy"), where)
    claims = [v["claim"] for v in plan["verdicts"]]
    for i, conclusion in enumerate(plan["conclusions"]):
        where = f"{path}: conclusion {entry_name(conclusion, 'claim', i)}"
        check_entry(conclusion, CONCLUSION_KEYS, ("claim", "source", "verdict"), where)
        for key in ("verdict", "instead"):
            if key in conclusion and conclusion[key] not in claims:
                raise ConfigError(f"{where}: {key}: no verdict {conclusion[key]!r}{closest(conclusion[key], claims)}")
    for term in plan["depth"]:
        check_term(term, configs, f"{path}: depth", single=True)
    loops = plan["depth_loops"]
    if not loops or not all(type(k) is int and k >= 1 for k in loops):
        raise ConfigError(f"{path}: depth_loops {loops!r}: expected a list of loop counts (integers >= 1)")


def plan_cell(plan, cell, earlier):
    """(cell, its runs as plan_runs gives them). A tuned cell's configs that its sweep (in `earlier`: {name:
    (cell, runs)} of the cells before it) varies take the value it chose (tuned_value); until the sweep has
    finished for one of them, the cell waits (cell["waiting"] says why; its runs are planned without that value,
    counted and never trained)."""
    root, records = (os.path.join(plan[k], cell["name"]) for k in ("out_root", "records"))
    tuned, unfinished = {}, []
    if "tune" in cell:
        tune = cell["tune"]
        sweep_runs = earlier[tune["sweep"]][1]
        swept = {name.partition("@")[0] for name, _ in sweep_runs}
        for config in (config_name(p) for p in cell["configs"]):
            if config in swept:
                value, _ = tuned_value(sweep_runs, config, tune["key"])
                if value is None:
                    unfinished.append(config)
                else:
                    tuned[config] = [f"{tune['key']}={value}"]
        if unfinished:
            cell = {**cell, "waiting": f"waits for its sweep, {tune['sweep']}, to finish the runs of "
                                       f"{', '.join(unfinished)}"}
    return cell, plan_runs(cell["configs"], cell.get("seeds", plan["seeds"]), root, cell.get("set", []),
                           cell.get("grid", []), records=records, tuned=tuned)


def best_eval(log_path):
    """The evaluation record of a run's best checkpoint (the last one logged as best: the lowest validation
    loss, which the run keeps and scores on test); None if the log has none."""
    evals = log_records(log_path, "eval")
    best = [r for r in evals if r.get("best")]
    return best[-1] if best else None


def tuned_value(sweep_runs, config, key):
    """The value of `key` that a sweep's grid (its runs: {(name, seed): (argv, cfg, record)}) chooses for
    `config`: the grid point whose runs' best checkpoints have the highest validation accuracy, mean over the
    sweep's seeds; of two equal, the lower validation loss. Only the validation split chooses: the test
    figures of the sweep's runs play no part. Returns (value as the grid spells it, {value: (mean validation
    accuracy, mean validation loss)}), or (None, {}) until every run of the sweep for `config` has finished."""
    scores = {}
    for (name, seed), (_, cfg, record) in sweep_runs.items():
        if name.partition("@")[0] != config:
            continue
        best = best_eval(run_file(cfg, record, "log.jsonl")) if finished_summary(cfg, record) else None
        if best is None:
            return None, {}
        value = dict(item.split("=", 1) for item in grid_settings(name))[key]
        scores.setdefault(value, []).append((best["val_accuracy"], best["val_loss"]))
    means = {v: (float(np.mean([a for a, _ in x])), float(np.mean([loss for _, loss in x])))
             for v, x in scores.items()}
    if not means:
        return None, {}
    return max(means, key=lambda v: (means[v][0], -means[v][1])), means


def run_plan(plan, jobs=1, collect_only=False, only=None):
    """Train every cell's unfinished runs, cell after cell (unless collect_only; with `only`, just those
    cells'), record every finished run that has no record yet (save_record) and each cell's test labels
    (cell_data), note the plan in its history (note_plan), then return {cell name: (cell with its "data",
    runs, {(config name, seed): summary or None})}. A tuned cell is planned once the cells before it have
    trained, so that it takes what its sweep chose in this very study."""
    names = [cell["name"] for cell in plan["cells"]]
    unknown = sorted(set(only or ()) - set(names))
    if unknown:
        raise ConfigError(f"--cells {unknown}: the plan has {names}")
    cells = {}
    for cell in plan["cells"]:
        name = cell["name"]
        cell, runs = plan_cell(plan, cell, cells)
        cells[name] = (cell, runs)
        todo = [key for key, (_, cfg, record) in runs.items() if finished_summary(cfg, record) is None]
        if todo and not collect_only and (not only or name in only):
            if cell.get("waiting"):
                print(f"cell {name}: {len(runs)} runs, not trained: it {cell['waiting']}")
                continue
            print(f"cell {name}: {len(runs)} runs, {len(todo)} to train")
            try:
                run_pending(runs, todo, jobs, check=lambda: plan_unchanged(plan),
                            recorded=lambda: note_plan(plan, cells))
            except RunFailed as e:  # a cell that cannot run (its data cannot be had) does not stop the rest
                print(f"cell {name} stopped: {e}")
                cells[name] = ({**cell, "error": str(e)}, runs)
    # collected after all the training: runs that finished meanwhile elsewhere (another core's queue) count
    results = {}
    for name, (cell, runs) in cells.items():
        record_finished(runs)
        summaries = {key: finished_summary(cfg, record) for key, (_, cfg, record) in runs.items()}
        results[name] = ({**cell, "data": cell_data(os.path.join(plan["records"], name), runs, summaries, plan)},
                         runs, summaries)
    note_plan(plan, cells)
    return results


# -----------------------------------------------------------------------------
# the plan's history: which rules and seed counts were in force when each cell's data began
#
# A verdict's rule (and the seeds it waits for) must be fixed before its data is seen. The records folder keeps
# plan_history.jsonl, one line per event, each with the date, the code's commit and the plan's rules and seeds as
# they stood: "first run" when a cell's first run is recorded, "plan changed" when a study finds the plan's rules
# or seeds differ from the last line. The report reads it beside each verdict (rule_history). The lines before
# this file existed were written from the repository's history (results/runs/plan_history.md says how).

HISTORY = "plan_history.jsonl"


def plan_snapshot(plan):
    """What a verdict's fairness rests on: each cell's seeds, and each verdict's terms, rule and margin."""
    return {"seeds": {c["name"]: c.get("seeds", plan["seeds"]) for c in plan["cells"]},
            "verdicts": {v["claim"]: {k: v[k] for k in ("a", "b", "rule", "margin", "subset") if k in v}
                         for v in plan["verdicts"]}}


def read_history(path):
    if not os.path.isfile(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def note_plan(plan, cells):
    """Append to the plan's history what is new: "plan changed" if its rules or seeds differ from the last
    line, and "first run" for each cell (of `cells`: {name: (cell, runs)}) that has a recorded run and no
    such line yet. Nothing when nothing is new, so a fresh clone's report leaves the file as it is."""
    path = os.path.join(plan["records"], HISTORY)
    history = read_history(path)
    snapshot = plan_snapshot(plan)
    lines = []
    if history and history[-1]["plan"] != snapshot:
        lines.append({"event": "plan changed"})
    started = {line.get("cell") for line in history}
    for name, (_, runs) in cells.items():
        if name not in started and any(has_record(record) for _, _, record in runs.values()):
            lines.append({"event": "first run", "cell": name})
    if not lines:
        return
    stamp = {"date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "commit": train.code_commit()}
    os.makedirs(plan["records"], exist_ok=True)
    with open(path, "a") as f:
        for line in lines:
            f.write(json.dumps({**stamp, **line, "plan": snapshot}) + "\n")


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
    """A run's SST-2 test sentences in the order of its prepared split (data.prepare_sst2, at its default seed),
    or None (with a line saying why) if the source files cannot be had here."""
    try:
        splits = data.sst2_splits(cfg["protocol"], seed, os.environ.get("DATA_MIRROR"))
        return data.subset_splits(splits, cfg.get("subset", ""), seed)["test"][0]
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


def subset_index(results, cell, subset):
    """The test indices of a plan subset in a cell (its data.json), or None if they were not recorded."""
    return results[cell][0]["data"].get("test_subsets", {}).get(subset, {}).get("index")


def correct(results, cell, name, seeds, index=None):
    """(seeds, examples) 0/1: which test examples each seed's run of cell/name got right (its test_predictions
    against the cell's test labels), on the examples `index` if given."""
    labels = np.asarray(results[cell][0]["data"]["test_labels"])
    right = np.array([np.asarray(results[cell][2][(name, s)]["test_predictions"]) == labels for s in seeds])
    return (right if index is None else right[:, index]).astype(np.int64)


def term_values(term, results, metric, subset=None):
    """Per-seed values {seed: value} of a term: 'cell/config', or 'cell/config - cell/config'. With a plan
    subset, a single term's accuracy on that subset's test examples (None if the cell did not record them)."""
    if subset is not None:
        (cell, name), = parse_term(term)
        index = subset_index(results, cell, subset)
        if index is None:
            return {}
        done = finished_seeds(results[cell][2], name)
        return dict(zip(done, correct(results, cell, name, done, index).mean(axis=1).tolist())) if done else {}
    values = []
    for cell, name in parse_term(term):
        if cell not in results:
            raise ConfigError(f"term {term!r}: no cell {cell!r} in the plan")
        summaries = results[cell][2]
        if not any(n == name for n, _ in summaries):
            raise ConfigError(f"term {term!r}: cell {cell} has no config {name!r}")
        done = {seed: s for (n, seed), s in summaries.items() if n == name and s is not None}
        if any(metric not in s for s in done.values()):
            raise ConfigError(f"term {cell}/{name}: its runs do not report {metric!r}")
        values.append({seed: s[metric] for seed, s in done.items()})
    if len(values) == 1:
        return values[0]
    return {seed: v - values[1][seed] for seed, v in values[0].items() if seed in values[1]}


def planned_seeds(term, results):
    """The seeds a term's runs are planned for (all of them, finished or not)."""
    return set.intersection(*({seed for n, seed in results[cell][2] if n == name} for cell, name in parse_term(term)))


def judge(claim, results, metrics, effect=0.01):
    """One verdict row: the claim that term a beats term b in `metric`, over the seeds both finished:
    mean difference, paired t-interval (decides), bootstrap interval, the smallest effect these seeds could
    detect (detectable_effect, from the spread of the per-seed differences) and the seeds a true difference
    of `effect` would need (seeds_needed), and for two single runs on the same test examples McNemar's
    exact p per seed."""
    metric = claim.get("metric", "test_accuracy")
    a, b = (term_values(claim[k], results, metric, claim.get("subset")) for k in ("a", "b"))
    seeds = sorted(set(a) & set(b))
    row = {**claim, "metric": metric, "seeds": seeds, "n": len(seeds),
           "planned": len(planned_seeds(claim["a"], results) & planned_seeds(claim["b"], results))}
    if len(seeds) < 2:
        return {**row, "verdict": "not run"}
    pair = ([b[s] for s in seeds], [a[s] for s in seeds])
    d, lo, hi = paired_t(*pair)
    _, b_lo, b_hi = paired_bootstrap(*pair)
    better = metrics.get(metric, {}).get("better", "higher")
    sd = float(np.std(np.subtract(pair[1], pair[0]), ddof=1))
    verdict_ = claim_verdict(lo, hi, better, claim.get("rule", "superiority"), claim.get("margin", 0.0))
    row.update(mean=d, lo=lo, hi=hi, boot_lo=b_lo, boot_hi=b_hi, verdict=verdict_, sd=sd,
               detectable=detectable_effect(sd, len(seeds)), seeds_needed=seeds_needed(sd, effect))
    if " - " not in claim["a"] + claim["b"]:
        (cell_a, _, name_a), (cell_b, _, name_b) = claim["a"].partition("/"), claim["b"].partition("/")
        same_test = results[cell_a][0].get("test_set") == results[cell_b][0].get("test_set")
        labels = results[cell_a][0]["data"].get("test_labels")
        if same_test and metric.startswith("test_") and labels and "subset" not in claim:
            row["mcnemar"] = [mcnemar(labels, results[cell_a][2][(name_a, s)]["test_predictions"],
                                      results[cell_b][2][(name_b, s)]["test_predictions"]) for s in seeds]
        if same_test and metric == "test_accuracy" and labels:
            index = subset_index(results, cell_a, claim["subset"]) if "subset" in claim else None
            d_examples = correct(results, cell_a, name_a, seeds, index) - correct(results, cell_b, name_b, seeds, index)
            row["sent_lo"], row["sent_hi"] = seed_and_example_bootstrap(d_examples)
            row["sent_verdict"] = claim_verdict(row["sent_lo"], row["sent_hi"], better, claim.get("rule", "superiority"),
                                                claim.get("margin", 0.0))
    return row


def seed_and_example_bootstrap(d, n_boot=10000, seed=0):
    """The 95 % percentile interval of a mean accuracy difference that resamples the seeds and the test
    examples both: d is (seeds, examples), each entry A's right minus B's (-1, 0 or 1), paired by seed and
    example. Each of the n_boot resamples draws the examples with replacement (the same draw for every seed
    and both models: the test set is one sample of sentences) and the seeds with replacement, and takes the
    mean over the drawn seeds of the accuracy difference on the drawn examples. With seeds alone (the
    t-interval) the test set is taken as fixed; this shows what its size adds. Returns (lower, upper)."""
    n_seeds, n = d.shape
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    for start in range(0, n_boot, 1000):
        k = min(1000, n_boot - start)
        draws = rng.integers(0, n, size=(k, n))
        counts = np.bincount((draws + n * np.arange(k)[:, None]).ravel(), minlength=k * n).reshape(k, n)
        per_seed = counts @ d.T  # (k, seeds): integer sums, exact on every machine
        picks = rng.integers(0, n_seeds, size=(k, n_seeds))
        means[start:start + k] = np.take_along_axis(per_seed, picks, axis=1).mean(axis=1) / n
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(lo), float(hi)


def rule_words(v):
    """'superiority', 'non-inferiority, margin 0.01' or 'equivalence, within ±0.01' for a verdict's rule."""
    rule = v.get("rule", "superiority")
    return {"superiority": rule, "non-inferiority": f"{rule}, margin {v.get('margin', 0):g}",
            "equivalence": f"{rule}, within ±{v.get('margin', 0):g}"}[rule]


def term_cells(v):
    return sorted({cell for k in ("a", "b") for cell, _ in parse_term(v[k])})


def rule_history(history, claim):
    """What the plan's history (plan_history.jsonl) says of a verdict: the rule and the seed count it had when
    its data began (the first run of the last of its cells to start), and each change of either since, dated.
    Returns (words, the verdict's entry as planned then, or None if it was not in the plan then or has no data)."""
    now = next((h["plan"]["verdicts"][claim] for h in reversed(history) if claim in h["plan"]["verdicts"]), None)
    firsts = {h["cell"]: i for i, h in enumerate(history) if h["event"] == "first run"}
    cells = term_cells(now) if now else []
    if not now or not all(c in firsts for c in cells):
        return "planned before any of its data", None
    start = max(firsts[c] for c in cells)

    def seeds(h, v):
        return len(set.intersection(*(set(h["plan"]["seeds"].get(c, [])) for c in term_cells(v))))

    first = history[start]["plan"]["verdicts"].get(claim)
    began = history[start]["date"][:10]
    if first is None:
        added = next(h for h in history[start:] if claim in h["plan"]["verdicts"])
        return f"added to the plan on {added['date']}, after its data began ({began})", None
    changes, (rule, n) = [], (rule_words(first), seeds(history[start], first))
    for h in history[start + 1:]:
        v = h["plan"]["verdicts"].get(claim)
        if v is None:
            continue
        if rule_words(v) != rule:
            changes.append(f"rule {rule} → {rule_words(v)} on {h['date']}")
        if seeds(h, v) != n:
            changes.append(f"seeds {n} → {seeds(h, v)} on {h['date']}")
        rule, n = rule_words(v), seeds(h, v)
    if not changes:
        return f"as planned when its data began ({began}: {rule}, {n} seeds)", first
    return f"changed after its data began ({began}): " + "; ".join(changes), first


# -----------------------------------------------------------------------------
# measurements that need the trained models: evaluate.py runs them (this file never loads a model)


def evaluate_script(argv, json_path):
    """Run `python evaluate.py ARGV --json JSON_PATH` on one thread and return the JSON, or None if it failed."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "evaluate.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, script, *argv, "--json", json_path], env=env, capture_output=True,
                          text=True)
    if done.returncode != 0:
        print(f"  evaluate.py {' '.join(argv[:3])} ... failed: {done.stderr.strip()[-300:]}")
        return None
    with open(json_path) as f:
        out = json.load(f)
    return out if isinstance(out, list) else [out]


def machine_load():
    """The load average of the last minute: about the number of processes that wanted a core."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0


BUBBLE_PER_MB = 12  # a frontier plot's bubble area, in points^2, per MB of fp32 weights
FRONTIER_NUMBERED = 12  # a frontier plot with more models numbers only the points on its frontiers
QUIET_LOAD = 0.5  # a machine whose load average is above this is busy: its latencies would not be the models'


def run_measurement(cfg, record, name, argv, what, remeasure=False):
    """A measurement of one finished run's best checkpoint, kept in its record folder as `name` (committed
    with it: checkpoints do not outlive a session, the record does). Read from there if it is there (and
    not `remeasure`), else measured now with `evaluate.py --ckpt CKPT ARGV` (announced as `what`) if the
    checkpoint is here; None if neither."""
    path, ckpt = os.path.join(record, name), os.path.join(cfg["out_dir"], "ckpt.pt")
    here = os.path.isfile(ckpt) and has_record(record)
    if here and (remeasure or not os.path.isfile(path)):
        print(what)
        rows = evaluate_script(["--ckpt", ckpt, *argv], path)
        return rows[0] if rows else None
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        rows = json.load(f)
    return rows[0] if isinstance(rows, list) else rows


def measure(results, plan, remeasure=False, timed=False):
    """Size and FLOPs of each cell's configs (their first finished seed's best checkpoint, on one thread),
    and the test-time depth of the plan's `depth` runs (every finished seed); with `timed` (study.py --time,
    on a quiet machine, training done) also latency at batch 1 and throughput in batches of 256, every
    checkpoint here in one process, in turns, with the pass's conditions in the records folder
    (timing.json). Each measurement is kept in its
    run's record folder (run_measurement: measure.json, depth.json), so a later session, whose out/ holds
    none of these checkpoints, reports them as they were. Returns ({cell: {config: figures}}, {depth term:
    [figures per seed]})."""
    if timed:
        load = machine_load()
        if load > QUIET_LOAD:
            raise StudyError(f"the machine is busy (load average {load:.2f} over the last minute): time the "
                             f"checkpoints when nothing else runs, or the latencies are the other processes' too")
        # evaluate.py runs on one thread (evaluate_script)
        started = {"load_before": round(load, 2), **train.machine_conditions("cpu"), "threads": 1}
    firsts = []  # (cell, config, its first finished seed's config and record folder) of every tested config
    for name, (cell, runs, summaries) in results.items():
        for config in dict.fromkeys(n for n, _ in runs):
            seeds = finished_seeds(summaries, config)
            if seeds and summaries[(config, seeds[0])].get("test_n"):
                firsts.append((name, config, *runs[(config, seeds[0])][1:]))
    if timed:  # every first seed in one evaluate.py process, timed in turns (evaluate.py --interleave)
        firsts = [f for f in firsts if has_record(f[3])]
        here = [f for f in firsts if os.path.isfile(os.path.join(f[2]["out_dir"], "ckpt.pt"))]
        gone = [f for f in firsts if f not in here]  # trained in an earlier session: its architecture, fresh
        print(f"timing {len(firsts)} configs' first seeds in turns: {len(here)} checkpoints, {len(gone)} "
              f"architectures whose checkpoint is gone (fresh weights: a forward's time does not depend on them)")
        with tempfile.TemporaryDirectory() as tmp:
            argv = [*(["--ckpt", *[os.path.join(f[2]["out_dir"], "ckpt.pt") for f in here]] if here else []),
                    *(["--untrained", *[os.path.join(f[3], "config.py") for f in gone]] if gone else []),
                    "--split", "test", "--interleave"]
            rows = evaluate_script(argv, os.path.join(tmp, "timing.json")) if firsts else []
        for (_, _, _, record), row in zip(here + gone, rows or []):
            path = os.path.join(record, "measure.json")
            if row.get("untrained") and os.path.isfile(path):  # the checkpoint's figures stay, timed anew
                with open(path) as f:
                    row = {**json.load(f), **{k: row[k] for k in ("latency_ms", "throughput", "untrained")}}
            data.write_json(path, row, indent=2)
    timing, depth = {}, {}
    for name, config, cfg, record in firsts:
        row = run_measurement(cfg, record, "measure.json", ["--split", "test", "--no_timing"],
                              f"measuring {name}/{config}", remeasure)
        if row:
            timing.setdefault(name, {})[config] = row
    for term in plan["depth"]:
        cell, _, config = term.partition("/")
        _, runs, summaries = results[cell]
        rows = [run_measurement(*runs[(config, s)][1:], "depth.json",
                                ["--no_timing", "--loops", *map(str, plan["depth_loops"])],
                                f"test-time depth of {term} seed {s}: loops {plan['depth_loops']}", remeasure)
                for s in finished_seeds(summaries, config)]
        if any(rows):
            depth[term] = [r for r in rows if r]
    if timed:
        data.write_json(os.path.join(plan["records"], "timing.json"),
                        {**started, "load_after": round(machine_load(), 2)}, indent=1)
    return timing, depth


# -----------------------------------------------------------------------------
# the report: RESULTS.md and its plots
#
# The report says how many runs it holds (`Finished runs: N of M.`), and a report is never replaced by one
# that holds fewer (a fresh clone has no out/: its study would report nothing) unless --allow_fewer. It is
# written with its plots in one go: made in a temporary folder, then moved into place.


def pareto_front(points):
    """The points no other point beats on both counts, for (cost, value) pairs where a lower cost and a
    higher value are better: sorted by cost, each kept point has a higher value than every cheaper one
    (of two at the same cost, the better value). Returns their indices in order of cost."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front, best = [], -math.inf
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front


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


def read_log(path):
    """The evaluation records of a run's log.jsonl: [(iter, val accuracy or None, val loss)]."""
    return [(r["iter"], r.get("val_accuracy"), r.get("val_loss")) for r in log_records(path, "eval")]


def tight_layout(fig, **kwargs):
    """fig.tight_layout(**kwargs), its result rounded to steps of 2**-20 of the figure (about a thousandth of
    a pixel), so that a plot comes out the same on every machine. tight_layout measures the artists' extents,
    and on a log axis a spine's ends go through numpy's log10, whose last bit depends on the CPU and the numpy
    version (its AVX-512 code and its AVX2 code round differently): the edge of the right panel of
    frontier_sst2_glue_compact.png, exactly on a half pixel (1303.5), was snapped to one pixel column or the
    next. The steps are binary fractions so that an exact value (a pad in points, a font metric in 1/64
    pixel) does not fall halfway between two of them."""
    fig.tight_layout(**kwargs)
    p = fig.subplotpars
    fig.subplots_adjust(**{k: round(getattr(p, k) * 2**20) / 2**20
                           for k in ("left", "right", "bottom", "top", "wspace", "hspace")})


def draw_plots(plan, results, timing, depth, folder, label):
    """The report's PNGs in `folder`: per test set, accuracy against latency (bubble area = fp32 size)
    and against non-embedding parameters, each with its Pareto frontier; the learning curves of every
    cell; the length histograms of the short/long subsets; accuracy against test-time depth. Returns
    [(title, path)]. matplotlib is imported here, and only here."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    os.makedirs(folder, exist_ok=True)
    made = []

    def save(fig, file, title, layout=True):
        path = os.path.join(folder, file)
        if layout:
            tight_layout(fig)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append((title, path))

    # one frontier per training set (a cell's prepared dataset, data.json): models trained on other data
    # (a subset, the other protocol) are not points of the same trade-off, even on the same test set; nor
    # are a grid's, trained at a budget of its own: a grid cell has a frontier to itself
    groups = {}  # (training set, test set, grid cell or "") -> [(cell, row)] with a test accuracy
    for name in results:
        cell = results[name][0]
        trained_on = cell["data"].get("dataset", name)
        for row in cell_rows(name, results, timing):
            if "test_accuracy" in row:
                key = (trained_on, cell.get("test_set", name), name if cell.get("grid") else "")
                groups.setdefault(key, []).append((name, row))
    for (trained_on, test_set, grid_cell), items in groups.items():
        if len(items) < 2:
            continue
        # past a dozen points the numbers run together: then only each panel's frontier is numbered
        numbered = set()
        timed = [(n, r) for n, r in items if r.get("latency_ms")]
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
        for ax, key, xlabel, pts in ((axes[0], "latency_ms", "latency at batch 1 (ms, one CPU thread)", timed),
                                     (axes[1], "params_non_embedding", "non-embedding parameters", items)):
            if not pts:
                ax.text(0.5, 0.5, "not timed yet (study.py --time)", ha="center", va="center", transform=ax.transAxes)
                ax.set_xlabel(xlabel)
                continue
            xy = [(r[key], r["test_accuracy"][0]) for _, r in pts]
            # bubble area (points^2) proportional to the fp32 size, on the latency panel
            sizes = [BUBBLE_PER_MB * (r.get("size_mb") or 0) for _, r in pts] if key == "latency_ms" else 30
            ax.scatter([p[0] for p in xy], [p[1] for p in xy], s=sizes, alpha=0.45, edgecolors="k")
            ax.errorbar([p[0] for p in xy], [p[1] for p in xy], fmt="none", ecolor="grey", lw=0.8,
                        yerr=[0 if math.isnan(r["test_accuracy"][1]) else r["test_accuracy"][1] for _, r in pts])
            front = pareto_front(xy)
            for i, (x, y) in enumerate(xy):  # numbers, not names: the legend below says which is which
                k = items.index(pts[i])
                if len(items) <= FRONTIER_NUMBERED or i in front:
                    ax.annotate(str(k + 1), (x, y), fontsize=7, ha="center", va="center")
                    numbered.add(k)
            if len(front) > 1:
                ax.plot([xy[i][0] for i in front], [xy[i][1] for i in front], "r--", lw=1, label="Pareto frontier")
                ax.legend(fontsize=7, loc="lower right")
            if max(p[0] for p in xy) / max(min(p[0] for p in xy), 1e-12) > 20:  # a log axis only for a wide range
                ax.set_xscale("log")
                ax.xaxis.set_major_formatter(matplotlib.ticker.LogFormatterSciNotation(labelOnlyBase=True))
                ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            ax.margins(0.15)
            ax.set_xlabel(xlabel)
            ax.set_ylabel("test accuracy (mean over seeds)")
        point_label = (lambda c: " ".join(grid_settings(c))) if grid_cell else label  # noqa: E731
        key = "; ".join(f"{i + 1} {point_label(r['config'])}" + ("" if grid_cell else f" [{n}]")
                        for i, (n, r) in enumerate(items) if i in numbered)
        if len(items) > FRONTIER_NUMBERED:
            key = f"{len(items)} models, the frontiers' numbered (the others: the cell's table): {key}"
        axes[0].set_title(f"bubble area ∝ fp32 size ({BUBBLE_PER_MB:g} pt² per MB); bars: 95 % CI over seeds",
                          fontsize=8)
        fig.suptitle(f"trained on {trained_on}" + (f", the {grid_cell} cell at its own budget" if grid_cell else "")
                     + f", tested on {test_set}", fontsize=10)
        fig.text(0.01, 0.01, textwrap.fill(key, 190), fontsize=6.5, va="bottom")
        tight_layout(fig, rect=(0, 0.04 + 0.02 * (len(key) // 190), 1, 1))
        save(fig, f"frontier_{re.sub(r'[^A-Za-z0-9]+', '_', grid_cell or trained_on).strip('_')}.png",
             f"Accuracy against latency and non-embedding parameters (trained on {trained_on}"
             + (f", the {grid_cell} cell" if grid_cell else "") + f"; {test_set})", layout=False)

    curves = [(name, cell, runs, summaries) for name, (cell, runs, summaries) in results.items()
              if any(s is not None for s in summaries.values())]
    if curves:
        cols = 3
        rows = math.ceil(len(curves) / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
        for ax, (name, cell, runs, summaries) in zip(axes.flat, curves):
            # a colour and a legend entry per config; in a grid, per value of its first setting (its width)
            group = (lambda c: grid_settings(c)[0]) if cell.get("grid") else label
            colors = dict(zip(dict.fromkeys(group(n) for n, _ in runs),
                              itertools.cycle(plt.rcParams["axes.prop_cycle"].by_key()["color"])))
            shown = set()
            for config in dict.fromkeys(n for n, _ in runs):
                for s in finished_seeds(summaries, config):
                    log = read_log(run_file(*runs[(config, s)][1:], "log.jsonl"))
                    use_acc = log and log[0][1] is not None
                    g = group(config)
                    ax.plot([x[0] for x in log], [x[1] if use_acc else x[2] for x in log], color=colors[g], lw=1,
                            alpha=0.8, label=None if g in shown else g)
                    shown.add(g)
                    ax.set_ylabel("validation accuracy" if use_acc else "validation loss")
            ax.set_title(name, fontsize=9)
            ax.set_xlabel("step")
            ax.legend(fontsize=6)
        for ax in list(axes.flat)[len(curves):]:
            ax.axis("off")
        save(fig, "learning_curves.png", "Learning curves (validation, every seed)")

    # the length subsets' training splits beside the whole one they are cut from (data.json of each cell)
    subsets = {cell["data"]["dataset"]: next(iter(runs.values()))[1] for cell, runs, _ in results.values()
               if cell["data"].get("train_lengths")}
    counts = {cell["data"]["dataset"]: cell["data"]["train_lengths"] for cell, _, _ in results.values()
              if cell["data"].get("train_lengths")}
    lengths = {}
    for folder_, cfg in subsets.items():
        if re.fullmatch(r"(short|long)\d+", cfg.get("subset", "")):
            lengths[cfg["subset"]] = counts[folder_]
            whole = os.path.basename(data.dataset_dir(cfg["dataset"], cfg.get("protocol"), cfg.get("vocab"), "", "",
                                                      cfg.get("max_len")))
            if whole in counts:
                lengths["all"] = counts[whole]
    if len(lengths) > 1:
        fig, ax = plt.subplots(figsize=(6.5, 3.6))
        top = max(int(n) for c in lengths.values() for n in c)
        for name, c in sorted(lengths.items()):
            n = sum(c.values())
            ax.hist([int(k) for k in c], bins=range(1, top + 2), weights=[v / n for v in c.values()], alpha=0.5,
                    label=f"{name} (n={n:,})")
        ax.set_xlabel("tokens per training example (incl. [CLS])")
        ax.set_ylabel("share of the split")
        ax.legend(fontsize=8)
        save(fig, "length_histograms.png", "Length histograms of the short / long subsets' training splits")

    if depth:
        fig, ax = plt.subplots(figsize=(6.5, 3.8))
        for term, rows in depth.items():  # one line per run group: the mean over its seeds, bars its 95 % CI
            loops = sorted({x["n_loops"] for r in rows for x in r["loops"]})
            accs = [[x["accuracy"] for r in rows for x in r["loops"] if x["n_loops"] == k] for k in loops]
            stats = [mean_ci(a) if len(a) > 1 else (a[0], 0.0) for a in accs]
            ax.errorbar(loops, [m for m, _ in stats], yerr=[h for _, h in stats], fmt="o-", lw=1, capsize=3,
                        label=f"{term} ({len(rows)} seeds; trained with {rows[0]['loops'][0]['trained_loops']})")
        ax.set_xticks(sorted({x["n_loops"] for rows in depth.values() for r in rows for x in r["loops"]}))
        ax.set_xlabel("loops at test time")
        ax.set_ylabel("test accuracy (mean over seeds)")
        ax.legend(fontsize=7)
        save(fig, "test_time_depth.png", "Test-time depth: accuracy against the number of loops (each seed)")
    return made


def run_conditions(results):
    """Where the runs ran, from their own logs (train.run_conditions' record): one line per distinct set
    of conditions with its count of runs, most runs first; runs made before logs held it are counted."""
    groups, unknown = {}, 0
    for cell, runs, summaries in results.values():
        for key, summary in summaries.items():
            if summary is None:
                continue
            found = log_records(run_file(*runs[key][1:], "log.jsonl"), "conditions")
            if not found:
                unknown += 1
                continue
            c = found[0]
            processes = f", {c['processes']} processes" if c["processes"] > 1 else ""
            text = (f"{c['machine']}, {c['device']}, {c['dtype']}, {c['threads']} thread(s) on {c['cores']} "
                    f"core(s){processes}; torch {c['torch']}, Python {c['python']}; code at commit {c['commit']}")
            groups[text] = groups.get(text, 0) + 1
    lines = [f"{n} run{'s' * (n > 1)}: {text}" for text, n in sorted(groups.items(), key=lambda g: (-g[1], g[0]))]
    if unknown:
        lines.append(f"{unknown} run{'s' * (unknown > 1)} made before train.py logged its conditions: not recorded")
    return lines


def fmt_ci(pair, digits=4):
    mean, half = pair
    return f"{mean:.{digits}f}" if math.isnan(half) else f"{mean:.{digits}f} ± {half:.{digits}f}"


def latency(ms, first):
    """'6.10 ms (0.85×)': a latency with its ratio to the cell's first model's; '–' if not timed."""
    if ms is None:
        return "–"
    return f"{ms:.2f} ms" + (f" ({ms / first:.2f}×)" if first else "")


def fmt_num(x, spec):
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def finished_runs(results):
    """(finished runs, planned runs) of run_plan's results."""
    done = sum(s is not None for _, _, summaries in results.values() for s in summaries.values())
    return done, sum(len(summaries) for _, _, summaries in results.values())


def reported_runs(path):
    """How many finished runs the report at `path` holds, read back from its `Finished runs: N of M.` line
    (a report written before that line: the sum of its tables' `K of M` seeds); None if there is no file."""
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        text = f.read()
    line = re.search(r"^Finished runs: (\d+) of \d+\.$", text, re.M)
    if line:
        return int(line.group(1))
    return sum(int(k) for k in re.findall(r"^\| [^|\n]+ \| (\d+) of \d+ \|", text, re.M))


# how report_lines begins, and every RESULTS.md study.py has written: a title, a blank line, this line
REPORT_HEADER = b"Written by `python study.py --plan "


def check_report_path(path):
    """--report is written only over a report study.py wrote (or where there is nothing): a note or another
    tool's output there is never replaced, whatever the run counts. Checked before the study trains, so a
    long study does not end by refusing."""
    if not os.path.lexists(path):
        return
    if not os.path.isfile(path):
        raise ConfigError(f"--report {path}: that is not a file; give the path of the report to write")
    with open(path, "rb") as f:
        head = [f.readline() for _ in range(3)]
    if not (head[0].startswith(b"# ") and head[1].strip() == b"" and head[2].startswith(REPORT_HEADER)):
        raise ConfigError(f"--report {path}: that file is not a report study.py wrote (one begins with a title, "
                          f"then '{REPORT_HEADER.decode()}...'), so it is kept. Give another --report path, or "
                          f"move the file away and run again")


def check_report_keeps_runs(path, done, planned, out_root, allow_fewer=False):
    """A report is not replaced by one that holds fewer finished runs (run on a fresh clone, with no out/,
    a study would rewrite the committed RESULTS.md as 'not run' throughout) unless `allow_fewer`."""
    before = reported_runs(path)
    if before is not None and before > done and not allow_fewer:
        raise StudyError(f"{path} reports {before} finished runs, and a new report would hold {done} (of {planned} "
                         f"planned; read from {out_root}/): it is kept. Train or bring back the missing runs, or give "
                         f"--allow_fewer to replace it anyway")


def report_plots(path):
    """The PNGs the report at `path` shows that lie in its plot folder (results/ beside it): the ones a
    report made. Anything else there (results/runs/, a file of one's own) is not a report's."""
    if not os.path.isfile(path):
        return set()
    folder = os.path.dirname(os.path.abspath(path))
    with open(path) as f:
        links = re.findall(r"!\[[^\]]*\]\(([^)\s]+\.png)\)", f.read())
    plots = {os.path.normpath(os.path.join(folder, link)) for link in links}
    return {p for p in plots if os.path.dirname(p) == os.path.join(folder, "results")}


def write_report(plan, results, timing, depth, path):
    """RESULTS.md and its plots (results/ beside it), from the finished runs, written together: all of it
    is drawn and written into a temporary folder first, and moved into place only when all of it is
    there, so an error half-way leaves the old report and plots as they were. Plots an old report showed
    that this one does not are removed. Returns the report's lines."""
    folder = os.path.dirname(os.path.abspath(path))
    plot_dir = os.path.join(folder, "results")
    staging = tempfile.mkdtemp(prefix=".report-", dir=folder)
    try:
        label = lambda config: plan["labels"].get(config, config)  # noqa: E731
        staged = draw_plots(plan, results, timing, depth, os.path.join(staging, "results"), label)
        plots = [(title, os.path.join(plot_dir, os.path.basename(p))) for title, p in staged]
        lines = report_lines(plan, results, timing, depth, path, plots)
        with open(os.path.join(staging, "report.md"), "w") as f:
            f.write("\n".join(lines))
        stale = report_plots(path) - {p for _, p in plots}
        os.makedirs(plot_dir, exist_ok=True)
        # only renames from here on, within one folder's file system: nothing that draws or computes
        for (_, staged_path), (_, final) in zip(staged, plots):
            os.replace(staged_path, final)
        os.replace(os.path.join(staging, "report.md"), path)
        for p in sorted(stale):
            if os.path.isfile(p):
                os.remove(p)
                print(f"removed {os.path.relpath(p, folder)} (a plot the report no longer shows)")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return lines


def timing_note(plan):
    """How the latencies were measured, from the timing pass's record (study.py --time), or that they were not."""
    path = os.path.join(plan["records"], "timing.json")
    if not os.path.isfile(path):
        return (f"Timing: not measured yet (`python study.py --plan {plan['path']} --time` on a machine where nothing "
                f"else runs, after the training); size and FLOPs are shown.")
    with open(path) as f:
        c = json.load(f)
    return ("Timing (latency, throughput): one pass after the training, on a quiet machine (load average "
            f"{c['load_before']:.2f} before, {c['load_after']:.2f} after): {c['machine']}, {c['threads']} thread, "
            f"float32, torch {c['torch']}, code at commit {c['commit']}; evaluate.py --interleave on each config's "
            "first seed's best checkpoint (or, where it is gone, trained in an earlier session, on its architecture "
            "with fresh weights: a forward's time does not depend on them), all of them in one process, timed in "
            "turns (3 rounds, each model once a round); latency = median ms per sentence at batch 1 over the "
            "first 200 test sentences × 3 passes (in brackets: the ratio to the cell's first model); throughput = "
            "sentences/s in length-sorted batches of 256 (first 1,024 test sentences).")


def tokens_seen(term, results):
    """', about N tokens seen': the training tokens a term's runs saw, mean over seeds (steps x examples a
    step x the training split's tokens per text, from its data.json); '' if its data was not recorded."""
    cell, name = parse_term(term)[0]
    record, runs, summaries = results[cell]
    texts, tokens = record["data"].get("train_texts"), record["data"].get("train_tokens")
    done = [s for (n, _), s in summaries.items() if n == name and s is not None]
    if not texts or not tokens or not done:
        return ""
    seen = [s["iters"] * s["config"]["batch_size"] * s["config"].get("grad_accum", 1) * tokens / texts for s in done]
    return f", about {float(np.mean(seen)):.3g} tokens seen: {float(np.mean(seen)) / tokens:.2f} epochs of {tokens:,}"


def verdict_rows(plan, results, metrics):
    """{claim: judge's row} for every verdict of the plan, in its order, each with what the plan's history
    says of its rule and seeds (`fixed`, rule_history) and, where its rule changed after its data began,
    its verdict under the rule first planned (`first_rule`: (rule, verdict))."""
    history = read_history(os.path.join(plan["records"], HISTORY))
    rows = {}
    for claim in plan["verdicts"]:
        row = judge(claim, results, metrics, plan["effect"])
        row["fixed"], first = rule_history(history, claim["claim"])
        if first and rule_words(first) != rule_words(claim) and row["verdict"] != "not run":
            better = metrics.get(row["metric"], {}).get("better", "higher")
            row["first_rule"] = (rule_words(first), claim_verdict(row["lo"], row["hi"], better,
                                                                  first.get("rule", "superiority"),
                                                                  first.get("margin", 0.0)))
        rows[claim["claim"]] = row
    return rows


def conclusion_row(conclusion, rows):
    """The verdict row that judges a conclusion: its own verdict's, or, while that one has not run and the
    conclusion names a stand-in (`instead`: a task this machine can build in place of one it cannot), the
    stand-in's, marked as such."""
    row = rows[conclusion["verdict"]]
    if row["verdict"] == "not run" and conclusion.get("instead") and rows[conclusion["instead"]]["verdict"] != "not run":
        return {**rows[conclusion["instead"]], "stands_in": True}
    return row


def conclusion_line(conclusion, row, effect):
    """One plain sentence on a claim of the seed write-ups: confirmed, refuted or not settled, from its
    verdict's row (judged under the verdict's rule: claim_verdict), with the smallest effect the study could
    have seen and what would settle it. A claim that is the negation of the one judged (`reverse`: B is
    ahead, say) is refuted where that one is confirmed and confirmed where it is refuted."""
    head = f"- **{conclusion['claim']}** ({conclusion['source']}): "
    note = f" {conclusion['note']}" if conclusion.get("note") else ""
    if row.get("stands_in"):  # the claim's own verdict has no runs here; the plan's stand-in judges it
        note = f" Judged by '{conclusion['instead']}' while '{conclusion['verdict']}' has not run.{note}"
    if row["verdict"] == "not run":
        return (f"{head}**not settled**: not run yet (paired seeds finished: {row['n']}; A = `{row['a']}`, "
                f"B = `{row['b']}`).{note}")
    status = {"confirmed": "confirmed", "refuted": "refuted"}.get(row["verdict"], "not settled")
    m, rule = row.get("margin"), row.get("rule", "superiority")
    if conclusion.get("reverse"):  # the claim is the negation of the one judged
        status = {"confirmed": "refuted", "refuted": "confirmed"}.get(status, status)
    sentences = (f"; bootstrapped over seeds and test sentences, [{row['sent_lo']:+.4f}, {row['sent_hi']:+.4f}] "
                 f"against [{row['boot_lo']:+.4f}, {row['boot_hi']:+.4f}] over seeds alone" if "sent_lo" in row else "")
    figures = (f"A − B = {row['mean']:+.4f} in {row['metric']}, 95 % interval [{row['lo']:+.4f}, {row['hi']:+.4f}] "
               f"over {row['n']} seeds{sentences} (A = `{row['a']}`, B = `{row['b']}`" + RULE_WORDS[rule].format(m=m)
               + ")")
    if "first_rule" in row:  # the rule changed after the data began: the one planned first judges it too
        first = {"confirmed": "confirmed", "refuted": "refuted"}.get(row["first_rule"][1], "not settled")
        if conclusion.get("reverse"):
            first = {"confirmed": "refuted", "refuted": "confirmed"}.get(first, first)
        note = f" Under the rule first planned ({row['first_rule'][0]}): **{first}**; the rule now is {rule_words(row)}.{note}"
    if status != "not settled":
        interim = "" if row["n"] >= row.get("planned", row["n"]) else (
            f" Interim: {row['n']} of the {row['planned']} planned seeds; a verdict read before they are all in "
            f"can still change.")
        return f"{head}**{status}**: {figures}.{interim}{note}"
    needed = row["seeds_needed"]
    settle = f"{needed} seeds would find a true difference of {effect:g}" if needed else \
        f"more than 1,000 seeds would be needed to find a difference of {effect:g}"
    return (f"{head}**not settled**: {figures}. The smallest difference these seeds could see is "
            f"{row['detectable']:.4f}; {settle}.{note}")


def report_lines(plan, results, timing, depth, path, plots):
    """The lines of the report at `path`: conditions, the count of finished runs, targets, verdicts, one
    table per cell (a cell not run yet says so), test-time depth, and the `plots` [(title, path)]."""
    label = lambda config: plan["labels"].get(config, config)  # noqa: E731
    metrics = {}
    for _, _, summaries in results.values():
        for s in summaries.values():
            if s is not None:
                metrics.update(s.get("metrics", {}))
    rel = lambda p: os.path.relpath(p, os.path.dirname(os.path.abspath(path)))  # noqa: E731
    done, planned = finished_runs(results)
    lines = ["# Results: recurrent vs standard encoders", "",
             # REPORT_HEADER: check_report_path replaces only a file that begins with these three lines
             f"Written by `python study.py --plan {plan['path']} --report {os.path.basename(path)}` from the "
             f"run records under `{plan['records']}/` (do not edit by hand: run the command again; "
             f"`--collect_only` writes it from the records alone).", "",
             # read back by reported_runs: a report is not replaced by one with fewer finished runs
             f"Finished runs: {done} of {planned}.", ""]
    rows = verdict_rows(plan, results, metrics)
    if plan["conclusions"]:
        lines += ["## Conclusions", "", "Each claim of the seed write-ups, judged by the verdict below that tests "
                  "it (*confirmed* or *refuted* when its 95 % interval says so; otherwise *not settled*, with the "
                  "smallest difference the study could have seen).", "",
                  *[conclusion_line(c, conclusion_row(c, rows), plan["effect"]) for c in plan["conclusions"]], ""]
    lines += ["## Conditions", "",
              "- Training, as each run's log records it:", *[f"  - {line}" for line in run_conditions(results)],
              f"- Seeds: {plan['seeds']} per cell unless a cell says otherwise; mean ± 95 % t-interval over seeds.",
              f"- Budget: {plan.get('budget_note', 'as each cell sets')}",
              f"- {timing_note(plan)}",
              "- Verdicts: a claim that A beats B is *confirmed* if the 95 % paired t-interval of A − B over "
              "seeds lies on the better side, *refuted* if it lies on the worse side, *inconclusive* otherwise. "
              "The percentile bootstrap interval (10,000 resamples of the per-seed differences) is shown beside it "
              "but does not decide: with 3 seeds it excludes 0 whenever the three differences share a sign. "
              "McNemar's exact test compares the two models' per-example test predictions for each seed "
              "(p < 0.05: that seed's two runs disagree beyond what chance in the test examples explains).",
              *[f"- {n}" for n in plan["notes"]], ""]
    if plan["targets"]:
        lines += ["## Targets", "", "| target | measured | met |", "|---|---|---|"]
        for t in plan["targets"]:
            try:
                values = term_values(t["term"], results, t.get("metric", "test_accuracy"))
            except ConfigError:  # its runs do not report the metric (a pretraining run has no test split)
                values = {}
            if len(values) >= 1:
                mean = float(np.mean(list(values.values())))
                met = "yes" if (mean >= t["at_least"] if "at_least" in t else mean <= t["at_most"]) else "no"
                lines.append(f"| {t['what']} | {mean:.4f} (mean over seeds: {len(values)}; `{t['term']}`) | {met} |")
            else:
                lines.append(f"| {t['what']} | not run | – |")
        lines.append("")
    effect = plan["effect"]
    lines += ["## Verdicts", "", f"Rule: how the claim is judged on the 95 % t-interval over seeds (superiority: "
              f"A − B wholly above 0; non-inferiority: above −margin; equivalence: within ±margin). Bootstrap: the "
              f"95 % percentile interval of 10,000 resamples, of the seeds, and of the seeds and the test examples "
              f"together (accuracy on one test set): the two side by side show how much of the uncertainty is the "
              f"test set's size; the t-interval decides (where a verdict from the seeds + sentences interval would "
              f"differ, it is given in brackets). Detectable: "
              f"the smallest true difference these seeds find with 80 % power (from the spread of the per-seed "
              f"differences); seeds for {effect:g}: how many a true difference of {effect:g} would need. Fixed: the "
              f"rule and seed count when the verdict's data began (the first run of the last of its cells), and any "
              f"change since (results/runs/plan_history.jsonl).", "",
              "| claim | rule | metric | seeds | A − B | 95 % t-interval | 95 % bootstrap, seeds | 95 % bootstrap, seeds + "
              "sentences | "
              f"McNemar per seed (A only / B only, p) | detectable | seeds for {effect:g} | verdict | fixed |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for claim, r in rows.items():
        if r["verdict"] == "not run":
            lines.append(f"| {r['claim']} | {rule_words(r)} | {r['metric']} | {r['n']} | – | – | – | – | – | – | – | "
                         f"not run | {r['fixed']} |")
            continue
        mc = "; ".join(f"{a}/{b}, p={p:.3g}" for a, b, p in r.get("mcnemar", [])) or "–"
        sent = f"[{r['sent_lo']:+.4f}, {r['sent_hi']:+.4f}]" if "sent_lo" in r else "–"
        word = f"**{r['verdict']}**" + (f" ({r['sent_verdict']} with sentences)" if r.get("sent_verdict", r["verdict"])
                                        != r["verdict"] else "")
        if "first_rule" in r:
            word += f"; under its first rule ({r['first_rule'][0]}): {r['first_rule'][1]}"
        lines.append(f"| {r['claim']} | {rule_words(r)} | {r['metric']} | {r['n']} | {r['mean']:+.4f} | "
                     f"[{r['lo']:+.4f}, {r['hi']:+.4f}] | [{r['boot_lo']:+.4f}, {r['boot_hi']:+.4f}] | {sent} | {mc} | "
                     f"{r['detectable']:.4f} | {r['seeds_needed'] or '> 1,000'} | {word} | {r['fixed']} |")
    for claim in plan["verdicts"]:
        if "cost" in claim:  # what A spent beyond B (a pretraining run), beside what it gained
            cost, fine = (term_values(t, results, "train_flops") for t in (claim["cost"], claim["a"]))
            minutes = term_values(claim["cost"], results, "train_minutes") if cost else {}
            if cost and fine:
                c, f = float(np.mean(list(cost.values()))), float(np.mean(list(fine.values())))
                lines += ["", f"Cost of \"{claim['claim']}\": `{claim['cost']}` spent {c:.3g} training FLOPs "
                              f"({float(np.mean(list(minutes.values()))):.1f} min{tokens_seen(claim['cost'], results)}), "
                              f"{c / f:.2f}× the {f:.3g} of each fine-tuning run."]
    lines += ["", "A and B of each claim, as `cell/config`:", ""]
    lines += [f"- {c['claim']}: A = `{c['a']}`, B = `{c['b']}`" +
              (f", on the test sentences of subset {c['subset']} ({', '.join(plan['subsets'][c['subset']])})"
               if "subset" in c else "") for c in plan["verdicts"]]
    lines += ["", "## Cells", ""]
    for name, (cell, runs, summaries) in results.items():
        rows = cell_rows(name, results, timing)
        lines += [f"### {name}: {cell.get('what', '')}", "",
                  f"Test set: {cell.get('test_set', '?')}. Overrides: `{' '.join(cell.get('set', [])) or 'none'}`.", ""]
        if not any(r["seeds"] for r in rows):
            why = f" It stopped: {cell['error']}" if cell.get("error") else ""
            lines += [f"Not run yet ({len(runs)} runs planned).{why}", ""]
            continue
        lines += ["| model | seeds | accuracy | F1 | precision | recall | MCC | params (non-emb.) | fp32 MB | "
                  "FLOPs/sample | latency bs=1 | throughput | train min | steps | train FLOPs |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        first = rows[0].get("latency_ms")
        for r in rows:
            if not r["seeds"]:
                lines.append(f"| {label(r['config'])} | 0 of {r['planned']} | not run |" + " |" * 12)
                continue
            acc = [fmt_ci(r[m]) if m in r else "–" for m in TEST_METRICS]
            params = f"{r['params'] / 1e6:.2f} M ({r['params_non_embedding'] / 1e6:.2f} M)"
            lines.append(f"| {label(r['config'])} | {len(r['seeds'])} of {r['planned']} | {' | '.join(acc)} | "
                         f"{params} | {fmt_num(r['size_mb'], '.1f')} | {fmt_num(r['flops_per_sample'], '.2e')} | "
                         f"{latency(r['latency_ms'], first)} | {fmt_num(r['throughput'], ',.0f')}{' /s' * bool(r['throughput'])} | "
                         f"{r['train_minutes']:.1f} | {', '.join(map(str, r['iters']))} | "
                         f"{fmt_num(r['train_flops'], '.2e')} |")
        lines.append("")
        lines += stop_lines(summaries) + tuned_lines(cell, results, label) + subset_lines(name, results, label)
        lines += pretraining_lines(summaries, label)
    if depth:
        loops = plan["depth_loops"]
        lines += ["## Test-time depth", "", "The trained weights scored with each number of loops, no retraining "
                  "(`python evaluate.py --ckpt ... --loops " + " ".join(map(str, loops)) + "`).", "",
                  "| run | " + " | ".join(f"{k} loops" for k in loops) + " |", "|---|" + "---|" * len(loops)]
        for term, rows in depth.items():
            for r in rows:
                accs = {x["n_loops"]: x["accuracy"] for x in r["loops"]}
                where = os.path.basename(os.path.dirname(r["ckpt"]))
                lines.append(f"| {term} {where} (trained: {r['loops'][0]['trained_loops']}) | " +
                             " | ".join(f"{accs[k]:.4f}" if k in accs else "–" for k in loops) + " |")
        lines.append("")
    if plots:
        lines += ["## Plots", ""]
        for title, p in plots:
            lines += [f"**{title}**", "", f"![{title}]({rel(p)})", ""]
    return lines


def stop_lines(summaries):
    """How a cell's finished runs stopped (train.py's reasons, with their counts), in a line."""
    stops = {}
    for s in summaries.values():
        if s is not None:
            stops[s["stopped"]] = stops.get(s["stopped"], 0) + 1
    return [f"How the runs stopped: {'; '.join(f'{why}: {n}' for why, n in sorted(stops.items()))}.", ""] if stops \
        else []


def tuned_lines(cell, results, label):
    """For a tuned cell: what its sweep measured on validation at each value, and the value each config took."""
    if "tune" not in cell:
        return []
    tune = cell["tune"]
    sweep_runs = results[tune["sweep"]][1]
    parts = []
    for config in dict.fromkeys(name.partition("@")[0] for name, _ in sweep_runs):
        value, means = tuned_value(sweep_runs, config, tune["key"])
        if value is None:
            parts.append(f"{label(config)}: its sweep is not finished")
            continue
        scores = ", ".join(f"{v}: {acc:.4f} ({loss:.4f})" for v, (acc, loss) in means.items())
        parts.append(f"{label(config)} {scores}; chosen {tune['key']}={value}")
    return [f"{tune['key']} chosen by `{tune['sweep']}` on the validation split (validation accuracy of the best "
            f"checkpoint, and its loss, mean over the sweep's seeds): " + "; ".join(parts) + ".", ""]


def subset_lines(name, results, label):
    """A cell's test accuracy on the plan's subsets of its test sentences (negation, contrast), on those with
    none of their words, and on all of them: mean ± 95 % t-interval over seeds, per config."""
    cell, runs, summaries = results[name]
    subsets = cell["data"].get("test_subsets")
    if not subsets:
        return []
    n = len(cell["data"]["test_labels"])
    inside = {i for v in subsets.values() for i in v["index"]}
    groups = {**{k: v["index"] for k, v in subsets.items()}, "neither": [i for i in range(n) if i not in inside],
              "all": list(range(n))}
    lines = ["Accuracy on the test sentences that hold a word of each subset (the plan's `subsets`), on those that "
             "hold none, and on all (mean ± 95 % t-interval over seeds):", "",
             "| model | " + " | ".join(f"{k} ({len(v):,})" for k, v in groups.items()) + " |",
             "|---|" + "---|" * len(groups)]
    for config in dict.fromkeys(c for c, _ in runs):
        seeds = [s for s in finished_seeds(summaries, config) if "test_predictions" in summaries[(config, s)]]
        if not seeds:
            continue
        cells_ = []
        for index in groups.values():
            acc = correct(results, name, config, seeds, index).mean(axis=1)
            cells_.append(fmt_ci(mean_ci(acc) if len(acc) > 1 else (float(acc[0]), math.nan)))
        lines.append(f"| {label(config)} | " + " | ".join(cells_) + " |")
    return lines + [""]


def pretraining_lines(summaries, label):
    """For a cell's masked-LM configs, which have no test set: their held-out figures at the end of
    training (mean ± 95 % interval over seeds), a paragraph each."""
    lines = []
    for config in dict.fromkeys(n for (n, _), s in summaries.items() if s and s.get("task") == "mlm"):
        done = [s for (n, _), s in summaries.items() if n == config and s]
        ci = {m: fmt_ci(mean_ci([s[f"final_val_{m}"] for s in done]), digits)
              for m, digits in (("loss", 3), ("accuracy", 4), ("ppl", 1))}
        lines += [f"{label(config)}, on the corpus's held-out texts at the end of training ({done[0]['final_val_n']:,} "
                  f"masked tokens, masked the same way in every evaluation; {len(done)} seeds): masked-token loss "
                  f"{ci['loss']}, accuracy {ci['accuracy']}, perplexity {ci['ppl']}.", ""]
    return lines


def check_folder(path, flag):
    """The folder an output file is to go to exists: found now, not after the training."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ConfigError(f"{flag} {path}: there is no folder {folder}")


def plan_main(args):
    """study.py --plan: check the whole plan, train what it lacks (or, with --collect_only, only read what
    is finished), measure the checkpoints, judge the claims and write the report, unless the report there
    holds more finished runs than this one would (then --allow_fewer). A file there that is not a report is
    never replaced."""
    report = args.report or "RESULTS.md"
    check_folder(report, "--report")
    check_report_path(report)
    plan = load_plan(args.plan)
    results = run_plan(plan, args.jobs, args.collect_only, args.cells)
    done, planned = finished_runs(results)
    print(f"plan {args.plan}: {done} of {planned} runs finished")
    check_report_keeps_runs(report, done, planned, plan["out_root"], args.allow_fewer)
    timing, depth = measure(results, plan, args.remeasure, args.time)
    lines = write_report(plan, results, timing, depth, report)
    print(f"wrote {report} ({len(lines)} lines)")


def configs_main(args):
    """study.py CONFIG...: train the configs x seeds not finished yet (or, with --collect_only, only read
    them), then print each metric's mean over seeds and the paired differences (and --json them)."""
    seeds = args.seeds or [1, 2, 3, 4, 5]
    if not args.configs:
        raise ConfigError("give config files, or --plan PLAN")
    check_seeds(seeds, "--seeds")
    if len(seeds) < 2:
        raise ConfigError(f"--seeds {seeds}: a study needs at least two (an interval over seeds needs two values)")
    for metric in args.metrics or []:
        check_metric(metric, "--metrics")
    if args.json:
        check_folder(args.json, "--json")
    runs = plan_runs(args.configs, seeds, args.out_root or "out/study", args.set or [], args.grid or [],
                     records=args.records)
    names = list(dict.fromkeys(name for name, _ in runs))
    summaries = run_study(runs, args.jobs, args.collect_only)
    metrics = shared_metrics(summaries, args.metrics)
    result, lines = study_table(summaries, names, seeds, metrics)
    first = summaries[(names[0], seeds[0])]
    stops = sorted({s["stopped"] for s in summaries.values()})
    iters = [s["iters"] for s in summaries.values()]
    print(f"\n{len(summaries)} runs ({len(names)} configs x seeds {seeds}); task {first['task']}; "
          f"iterations {min(iters)}-{max(iters)}; stopped by {', '.join(stops)}")
    print("\n".join(lines))
    if args.json:
        result["runs"] = {f"{n}/seed{s}": summaries[(n, s)] for n, s in summaries}
        data.write_json(args.json, result, indent=1)
        print(f"wrote {args.json}")


# the flags of each way to run: given to the other one, they would be ignored, so they are refused
PLAN_FLAGS = ("report", "cells", "remeasure", "allow_fewer", "time")
CONFIGS_FLAGS = ("configs", "seeds", "set", "grid", "out_root", "records", "metrics", "json")


def main(argv=None):
    p = argparse.ArgumentParser(description="Train (or collect) config files x overrides x seeds and compare them "
                                            "over seeds. The first config is the baseline of the paired differences.")
    p.add_argument("configs", nargs="*", metavar="CONFIG", help="train.py config files")
    p.add_argument("--plan", help="a study plan (config/encoders_study.py): check it whole, train its cells' "
                   "unfinished runs in order, then write the report (--report)")
    p.add_argument("--report", help="with --plan: the report to write (default RESULTS.md; plots go to results/ "
                   "beside it)")
    p.add_argument("--allow_fewer", action="store_true", help="with --plan: replace the report even if it holds "
                   "more finished runs than the new one will")
    p.add_argument("--cells", nargs="*", default=None, help="with --plan: train only these cells (the report "
                   "still reads every finished run)")
    p.add_argument("--time", action="store_true", help="with --plan: after the training, on a machine where "
                   "nothing else runs: time every cell's checkpoints (latency, throughput) and record it")
    p.add_argument("--remeasure", action="store_true", help="with --plan: time the checkpoints again even if "
                   "their measurements are newer")
    p.add_argument("--seeds", type=int, nargs="+", help="the seeds (at least two, distinct; default 1 2 3 4 5)")
    p.add_argument("--set", nargs="*", metavar="KEY=VALUE",
                   help="overrides for every run, e.g. --set device=cuda max_iters=600")
    p.add_argument("--grid", nargs="*", metavar="KEY=V1,V2",
                   help="run every config at every combination of these values, e.g. --grid n_loops=1,2,3")
    p.add_argument("--out_root", help="runs go to OUT_ROOT/<name>/seed<N> (default out/study)")
    p.add_argument("--records", help="copy each finished run's record (summary.json, log.jsonl, config.py; no "
                   "checkpoint) to RECORDS/<name>/seed<N>, to commit: a run with a record counts as finished when "
                   "its out_root folder is gone (a plan names its own records folder)")
    p.add_argument("--jobs", type=int, default=1, help="runs at a time (CPU: one per core, pinned)")
    p.add_argument("--collect_only", action="store_true", help="only collect finished runs, never train")
    p.add_argument("--metrics", nargs="*", default=None, help="the metrics to show (default: all the runs report)")
    p.add_argument("--json", help="write the table, the differences and every run's summary to this file")
    args = p.parse_args(argv)

    def stop(signum, frame):  # `kill <study>` stops the study as Ctrl-C does: its runs save and stop too
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        if args.jobs < 1:
            raise ConfigError(f"--jobs {args.jobs}: expected at least 1")
        other = [f for f in (CONFIGS_FLAGS if args.plan else PLAN_FLAGS) if getattr(args, f)]
        if other:
            raise ConfigError(f"{', '.join('config files' if f == 'configs' else '--' + f for f in other)}: "
                              f"{'not with --plan (its cells set their own)' if args.plan else 'only with --plan'}")
        return plan_main(args) if args.plan else configs_main(args)
    except KeyboardInterrupt:
        sys.exit("study interrupted: the runs that were going saved their last.pt; run the same command to continue")
    except UserError as e:  # bad input: one line; a bug keeps its traceback
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
