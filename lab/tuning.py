"""
A tuning plan carried out mechanically (config/piglatin_tuning.py): a coordinate search per model family, its
choice confirmed over seeds at full budget, then one-factor runs from the tuned setting.

    python study.py --tune config/piglatin_tuning.py --dry_run     # the runs it would train next; trains nothing
    python study.py --tune config/piglatin_tuning.py --jobs 2      # every stage, as far as the finished runs allow
    python study.py --tune config/piglatin_tuning.py --stage search --jobs 2

1. search: each family from its config, at the plan's short budget (search_set) and one seed, walks the
   plan's `axes` in order: it trains every value of an axis, with the winners of the axes before it, and
   carries this axis's winner on. The winner is the run whose kept checkpoint (ckpt.pt, the lowest
   validation loss) scored the highest `metric` on validation (lab.runs.validation_score); of two equal,
   the lower validation loss. A numeric axis whose winner is at an edge of its values gains the next value
   past it (extension) until the winner is strictly inside (or at the axis's floor). A run whose settings
   equal an earlier run's is that run, not trained again. The choices and their validation figures go to
   RECORDS/choices.json and choices.md.
2. confirm: each family's choice written as a config file (tuned_configs) once its own search is complete,
   trained at the config's full budget over confirm_seeds; then the verdicts, paired by seed: tuned against
   tuned, and each tuned family against its untuned records.
3. ablate: the plan's one-factor runs from a tuned config, their verdicts against it, and every confirm and
   ablate run's predictions on test and unseen words (errors.json beside its record, by evaluate.py).

Each family goes through the stages at its own pace, in one queue (tune): when a run ends, the runs it
decides take the free core, so one family's confirm runs train while the other still searches.

The runs are study.py's (study.run_pending: train.py subprocesses, pinned, resumed, never replacing a run),
and each finished run leaves its record (summary.json, log.jsonl, config.py; no checkpoint) to commit, so a
later session, or a fresh clone, continues where this one stopped. Bad input is one line, `error: ...`.
"""

import json
import math
import os

import data
import train
from configurator import ConfigError, parse_value
from lab.plan import StudyError, check_entry, check_overrides, check_seeds, config_name, read_plan
from lab.report import shared_metrics, study_table
from lab.runs import finished_summary, plan_runs, record_finished, validation_score

PLAN_KEYS = {"out_root": str, "records": str, "confirm_records": str, "metric": str, "families": dict,
             "search_seed": int, "search_set": list, "axes": list, "tuned_configs": dict, "confirm_seeds": list,
             "untuned_records": str, "verdict_metrics": list, "ablations": dict}
AXIS_KEYS = {"name": str, "choices": dict, "per_family": dict, "values": list, "extend": str, "step": (int, float),
             "floor": (int, float)}
STAGES = ("search", "confirm", "ablate")
ERRORS_ARGV = ["--split", "test", "--no_timing", "--max_errors", "0"]  # test and unseen words, every prediction


# -----------------------------------------------------------------------------
# the plan, checked whole before anything trains


