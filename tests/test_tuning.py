"""
The tuning tool (study.py --tune, lab/tuning.py) on tiny plans: the coordinate search's choices and its edge extension on
fabricated records (no training), a search trained end to end on a tiny Pig Latin transformer (one step a
run: seconds each on a quiet core), --dry_run, the confirm and ablate stages' verdicts on fabricated records,
and the one-line refusals of a bad plan.
"""

import json
import os

import pytest

import data
import study
import train
from lab import runs as lab_runs
from lab import tuning
from lab.runs import validation_score
from test_piglatin import novel_mirror, pig_data  # noqa: F401  (the fixtures: a fake novel, prepared)

TINY = ("dataset = 'piglatin'\nmodel = 'encdec'\ndevice = 'cpu'\ndtype = 'float32'\nn_layer = 1\nn_embd = 16\n"
        "n_head = 2\nffn_hidden = 16\nbatch_size = 16\nlearning_rate = 3e-3\nweight_decay = 0.01\ndropout = 0.0\n"
        "scheduler = 'cosine'\nwarmup_iters = 0\nearly_stop_patience = 0\nlog_interval = 1\n")


def write_plan(tmp_path, axes, data_dir="", families=("tiny",), **extra):
    for name in families:
        (tmp_path / f"{name}.py").write_text(f"# a tiny Pig Latin transformer\n{TINY}data_dir = {data_dir!r}\n")
    settings = dict(out_root=str(tmp_path / "out"), records=str(tmp_path / "records"),
                    confirm_records=str(tmp_path / "tuned"), metric="val_word_accuracy",
                    families={n: str(tmp_path / f"{n}.py") for n in families}, search_seed=301,
                    search_set=["max_iters=1", "eval_interval=1"], axes=axes,
                    tuned_configs={n: str(tmp_path / f"{n}_tuned.py") for n in families}, confirm_seeds=[1, 2],
                    untuned_records=str(tmp_path / "runs"), verdict_metrics=["test_word_accuracy"],
                    **{"ablations": {}, **extra})
    path = tmp_path / "plan.py"
    path.write_text("".join(f"{k} = {v!r}\n" for k, v in settings.items()))
    return str(path)


AXES = [dict(name="schedule", choices={"cosine": ["scheduler=cosine"], "constant": ["scheduler=constant"]}),
        dict(name="learning_rate", values=[1e-3, 3e-3, 1e-2], extend="times", step=3),
        dict(name="dropout", values=[0.0, 0.1, 0.2], extend="plus", step=0.1, floor=0.0),
        dict(name="weight_decay", values=[0.01, 0.1])]


def fabricate(cfg, record, acc, loss):
    """A finished run's record as train.py leaves it: its summary, and a log whose best evaluation says acc, loss."""
    os.makedirs(record)
    data.write_json(os.path.join(record, "summary.json"), {"stopped": "max_iters", "config": cfg})
    with open(os.path.join(record, "log.jsonl"), "w") as f:
        f.write(json.dumps({"type": "eval", "best": True, "val_loss": loss + 1, "val_word_accuracy": 0.0}) + "\n")
        f.write(json.dumps({"type": "eval", "best": True, "val_loss": loss, "val_word_accuracy": acc}) + "\n")
        f.write(json.dumps({"type": "eval", "best": False, "val_loss": loss + 2, "val_word_accuracy": 1.0}) + "\n")


def test_the_coordinate_search_extends_an_edge_and_carries_each_winner(tmp_path):
    """Scores made up from the settings: the rate peaks at 0.03 (past the grid's top, so the grid grows by x3 twice
    until its choice is inside), dropout is best at 0 (the floor: it stands), the schedules tie on accuracy (the
    lower loss wins), weight decay 0.1 is best; a run whose settings an earlier one had is not trained again."""
    plan = {**tuning.load_plan(write_plan(tmp_path, AXES)), "path": "plan.py"}
    trained = []
    while True:
        result, pending = tuning.search(plan, "tiny")
        if not pending:
            break
        for (name, _), (_, cfg, record) in pending.items():
            trained.append(name)
            acc = 0.9 - abs(cfg["learning_rate"] - 0.03) - cfg["dropout"] + cfg["weight_decay"]  # no schedule term
            fabricate(cfg, record, acc, loss=0.5 if cfg["scheduler"] == "constant" else 0.6)
    assert result["complete"]
    chosen = {step["axis"]: step["chosen"] for step in result["axes"]}
    assert chosen == {"schedule": "schedule=constant", "learning_rate": "learning_rate=0.03",
                      "dropout": "dropout=0.0", "weight_decay": "weight_decay=0.1"}
    lr = next(step for step in result["axes"] if step["axis"] == "learning_rate")
    assert list(lr["scores"]) == [f"learning_rate={v}" for v in (0.001, 0.003, 0.01, 0.03, 0.09)]
    assert result["settings"] == ["scheduler=constant", "learning_rate=0.03", "dropout=0.0", "weight_decay=0.1"]
    # 2 schedules, 4 new rates (0.003 is the constant schedule's run), 2 new dropouts, 1 new weight decay
    assert len(trained) == len(set(trained)) == 9 == result["runs"]
    assert "learning_rate=0.003" not in " ".join(trained)
    assert tuning.planned_count(plan, "tiny") == 2 + 2 + 2 + 1  # without the two extensions


