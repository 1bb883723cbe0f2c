"""
The study runner: config files x overrides x seeds, trained by train.py and compared over seeds.

    python study.py config/sst2_recurrent.py config/sst2_baseline.py --seeds 1 2 3 --jobs 2
    python study.py config/shakespeare_char_{baseline,layernorm,rmsnorm}.py --seeds 1 2 3 4 5 --jobs 2
    python study.py config/sst2_recurrent.py --grid n_loops=1,2,3 --seeds 1 2 3 --set max_epochs=1
    python study.py ... --collect_only --json study.json     # only read finished runs; never train

Each run is `python train.py CONFIG --KEY=VALUE... --seed=N --out_dir=OUT_ROOT/<name>/seed<N>`, where
<name> is the config file's stem, followed by @key=value,... for a --grid point. The runner works for
every task, because it never loads a model: it reads the runs' summary.json files, which carry their
figures and, for each, its label and which way is better (`metrics`, written by train.py from the
task's evaluator). It is resumable: a run whose summary.json holds exactly the planned config is
finished and is not run again; a run with a last.pt of the planned config (stopped by Ctrl-C, which
reaches each run as SIGTERM and makes it save) continues from there with --init_from=resume, which
gives the same weights as an uninterrupted run.

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
import signal
import subprocess
import sys
import time

import numpy as np

import configurator
import data
import train

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


def claim_verdict(lo, hi, better):
    """A claim that A beats B, judged on the 95 % interval [lo, hi] of A - B in a metric whose better
    side is `better`: 'confirmed' if the interval lies on the better side, 'refuted' if it lies on the
    worse side, 'inconclusive' if it holds 0."""
    word = verdict(lo, hi, better)
    return {"better": "confirmed", "worse": "refuted"}.get(word, "inconclusive")


# -----------------------------------------------------------------------------
# the plan: which runs, and which of them are finished


def config_name(path):
    """A study's name for a config file: its stem (config/shakespeare_char_rmsnorm.py -> shakespeare_char_rmsnorm)."""
    return os.path.splitext(os.path.basename(path))[0]


def grid_points(grid):
    """['n_loops=1,2', 'n_embd=128,256'] -> [['--n_loops=1', '--n_embd=128'], ['--n_loops=1', '--n_embd=256'], ...]
    (the product of the values, in the order given); no grid is one point with no overrides."""
    axes = []
    for item in grid:
        key, sep, values = item.partition("=")
        if not sep or not values:
            raise configurator.ConfigError(f"--grid {item!r} must be KEY=V1,V2,...")
        axes.append([f"--{key}={v}" for v in values.split(",")])
    return [list(p) for p in itertools.product(*axes)]


def plan_runs(configs, seeds, out_root, sets=(), grid=()):
    """The planned runs, in order: {(name, seed): (train.py arguments, full config)}. name is the config
    file's stem, with @key=value,... for a grid point; each run writes to out_root/<name>/seed<seed>."""
    runs = {}
    for path in configs:
        for point in grid_points(grid):
            name = config_name(path) + ("@" + ",".join(a[2:] for a in point) if point else "")
            for seed in seeds:
                argv = [path, *[f"--{s}" for s in sets], *point, f"--seed={seed}",
                        f"--out_dir={os.path.join(out_root, name, f'seed{seed}')}"]
                runs[(name, seed)] = (argv, train.make_config(argv))
    return runs


# Settings that pick how the same function is computed, not what is trained: the attention, norm, SwiGLU and
# AdamW paths (each tested equal to its reference) and compilation. They change results only by float rounding,
# so a run made under another of them is the same run (runs from before the fused norms and the fused AdamW
# became the defaults count as finished).
IMPLEMENTATION_KEYS = ("attn_impl", "norm_impl", "ffn_impl", "adamw_impl", "compile")