def load_plan(path):
    plan, _ = read_plan(path)
    check_entry(plan, PLAN_KEYS, list(PLAN_KEYS), path)
    for family, config in plan["families"].items():
        if not os.path.isfile(config):
            raise ConfigError(f"{path}: families: config {config} of {family} not found")
    for key in ("tuned_configs", "ablations"):  # a tuned config for every family; ablations of some
        if set(plan[key]) - set(plan["families"]) or key == "tuned_configs" and set(plan[key]) != set(plan["families"]):
            raise ConfigError(f"{path}: {key} names {sorted(plan[key])}; the families are {sorted(plan['families'])}")
    check_seeds([plan["search_seed"]], f"{path}: search_seed")
    check_seeds(plan["confirm_seeds"], f"{path}: confirm_seeds")
    check_overrides(plan["search_set"], f"{path}: search_set")
    for i, axis in enumerate(plan["axes"]):
        where = f"{path}: axes[{i}]"
        check_entry(axis, AXIS_KEYS, ["name"], where)
        if sum(k in axis for k in ("choices", "per_family", "values")) != 1:
            raise ConfigError(f"{where} needs one of choices, per_family or values")
        if axis.get("extend") not in (None, "times", "plus") or ("extend" in axis) != ("step" in axis):
            raise ConfigError(f"{where}: extend is 'times' or 'plus', with a step")
        for family, config in plan["families"].items():  # every setting is a train.py key of a fitting type
            for settings in axis_choices(axis, family).values():
                check_overrides(settings, where)
                train.make_config([config, *(f"--{s}" for s in plan["search_set"] + settings)])
    for family, ablations in plan["ablations"].items():
        for settings in ablations:
            check_overrides(settings, f"{path}: ablations")
            train.make_config([plan["families"][family], *(f"--{s}" for s in settings)])
    return plan


def value_text(v):
    return repr(round(v, 10)) if isinstance(v, float) else repr(v)


def axis_choices(axis, family, values=None):
    """{label: settings} of one axis for one family, in order; a numeric axis at `values` (its grid, extended)."""
    if "values" not in axis:
        choices = axis["choices"] if "choices" in axis else axis["per_family"].get(family, {})
        return {f"{axis['name']}={label}": list(s) for label, s in choices.items()}
    return {f"{axis['name']}={value_text(v)}": [f"{axis['name']}={value_text(v)}"]
            for v in sorted(axis["values"] if values is None else values)}


def extension(axis, values, chosen):
    """The value a numeric axis gains when its winner `chosen` is at an edge of its `values` (x step or + step
    past it), or None: the winner strictly inside, an axis without `extend`, or the next value below its floor."""
    if "extend" not in axis or len(values) < 2 or min(values) < chosen < max(values):
        return None
    times = axis["extend"] == "times"
    if chosen == max(values):
        return round(chosen * axis["step"] if times else chosen + axis["step"], 10)
    lower = round(chosen / axis["step"] if times else chosen - axis["step"], 10)
    return None if lower < axis.get("floor", -math.inf) else lower


def better(scores):
    """The label whose (metric, validation loss) is best: the highest metric, then the lower loss."""
    return max(scores, key=lambda label: (scores[label][0], -scores[label][1]))


# -----------------------------------------------------------------------------
# stage 1: the coordinate search


def search(plan, family):
    """Walk one family's axes as far as its finished runs allow. Returns (result, pending): result holds each
    axis reached ({axis, scores: {label: [metric, val_loss] or None}, chosen, settings}), the settings carried
    so far, whether the search is complete and its distinct runs so far; pending, the runs ({(name, seed):
    (argv, cfg, record)}) that must finish before it can go on."""
    config, seed, metric = plan["families"][family], plan["search_seed"], plan["metric"]
    seen = {}  # a run's settings (its config less out_dir) -> the run: equal settings are one run
    carried, axes = [], []
    for axis in plan["axes"]:
        values = list(axis.get("values", []))
        while True:
            runs, scores = {}, {}
            for label, settings in axis_choices(axis, family, values).items():
                root = os.path.join("search", family, label)
                planned = plan_runs([config], [seed], os.path.join(plan["out_root"], root),
                                    [*plan["search_set"], *carried, *settings],
                                    records=os.path.join(plan["records"], root))
                (run,) = planned.values()
                same = json.dumps({k: v for k, v in run[1].items() if k != "out_dir"}, sort_keys=True)
                argv, cfg, record = runs[(f"{family} {label}", seed)] = seen.setdefault(same, run)
                scores[label] = validation_score(cfg, record, metric)
            step = {"axis": axis["name"], "scores": {k: list(v) if v else None for k, v in scores.items()}}
            if any(s is None for s in scores.values()):
                pending = {k: run for k, run in runs.items() if finished_summary(*run[1:]) is None}
                return {"axes": [*axes, step], "settings": carried, "complete": False, "runs": len(seen)}, pending
            step["chosen"] = better(scores)
            more = extension(axis, values, float(step["chosen"].partition("=")[2])) if values else None
            if more is None:
                break
            values.append(more)
        step["settings"] = axis_choices(axis, family, values)[step["chosen"]]
        axes.append(step)
        carried = [*carried, *step["settings"]]
    return {"axes": axes, "settings": carried, "complete": True, "runs": len(seen)}, {}