@pytest.mark.parametrize("values, chosen, more", [
    ([1e-3, 3e-3, 1e-2], 1e-2, 0.03), ([1e-3, 3e-3, 1e-2], 1e-3, 0.000333333), ([1e-3, 3e-3, 1e-2], 3e-3, None),
    ([0.0, 0.1, 0.2], 0.2, 0.3), ([0.0, 0.1, 0.2], 0.0, None), ([0.1, 0.2, 0.3], 0.1, 0.0)])
def test_extension_at_an_edge(values, chosen, more):
    axis = dict(values=values, extend="times", step=3) if values[-1] < 0.1 else \
        dict(values=values, extend="plus", step=0.1, floor=0.0)
    assert tuning.extension(axis, values, chosen) == (more if more is None else pytest.approx(more, abs=1e-9))
    assert tuning.extension(dict(values=values), values, chosen) is None  # no `extend`: the grid stays


def test_search_trains_end_to_end_writes_its_choices_and_resumes(pig_data, tmp_path, capsys, runs_in_process):  # noqa: F811
    axes = [dict(name="schedule", choices={"cosine": ["scheduler=cosine"], "constant": ["scheduler=constant"]}),
            dict(name="weight_decay", values=[0.01, 0.1])]
    path = write_plan(tmp_path, axes, data_dir=pig_data)
    study.main(["--tune", path, "--dry_run"])
    out = capsys.readouterr().out
    assert "search: 2 runs to train next" in out and "tiny: 3 runs if no grid is extended" in out
    assert "--scheduler=constant --seed=301" in out and "confirm: 2 runs of tiny once its search is complete" in out
    assert not (tmp_path / "out").exists() and not (tmp_path / "records").exists()  # a dry run writes nothing

    study.main(["--tune", path, "--stage", "search"])
    out = capsys.readouterr().out
    assert out.count("finished tiny ") == 3 and "wrote " + str(tmp_path / "tiny_tuned.py") in out
    choices = json.load(open(tmp_path / "records" / "choices.json"))["families"]["tiny"]
    assert choices["complete"] and [s["axis"] for s in choices["axes"]] == ["schedule", "weight_decay"]
    for step in choices["axes"]:  # each choice is the best of its scores, read from its run's kept checkpoint
        best = max(step["scores"].values(), key=lambda s: (s[0], -s[1]))
        assert step["scores"][step["chosen"]] == best
    runs = [os.path.join(root, f) for root, dirs, files in os.walk(tmp_path / "records") for f in files]
    records = [r for r in runs if r.endswith("summary.json")]
    assert len(records) == 3 and not [r for r in runs if r.endswith(".pt")]
    for r in records:
        assert sorted(os.listdir(os.path.dirname(r))) == ["config.py", "log.jsonl", "summary.json"]
    table = (tmp_path / "records" / "choices.md").read_text()
    assert "**chosen**" in table and table.count("| tiny |") == 5  # 2 + 2 settings and the line that sums up
    # the tuned config trains the choice: its settings are the ones chosen, its budget the config's own
    tuned = train.make_config([str(tmp_path / "tiny_tuned.py")])
    for setting in choices["settings"]:
        key, _, value = setting.partition("=")
        assert str(tuned[key]) == value
    assert tuned["max_iters"] == 0 and tuned["eval_interval"] == 0

    study.main(["--tune", path, "--stage", "search"])  # everything is finished: nothing trains again
    out = capsys.readouterr().out
    assert "started" not in out and "confirm: 2 runs, 0 finished, 2 to train" in out
    score = validation_score(train.make_config([os.path.join(os.path.dirname(records[0]), "config.py")]),
                             os.path.dirname(records[0]), "val_word_accuracy")
    assert score is not None and 0 <= score[0] <= 1


@pytest.mark.parametrize("change, message", [
    ({"seeds": [1]}, "unknown key 'seeds'"),
    ({"families": {"tiny": "config/no_such_config.py"}}, "config config/no_such_config.py of tiny not found"),
    ({"axes": [dict(name="lr", values=[1e-3], extnd="times")]}, "unknown key 'extnd'"),
    ({"axes": [dict(name="learning_rat", values=[1e-3])]}, "unknown config key 'learning_rat'"),
])
def test_a_bad_plan_is_one_error_line(tmp_path, capsys, change, message):
    path = write_plan(tmp_path, AXES)
    text = open(path).read()
    for key, value in change.items():
        lines = [line for line in text.splitlines() if not line.startswith(f"{key} = ")]
        text = "\n".join([*lines, f"{key} = {value!r}"]) + "\n"
    open(path, "w").write(text)
    with pytest.raises(SystemExit) as e:
        study.main(["--tune", path, "--dry_run"])
    assert str(e.value).startswith("error: ") and message in str(e.value) and "\n" not in str(e.value)


