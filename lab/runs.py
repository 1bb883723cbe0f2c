"""
A study's runs on disk: which folder each planned run trains in (a run is never replaced: one of other settings
is left where it is, and this one goes beside it), which runs are finished or can resume, and their records
(results/runs/<cell>/<config>/seed<N>: summary, log and settings, never a checkpoint), committed so that a fresh
clone counts them as finished and writes the same report. Also the value a tuned cell takes from its sweep
(tuned_value), and the plan's history (plan_history.jsonl): the rules and seed counts in force when each cell's
data began, and every change since, which the report prints beside each verdict (rule_history).
"""

import json
import os
import re
import shutil
import tempfile
import time

import numpy as np

import train
from bookkeeping import records
from lab.plan import (
    StudyError,
    check_overrides,
    check_seeds,
    config_name,
    grid_settings,
    parse_term,
    run_config,
    run_names,
)


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
        while records.existing_run(folder) or has_record(record_of(folder)):
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
    if not records.existing_run(folder) and not has_record(record):
        return None
    held = held_config(folder) if records.existing_run(folder) else held_config(record)
    if held is None:
        return "a run whose settings it does not record"
    other = records.run_differences(held, cfg, train.DEFAULTS)[1]
    if not other:
        return "a run of these settings that cannot be continued (no last.pt, or no log of its start)"
    return f"a run of other settings ({records.changes(held, cfg, other)})"


def holds_this_run(cfg, record=None):
    """Whether cfg's out_dir (or its record) holds a run of cfg: finished, or stopped and resumable."""
    return finished_summary(cfg, record) is not None or can_resume(cfg)


def finished_summary(cfg, record=None):
    """The summary.json of a finished run of this config (records.same_run), from its record if it has one,
    else from its out_dir; None if neither holds one (then it must be run)."""
    for folder in (record, cfg["out_dir"]):
        path = folder and os.path.join(folder, "summary.json")
        if not path or not os.path.isfile(path):
            continue
        with open(path) as f:
            summary = json.load(f)
        if records.same_run(summary.get("config", {}), cfg, train.DEFAULTS) and summary.get("stopped") != "interrupted":
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
            and records.same_run(started, cfg, train.DEFAULTS))


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


def timing_file(records, cell=None):
    """Where a timing pass (study.py --time) records its conditions: the whole plan's pass in the records
    folder, a --cells pass in each of its cells' folders."""
    return os.path.join(records, *([cell] if cell else []), "timing.json")


def timing_conditions(records, cell=None):
    """The conditions timing_file holds (load before and after, machine, torch, commit), or None: not timed."""
    path = timing_file(records, cell)
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def is_reused(record):
    """Whether a record is a copy of another cell's (reuse_records wrote it, with reused.json)."""
    return bool(record) and os.path.isfile(os.path.join(record, "reused.json"))


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


def best_eval(log_path):
    """The evaluation record of a run's best checkpoint (the last one logged as best: the lowest validation
    loss, which the run keeps and scores on test); None if the log has none."""
    evals = log_records(log_path, "eval")
    best = [r for r in evals if r.get("best")]
    return best[-1] if best else None


def validation_score(cfg, record, metric="val_accuracy"):
    """(metric, validation loss) of a finished run's best checkpoint (best_eval: the lowest validation loss,
    the checkpoint the run keeps), read from its log; None while the run is not finished."""
    best = best_eval(run_file(cfg, record, "log.jsonl")) if finished_summary(cfg, record) else None
    return None if best is None else (best[metric], best["val_loss"])


def tuned_value(sweep_runs, config, key, metric="val_accuracy"):
    """The value of `key` that a sweep's grid (its runs: {(name, seed): (argv, cfg, record)}) chooses for
    `config`: the grid point whose runs' best checkpoints have the highest validation accuracy (`metric`; a
    seq2seq run logs val_word_accuracy), mean over the sweep's seeds; of two equal, the lower validation loss.
    Only the validation split chooses: the test figures of the sweep's runs play no part. `key` may be a list
    of keys (a grid of several axes): the value is then the grid point, 'k1=v1,k2=v2'. Returns (value as the
    grid spells it, {value: (mean validation accuracy, mean validation loss)}), or (None, {}) until every run
    of the sweep for `config` has finished."""
    scores = {}
    for (name, seed), (_, cfg, record) in sweep_runs.items():
        if run_config(name) != config:
            continue
        score = validation_score(cfg, record, metric)
        if score is None:
            return None, {}
        settings = dict(item.split("=", 1) for item in grid_settings(name))
        value = settings[key] if isinstance(key, str) else ",".join(f"{k}={settings[k]}" for k in key)
        scores.setdefault(value, []).append(score)
    means = {v: (float(np.mean([a for a, _ in x])), float(np.mean([loss for _, loss in x])))
             for v, x in scores.items()}
    if not means:
        return None, {}
    return max(means, key=lambda v: (means[v][0], -means[v][1])), means