def planned_count(plan, family):
    """The search's runs for a family if no grid is extended: every axis's values, less, after the first axis,
    the one that is the config's own (that run is the winner carried in, run already)."""
    config, fixed = plan["families"][family], [f"--{s}" for s in plan["search_set"]]
    own = train.make_config([config, *fixed])
    count = 0
    for i, axis in enumerate(plan["axes"]):
        choices = axis_choices(axis, family).values()
        count += len(choices) - (i > 0 and any(train.make_config([config, *fixed, *(f"--{s}" for s in settings)])
                                               == own for settings in choices))
    return count


def write_choices(plan, results):
    """RECORDS/choices.json (the search as it stands) and choices.md, its table."""
    os.makedirs(plan["records"], exist_ok=True)
    data.write_json(os.path.join(plan["records"], "choices.json"),
                    {"metric": plan["metric"], "seed": plan["search_seed"], "search_set": plan["search_set"],
                     "families": results}, indent=1)
    lines = ["# Pig Latin tuning: the search's choices", "",
             f"Written by `python study.py --tune` from the runs' records: seed {plan['search_seed']}, "
             f"{' '.join(plan['search_set'])}; each run scored by its kept checkpoint (lowest validation loss) on "
             f"`{plan['metric']}`, ties to the lower validation loss. Test and unseen words choose nothing.", "",
             f"| family | axis | setting | {plan['metric']} | val_loss | chosen |", "|---|---|---|---|---|---|"]
    for family, result in results.items():
        for step in result["axes"]:
            for label, score in step["scores"].items():
                figures = f"{score[0]:.4f} | {score[1]:.4f}" if score else "not finished | "
                lines.append(f"| {family} | {step['axis']} | {label.partition('=')[2]} | {figures} | "
                             f"{'**chosen**' if step.get('chosen') == label else ''} |")
        state = "complete" if result["complete"] else "not complete"
        lines.append(f"| {family} | ({state}) | {' '.join(result['settings']) or '(the config)'} | | | |")
    with open(os.path.join(plan["records"], "choices.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


# -----------------------------------------------------------------------------
# stage 2: confirm; stage 3: ablate


def tuned_text(plan, family, result):
    """A family's chosen settings as a config file that runs its config first."""
    config, path = plan["families"][family], plan["tuned_configs"][family]
    rel = os.path.relpath(config, os.path.dirname(path))
    lines = [f"# {family} as the tuning plan chose it: written by `python study.py --tune` from "
             f"{plan['records']}/choices.json", f"# (seed {plan['search_seed']}, {' '.join(plan['search_set'])}; "
             f"chosen by {plan['metric']}). The full budget is {os.path.basename(config)}'s own.",
             "import pathlib", "", f"exec((pathlib.Path(__file__).parent / {rel!r}).read_text())",
             f"out_dir = 'out/{config_name(path)}'"]
    for step in result["axes"]:
        score = step["scores"][step["chosen"]]
        for setting in step["settings"]:
            key, _, value = setting.partition("=")
            lines.append(f"{key} = {parse_value(value)!r}  # {step['axis']}: {plan['metric']} {score[0]:.4f}, "
                         f"val_loss {score[1]:.4f}")
    return "\n".join(lines) + "\n"


def tuned_configs(plan, results, dry_run):
    """Write each family's tuned config file (never over a different one: the runs would not be the plan's)."""
    for family, result in results.items():
        path, text = plan["tuned_configs"][family], tuned_text(plan, family, result)
        if os.path.isfile(path):
            with open(path) as f:
                if f.read() != text:
                    raise StudyError(f"{path} is not what the search chose (edited?): move it away, and it is "
                                     f"written again from {plan['records']}/choices.json")
        elif dry_run:
            print(f"would write {path}")
        else:
            with open(path, "w") as f:
                f.write(text)
            print(f"wrote {path}")


def confirm_runs(plan, family):
    """A family's tuned config at its full budget over the confirm seeds."""
    return plan_runs([plan["tuned_configs"][family]], plan["confirm_seeds"], os.path.join(plan["out_root"], "confirm"),
                     records=plan["confirm_records"])


def ablate_runs(plan, family):
    """The plan's one-factor runs from a family's tuned config, over the confirm seeds."""
    runs = {}
    for settings in plan["ablations"].get(family, []):
        runs.update(plan_runs([plan["tuned_configs"][family]], plan["confirm_seeds"],
                              os.path.join(plan["out_root"], "ablate"), grid=settings, records=plan["confirm_records"]))
    return runs


def family_runs(plan, family, dry_run):
    """One family's state: (its search result, {stage: runs}). Until its search is complete, {"search": the
    runs it waits for}; then, its tuned config written, every confirm and ablate run, finished or not. Each
    family goes on alone: its confirm runs need its own choices, not the other family's."""
    result, pending = search(plan, family)
    if not result["complete"]:
        return result, {"search": pending}
    tuned_configs(plan, {family: result}, dry_run)
    if not os.path.isfile(plan["tuned_configs"][family]):  # a dry run, which writes nothing
        return result, {}
    return result, {"confirm": confirm_runs(plan, family), "ablate": ablate_runs(plan, family)}


def plan_now(plan, dry_run):
    """Every family's state as the finished runs decide it ({family: search result}, {family: {stage: runs}});
    unless dry_run, choices.json and choices.md are written and any finished run without a record recorded."""
    found = {family: family_runs(plan, family, dry_run) for family in plan["families"]}
    results, planned = {f: r for f, (r, _) in found.items()}, {f: p for f, (_, p) in found.items()}
    if not dry_run:
        write_choices(plan, results)
        for stages in planned.values():
            record_finished(stages.get("confirm", {}))
            record_finished(stages.get("ablate", {}))
    return results, planned


def unfinished(runs):
    """The runs ({key: (argv, cfg, record)}) that have not finished."""
    return {key: run for key, run in runs.items() if finished_summary(*run[1:]) is None}


def to_train(planned, stages):
    """The unfinished runs of the `stages` asked for, in the order their slots take them: the searches' first
    (each decides what follows it), then the confirm runs, then the ablations."""
    return {key: run for stage in STAGES if stage in stages for runs in planned.values()
            for key, run in unfinished(runs.get(stage, {})).items()}


def print_state(plan, results, planned, dry_run):
    """What each stage has finished and has to train (with dry_run, the commands too)."""
    searching = {k: run for runs in planned.values() for k, run in runs.get("search", {}).items()}
    if searching:
        print(f"search: {len(searching)} runs to train next")
    for family, result in results.items():
        if dry_run and not result["complete"]:
            waiting = sum(name.startswith(family + " ") for name, _ in searching)
            print(f"  {family}: {planned_count(plan, family)} runs if no grid is extended (each extension adds "
                  f"one); {result['runs'] - waiting} finished")
    todo = dict(searching)
    for stage in STAGES[1:]:
        runs = {k: run for stages in planned.values() for k, run in stages.get(stage, {}).items()}
        if runs:
            left = unfinished(runs)
            todo.update(left)
            print(f"{stage}: {len(runs)} runs, {len(runs) - len(left)} finished, {len(left)} to train")
        for family in [f for f in plan["families"] if stage not in planned[f]]:
            count = len(plan["confirm_seeds"]) * (1 if stage == "confirm" else len(plan["ablations"].get(family, [])))
            after = "its search is complete" if not results[family]["complete"] else "its tuned config is written"
            if count:
                print(f"{stage}: {count} runs of {family} once {after}")
    if dry_run:
        for (name, seed), (argv, _, _) in todo.items():
            print(f"  {name} seed {seed}: python train.py {' '.join(argv)}")


def verdict(plan, summaries, names, title):
    """study.py's table for `names` (the first is the baseline), paired by the confirm seeds."""
    metrics = shared_metrics({k: v for k, v in summaries.items() if k[0] in names}, plan["verdict_metrics"])
    _, lines = study_table(summaries, names, plan["confirm_seeds"], metrics)
    print(f"\n{title}\n" + "\n".join(lines))


def untuned_summary(plan, family, seed):
    path = os.path.join(plan["untuned_records"], config_name(plan["families"][family]), f"seed{seed}", "summary.json")
    if not os.path.isfile(path):
        raise StudyError(f"{path} not found: the untuned record this verdict pairs with")
    with open(path) as f:
        return json.load(f)


def verdicts(plan, planned):
    """The planned verdicts whose runs have all finished, paired by seed: tuned against tuned and each tuned
    family against its untuned records (every family confirmed); each family's one-factor runs against it."""
    done = lambda runs: runs and not unfinished(runs)  # noqa: E731
    confirmed = {f: stages.get("confirm") for f, stages in planned.items()}
    summaries = {k: finished_summary(*run[1:]) for stages in planned.values() for runs in stages.values()
                 for k, run in runs.items() if done(runs)}
    tuned = {family: config_name(path) for family, path in plan["tuned_configs"].items()}
    if all(map(done, confirmed.values())):
        verdict(plan, summaries, list(tuned.values()), "verdict: tuned against tuned (difference = second - first)")
        for family, name in tuned.items():
            untuned = config_name(plan["families"][family]) + " (untuned)"
            both = {**summaries, **{(untuned, s): untuned_summary(plan, family, s) for s in plan["confirm_seeds"]}}
            verdict(plan, both, [untuned, name], f"verdict: {family} tuned against its untuned records")
    for family, stages in planned.items():
        if done(stages.get("confirm")) and done(stages.get("ablate")):
            names = [tuned[family], *dict.fromkeys(name for name, _ in stages["ablate"])]
            verdict(plan, summaries, names, f"verdict: {family}'s one-factor runs against the tuned {family}")


def tune(path, stage, jobs, dry_run, runner):
    """study.py --tune: carry out the plan at `path` (every stage, or `stage` alone), or with dry_run say what
    it would train. One queue serves every family and stage: when a run ends, the runs it decides (the next
    axis of its search; once the search is complete, the family's confirm and ablate runs) take the free
    slot. `runner` is study.py, whose run_pending trains and run_measurement measures: lab/ never imports
    study.py, which stands above it."""
    plan = {**load_plan(path), "path": path}
    stages = [stage] if stage else list(STAGES)
    results, planned = plan_now(plan, dry_run)
    print_state(plan, results, planned, dry_run)
    if dry_run:
        return
    todo = to_train(planned, stages)
    if todo:  # refill plans again each time a run ends, so the queue runs until nothing is left to train
        runner.run_pending(todo, list(todo), jobs, refill=lambda: to_train(plan_now(plan, False)[1], stages))
        results, planned = plan_now(plan, False)
    print_state(plan, results, planned, dry_run)
    verdicts(plan, planned)
    if "ablate" in stages:  # every confirm and ablate run's predictions, beside its record
        for stages_runs in planned.values():
            for (name, seed), (_, cfg, record) in {**stages_runs.get("confirm", {}),
                                                   **stages_runs.get("ablate", {})}.items():
                runner.run_measurement(cfg, record, "errors.json", ERRORS_ARGV, f"predictions of {name} seed {seed}")