def test_confirm_and_ablate_pair_their_runs_by_seed(tmp_path, capsys):
    """Fabricated records all through: the search done, the tuned config written from its choices, the confirm,
    untuned and ablate runs finished; the tool then trains nothing and prints the planned verdicts."""
    axes = [dict(name="weight_decay", values=[0.01, 0.1])]
    path = write_plan(tmp_path, axes, families=("tiny", "other"), ablations={"tiny": [["n_head=4"]]})
    plan = {**tuning.load_plan(path), "path": path}
    metrics = {"test_word_accuracy": {"label": "test word accuracy", "better": "higher"}}

    def finish(cfg, record, acc):
        fabricate(cfg, record, acc, 0.5)
        data.write_json(os.path.join(record, "summary.json"), {"stopped": "max_iters", "config": cfg,
                                                               "metrics": metrics, "test_word_accuracy": acc})

    for family in ("tiny", "other"):
        _, pending = tuning.search(plan, family)
        for (_, _), (_, cfg, record) in pending.items():
            finish(cfg, record, 0.5 + cfg["weight_decay"])
        for seed in (1, 2):  # the untuned records this plan pairs with
            os.makedirs(tmp_path / "runs" / family / f"seed{seed}")
            data.write_json(str(tmp_path / "runs" / family / f"seed{seed}" / "summary.json"),
                            {"metrics": metrics, "test_word_accuracy": 0.1 * seed})
    study.main(["--tune", path, "--dry_run"])
    out = capsys.readouterr().out
    assert "would write" in out and "ablate: 2 runs of tiny once its tuned config is written" in out
    assert "confirm: 2 runs of tiny once" in out and "confirm: 2 runs of other once" in out
    results = {family: tuning.search(plan, family)[0] for family in ("tiny", "other")}
    tuning.tuned_configs(plan, results, dry_run=False)
    assert train.make_config([plan["tuned_configs"]["tiny"]])["weight_decay"] == 0.1
    confirm = lab_runs.plan_runs(list(plan["tuned_configs"].values()), [1, 2], str(tmp_path / "out" / "confirm"),
                                 records=plan["confirm_records"])
    ablate = lab_runs.plan_runs([plan["tuned_configs"]["tiny"]], [1, 2], str(tmp_path / "out" / "ablate"),
                                grid=["n_head=4"], records=plan["confirm_records"])
    for (name, seed), (_, cfg, record) in {**confirm, **ablate}.items():
        finish(cfg, record, 0.6 + 0.01 * seed + 0.1 * ("other" in name) + 0.2 * ("@" in name))
    study.main(["--tune", path])
    out = capsys.readouterr().out
    assert "started" not in out and "confirm: 4 runs, 4 finished, 0 to train" in out
    assert "verdict: tuned against tuned" in out and "verdict: tiny tuned against its untuned records" in out
    assert "verdict: tiny's one-factor runs against the tuned tiny" in out
    paired = next(line for line in out.splitlines() if "tiny_tuned@n_head=4" in line and " t [" in line)
    assert "+0.2000  t [+0.2000, +0.2000]" in paired and paired.endswith("better")  # the same +0.2 on each seed


def test_a_family_whose_search_is_complete_goes_on_while_the_other_still_searches(tmp_path, capsys):
    """One queue for every family and stage: `fast` has finished its search, `slow` has not; the runs to
    train next are slow's search runs first, then fast's confirm runs, then fast's ablations, none waiting
    for the other family; and the tuned config of `fast` alone is written."""
    axes = [dict(name="weight_decay", values=[0.01, 0.1])]
    path = write_plan(tmp_path, axes, families=("fast", "slow"), ablations={"fast": [["n_head=4"]]})
    plan = {**tuning.load_plan(path), "path": path}
    _, pending = tuning.search(plan, "fast")
    for _, cfg, record in pending.values():
        fabricate(cfg, record, 0.5 + cfg["weight_decay"], 0.5)
    _, planned = tuning.plan_now(plan, dry_run=False)
    assert os.path.isfile(plan["tuned_configs"]["fast"]) and not os.path.exists(plan["tuned_configs"]["slow"])
    todo = list(tuning.to_train(planned, tuning.STAGES))
    assert todo == [("slow weight_decay=0.01", 301), ("slow weight_decay=0.1", 301), ("fast_tuned", 1),
                    ("fast_tuned", 2), ("fast_tuned@n_head=4", 1), ("fast_tuned@n_head=4", 2)]
    assert list(tuning.to_train(planned, ["search"])) == todo[:2]
    assert list(tuning.to_train(planned, ["ablate"])) == todo[4:]
    tuning.print_state(plan, *tuning.plan_now(plan, dry_run=True), dry_run=True)
    out = capsys.readouterr().out
    assert "search: 2 runs to train next" in out and "confirm: 2 runs, 0 finished, 2 to train" in out
    assert "confirm: 2 runs of slow once its search is complete" in out and "ablate: 2 runs, 0 finished" in out