def same_run(a, b):
    """Whether two run configs describe the same run. init_from 'scratch' and 'resume' say only how a
    run was started (a resumed run is the run it continues); a checkpoint file to start from counts. A
    setting added to train.py after a run was made counts as its default (the run had no other), and the
    IMPLEMENTATION_KEYS are not compared."""
    def norm(c):
        c = json.loads(json.dumps(c))  # as stored: tuples -> lists
        if c.get("init_from") == "resume":
            c["init_from"] = "scratch"
        for k in IMPLEMENTATION_KEYS:
            c.pop(k, None)
        return c
    a, b = norm(a), norm(b)
    defaults = {**train.DEFAULTS, **train.MODEL_SETTINGS["model"].get(a.get("model"), {})}
    for k in set(a) ^ set(b):
        if k in defaults:
            a.setdefault(k, defaults[k])
            b.setdefault(k, defaults[k])
    return a == b


def finished_summary(cfg):
    """The summary.json of a finished run of exactly this config, else None (then it must be run)."""
    path = os.path.join(cfg["out_dir"], "summary.json")
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        summary = json.load(f)
    if not same_run(summary.get("config", {}), cfg) or summary.get("stopped") == "interrupted":
        return None
    return summary


def can_resume(cfg):
    """Whether out_dir holds a stopped run of this config to continue: a last.pt, and a log whose
    latest start record has this config."""
    log = os.path.join(cfg["out_dir"], "log.jsonl")
    if not (os.path.isfile(os.path.join(cfg["out_dir"], "last.pt")) and os.path.isfile(log)):
        return False
    started = None
    with open(log) as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short when the run was killed
            if record.get("type") == "start":
                started = record.get("config")
    return started is not None and same_run(started, cfg)


# -----------------------------------------------------------------------------
# running


