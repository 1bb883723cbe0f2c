"""
The study runner: config files x overrides x seeds, trained by train.py and compared over seeds.

    python study.py config/sst2_recurrent.py config/sst2_baseline.py --seeds 1 2 3 --jobs 2
    python study.py config/sst2_recurrent.py --grid n_loops=1,2,3 --seeds 1 2 3 --set max_epochs=1
    python study.py ... --collect_only --json study.json     # only read finished runs; never train
    python study.py --plan config/encoders_study.py [--time] # a plan's cells, then RESULTS.md (--time: latency too)
    python study.py --tune config/piglatin_tuning.py --dry_run   # a tuning plan (lab/tuning.py): what it trains next

Each run is `python train.py CONFIG --KEY=VALUE... --seed=N --out_dir=OUT_ROOT/<name>/seed<N>`, <name>
the config file's stem, with @key=value,... for a --grid point. The runner works for every task: it
never loads a model, but reads the runs' summary.json (their figures, each with its label and which
way is better: `metrics`). It is resumable: a run whose summary.json holds the planned config
(records.same_run) is finished; one with a last.pt of it (stopped by Ctrl-C, which reaches each run as
SIGTERM and makes it save) continues with --init_from=resume, to the same weights. A run is never
replaced: if seed<N> holds a run of other settings, it is left as it is and this one goes to seed<N>-2
(then -3, ...), where later calls find it.

A plan (--plan) also records each finished run in the repository (results/runs/<cell>/<config>/seed<N>:
summary, log, settings, measurements; never a checkpoint), counts it as finished, and writes its report
from the records alone, so a fresh clone writes the same RESULTS.md; latency comes from a pass of its
own on a quiet machine (--time).

Read top to bottom: the runner (run_pending: subprocesses pinned to cores, resumed, never replacing a
run), a plan's cells in order (run_plan, plan_cell), the measurements that need the checkpoints
(measure, through evaluate.py), the commands (plan_main, configs_main, main). lab/ holds the rest: the
plan (plan.py), the runs' folders, records and history (runs.py), a cell's rows (cells.py), the
statistics (stats.py), the report and its plots (report.py, plots.py; the configs mode's table too).

Bad input (an unknown key, a repeated seed, a plan's mistake, a failed run) is one line `error: ...`; a
plan is checked whole before its first run. Anything else is a bug, and keeps its traceback."""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import data
from bookkeeping import records
from cli.help import HelpFormatter, reader_may_stop
from configurator import ConfigError, UserError
from evaluation.ranges import check_new_file
from lab import tuning
from lab.cells import cell_data, finished_seeds
from lab.plan import (
    RunFailed,
    StudyError,
    cell_tunes,
    check_metric,
    check_seeds,
    config_name,
    load_plan,
    plan_unchanged,
    run_config,
)
from lab.report import (
    check_report_keeps_runs,
    check_report_path,
    finished_runs,
    shared_metrics,
    study_table,
    write_report,
)
from lab.runs import (
    can_resume,
    chosen_settings,
    finished_summary,
    has_record,
    note_plan,
    plan_runs,
    record_finished,
    reuse_records,
    save_record,
    timing_file,
    tuned_value,
)

# -----------------------------------------------------------------------------
# running


def run_pending(runs, todo, jobs, check=None, recorded=None, refill=None):
    """Train the runs `todo` as `python train.py` subprocesses, `jobs` at a time, each slot pinned to its
    own share of the cores. A run that can resume does; any other starts in a folder that holds no run
    (run_folder saw to it), so none is ever started with --overwrite; one that another process is training
    (its out_dir's train.lock held: another study.py on the plan) is skipped, and so is one it has finished
    since `todo` was drawn up: two study.py share a plan's runs out. If a run fails (RunFailed) or the
    study is interrupted, the runs still going get SIGTERM, save their last.pt and stop; a later call
    continues them. `check`, if given, is called before each run starts (plan_unchanged); `recorded`, after
    each run's record is written (note_plan); `refill`, each time a run has finished: the runs to train next,
    first first ({key: (argv, cfg, record)}: a tuning's, which the finished run may have decided), replace
    the queue, less those going already; so no core waits for the slowest run of a batch, and a run the
    finished one decided starts before the runs queued earlier that the caller ranks after it."""
    # the cores this process may use (`taskset -c 1 python study.py ...` gives it one), shared out by slot
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    per_job = max(1, len(allowed) // jobs)
    running = []  # (key, process, log file, slot)
    runs, pending, free_slots = dict(runs), list(todo), list(range(jobs))
    try:
        while pending or running:
            while pending and free_slots:
                if check:
                    check()
                key = pending.pop(0)
                argv, cfg, record = runs[key]
                busy = records.out_dir_busy(cfg["out_dir"])
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

                proc = start_run([*argv, *(["--init_from=resume"] if resume else [])], log, cores if jobs > 1 else None,
                                 per_job)
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
                if refill:
                    going = {r[0] for r in running}
                    more = {k: run for k, run in refill().items() if k not in going}
                    runs.update(more)
                    pending[:] = list(more)
    finally:
        for _, proc, log, _ in running:
            proc.terminate()  # SIGTERM: train.py finishes its step, saves last.pt and exits
            proc.wait()
            log.close()


def start_run(argv, log, cores, threads):
    """`python train.py ARGV` as a subprocess writing to the file `log`, pinned to `cores` (None: unpinned; one job
    per group of cores is ~2x faster than unpinned on a 2-core VM) with `threads` threads, in a session of its own
    (a Ctrl-C at the terminal reaches the study, which passes it on once). Returns the Popen."""
    def pin():
        if cores and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, cores)

    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train.py")
    return subprocess.Popen([sys.executable, script, *argv], stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "OMP_NUM_THREADS": str(threads)}, preexec_fn=pin, start_new_session=True)


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


