"""
A study plan (config/encoders_study.py): a Python file of named cells of runs, the verdicts to judge between
them, and the conclusions, targets and notes of the report. This module reads one and checks all of it before
anything trains (check_plan), so that a mistake in its last cell stops the study at once, not hours later; it
also names a plan's runs (run_names, grid_points) and parses its terms ('cell/config', 'cell/config -
cell/config').

A plan sets (names starting with _ are its own helpers):
  out_root   where the cells' runs go: OUT_ROOT/<cell>/<config name>/seed<N>
  seeds      the seeds of every cell (a cell may set its own)
  cells      [dict(name, configs, set, seeds, test_set, what, tune)]: each cell is a study of its config files
             with the overrides `set`; test_set names the test examples (cells with the same one are compared on
             a plot); run in order, so a cell may start from a checkpoint an earlier cell trained, or take a
             setting an earlier cell chose: tune=dict(sweep=CELL, key=KEY) gives each config the value of KEY
             that CELL's grid over KEY found best on validation (lab.runs.tuned_value); a config waits until CELL has
             finished its runs, and with inside=True while that value is an edge of the grid (the best may lie
             beyond: extend the grid), while the cell's other configs train; a list of
             such dicts takes one setting from each sweep, each for the configs that sweep holds
  labels     {config name: how tables call it}
  verdicts   [dict(claim, a, b, metric, cost, rule, margin, subset)]: a and b are "cell/config", or
             "cell/config - cell/config" (a difference per seed); the claim is judged under its rule (RULES:
             superiority, that a beats b, unless it says non-inferiority or equivalence, with a margin);
             subset: only the test examples of one of the plan's `subsets`; cost: a run A spent beyond B
  subsets    {name: [words]}: test examples that hold one of the words (lab.cells.subset_words)
  depth      ["cell/config"]: recurrent runs to score at test-time depths `depth_loops`
  targets    [dict(what, term, metric, at_least or at_most)] and `budget_note`, `notes`: text for the report
"""

import itertools
import os
import traceback

import evaluate
import train
from configurator import ConfigError, UserError, closest
from lab.stats import RULES


class StudyError(UserError):
    """A study that cannot do what was asked: runs not finished under --collect_only, or a report that
    would replace one holding more finished runs."""


class RunFailed(StudyError):
    """A run's train.py exited with an error; its train.out says why."""


# -----------------------------------------------------------------------------
# a plan's runs: their names, from config files and grid points


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


def run_config(name):
    """The config stem of a run name (run_names: stem@key=value,...)."""
    return name.partition("@")[0]


def grid_settings(name):
    """The key=value settings of a grid point's run name (run_names: stem@key=value,...); [] for none."""
    return name.partition("@")[2].split(",") if "@" in name else []


# -----------------------------------------------------------------------------
# reading a plan, and checking all of it before anything trains

PLAN_KEYS = {"out_root": str, "records": str, "seeds": list, "cells": list, "labels": dict, "verdicts": list,
             "depth": list, "depth_loops": list, "targets": list, "budget_note": str, "notes": list,
             "conclusions": list, "effect": (int, float), "subsets": dict}
CELL_KEYS = {"name": str, "configs": list, "set": list, "grid": list, "seeds": list, "test_set": str, "what": str,
             "tune": (dict, list), "reuse": list}
TUNE_KEYS = {"sweep": str, "key": (str, list), "inside": bool}
VERDICT_KEYS = {"claim": str, "a": str, "b": str, "metric": str, "cost": str, "rule": str, "margin": (int, float),
                "subset": str}
CONCLUSION_KEYS = {"claim": str, "source": str, "verdict": str, "instead": str, "reverse": bool, "note": str}
TARGET_KEYS = {"what": str, "term": str, "metric": str, "at_least": (int, float), "at_most": (int, float)}
TEST_METRICS = ["test_accuracy", "test_f1", "test_precision", "test_recall", "test_mcc"]
# the figures records.summarize writes for every run, beside its task's final validation and test figures
RUN_FIGURES = ("best_val_loss", "final_grad_norm", "train_minutes", "train_flops", "iters", "epochs", "params",
               "params_non_embedding")


def metric_names():
    """The figures a run's summary.json may hold, which a verdict or a target may compare: each task's
    (evaluate.METRICS) as test_X (the best checkpoint on the test split) and final_val_X, and the RUN_FIGURES."""
    per_task = {f"{split}_{k}" for metrics in evaluate.METRICS.values() for k in metrics
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
            kinds = keys[key] if isinstance(keys[key], tuple) else (keys[key],)
            kind = "number" if kinds == (int, float) else " or ".join(k.__name__ for k in kinds)
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


def tune_keys(tune):
    """The settings one tune entry chooses: its key, or its keys (a sweep over a grid of several axes chooses
    a grid point: max_epochs and learning_rate together, say)."""
    return [tune["key"]] if isinstance(tune["key"], str) else list(tune["key"])


def cell_tunes(cell):
    """A cell's tune entries as a list: `tune` is one dict(sweep, key, inside) or a list of them (one sweep per
    setting: each chooses its key for the configs it swept)."""
    tune = cell.get("tune", [])
    return [tune] if isinstance(tune, dict) else list(tune)


def check_tune(cell, earlier, where):
    """Each of a tuned cell's tune entries names an earlier cell (its sweep) whose one grid axis is the key to
    tune, and shares a config with it; the key is not also set by the tuned cell (the chosen value would be
    overridden or override it), nor chosen by two sweeps for one config."""
    chosen = set()
    for tune in cell_tunes(cell):
        check_one_tune(tune, cell, earlier, where)
        sweep = earlier[tune["sweep"]]
        for config in {config_name(p) for p in cell["configs"]} & {config_name(p) for p in sweep["configs"]}:
            for key in tune_keys(tune):
                if (config, key) in chosen:
                    raise ConfigError(f"{where}: tune: two sweeps choose {key} for {config}")
                chosen.add((config, key))


def check_one_tune(tune, cell, earlier, where):
    check_entry(tune, TUNE_KEYS, ("sweep", "key"), f"{where}: tune")
    sweep = earlier.get(tune["sweep"])
    if sweep is None:
        raise ConfigError(f"{where}: tune: sweep {tune['sweep']!r} is not a cell before this one"
                          f"{closest(tune['sweep'], list(earlier))}")
    axes, keys = [g.partition("=")[0] for g in sweep.get("grid", [])], tune_keys(tune)
    if axes != keys:
        raise ConfigError(f"{where}: tune: sweep {tune['sweep']}'s grid axes must be the tuned keys, "
                          f"{', '.join(keys)}, in that order (it has {axes or 'none'})")
    if tune.get("inside") and len(keys) > 1:
        raise ConfigError(f"{where}: tune: inside=True takes one key (an edge of a grid of several axes is not "
                          f"one value)")
    if not {config_name(p) for p in cell["configs"]} & {config_name(p) for p in sweep["configs"]}:
        raise ConfigError(f"{where}: tune: no config of this cell is in sweep {tune['sweep']}")
    for item in cell.get("set", []):
        if item.partition("=")[0] in keys:
            raise ConfigError(f"{where}: tune: the cell also sets {item.partition('=')[0]}; its sweep chooses it")


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
        if cell_tunes(cell):
            check_tune(cell, {c["name"]: c for c in plan["cells"][:i]}, where)
        for other in cell.get("reuse", []):
            if other not in configs or other == cell["name"]:
                raise ConfigError(f"{where}: reuse: {other!r} is not a cell before this one"
                                  f"{closest(other, list(configs))}")
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