def chosen_settings(key, value):
    """The 'key=value' overrides a tuned_value choice gives a config: one, or a grid point's several."""
    return [f"{key}={value}"] if isinstance(key, str) else value.split(",")


def reuse_records(runs, sources, records_root):
    """Count the runs of earlier cells as this cell's where they are the same run: for each planned run
    ({(name, seed): (argv, cfg, record)}) with no record yet, a record in one of the `sources` cells (of the
    same config file and seed, at any grid point) whose settings are the run's (records.same_run) is copied to
    the run's record folder, with reused.json naming where it came from. A run trained once is one run: two
    cells that need it read one record instead of training it twice. Returns the copies made."""
    made = []
    for (name, seed), (_, cfg, record) in runs.items():
        if not record or has_record(record) or os.path.exists(record):
            continue
        for source in sources:
            folder = os.path.join(records_root, source)
            names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
            found = [os.path.join(folder, n, f"seed{seed}") for n in names if run_config(n) == run_config(name)]
            found = [f for f in found if finished_summary({**cfg, "out_dir": None}, f) is not None]
            if found:
                shutil.copytree(found[0], record)
                with open(os.path.join(record, "reused.json"), "w") as f:
                    json.dump({"from": os.path.relpath(found[0], records_root)}, f)
                made.append((found[0], record))
                break
    return made


# -----------------------------------------------------------------------------
# the plan's history: which rules and seed counts were in force when each cell's data began
#
# A verdict's rule (and the seeds it waits for) must be fixed before its data is seen. The records folder keeps
# plan_history.jsonl, one line per event, each with the date, the code's commit and the plan's rules and seeds as
# they stood: "first run" when a cell's first run is recorded, "plan changed" when a study finds the plan's rules
# or seeds differ from the last line. The report reads it beside each verdict (rule_history). The lines before
# this file existed were written from the repository's history (lab/plan_history_from_git.py says how).

HISTORY = "plan_history.jsonl"


# the settings of a run that decide what a verdict reads: the data split, the budget, the schedule, and which
# checkpoint is kept (select_on, and when early stopping ends the run)
DECIDING_KEYS = ("protocol", "select_on", "early_stop_patience", "early_stop_min_delta", "eval_interval", "max_epochs",
                 "max_iters", "scheduler", "plateau_patience", "warmup_iters", "learning_rate", "weight_decay", "dtype")


def plan_snapshot(plan):
    """What a verdict's fairness rests on: each cell's seeds; each cell's configs, overrides, grid and sweeps
    (tune), with the deciding settings (DECIDING_KEYS) each config's runs take, the selection rule among them;
    each verdict's terms, rule and margin; and which verdict answers each conclusion."""
    def deciding(cell, path):
        cfg = train.make_config([path, *[f"--{s}" for s in cell.get("set", [])]])
        return {k: cfg[k] for k in DECIDING_KEYS}

    return {"seeds": {c["name"]: c.get("seeds", plan["seeds"]) for c in plan["cells"]},
            "cells": {c["name"]: {**{k: c[k] for k in ("set", "grid", "tune") if k in c},
                                  "configs": {config_name(p): deciding(c, p) for p in c["configs"]}}
                      for c in plan["cells"]},
            "verdicts": {v["claim"]: {k: v[k] for k in ("a", "b", "rule", "margin", "subset") if k in v}
                         for v in plan["verdicts"]},
            "conclusions": {c["claim"]: {k: c[k] for k in ("verdict", "instead", "reverse") if k in c}
                            for c in plan["conclusions"]}}


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
    # the data seen when the line is written: each cell's recorded runs (a rule changed after them is marked so)
    seen = {name: sum(has_record(record) for _, _, record in runs.values()) for name, (_, runs) in cells.items()}
    stamp = {"date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "commit": records.code_commit(),
             "recorded": {name: n for name, n in seen.items() if n}}
    os.makedirs(plan["records"], exist_ok=True)
    with open(path, "a") as f:
        for line in lines:
            f.write(json.dumps({**stamp, **line, "plan": snapshot}) + "\n")


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