def plan_cell(plan, cell, earlier):
    """(cell, its runs as plan_runs gives them). A tuned cell's configs that a sweep of its (in `earlier`: {name:
    (cell, runs)} of the cells before it) varies take the value it chose (tuned_value); until the sweep has
    finished for one, or (tune's inside=True) while it chose an edge of its grid, where the best may lie beyond,
    that config waits (cell["waiting"]: {config: why}; its runs planned without that value, counted, never
    trained) and the cell's other configs train. A run that a cell in its `reuse` list holds already (the same
    settings and seed) takes that record (reuse_records) instead of training again."""
    root, records = (os.path.join(plan[k], cell["name"]) for k in ("out_root", "records"))
    tuned, waiting = {}, {}
    for tune in cell_tunes(cell):  # each sweep chooses one setting for the configs it holds
        sweep_runs = earlier[tune["sweep"]][1]
        swept = {run_config(name) for name, _ in sweep_runs}
        for config in (config_name(p) for p in cell["configs"]):
            if config in swept:
                value, means = tuned_value(sweep_runs, config, tune["key"])
                if value is None:
                    waiting.setdefault(config, f"waits for its sweep, {tune['sweep']}, to finish its runs")
                elif tune.get("inside") and float(value) in (min(map(float, means)), max(map(float, means))):
                    waiting.setdefault(config, f"waits: in its sweep, {tune['sweep']}, it chose {tune['key']}={value}, "
                                               "an edge of the grid; extend that grid past it so the choice is "
                                               "strictly inside")
                else:
                    tuned.setdefault(config, []).extend(chosen_settings(tune["key"], value))
    cell = {**cell, "waiting": waiting} if waiting else cell
    runs = plan_runs(cell["configs"], cell.get("seeds", plan["seeds"]), root, cell.get("set", []),
                     cell.get("grid", []), records=records, tuned=tuned)
    ready = {key: run for key, run in runs.items() if run_config(key[0]) not in waiting}  # a waiting run's settings
    for source, record in reuse_records(ready, cell.get("reuse", []), plan["records"]):  # are not its own yet
        print(f"  cell {cell['name']}: reused the record {source} (the same run) as {record}")
    return cell, runs


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
    for cell in plan["cells"]:  # a change of the plan is noted before anything trains, beside the runs recorded then
        cells[cell["name"]] = plan_cell(plan, cell, cells)
    note_plan(plan, cells)
    cells = {}
    for cell in plan["cells"]:
        name = cell["name"]
        cell, runs = plan_cell(plan, cell, cells)
        cells[name] = (cell, runs)
        todo = [key for key, (_, cfg, record) in runs.items() if finished_summary(cfg, record) is None]
        if todo and not collect_only and (not only or name in only):
            waiting = cell.get("waiting", {})
            for config, why in waiting.items():
                print(f"cell {name}: {config} not trained: it {why}")
            todo = [key for key in todo if run_config(key[0]) not in waiting]
            if not todo:
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
        new = f"{path}.new"  # evaluate.py never replaces a file: the study replaces its own measurement, once made
        if os.path.exists(new):
            os.remove(new)  # left by a measurement that was stopped
        rows = evaluate_script(["--ckpt", ckpt, *argv], new)
        if rows:
            os.replace(new, path)
        return rows[0] if rows else None
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        rows = json.load(f)
    return rows[0] if isinstance(rows, list) else rows