def run_pending(runs, todo, jobs):
    """Train the runs `todo` as `python train.py` subprocesses, `jobs` at a time, each slot pinned to its
    own share of the cores. A run that can resume does. If a run fails or the study is interrupted,
    the runs still going get SIGTERM, save their last.pt and stop; a later call continues them."""
    # the cores this process may use (`taskset -c 1 python study.py ...` gives it one), shared out by slot
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    per_job = max(1, len(allowed) // jobs)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train.py")
    running = []  # (key, process, log file, slot)
    pending, free_slots = list(todo), list(range(jobs))
    try:
        while pending or running:
            while pending and free_slots:
                key, slot = pending.pop(0), free_slots.pop(0)
                argv, cfg = runs[key]
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
                    raise RuntimeError(f"{key[0]} seed {key[1]} failed (exit {proc.returncode}); see "
                                       f"{runs[key][1]['out_dir']}/train.out")
                print(f"  finished {key[0]} seed {key[1]}", flush=True)
    finally:
        for _, proc, log, _ in running:
            proc.terminate()  # SIGTERM: train.py finishes its step, saves last.pt and exits
            proc.wait()
            log.close()


def run_study(runs, jobs=1, collect_only=False):
    """Run the planned runs that are not finished yet, then return {(name, seed): summary}."""
    todo = [key for key, (_, cfg) in runs.items() if finished_summary(cfg) is None]
    if todo and collect_only:
        raise ValueError(f"{len(todo)} runs are not finished (first: {runs[todo[0]][1]['out_dir']}); "
                         f"run without --collect_only to train them")
    print(f"study: {len(runs)} runs, {len(runs) - len(todo)} finished, {len(todo)} to train ({jobs} at a time)")
    run_pending(runs, todo, jobs)
    summaries = {key: finished_summary(cfg) for key, (_, cfg) in runs.items()}
    missing = [k for k, v in summaries.items() if v is None]
    if missing:
        raise RuntimeError(f"runs {missing} ended without a finished summary.json (interrupted?); run the study again")
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
        raise ValueError(f"metrics {unknown} are not reported by every run; available: {list(common)}")
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
# A plan is a Python file (config/encoders_study.py) that sets:
#   out_root   where the cells' runs go: OUT_ROOT/<cell>/<config name>/seed<N>
#   seeds      the seeds of every cell (a cell may set its own)
#   cells      [dict(name, configs, set, test_set, what)]: each cell is a study of its config files with the
#              overrides `set`; test_set names the test examples (cells with the same one are compared on a
#              plot); run in order, so a cell may start from a checkpoint an earlier cell trained
#   labels     {config name: how tables call it}
#   verdicts   [dict(claim, a, b, metric, cost)]: a and b are "cell/config", or "cell/config - cell/config"
#              (a difference per seed); the claim is that a beats b; cost: a run A spent beyond B (pretraining)
#   depth      ["cell/config"]: recurrent runs to score at test-time depths `depth_loops`
#   targets    [dict(what, term, metric, at_least)] and `budget_note`, `notes`: text for the report

PLAN_KEYS = {"out_root": str, "seeds": list, "cells": list, "labels": dict, "verdicts": list, "depth": list,
             "depth_loops": list, "targets": list, "budget_note": str, "notes": list}
TEST_METRICS = ["test_accuracy", "test_f1", "test_precision", "test_recall", "test_mcc"]


def load_plan(path):
    """The plan file's settings, checked: the keys above and nothing else."""
    namespace = {"__file__": os.path.abspath(path)}  # one namespace: comprehensions see the plan's names
    try:
        with open(path) as f:
            exec(compile(f.read(), path, "exec"), namespace)
    except OSError as e:
        raise ValueError(f"cannot read the plan {path}: {e}") from None
    plan = {k: v for k, v in namespace.items() if not k.startswith("_") and k.islower()}
    unknown = [k for k in plan if k not in PLAN_KEYS]
    if unknown:
        raise ValueError(f"{path}: unknown plan keys {unknown} (known: {sorted(PLAN_KEYS)})")
    if not plan.get("cells"):
        raise ValueError(f"{path} plans no cells")
    for cell in plan["cells"]:
        if not {"name", "configs"} <= set(cell):
            raise ValueError(f"{path}: every cell needs a name and configs, not {cell}")
    plan.setdefault("out_root", "out/plan")
    plan.setdefault("seeds", [1, 2, 3])
    for key in ("labels",):
        plan.setdefault(key, {})
    for key in ("verdicts", "depth", "targets", "notes"):
        plan.setdefault(key, [])
    plan.setdefault("depth_loops", [1, 2, 3, 4])
    plan["path"] = path
    return plan


def plan_cells(plan):
    """{cell name: (cell, its runs as plan_runs gives them)}, in the plan's order."""
    out = {}
    for cell in plan["cells"]:
        root = os.path.join(plan["out_root"], cell["name"])
        out[cell["name"]] = (cell, plan_runs(cell["configs"], cell.get("seeds", plan["seeds"]), root,
                                             cell.get("set", [])))
    return out


def run_plan(plan, jobs=1, collect_only=False, only=None):
    """Train every cell's unfinished runs, cell after cell (unless collect_only; with `only`, just those
    cells'), then return {cell name: (cell, runs, {(config name, seed): summary or None})}."""
    cells = plan_cells(plan)
    unknown = sorted(set(only or ()) - set(cells))
    if unknown:
        raise ValueError(f"--cells {unknown}: the plan has {list(cells)}")
    for name, (cell, runs) in list(cells.items()):
        todo = [key for key, (_, cfg) in runs.items() if finished_summary(cfg) is None]
        if todo and not collect_only and (not only or name in only):
            print(f"cell {name}: {len(runs)} runs, {len(todo)} to train")
            try:
                run_pending(runs, todo, jobs)
            except RuntimeError as e:  # a cell that cannot run (its data cannot be had) does not stop the rest
                print(f"cell {name} stopped: {e}")
                cells[name] = ({**cell, "error": str(e)}, runs)
    # collected after all the training: runs that finished meanwhile elsewhere (another core's queue) count
    return {name: (cell, runs, {key: finished_summary(cfg) for key, (_, cfg) in runs.items()})
            for name, (cell, runs) in cells.items()}


def finished_seeds(summaries, name):
    return [seed for (n, seed), s in summaries.items() if n == name and s is not None]


def term_values(term, results, metric):
    """Per-seed values {seed: value} of a term: 'cell/config', or 'cell/config - cell/config'."""
    parts = [p.strip() for p in term.split(" - ")]
    values = []
    for part in parts:
        cell, _, name = part.partition("/")
        if cell not in results:
            raise ValueError(f"term {part!r}: no cell {cell!r} in the plan")
        summaries = results[cell][2]
        if not any(n == name for n, _ in summaries):
            raise ValueError(f"term {part!r}: cell {cell} has no config {name!r}")
        done = {seed: s for (n, seed), s in summaries.items() if n == name and s is not None}
        if any(metric not in s for s in done.values()):
            raise ValueError(f"term {part!r}: its runs do not report {metric!r}")
        values.append({seed: s[metric] for seed, s in done.items()})
    if len(values) == 1:
        return values[0]
    if len(values) != 2:
        raise ValueError(f"term {term!r}: expected 'cell/config' or 'cell/config - cell/config'")
    return {seed: v - values[1][seed] for seed, v in values[0].items() if seed in values[1]}


def test_labels(cfg):
    """The true labels of a run's test split, read from its prepared data folder."""
    return data.load_dataset(cfg).splits["test"].labels


def judge(claim, results, metrics):
    """One verdict row: the claim that term a beats term b in `metric`, over the seeds both finished:
    mean difference, paired t-interval (decides), bootstrap interval, and for two single runs on the same
    test examples McNemar's exact p per seed."""
    metric = claim.get("metric", "test_accuracy")
    a, b = term_values(claim["a"], results, metric), term_values(claim["b"], results, metric)
    seeds = sorted(set(a) & set(b))
    row = {**claim, "metric": metric, "seeds": seeds, "n": len(seeds)}
    if len(seeds) < 2:
        return {**row, "verdict": "not run"}
    pair = ([b[s] for s in seeds], [a[s] for s in seeds])
    d, lo, hi = paired_t(*pair)
    _, b_lo, b_hi = paired_bootstrap(*pair)
    better = metrics.get(metric, {}).get("better", "higher")
    row.update(mean=d, lo=lo, hi=hi, boot_lo=b_lo, boot_hi=b_hi, verdict=claim_verdict(lo, hi, better))
    if " - " not in claim["a"] + claim["b"]:
        (cell_a, _, name_a), (cell_b, _, name_b) = claim["a"].partition("/"), claim["b"].partition("/")
        run_a = results[cell_a][1]
        same_test = results[cell_a][0].get("test_set") == results[cell_b][0].get("test_set")
        if same_test and metric.startswith("test_"):
            labels = test_labels(run_a[(name_a, seeds[0])][1])
            row["mcnemar"] = [mcnemar(labels, results[cell_a][2][(name_a, s)]["test_predictions"],
                                      results[cell_b][2][(name_b, s)]["test_predictions"]) for s in seeds]
    return row


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


def cached_evaluation(out, ckpts, argv, what, remeasure=False):
    """The rows of an evaluate.py JSON file `out` for the checkpoints `ckpts`, in order: read from `out` if
    it measured exactly these and is newer than each (and not `remeasure`), else measured now with
    `evaluate.py --ckpt CKPTS ARGV` (announced as `what`). None if there are none for these checkpoints."""
    rows = None
    if os.path.isfile(out):
        with open(out) as f:
            rows = json.load(f)
        rows = rows if isinstance(rows, list) else [rows]
    if remeasure or rows is None or [r["ckpt"] for r in rows] != ckpts or \
            any(os.path.getmtime(out) < os.path.getmtime(p) for p in ckpts):
        print(what)
        rows = evaluate_script(["--ckpt", *ckpts, *argv], out)
    return rows


def measure(results, plan, remeasure=False):
    """Size, FLOPs, latency and throughput of each cell's configs (their first finished seed's best
    checkpoint, all of a cell in one evaluate.py call, one thread: latency at batch 1, throughput in
    batches of 256), and the test-time depth runs. Cached in each cell's folder next to the runs, and
    measured again only when a checkpoint is newer or `remeasure`."""
    timing, depth = {}, {}
    for name, (cell, runs, summaries) in results.items():
        ckpts = {}
        for config in dict.fromkeys(n for n, _ in runs):
            seeds = finished_seeds(summaries, config)
            path = seeds and os.path.join(runs[(config, seeds[0])][1]["out_dir"], "ckpt.pt")
            if path and os.path.isfile(path) and summaries[(config, seeds[0])].get("test_n"):
                ckpts[config] = path
        if ckpts:
            rows = cached_evaluation(os.path.join(plan["out_root"], name, "timing.json"), list(ckpts.values()),
                                     ["--split", "test"], f"measuring {name}: {', '.join(ckpts)}", remeasure)
            if rows:
                timing[name] = dict(zip(ckpts, rows))
    for term in plan["depth"]:
        cell, _, config = term.partition("/")
        if cell not in results:
            raise ValueError(f"depth {term!r}: no cell {cell!r}")
        _, runs, summaries = results[cell]
        paths = [os.path.join(runs[(config, s)][1]["out_dir"], "ckpt.pt") for s in finished_seeds(summaries, config)]
        if paths:
            rows = cached_evaluation(os.path.join(plan["out_root"], cell, f"depth_{config}.json"), paths,
                                     ["--no_timing", "--loops", *map(str, plan["depth_loops"])],
                                     f"test-time depth of {term}: loops {plan['depth_loops']}", remeasure)
            if rows:
                depth[term] = rows
    return timing, depth


# -----------------------------------------------------------------------------
# the report: RESULTS.md and its plots


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
    out = []
    if os.path.isfile(path):
        with open(path) as f:
            for line in f:
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if r.get("type") == "eval":
                    out.append((r["iter"], r.get("val_accuracy"), r.get("val_loss")))
    return out


def draw_plots(plan, results, timing, depth, folder, label):
    """The report's PNGs in `folder`: per test set, accuracy against latency (bubble area = fp32 size)
    and against non-embedding parameters, each with its Pareto frontier; the learning curves of every
    cell; the length histograms of the short/long subsets; accuracy against test-time depth. Returns
    [(title, path)]. matplotlib is imported here, and only here."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(folder, exist_ok=True)
    made = []

    def save(fig, file, title):
        path = os.path.join(folder, file)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append((title, path))

    groups = {}  # test set -> [(cell, row)] with a test accuracy
    for name in results:
        for row in cell_rows(name, results, timing):
            if "test_accuracy" in row:
                groups.setdefault(results[name][0].get("test_set", name), []).append((name, row))
    for test_set, items in groups.items():
        timed = [(n, r) for n, r in items if r.get("latency_ms")]
        if len(items) < 2:
            continue
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
        for ax, key, xlabel, pts in ((axes[0], "latency_ms", "latency at batch 1 (ms, one CPU thread)", timed),
                                     (axes[1], "params_non_embedding", "non-embedding parameters", items)):
            xy = [(r[key], r["test_accuracy"][0]) for _, r in pts]
            sizes = [40 * (r.get("size_mb") or 10) ** 0.8 for _, r in pts] if key == "latency_ms" else 40
            ax.scatter([p[0] for p in xy], [p[1] for p in xy], s=sizes, alpha=0.45, edgecolors="k")
            ax.errorbar([p[0] for p in xy], [p[1] for p in xy], fmt="none", ecolor="grey", lw=0.8,
                        yerr=[0 if math.isnan(r["test_accuracy"][1]) else r["test_accuracy"][1] for _, r in pts])
            for (n, r), (x, y) in zip(pts, xy):
                ax.annotate(f"{label(r['config'])} [{n}]", (x, y), fontsize=7, xytext=(4, 4),
                            textcoords="offset points")
            front = pareto_front(xy)
            if front:
                ax.plot([xy[i][0] for i in front], [xy[i][1] for i in front], "r--x", lw=1, label="Pareto frontier")
                ax.legend(fontsize=7, loc="lower right")
            ax.set_xscale("log")
            ax.margins(0.25)
            ax.set_xlabel(xlabel)
            ax.set_ylabel("test accuracy (mean over seeds)")
        axes[0].set_title("bubble area = fp32 size; bars: 95 % CI over seeds", fontsize=9)
        fig.suptitle(f"test set: {test_set}", fontsize=10)
        save(fig, f"frontier_{re.sub(r'[^A-Za-z0-9]+', '_', test_set).strip('_')}.png",
             f"Accuracy against latency and non-embedding parameters ({test_set})")

    curves = [(name, cell, runs, summaries) for name, (cell, runs, summaries) in results.items()
              if any(s is not None for s in summaries.values())]
    if curves:
        cols = 3
        rows = math.ceil(len(curves) / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
        for ax, (name, cell, runs, summaries) in zip(axes.flat, curves):
            for color, config in zip(plt.rcParams["axes.prop_cycle"].by_key()["color"],
                                     dict.fromkeys(n for n, _ in runs)):
                for i, s in enumerate(finished_seeds(summaries, config)):
                    log = read_log(os.path.join(runs[(config, s)][1]["out_dir"], "log.jsonl"))
                    use_acc = log and log[0][1] is not None
                    ax.plot([x[0] for x in log], [x[1] if use_acc else x[2] for x in log], color=color, lw=1,
                            alpha=0.8, label=label(config) if i == 0 else None)
                    ax.set_ylabel("validation accuracy" if use_acc else "validation loss")
            ax.set_title(name, fontsize=9)
            ax.set_xlabel("step")
            ax.legend(fontsize=6)
        for ax in list(axes.flat)[len(curves):]:
            ax.axis("off")
        save(fig, "learning_curves.png", "Learning curves (validation, every seed)")

    lengths = {}
    for name, (cell, runs, summaries) in results.items():
        cfg = next(iter(runs.values()))[1]
        if re.fullmatch(r"(short|long)\d+", cfg.get("subset", "")):
            for label_, sub in ((cfg["subset"], cfg["subset"]), ("all", "")):
                folder_ = data.dataset_dir(cfg["dataset"], cfg.get("protocol"), cfg.get("vocab"), "", sub,
                                           cfg.get("max_len"))
                if os.path.isfile(os.path.join(folder_, "meta.json")) and label_ not in lengths:
                    lengths[label_] = data.ClassificationSplit(folder_, "train", verify=False).lengths
    if len(lengths) > 1:
        fig, ax = plt.subplots(figsize=(6.5, 3.6))
        top = max(int(v.max()) for v in lengths.values())
        for name, v in sorted(lengths.items()):
            ax.hist(v, bins=range(1, top + 2), alpha=0.5, label=f"{name} (n={len(v):,})", density=True)
        ax.set_xlabel("tokens per training example (incl. [CLS])")
        ax.set_ylabel("share of the split")
        ax.legend(fontsize=8)
        save(fig, "length_histograms.png", "Length histograms of the short / long subsets' training splits")

    if depth:
        fig, ax = plt.subplots(figsize=(6, 3.8))
        for term, rows in depth.items():
            for i, r in enumerate(rows):
                loops = [x["n_loops"] for x in r["loops"]]
                ax.plot(loops, [x["accuracy"] for x in r["loops"]], "o-", lw=1, label=term if i == 0 else None)
            ax.axvline(rows[0]["loops"][0]["trained_loops"], color="grey", ls=":", lw=1)
        ax.set_xlabel("loops at test time (dotted: as trained)")
        ax.set_ylabel("test accuracy")
        ax.legend(fontsize=7)
        save(fig, "test_time_depth.png", "Test-time depth: accuracy against the number of loops (each seed)")
    return made


def machine_conditions():
    """Where the numbers come from: CPU model, cores, torch, numpy, Python, and the git commit."""
    cpu = "unknown CPU"
    if os.path.isfile("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    import torch

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip() or "unknown"
    return {"cpu": cpu, "cores": os.cpu_count(), "torch": torch.__version__, "numpy": np.__version__,
            "python": sys.version.split()[0], "commit": commit, "cuda": torch.cuda.is_available()}


def fmt_ci(pair, digits=4):
    mean, half = pair
    return f"{mean:.{digits}f}" if math.isnan(half) else f"{mean:.{digits}f} ± {half:.{digits}f}"


def fmt_num(x, spec):
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def write_report(plan, results, timing, depth, path):
    """RESULTS.md: conditions, targets, verdicts, one table per cell, test-time depth and the plots,
    all from the finished runs (a cell not run yet says so)."""
    label = lambda config: plan["labels"].get(config, config)  # noqa: E731
    metrics = {}
    for _, _, summaries in results.values():
        for s in summaries.values():
            if s is not None:
                metrics.update(s.get("metrics", {}))
    plot_dir = os.path.join(os.path.dirname(os.path.abspath(path)), "results")
    plots = draw_plots(plan, results, timing, depth, plot_dir, label)
    cond = machine_conditions()
    rel = lambda p: os.path.relpath(p, os.path.dirname(os.path.abspath(path)))  # noqa: E731
    lines = ["# Results: recurrent vs standard encoders", "",
             f"Written by `python study.py --plan {plan['path']} --report {os.path.basename(path)}` from the "
             f"finished runs under `{plan['out_root']}/` (do not edit by hand: run the command again).", "",
             "## Conditions", "",
             f"- Machine: {cond['cpu']}, {cond['cores']} cores, {'a CUDA GPU' if cond['cuda'] else 'no GPU'}; "
             f"torch {cond['torch']}, numpy {cond['numpy']}, Python {cond['python']}; code at commit {cond['commit']}.",
             "- Training: float32, each run one thread pinned to one core (`taskset`), another run on the other core.",
             f"- Seeds: {plan['seeds']} per cell unless a cell says otherwise; mean ± 95 % t-interval over seeds.",
             f"- Budget: {plan.get('budget_note', 'as each cell sets')}",
             "- Timing (size, FLOPs, latency, throughput): evaluate.py on the first seed's best checkpoint, one "
             "thread, float32; latency = median ms per sentence at batch 1 over the first 200 test sentences × 3 "
             "passes; throughput = sentences/s in length-sorted batches of 256 (first 1,024 test sentences). "
             "Other runs were training on the other core, so compare ratios within a cell, not absolute times.",
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
            except ValueError:
                values = {}
            if len(values) >= 1:
                mean = float(np.mean(list(values.values())))
                met = "yes" if (mean >= t["at_least"] if "at_least" in t else mean <= t["at_most"]) else "no"
                lines.append(f"| {t['what']} | {mean:.4f} (mean of {len(values)} seeds, `{t['term']}`) | {met} |")
            else:
                lines.append(f"| {t['what']} | not run | – |")
        lines.append("")
    lines += ["## Verdicts", "", "| claim | metric | seeds | A − B | 95 % t-interval | 95 % bootstrap | "
              "McNemar per seed (A only / B only, p) | verdict |", "|---|---|---|---|---|---|---|---|"]
    for claim in plan["verdicts"]:
        r = judge(claim, results, metrics)
        if r["verdict"] == "not run":
            lines.append(f"| {r['claim']} | {r['metric']} | {r['n']} | – | – | – | – | not run |")
            continue
        mc = "; ".join(f"{a}/{b}, p={p:.3g}" for a, b, p in r.get("mcnemar", [])) or "–"
        lines.append(f"| {r['claim']} | {r['metric']} | {r['n']} | {r['mean']:+.4f} | [{r['lo']:+.4f}, "
                     f"{r['hi']:+.4f}] | [{r['boot_lo']:+.4f}, {r['boot_hi']:+.4f}] | {mc} | **{r['verdict']}** |")
    for claim in plan["verdicts"]:
        if "cost" in claim:  # what A spent beyond B (a pretraining run), beside what it gained
            cost, fine = (term_values(t, results, "train_flops") for t in (claim["cost"], claim["a"]))
            minutes = term_values(claim["cost"], results, "train_minutes") if cost else {}
            if cost and fine:
                c, f = float(np.mean(list(cost.values()))), float(np.mean(list(fine.values())))
                lines += ["", f"Cost of \"{claim['claim']}\": `{claim['cost']}` spent {c:.3g} training FLOPs "
                              f"({float(np.mean(list(minutes.values()))):.1f} min), {c / f:.2f}× the {f:.3g} of "
                              f"each fine-tuning run."]
    lines += ["", "A and B of each claim, as `cell/config`:", ""]
    lines += [f"- {c['claim']}: A = `{c['a']}`, B = `{c['b']}`" for c in plan["verdicts"]]
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
        for r in rows:
            if not r["seeds"]:
                lines.append(f"| {label(r['config'])} | 0 of {r['planned']} | not run |" + " |" * 12)
                continue
            acc = [fmt_ci(r[m]) if m in r else "–" for m in TEST_METRICS]
            params = f"{r['params'] / 1e6:.2f} M ({r['params_non_embedding'] / 1e6:.2f} M)"
            lines.append(f"| {label(r['config'])} | {len(r['seeds'])} of {r['planned']} | {' | '.join(acc)} | "
                         f"{params} | {fmt_num(r['size_mb'], '.1f')} | {fmt_num(r['flops_per_sample'], '.2e')} | "
                         f"{fmt_num(r['latency_ms'], '.2f')} ms | {fmt_num(r['throughput'], ',.0f')} /s | "
                         f"{r['train_minutes']:.1f} | {', '.join(map(str, r['iters']))} | "
                         f"{fmt_num(r['train_flops'], '.2e')} |")
        lines.append("")
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
    with open(path, "w") as f:
        f.write("\n".join(lines))
    return lines


def plan_main(args):
    """study.py --plan: train what the plan lacks (or, with --collect_only, only read what is finished),
    measure the checkpoints, judge the claims and write the report."""
    plan = load_plan(args.plan)
    results = run_plan(plan, args.jobs, args.collect_only, args.cells)
    done = sum(s is not None for _, _, summaries in results.values() for s in summaries.values())
    planned = sum(len(summaries) for _, _, summaries in results.values())
    print(f"plan {args.plan}: {done} of {planned} runs finished")
    timing, depth = measure(results, plan, args.remeasure)
    lines = write_report(plan, results, timing, depth, args.report)
    print(f"wrote {args.report} ({len(lines)} lines)")


def main(argv=None):
    p = argparse.ArgumentParser(description="Train (or collect) config files x overrides x seeds and compare them "
                                            "over seeds. The first config is the baseline of the paired differences.")
    p.add_argument("configs", nargs="*", metavar="CONFIG", help="train.py config files")
    p.add_argument("--plan", help="a study plan (config/encoders_study.py): train its cells' unfinished runs in "
                   "order, then write the report (--report)")
    p.add_argument("--report", default="RESULTS.md", help="with --plan: the report to write (default RESULTS.md)")
    p.add_argument("--cells", nargs="*", default=None, help="with --plan: train only these cells (the report "
                   "still reads every finished run)")
    p.add_argument("--remeasure", action="store_true", help="with --plan: time the checkpoints again even if "
                   "their measurements are newer")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5], help="the seeds (at least two)")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="overrides for every run, e.g. --set device=cuda max_iters=600")
    p.add_argument("--grid", nargs="*", default=[], metavar="KEY=V1,V2",
                   help="run every config at every combination of these values, e.g. --grid n_loops=1,2,3")
    p.add_argument("--out_root", default="out/study", help="runs go to OUT_ROOT/<name>/seed<N>")
    p.add_argument("--jobs", type=int, default=1, help="runs at a time (CPU: one per core, pinned)")
    p.add_argument("--collect_only", action="store_true", help="only collect finished runs, never train")
    p.add_argument("--metrics", nargs="*", default=None, help="the metrics to show (default: all the runs report)")
    p.add_argument("--json", help="write the table, the differences and every run's summary to this file")
    args = p.parse_args(argv)

    def stop(signum, frame):  # `kill <study>` stops the study as Ctrl-C does: its runs save and stop too
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        if args.plan:
            return plan_main(args)
        if not args.configs:
            raise ValueError("give config files, or --plan PLAN")
        if len(set(args.seeds)) < 2 or args.jobs < 1:
            raise ValueError("a study needs at least two distinct --seeds and --jobs >= 1")
        runs = plan_runs(args.configs, args.seeds, args.out_root, args.set, args.grid)
        names = list(dict.fromkeys(name for name, _ in runs))
        if len(names) * len(args.seeds) != len(runs):
            raise ValueError("two configs have the same file name; rename one (the name is the run folder)")
        summaries = run_study(runs, args.jobs, args.collect_only)
        metrics = shared_metrics(summaries, args.metrics)
        result, lines = study_table(summaries, names, args.seeds, metrics)
        first = summaries[(names[0], args.seeds[0])]
        stops = sorted({s["stopped"] for s in summaries.values()})
        iters = [s["iters"] for s in summaries.values()]
        print(f"\n{len(summaries)} runs ({len(names)} configs x seeds {args.seeds}); task {first['task']}; "
              f"iterations {min(iters)}-{max(iters)}; stopped by {', '.join(stops)}")
        print("\n".join(lines))
        if args.json:
            result["runs"] = {f"{n}/seed{s}": summaries[(n, s)] for n, s in summaries}
            data.write_json(args.json, result, indent=1)
            print(f"wrote {args.json}")
    except KeyboardInterrupt:
        sys.exit("study interrupted: the runs that were going saved their last.pt; run the same command to continue")
    except (configurator.ConfigError, data.DataError, ValueError, RuntimeError, OSError) as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
