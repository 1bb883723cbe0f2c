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


def same_run(a, b):
    """Whether two run configs describe the same run. init_from 'scratch' and 'resume' say only how a
    run was started (a resumed run is the run it continues); a checkpoint file to start from counts."""
    def norm(c):
        c = json.loads(json.dumps(c))  # as stored: tuples -> lists
        if c.get("init_from") == "resume":
            c["init_from"] = "scratch"
        return c
    return norm(a) == norm(b)


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


def main(argv=None):
    p = argparse.ArgumentParser(description="Train (or collect) config files x overrides x seeds and compare them "
                                            "over seeds. The first config is the baseline of the paired differences.")
    p.add_argument("configs", nargs="+", metavar="CONFIG", help="train.py config files")
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