def measure(results, plan, remeasure=False, timed=False, cells=None):
    """Size and FLOPs of each cell's configs (their first finished seed's best checkpoint, on one thread),
    and the test-time depth of the plan's `depth` runs (every finished seed); with `timed` (study.py --time,
    on a quiet machine, training done) also latency at batch 1 and throughput in batches of 256, every
    checkpoint here in one process, in turns, with the pass's conditions in the records folder
    (timing.json); with `cells` (--cells) only those cells' checkpoints, the conditions in each one's own
    folder (a pass of their own: the report says which latencies came from which pass). Each measurement is
    kept in its run's record folder (run_measurement: measure.json, depth.json), so a later session, whose out/ holds
    none of these checkpoints, reports them as they were. Returns ({cell: {config: figures}}, {depth term:
    [figures per seed]})."""
    if timed:
        load = machine_load()
        if load > QUIET_LOAD:
            raise StudyError(f"the machine is busy (load average {load:.2f} over the last minute): time the "
                             f"checkpoints when nothing else runs, or the latencies are the other processes' too")
        # evaluate.py runs on one thread (evaluate_script)
        started = {"load_before": round(load, 2), **records.machine_conditions("cpu"), "threads": 1}
    firsts = []  # (cell, config, its first finished seed's config and record folder) of every tested config
    for name, (cell, runs, summaries) in results.items():
        for config in dict.fromkeys(n for n, _ in runs):
            seeds = finished_seeds(summaries, config)
            if seeds and summaries[(config, seeds[0])].get("test_n"):
                firsts.append((name, config, *runs[(config, seeds[0])][1:]))
    if timed:  # every first seed in one evaluate.py process, timed in turns (evaluate.py --interleave)
        firsts = [f for f in firsts if has_record(f[3])]
        to_time = [f for f in firsts if cells is None or f[0] in cells]
        here = [f for f in to_time if os.path.isfile(os.path.join(f[2]["out_dir"], "ckpt.pt"))]
        gone = [f for f in to_time if f not in here]  # trained in an earlier session: its architecture, fresh
        print(f"timing {len(to_time)} configs' first seeds in turns: {len(here)} checkpoints, {len(gone)} "
              f"architectures whose checkpoint is gone (fresh weights: a forward's time does not depend on them)")
        with tempfile.TemporaryDirectory() as tmp:
            argv = [*(["--ckpt", *[os.path.join(f[2]["out_dir"], "ckpt.pt") for f in here]] if here else []),
                    *(["--untrained", *[os.path.join(f[3], "config.py") for f in gone]] if gone else []),
                    "--split", "test", "--interleave"]
            rows = evaluate_script(argv, os.path.join(tmp, "timing.json")) if to_time else []
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
        conditions = {**started, "load_after": round(machine_load(), 2)}
        for cell in [None] if cells is None else cells:
            data.write_json(timing_file(plan["records"], cell), conditions, indent=1)
        if cells is None:  # every cell timed anew: no cell's pass of its own stands any longer
            for name in results:
                if os.path.isfile(timing_file(plan["records"], name)):
                    os.remove(timing_file(plan["records"], name))
    return timing, depth


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
    timing, depth = measure(results, plan, args.remeasure, args.time, args.cells)
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
        check_new_file(args.json, "--json")  # found now, not after the training
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
    p = argparse.ArgumentParser(prog="python study.py", formatter_class=HelpFormatter,
                                description="Train (or collect) config files x overrides x seeds and compare them "
                                            "over seeds. The first config is the baseline of the paired differences.")
    p.add_argument("configs", nargs="*", metavar="CONFIG", help="train.py config files")
    p.add_argument("--plan", help="a study plan (config/encoders_study.py): check it whole, train its cells' "
                   "unfinished runs in order, then write the report (--report)")
    p.add_argument("--tune", metavar="PLAN", help="a tuning plan (config/piglatin_tuning.py): its coordinate "
                   "search, the choice confirmed over seeds, the one-factor runs (lab/tuning.py); resumable")
    p.add_argument("--stage", choices=tuning.STAGES, help="with --tune: only this stage (default: every stage, as far "
                   "as the finished runs allow)")
    p.add_argument("--dry_run", action="store_true", help="with --tune: print the runs it would train next; train "
                   "and write nothing")
    p.add_argument("--report", help="with --plan: the report to write (default RESULTS.md; plots go to results/ "
                   "beside it)")
    p.add_argument("--allow_fewer", action="store_true", help="with --plan: replace the report even if it holds "
                   "more finished runs than the new one will")
    p.add_argument("--cells", nargs="*", default=None, help="with --plan: train (and with --time, time) only "
                   "these cells (the report still reads every finished run)")
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
    p.add_argument("--json", help="write the table, the differences and every run's summary to this new file (one "
                   "already there is refused)")
    args = p.parse_args(argv)

    def stop(signum, frame):  # `kill <study>` stops the study as Ctrl-C does: its runs save and stop too
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        if args.jobs < 1:
            raise ConfigError(f"--jobs {args.jobs}: expected at least 1")
        if args.tune:
            other = [f for f in ("plan", *PLAN_FLAGS, *CONFIGS_FLAGS) if getattr(args, f)]
            if other:
                raise ConfigError(f"{', '.join('config files' if f == 'configs' else '--' + f for f in other)}: not "
                                  "with --tune (its plan sets its own)")
            return tuning.tune(args.tune, args.stage, args.jobs, args.dry_run, sys.modules[__name__])
        if args.stage or args.dry_run:
            raise ConfigError("--stage and --dry_run: only with --tune")
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
    with reader_may_stop():  # `python study.py --help | head` ends quietly
        main()
