"""
train.py driven on tiny data: the whole run, resume (bit-identical), early stopping, batching,
gradient accumulation, the optimizer's groups, and the command line. Models are 1-2 layers of width
16; each run takes about a second.
"""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch

import configurator
import data
import evaluate
import model
import train
from bookkeeping import checkpoints, checks, flops, records, timing
from conftest import REPO_ROOT
from hardware import devices


def run(cfg):
    summary = train.train(cfg)
    return summary, torch.load(os.path.join(cfg["out_dir"], "last.pt"), weights_only=True)


def assert_same_state(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"{k} differs"


def strict_json(constant):
    raise ValueError(f"{constant} is not JSON")  # Python writes and reads it; other JSON readers refuse it


def read_log(cfg):
    """The run's log.jsonl, each line read as strict JSON (no Infinity or NaN)."""
    with open(os.path.join(cfg["out_dir"], "log.jsonl")) as f:
        return [json.loads(line, parse_constant=strict_json) for line in f]


# -----------------------------------------------------------------------------
# the whole run


def test_train_end_to_end(tiny_cfg, capsys):
    cfg = tiny_cfg(max_epochs=2, eval_interval=3)
    summary = train.train(cfg)
    for name in ("ckpt.pt", "last.pt", "log.jsonl"):
        assert os.path.isfile(os.path.join(cfg["out_dir"], name)), name
    records = read_log(cfg)
    kinds = [r["type"] for r in records]
    assert "train" in kinds and "eval" in kinds and kinds[-1] == "summary"
    assert all(np.isfinite(r["loss"]) for r in records if r["type"] == "train")
    evals = [r for r in records if r["type"] == "eval"]
    assert [r["iter"] for r in evals] == [3, 6, 9, 12, 15, 16]  # every 3 iterations, and the run's end
    assert summary["iters"] == 16 and summary["epochs"] == 2 and summary["stopped"] == "max_epochs"
    assert summary["best_val_loss"] == min(r["val_loss"] for r in evals)
    assert "best checkpoint" in capsys.readouterr().out
    assert summary["final_val_loss"] == evals[-1]["val_loss"] and summary["final_eval_iter"] == 16

    best, ckpt = checkpoints.load_checkpoint(os.path.join(cfg["out_dir"], "ckpt.pt"))
    assert ckpt["config"] == cfg and ckpt["best_val_loss"] == summary["best_val_loss"]
    assert ckpt["data"]["vocab"] == data.load_meta(cfg["data_dir"])["vocab"]
    assert best.cfg.n_embd == 16 and best.cfg.n_loops == 2  # built from the run's settings
    last = torch.load(os.path.join(cfg["out_dir"], "last.pt"), weights_only=True)
    assert last["iter_num"] == 16 and last["epoch"] == 2 and "optimizer" in last and "rng_cpu" in last

    # the test figures are the best checkpoint's, scored here one example at a time, unbatched
    test = data.ClassificationSplit(cfg["data_dir"], "test")
    with torch.no_grad():
        preds = [best(torch.from_numpy(test[i][0])[None])[0].argmax().item() for i in range(len(test))]
    assert summary["test_accuracy"] == pytest.approx(np.mean(np.array(preds) == test.labels))
    assert summary["test_n"] == len(test) == 8
    assert summary["test_predictions"] == preds  # per example, in split order (study.py's McNemar test)
    assert summary["metrics"]["test_accuracy"] == {"label": "test accuracy (best checkpoint)", "better": "higher"}
    assert summary["metrics"]["final_val_loss"]["better"] == "lower"
    stored = json.loads(open(os.path.join(cfg["out_dir"], "summary.json")).read())
    assert stored["config"] == cfg and stored["test_accuracy"] == summary["test_accuracy"]


def test_train_stops_at_max_iters(tiny_cfg):
    summary, last = run(tiny_cfg(max_iters=5))
    assert summary["stopped"] == "max_iters" and summary["iters"] == 5 and last["iter_num"] == 5


def test_training_lowers_the_loss(tiny_cfg):
    """Four epochs on 64 examples must fit the training set better than the untrained model does."""
    cfg = tiny_cfg(max_epochs=4, learning_rate=1e-2, n_embd=32, n_head=2, ffn_hidden=64)
    run(cfg)
    dataset = data.load_dataset(cfg)
    trained, _ = checkpoints.load_checkpoint(os.path.join(cfg["out_dir"], "last.pt"))
    torch.manual_seed(0)
    fresh = train.new_model(cfg, dataset)
    loss_trained = evaluate.evaluate_classification(trained, dataset.splits["train"], "cpu", torch.no_grad())["loss"]
    loss_fresh = evaluate.evaluate_classification(fresh, dataset.splits["train"], "cpu", torch.no_grad())["loss"]
    assert loss_trained < 0.8 * loss_fresh


# -----------------------------------------------------------------------------
# resume


def resume_pair(tiny_cfg, tmp_path, stop_after, n_iters, half, **settings):
    """Run n_iters steps in one go, and the same run stopped after half steps + --init_from=resume; return
    both results."""
    cfg_one = tiny_cfg(out_dir=str(tmp_path / "one"), max_iters=n_iters, **settings)
    cfg_two = tiny_cfg(out_dir=str(tmp_path / "two"), max_iters=n_iters, **settings)
    one, last_one = run(cfg_one)
    stop_after(half)
    stopped, last_half = run(cfg_two)
    assert stopped["stopped"] == "interrupted" and last_half["iter_num"] == half
    if not any(r["type"] == "eval" for r in read_log(cfg_two)):  # stopped before its first evaluation
        assert [r["best_val_loss"] for r in read_log(cfg_two) if r["type"] == "summary"] == [None]
    two, last_two = run({**cfg_two, "init_from": "resume"})
    # a resumed run's minutes are the whole run's: the time before the stop (kept in last.pt) and after it
    assert 0 < last_half["train_seconds"] <= two["train_minutes"] * 60 and last_two["train_seconds"] >= \
        last_half["train_seconds"]
    evals = [[(r["iter"], r["val_loss"], r["lr"]) for r in read_log(c) if r["type"] == "eval"]
             for c in (cfg_one, cfg_two)]
    return (one, last_one, evals[0]), (two, last_two, evals[1])


def test_resume_equals_one_run(tiny_cfg, tmp_path, stop_after):
    """8 steps in one go == 4 steps, stop, resume to 8 (inside one epoch). The validation labels are
    the opposite of the training labels, so validation loss rises as the model learns: the plateau scheduler
    halves the lr at every evaluation after the first and the early-stopping counter counts up. A
    resume that lost the optimizer, scheduler or counter state would end differently."""
    folder = make_micro_dataset(tmp_path / "opposite", n_train=32, opposite_val=True)
    (one, last_one, evals_one), (two, last_two, evals_two) = resume_pair(
        tiny_cfg, tmp_path, stop_after, 8, 4, data_dir=folder, batch_size=4, max_epochs=1, eval_interval=2,
        scheduler="plateau", plateau_patience=0, plateau_factor=0.5, early_stop_patience=10,
        learning_rate=1e-2, dropout=0.0)
    assert last_one["iter_num"] == last_two["iter_num"] == 8
    assert_same_state(last_one["model"], last_two["model"])
    assert last_one["bad_evals"] == last_two["bad_evals"] == 3  # evaluations at 2 (best), 4, 6, 8
    assert last_one["optimizer"]["param_groups"][0]["lr"] == last_two["optimizer"]["param_groups"][0]["lr"]
    assert one["best_val_loss"] == two["best_val_loss"] and one["test_accuracy"] == two["test_accuracy"]
    assert evals_one == evals_two  # the resumed run appends to the same log: same evaluations, same lr
    lrs = [lr for _, _, lr in evals_one]
    assert lrs[2] < lrs[1]  # the plateau state mattered after the resume point (iteration 6)


def test_resume_across_an_epoch_boundary_equals_one_run(tiny_cfg, tmp_path, stop_after):
    """Stop exactly at the end of epoch 1 (4 steps of 8), resume, finish epoch 2."""
    folder = make_micro_dataset(tmp_path / "micro", n_train=32)
    (_, last_one, _), (_, last_two, _) = resume_pair(
        tiny_cfg, tmp_path, stop_after, 8, 4, data_dir=folder, batch_size=8, max_epochs=2, scheduler="constant",
        early_stop_patience=0, learning_rate=1e-2, dropout=0.0)
    assert last_one["iter_num"] == last_two["iter_num"] == 8 and last_one["epoch"] == last_two["epoch"] == 2
    assert_same_state(last_one["model"], last_two["model"])


def test_resume_with_the_manual_adamw_equals_one_run(tiny_cfg, tmp_path, stop_after):
    """The written-out AdamW's state goes into last.pt and comes back (step counts and moments)."""
    (_, last_one, _), (_, last_two, _) = resume_pair(tiny_cfg, tmp_path, stop_after, 6, 3, adamw_impl="manual",
                                                     scheduler="constant", early_stop_patience=0, learning_rate=1e-2)
    assert last_two["optimizer"]["state"][0]["step"] == 6
    assert_same_state(last_one["model"], last_two["model"])


def test_each_epoch_uses_its_own_batches(tiny_cfg, tmp_path, monkeypatch):
    """The training loop's batches are exactly epoch_batches(seed, epoch) for epoch 0, 1, 2 in turn."""
    folder = make_micro_dataset(tmp_path / "micro", n_train=12)
    cfg = tiny_cfg(data_dir=folder, batch_size=4, max_epochs=3, bucket=False, early_stop_patience=0)
    splits = {k: data.ClassificationSplit(folder, k) for k in ("train", "val", "test")}
    key = lambda ids: tuple(int(t) for t in ids)  # noqa: E731
    train_seqs = {key(splits["train"][i][0]) for i in range(12)}
    assert not train_seqs & {key(s[i][0]) for s in (splits["val"], splits["test"]) for i in range(len(s))}
    seen, real_collate = [], data.collate

    def spy(items, device):
        batch = [key(ids) for ids, _ in items]
        if set(batch) <= train_seqs:  # a training batch, not an evaluation one
            seen.append(batch)
        return real_collate(items, device)

    monkeypatch.setattr(data, "collate", spy)
    train.train(cfg)
    expected = [[key(splits["train"][j][0]) for j in b]
                for epoch in range(3) for b in data.epoch_batches(splits["train"], 4, cfg["seed"], epoch, False)]
    assert len(seen) == len(expected) == 9
    assert seen == expected


def test_resume_after_interrupt_is_bit_identical(tiny_cfg, tmp_path, monkeypatch):
    """A Ctrl-C in the middle of a cosine schedule with dropout on, then --init_from=resume, ends with
    exactly the weights of the uninterrupted run (same batches, same lr, same dropout masks)."""
    common = dict(max_iters=10, eval_interval=3, scheduler="cosine", warmup_iters=3, min_lr=1e-4,
                  learning_rate=1e-2, dropout=0.1, early_stop_patience=0)
    _, last_full = run(tiny_cfg(out_dir=str(tmp_path / "full"), **common))

    real_lr = train.scheduled_lr

    def lr_then_interrupt(cfg, it, total_iters):
        if it == 4:  # the first Ctrl-C: train's handler asks the loop to stop after this step
            signal.getsignal(signal.SIGINT)(signal.SIGINT, None)
        return real_lr(cfg, it, total_iters)

    monkeypatch.setattr(train, "scheduled_lr", lr_then_interrupt)
    cut = tiny_cfg(out_dir=str(tmp_path / "cut"), **common)
    summary, last_cut = run(cut)
    assert summary["stopped"] == "interrupted" and last_cut["iter_num"] == 5
    assert signal.getsignal(signal.SIGINT) is not None and not isinstance(signal.getsignal(signal.SIGINT),
                                                                          records.StopRequest)
    monkeypatch.setattr(train, "scheduled_lr", real_lr)
    _, last_resumed = run({**cut, "init_from": "resume"})
    assert last_resumed["iter_num"] == 10
    assert_same_state(last_full["model"], last_resumed["model"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_resume_on_cuda(tiny_cfg):
    cfg = tiny_cfg(device="cuda", max_iters=4)
    run({**cfg, "max_iters": 2})
    _, last = run({**cfg, "init_from": "resume"})
    assert last["iter_num"] == 4


def test_resume_refuses_another_vocabulary(tiny_cfg, tmp_path):
    cfg = tiny_cfg(max_iters=1)
    run(cfg)
    other = make_micro_dataset(tmp_path / "micro", n_train=8)
    with pytest.raises(data.DataError, match="vocabulary"):
        train.train({**cfg, "init_from": "resume", "data_dir": other})


def test_resume_refuses_a_version_1_checkpoint_and_other_settings(tiny_cfg):
    """A last.pt from before the run state changed (version 1) is refused with its version named; so is
    resuming with settings other than the checkpoint's, model settings or not (a longer max_iters makes
    another run: under a cosine schedule its learning rates differ from the first step), each named."""
    cfg = tiny_cfg(max_iters=2)
    _, last = run(cfg)
    path = os.path.join(cfg["out_dir"], "last.pt")
    with pytest.raises(configurator.ConfigError, match=r"other settings \(n_embd 16 -> 32\)"):
        train.train({**cfg, "init_from": "resume", "n_embd": 32})
    with pytest.raises(configurator.ConfigError, match=r"other settings \(learning_rate 0.003 -> 0.01, "
                                                       r"max_iters 2 -> 4\).*only attn_impl, norm_impl"):
        train.train({**cfg, "init_from": "resume", "max_iters": 4, "learning_rate": 1e-2})
    torch.save({**last, "version": 1, "kind": "encoder_classifier"}, path)
    with pytest.raises(checkpoints.CheckpointError, match="version 1; resuming needs version 2"):
        train.train({**cfg, "init_from": "resume"})


def test_resume_under_another_implementation_says_so(tiny_cfg, stop_after, capsys):
    """Settings that only pick how the same function is computed may change on resume (a run stopped on the
    written-out norms continues on the fused ones); the resume prints them and its start record keeps them.
    Settings that change nothing computed (log_interval) are not compared at all."""
    cfg = tiny_cfg(max_iters=4, norm_impl="manual", early_stop_patience=0)
    stop_after(2)
    assert run(cfg)[0]["stopped"] == "interrupted"
    summary, last = run({**cfg, "init_from": "resume", "norm_impl": "torch", "log_interval": 1})
    assert summary["stopped"] == "max_iters" and last["iter_num"] == 4
    assert "resuming under other implementation settings: norm_impl 'manual' -> 'torch'" in capsys.readouterr().out
    starts = [r for r in read_log(cfg) if r["type"] == "start"]
    assert [r.get("implementation_changed") for r in starts] == [None, {"norm_impl": ["manual", "torch"]}]


def test_same_run_is_one_definition():
    """records.same_run, which train.py's resume and study.py use: implementation and bookkeeping settings do
    not make another run; anything else does; a setting added to train.py after a run counts as its default;
    'resume' matches however the run started."""
    base, defaults = train.make_config([]), train.DEFAULTS
    assert records.same_run(base, {**base, "norm_impl": "manual", "compile": True, "log_interval": 7}, defaults)
    assert records.run_differences(base, {**base, "norm_impl": "manual", "seed": 2}, defaults) == (["norm_impl"],
                                                                                                    ["seed"])
    assert not records.same_run(base, {**base, "max_iters": 5}, defaults)
    older = {k: v for k, v in base.items() if k != "eval_windows"}  # a run from before the setting existed
    assert records.same_run(older, base, defaults)
    assert not records.same_run(older, {**base, "eval_windows": 3}, defaults)
    assert records.same_run({**base, "init_from": "stories260K"}, {**base, "init_from": "resume"}, defaults)
    assert not records.same_run({**base, "init_from": "stories260K"}, base, defaults)
    assert not records.same_run(base, {**base, "mystery": 1}, defaults)  # a key nobody knows differs


def test_a_model_field_since_removed_reads_at_the_value_every_run_had(tiny_cfg):
    """checkpoints.RETIRED_FIELDS (the encoder's n_segments): a checkpoint or a run config that holds one at the
    value every run had reads as if it had none; at another value, the checkpoint is refused and the run differs."""
    cfg = tiny_cfg(max_iters=2)
    run(cfg)
    path = os.path.join(cfg["out_dir"], "ckpt.pt")
    ckpt = torch.load(path, weights_only=True)
    for value in (0, 2):
        ckpt["model_args"]["n_segments"] = value
        torch.save(ckpt, path)
        if value == 0:
            assert checkpoints.load_checkpoint(path)[0].cfg == model.EncoderConfig(**{
                k: v for k, v in ckpt["model_args"].items() if k != "n_segments"})
        else:
            with pytest.raises(checkpoints.CheckpointError, match="uses n_segments=2, which this code no longer has"):
                checkpoints.load_checkpoint(path)
    assert records.same_run({**cfg, "n_segments": 0}, cfg, train.DEFAULTS)
    assert not records.same_run({**cfg, "n_segments": 2}, cfg, train.DEFAULTS)


@pytest.mark.parametrize("left", ["ckpt.pt", "last.pt", "summary.json"])
def test_a_run_never_replaces_another_unless_asked(tiny_cfg, tmp_path, left):
    """A second run into an out_dir that holds a run (a checkpoint or a summary) is refused before any data
    is read, with the ways on named, and leaves every file as it was; --overwrite=True replaces the run."""
    cfg = tiny_cfg(max_iters=2)
    run(cfg)
    for name in {"ckpt.pt", "last.pt", "summary.json"} - {left}:
        os.remove(os.path.join(cfg["out_dir"], name))
    before = {f: open(os.path.join(cfg["out_dir"], f), "rb").read() for f in os.listdir(cfg["out_dir"])}
    again = {**cfg, "seed": 2, "data_dir": str(tmp_path / "no such data")}  # data would be read after the check
    with pytest.raises(configurator.ConfigError, match=rf"already holds a run \({left}\): continue it with "
                                                       r"--init_from=resume, replace it with --overwrite=True"):
        train.train(again)
    assert {f: open(os.path.join(cfg["out_dir"], f), "rb").read() for f in os.listdir(cfg["out_dir"])} == before
    summary, last = run({**cfg, "seed": 2, "overwrite": True})
    assert last["config"]["seed"] == 2 and summary["iters"] == 2
    assert [r["type"] for r in read_log(cfg)][0] == "start" and len([r for r in read_log(cfg)
                                                                     if r["type"] == "start"]) == 1


def test_a_run_going_on_in_an_out_dir_keeps_a_second_one_out(tiny_cfg, tmp_path):
    """While one process writes a run (it holds out_dir/train.lock), a second train.py there stops at once, even
    with --init_from=resume or --overwrite=True, and touches no file; once the first lets go, the folder is
    free again (the lock goes with its holder: nothing stale is left)."""
    cfg = tiny_cfg(max_iters=2)
    run(cfg)
    lock = os.path.join(cfg["out_dir"], records.LOCK_FILE)
    assert not os.path.exists(lock)  # a run that ended leaves only its own files

    def files():
        return {f: open(os.path.join(cfg["out_dir"], f), "rb").read() for f in os.listdir(cfg["out_dir"])
                if f != records.LOCK_FILE}

    before = files()
    with records.out_dir_lock({**cfg, "overwrite": True}):  # a run going on, as another process would hold it
        assert records.out_dir_busy(cfg["out_dir"]) == str(os.getpid())
        for other in ({"init_from": "resume"}, {"overwrite": True, "seed": 2}):
            with pytest.raises(configurator.UserError, match=rf"{re.escape(cfg['out_dir'])} is being written by "
                                                             rf"another run \(process {os.getpid()}\): wait"):
                train.train({**cfg, **other})
        assert files() == before and open(lock).read() == str(os.getpid())
    assert records.out_dir_busy(cfg["out_dir"]) is None and not os.path.exists(lock)
    with open(lock, "w") as f:
        f.write("99999")  # a killed run's file, which nobody holds
    assert records.out_dir_busy(cfg["out_dir"]) is None
    summary, _ = run({**cfg, "seed": 2, "overwrite": True})
    assert summary["iters"] == 2 and not os.path.exists(lock)


def test_the_lock_is_taken_on_the_file_that_is_there(tmp_path, monkeypatch):
    """A run that ends removes train.lock while holding it: whoever took the lock on that file meanwhile
    opens the one now there and locks that, so two runs never hold locks on two different files."""
    cfg = {"out_dir": str(tmp_path / "run"), "init_from": "scratch", "overwrite": False}
    path = os.path.join(cfg["out_dir"], records.LOCK_FILE)
    real, calls = records.try_lock, []

    def ending_run_removes_it(f):  # the first lock is taken just as the ending run removes the file
        calls.append(f.fileno())
        if len(calls) == 1:
            os.remove(path)
        return real(f)

    monkeypatch.setattr(records, "try_lock", ending_run_removes_it)
    with records.out_dir_lock(cfg):
        assert len(calls) == 2 and os.path.isfile(path)
        monkeypatch.setattr(records, "try_lock", real)
        assert records.out_dir_busy(cfg["out_dir"]) == str(os.getpid())
    assert not os.path.exists(path)


def test_the_command_line_refuses_a_second_run_in_one_line(tmp_path):
    folder = make_micro_dataset(tmp_path / "micro", n_train=8)
    argv = [f"--data_dir={folder}", f"--out_dir={tmp_path / 'x'}", "--device=cpu", "--max_iters=1", "--n_layer=1",
            "--n_embd=16", "--n_head=2", "--batch_size=4"]
    train.main(argv)
    with pytest.raises(SystemExit, match=r"^error: .*x already holds a run \(ckpt.pt, last.pt, summary.json\)"):
        train.main([*argv, "--seed=2"])


def test_resume_without_checkpoint_is_a_clean_error(tmp_path):
    folder = make_micro_dataset(tmp_path / "micro", n_train=8)
    with pytest.raises(SystemExit, match="no checkpoint"):
        train.main([f"--data_dir={folder}", f"--out_dir={tmp_path / 'empty'}", "--device=cpu", "--init_from=resume"])


# -----------------------------------------------------------------------------
# early stopping


def test_early_stopping(tiny_cfg):
    # lr 0: the validation loss never improves after the first evaluation
    cfg = tiny_cfg(learning_rate=0.0, eval_interval=1, early_stop_patience=2, max_epochs=5)
    summary, last = run(cfg)
    assert summary["stopped"].startswith("early"), summary["stopped"]
    assert summary["iters"] == 3 and last["bad_evals"] == 2  # best at 1, then two without improvement
    assert len([r for r in read_log(cfg) if r["type"] == "eval"]) == 3
    assert "test_accuracy" in summary  # the best checkpoint is still evaluated


def test_a_run_killed_after_it_stopped_early_resumes_to_its_end_not_further(tiny_cfg):
    """Early stopping decided at an evaluation, whose last.pt is saved, and the process killed before the
    summary (a SIGTERM while the test split is scored): the resume ends the run where it stopped."""
    cfg = tiny_cfg(learning_rate=0.0, eval_interval=1, early_stop_patience=2, max_epochs=5)
    summary, _ = run(cfg)
    os.remove(os.path.join(cfg["out_dir"], "summary.json"))
    resumed = train.train({**cfg, "init_from": "resume"})
    assert resumed["iters"] == summary["iters"] == 3 and resumed["stopped"] == summary["stopped"]
    assert resumed["test_accuracy"] == summary["test_accuracy"]
    assert len([r for r in read_log(cfg) if r["type"] == "eval"]) == 3  # no evaluation after the resume
    assert os.path.exists(os.path.join(cfg["out_dir"], "summary.json"))


def test_a_run_killed_after_an_evaluation_resumes_and_goes_on(tiny_cfg, capsys):
    """last.pt saved at an evaluation that did not stop the run, and the process killed hard after it (no
    SIGTERM, so no save of its own): the resume trains on to the run's end."""
    cfg = tiny_cfg(learning_rate=0.0, eval_interval=1, early_stop_patience=0, max_iters=4)
    run(cfg)
    ckpt = torch.load(os.path.join(cfg["out_dir"], "last.pt"), weights_only=True)
    ckpt.update(iter_num=2, stopped="")  # as the evaluation at iter 2 saved it (weights aside)
    torch.save(ckpt, os.path.join(cfg["out_dir"], "last.pt"))
    os.remove(os.path.join(cfg["out_dir"], "summary.json"))
    capsys.readouterr()
    resumed = train.train({**cfg, "init_from": "resume"})
    assert resumed["iters"] == 4 and resumed["stopped"] == "max_iters"
    assert "had stopped" not in capsys.readouterr().out


def test_no_early_stop_when_off(tiny_cfg):
    summary, _ = run(tiny_cfg(learning_rate=0.0, eval_interval=1, early_stop_patience=0, max_iters=5))
    assert summary["iters"] == 5 and summary["stopped"] == "max_iters"


def test_the_kept_checkpoint_is_the_best_of_the_select_on_figure(tiny_cfg, tmp_path):
    """One training (a constant rate, no early stopping: select_on changes nothing else) kept by each rule:
    ckpt.pt is the evaluation of lowest loss, or of highest accuracy (the first of equals), and the log marks
    each evaluation that improved on all before it as `best`. On this data the two rules keep different
    checkpoints, so the test tells them apart."""
    kept = {}
    for select_on, sign in (("loss", -1), ("accuracy", 1)):
        cfg = tiny_cfg(eval_interval=1, max_iters=12, early_stop_patience=0, learning_rate=1e-2, select_on=select_on,
                       out_dir=str(tmp_path / select_on))
        summary, _ = run(cfg)
        evals = [r for r in read_log(cfg) if r["type"] == "eval"]
        values = [sign * r[f"val_{select_on}"] for r in evals]
        assert [r["best"] for r in evals] == [i == 0 or v > max(values[:i]) for i, v in enumerate(values)]
        best = values.index(max(values))
        ckpt = torch.load(os.path.join(cfg["out_dir"], "ckpt.pt"), weights_only=True)
        assert ckpt["iter_num"] == evals[best]["iter"] and ckpt["best_val"] == sign * values[best]
        assert summary["best_val_loss"] == min(r["val_loss"] for r in evals)  # the lowest loss, whatever selects
        kept[select_on] = ckpt["iter_num"]
    assert kept["loss"] != kept["accuracy"], kept


def test_early_stopping_and_the_plateau_schedule_watch_the_select_on_figure(tiny_cfg, tmp_path):
    """Validation holds the training sequences with the opposite label: the loss rises with every step, and the
    accuracy, 0 from the first evaluation, never gains. Both rules stop the run after the same evaluations; the
    plateau schedule watches the figure in its direction ('max' for accuracy) and halves the rate at each."""
    folder = make_micro_dataset(tmp_path / "micro", 8, opposite_val=True)
    cfg = tiny_cfg(data_dir=folder, eval_interval=1, max_iters=20, early_stop_patience=3, select_on="accuracy",
                   scheduler="plateau", plateau_patience=0, batch_size=8, max_epochs=30)
    summary, last = run(cfg)
    evals = [r for r in read_log(cfg) if r["type"] == "eval"]
    assert [r["val_accuracy"] for r in evals] == [0.0] * 4 and evals[-1]["val_loss"] > evals[0]["val_loss"]
    assert summary["stopped"].startswith("early") and summary["iters"] == 4
    assert last["plateau"]["mode"] == "max" and last["best_val"] == 0.0
    assert [r["lr"] for r in evals] == [cfg["learning_rate"] * 0.5 ** k for k in range(4)]


def test_select_on_must_be_a_figure_with_a_better_side(tiny_cfg):
    for bad in ("ppl", "emb_norm", "acc"):
        with pytest.raises(configurator.ConfigError, match=r"select_on=.*scored by loss, accuracy, f1"):
            train.train(tiny_cfg(select_on=bad, max_iters=2))


def test_a_checkpoint_from_before_select_on_resumes_with_its_loss_as_the_best(tiny_cfg):
    cfg = tiny_cfg(eval_interval=1, max_iters=3)
    run(cfg)
    ckpt = torch.load(os.path.join(cfg["out_dir"], "last.pt"), weights_only=True)
    del ckpt["best_val"]
    os.replace(os.path.join(cfg["out_dir"], "summary.json"), os.path.join(cfg["out_dir"], "summary.old"))
    torch.save(ckpt, os.path.join(cfg["out_dir"], "last.pt"))
    _, state, _, _ = train.resumed({**cfg, "init_from": "resume"}, data.load_dataset(cfg), "cpu",
                                   records.RunFiles(cfg["out_dir"], writer=False))
    assert state.best_val == ckpt["best_val_loss"]


# -----------------------------------------------------------------------------
# batching


class FakeSplit:
    def __init__(self, lengths):
        self.lengths = np.asarray(lengths)

    def __len__(self):
        return len(self.lengths)


@pytest.fixture(scope="module")
def fake_split():
    return FakeSplit(np.random.default_rng(0).integers(2, 60, size=1003))


def padding(split, batches):
    return sum(int(split.lengths[b].max() * len(b) - split.lengths[b].sum()) for b in batches)


@pytest.mark.parametrize("bucket", [True, False])
def test_epoch_batches_cover_every_index_once(fake_split, bucket):
    batches = data.epoch_batches(fake_split, 8, seed=1, epoch=0, bucket=bucket)
    flat = np.concatenate(batches)
    assert np.array_equal(np.sort(flat), np.arange(len(fake_split)))
    assert all(1 <= len(b) <= 8 for b in batches) and len(batches) == -(-1003 // 8)
    again = data.epoch_batches(fake_split, 8, seed=1, epoch=0, bucket=bucket)
    assert all(np.array_equal(a, b) for a, b in zip(batches, again))  # a pure function of (seed, epoch)
    for seed, epoch in [(1, 1), (2, 0)]:
        other = data.epoch_batches(fake_split, 8, seed=seed, epoch=epoch, bucket=bucket)
        assert not np.array_equal(np.concatenate(other), flat)


def test_bucketing_reduces_padding(fake_split):
    bucketed = data.epoch_batches(fake_split, 8, seed=1, epoch=0, bucket=True)
    shuffled = data.epoch_batches(fake_split, 8, seed=1, epoch=0, bucket=False)
    assert padding(fake_split, bucketed) < 0.25 * padding(fake_split, shuffled)
    # the batches themselves are still shuffled: not sorted by length across the epoch
    maxima = [fake_split.lengths[b].max() for b in bucketed]
    assert maxima != sorted(maxima) and maxima != sorted(maxima, reverse=True)


def test_a_batch_without_padding_has_no_key_mask():
    """A micro-batch of one length goes without a key mask (data.mask_if_padded), so attention runs unmasked
    (SDPA's flash kernel on a GPU); a padded one keeps its mask. The token count is the same either way, and
    the model's logits for the unpadded batch are those it gives with an all-True mask."""
    from model import EncoderClassifier, EncoderConfig
    same = [(np.array([2, 5, 6]), 1), (np.array([2, 7, 8]), 0)]
    mixed = same + [(np.array([2, 9]), 1)]

    class Items(list):
        lengths = property(lambda self: np.array([len(ids) for ids, _ in self]))

    stream = data.ClassificationStream(Items(mixed), 2, 1, seed=0)
    inputs, n, tokens = stream.micro_batch(same, "cpu", (0, 0, 0))
    assert "key_mask" not in inputs and (n, tokens) == (2, 6)
    inputs_mixed, n, tokens = stream.micro_batch(mixed, "cpu", (0, 0, 0))
    assert inputs_mixed["key_mask"].tolist() == [[True] * 3, [True] * 3, [True, True, False]] and tokens == 8
    torch.manual_seed(0)
    model = EncoderClassifier(EncoderConfig(vocab_size=12, block_size=8, n_layer=1, n_embd=16, n_head=2,
                                            dropout=0.0)).eval()
    unmasked, _ = model(inputs["idx"])
    masked, _ = model(inputs["idx"], torch.ones_like(inputs["idx"], dtype=torch.bool))
    torch.testing.assert_close(unmasked, masked, atol=1e-6, rtol=1e-6)


def test_collate_pads_with_pad_and_masks_real_tokens():
    items = [(np.array([2, 5, 6]), 1), (np.array([2, 7]), 0), (np.array([2, 8, 9, 10, 11]), 1)]
    idx, mask, labels = data.collate(items, "cpu")
    assert idx.dtype == torch.long and idx.shape == (3, 5)
    assert idx.tolist() == [[2, 5, 6, 0, 0], [2, 7, 0, 0, 0], [2, 8, 9, 10, 11]]
    assert mask.dtype == torch.bool and mask.sum(1).tolist() == [3, 2, 5]
    assert torch.equal(mask, idx != data.PAD)
    assert labels.tolist() == [1, 0, 1]


# -----------------------------------------------------------------------------
# optimizer, schedule, gradient accumulation


def test_optimizer_groups():
    cfg = {**train.DEFAULTS, "weight_decay": 0.1, "learning_rate": 2e-3, "beta1": 0.8, "beta2": 0.9}
    mcfg = model.EncoderConfig(vocab_size=30, block_size=16, n_layer=2, n_embd=16, n_head=2, norm="layer",
                               bias=True, pos="learned", emb_norm="layer", ffn="swiglu")
    m = model.EncoderClassifier(mcfg)
    opt = train.make_optimizer(m, cfg, "cpu")
    decay_group, no_decay_group = opt.param_groups
    assert decay_group["weight_decay"] == 0.1 and no_decay_group["weight_decay"] == 0.0
    assert opt.defaults["lr"] == 2e-3 and opt.defaults["betas"] == (0.8, 0.9)
    names = {id(p): n for n, p in m.named_parameters()}
    decay = {names[id(p)] for p in decay_group["params"]}
    no_decay = {names[id(p)] for p in no_decay_group["params"]}
    linear_weights = {f"{n}.weight" for n, mod in m.named_modules() if isinstance(mod, torch.nn.Linear)}
    assert decay == linear_weights  # wq, wk, wv, wo, w1, w2, w3 of each layer, and the head
    assert len(decay) == 2 * 7 + 1
    assert no_decay == set(names.values()) - linear_weights
    assert {"tok_emb.weight", "pos_emb.weight", "emb_norm.weight", "emb_norm.bias",
            "norm_f.weight", "head.bias", "layers.0.attn.wq.bias", "layers.1.norm2.bias"} <= no_decay


def test_optimizer_skips_frozen_parameters_and_decays_what_the_model_allows():
    """Freeze every Block (as LoRA freezes the base model) and let the model exempt one extra matrix
    from decay (as Mamba exempts A_log): AdamW gets only trainable parameters, and decays exactly
    the trainable ones the model does not name. One step then leaves the frozen weights unchanged."""
    cfg = {**train.DEFAULTS, "weight_decay": 0.5, "learning_rate": 1e-2}
    m = model.EncoderClassifier(model.EncoderConfig(vocab_size=30, block_size=16, n_layer=2, n_embd=16, n_head=2))
    for p in m.layers.parameters():
        p.requires_grad_(False)
    exempt = m.no_weight_decay() | {"head.weight"}
    m.no_weight_decay = lambda: exempt
    opt = train.make_optimizer(m, cfg, "cpu")
    names = {id(p): n for n, p in m.named_parameters()}
    decay = {names[id(p)] for p in opt.param_groups[0]["params"]}
    no_decay = {names[id(p)] for p in opt.param_groups[1]["params"]}
    assert not any(n.startswith("layers.") for n in decay | no_decay)
    assert decay == set() and no_decay == {"tok_emb.weight", "norm_f.weight", "head.weight", "head.bias"}
    frozen = {n: p.detach().clone() for n, p in m.named_parameters() if not p.requires_grad}
    head_before = m.head.weight.detach().clone()
    idx = torch.randint(3, 30, (4, 6))
    m(idx, targets=torch.tensor([0, 1, 0, 1]))[1].backward()
    opt.step()
    assert all(torch.equal(p, frozen[n]) for n, p in m.named_parameters() if n in frozen)
    assert not torch.equal(m.head.weight, head_before)
    # with the default rule the head's matrix is decayed: one step with a zero gradient shrinks it
    m2 = model.EncoderClassifier(model.EncoderConfig(vocab_size=30, block_size=16, n_layer=1, n_embd=16, n_head=2))
    opt2 = train.make_optimizer(m2, cfg, "cpu")
    before = m2.head.weight.detach().clone()
    emb_before = m2.tok_emb.weight.detach().clone()
    for p in m2.parameters():
        p.grad = torch.zeros_like(p)
    opt2.step()
    torch.testing.assert_close(m2.head.weight, before * (1 - 1e-2 * 0.5))  # decoupled decay: w -= lr * wd * w
    assert torch.equal(m2.tok_emb.weight, emb_before)  # an embedding table is not decayed


def test_manual_adamw_equals_torch_over_many_steps():
    """Our AdamW against torch.optim.AdamW, step by step: 60 steps of a small classifier's real
    gradients (computed on torch's copy and handed to both, so that rounding differences are not
    amplified by the network), two groups (decay 0.1 and none), the learning rate changed mid-way, and
    a parameter that gets no gradient for its first 10 steps."""
    torch.manual_seed(0)
    ref = model.EncoderClassifier(model.EncoderConfig(vocab_size=30, block_size=16, n_layer=1, n_embd=16,
                                                      n_head=2, dropout=0.0))
    ours = model.EncoderClassifier(ref.cfg)
    ours.load_state_dict(ref.state_dict())
    cfg = {**train.DEFAULTS, "weight_decay": 0.1, "learning_rate": 3e-2, "beta1": 0.8, "beta2": 0.95}
    opt_ref = train.make_optimizer(ref, cfg, "cpu")
    opt_ours = train.make_optimizer(ours, {**cfg, "adamw_impl": "manual"}, "cpu")
    assert isinstance(opt_ours, train.AdamW) and isinstance(opt_ref, torch.optim.AdamW)
    assert opt_ours.param_groups[0]["weight_decay"] == 0.1 and opt_ours.param_groups[1]["weight_decay"] == 0.0
    start = {k: v.clone() for k, v in ref.state_dict().items()}
    for step in range(60):
        if step == 30:
            for g in opt_ref.param_groups + opt_ours.param_groups:
                g["lr"] = 1e-2
        opt_ref.zero_grad(set_to_none=True)
        ref(torch.randint(3, 30, (8, 7)), targets=torch.randint(0, 2, (8,)))[1].backward()
        if step < 10:
            ref.head.bias.grad = None  # skipped: its moments start late, and its step count too
        for p, q in zip(ref.parameters(), ours.parameters()):
            q.grad = None if p.grad is None else p.grad.clone()
        opt_ref.step()
        opt_ours.step()
        for (k, v), w in zip(ref.state_dict().items(), ours.state_dict().values()):
            torch.testing.assert_close(w, v, atol=1e-6, rtol=1e-5, msg=f"{k} at step {step}")
    assert max((ref.state_dict()[k] - start[k]).abs().max() for k in start) > 0.1  # they did move
    assert opt_ours.state[ours.head.bias]["step"] == 50


def test_scheduled_lr():
    cfg = {**train.DEFAULTS, "learning_rate": 1.0, "min_lr": 0.1, "warmup_iters": 4, "scheduler": "cosine"}
    lrs = [train.scheduled_lr(cfg, it, 14) for it in range(14)]
    assert lrs[:4] == [0.25, 0.5, 0.75, 1.0]  # linear warm-up reaching the peak on its last step
    assert lrs[4] == pytest.approx(1.0) and lrs[9] == pytest.approx(0.55)  # halfway down the cosine
    assert all(a >= b for a, b in zip(lrs[3:], lrs[4:]))
    assert train.scheduled_lr(cfg, 14, 14) == pytest.approx(0.1)
    assert train.scheduled_lr({**cfg, "scheduler": "constant"}, 10, 14) == 1.0


def make_micro_dataset(folder, n_train, vocab_size=20, seed=0, opposite_val=False):
    """A prepared dataset written directly with data.write_split: n_train/4/4 random sequences with
    random labels; or with opposite_val=True, every training label 1 and a validation split of the same
    sequences labelled 0, so that validation loss rises with every step."""
    rng = np.random.default_rng(seed)
    os.makedirs(folder, exist_ok=True)
    for split, n in (("train", n_train), ("val", 4), ("test", 4)):
        seqs = [np.concatenate([[data.CLS], rng.integers(3, vocab_size, rng.integers(2, 9))]) for _ in range(n)]
        labels = rng.integers(0, 2, n).tolist()
        if split == "train":
            train_seqs = seqs
            labels = [1] * n if opposite_val else labels
        elif split == "val" and opposite_val:
            seqs, labels = train_seqs, [0] * n_train
        data.write_split(str(folder), split, seqs, labels, np.uint16)
    meta = {"dataset": "micro", "task": "classification", "protocol": "none", "tokenizer": "none",
            "preprocessing": "none", "max_len": 16,
            "vocab_size": vocab_size, "vocab": list(range(vocab_size - 3)), "label_names": ["a", "b"]}
    with open(os.path.join(folder, "meta.json"), "w") as f:
        json.dump(meta, f)
    return str(folder)


@pytest.mark.parametrize("n_train", [8, 6], ids=["even-4+4", "uneven-4+2"])
def test_grad_accum_matches_one_big_batch(tiny_cfg, tmp_path, monkeypatch, n_train):
    """One optimizer step over micro-batches of 4 (grad_accum=2) equals one step over the same examples
    in one batch. bucket=False makes the batches consecutive slices of one permutation, so both runs
    see the same examples; plain SGD (no clipping) makes the update the gradient itself, so the
    comparison is tight. With 6 examples the micro-batches are 4 and 2: each must weigh by its size."""
    monkeypatch.setattr(train, "make_optimizer",
                        lambda m, cfg, device_type: torch.optim.SGD(m.parameters(), lr=cfg["learning_rate"]))
    folder = make_micro_dataset(tmp_path / "micro", n_train)
    common = dict(data_dir=folder, max_iters=1, bucket=False, grad_clip=0.0, learning_rate=1.0, dropout=0.0,
                  n_layer=2, n_loops=1)
    _, accum = run(tiny_cfg(out_dir=str(tmp_path / "accum"), batch_size=4, grad_accum=2, **common))
    _, big = run(tiny_cfg(out_dir=str(tmp_path / "big"), batch_size=n_train, grad_accum=1, **common))
    _, first = run(tiny_cfg(out_dir=str(tmp_path / "first"), batch_size=4, grad_accum=1, **common))
    for k in big["model"]:
        torch.testing.assert_close(accum["model"][k], big["model"][k], atol=1e-6, rtol=1e-5, msg=k)
    # the first micro-batch alone gives another update (so the comparison above can fail)
    assert max((first["model"][k] - big["model"][k]).abs().max() for k in big["model"]) > 1e-4


# -----------------------------------------------------------------------------
# the command line


def _cli(args, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "train.py", *args], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def test_cli_run(tiny_dataset, tmp_path):
    out = tmp_path / "cli_out"
    cfg_file = tmp_path / "tiny.py"
    cfg_file.write_text(
        "# a tiny run for the test suite\n"
        f"data_dir = {tiny_dataset!r}\n"
        f"out_dir = {str(out)!r}\n"
        "n_layer = 1\nn_loops = 1\nn_embd = 16\nn_head = 2\nffn_hidden = 32\n"
        "batch_size = 16\nmax_epochs = 1\nlog_interval = 2\ndropout = 0.0\n")
    r = _cli([str(cfg_file), "--device=cpu", "--max_iters=3"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "best checkpoint" in r.stdout
    assert os.path.isfile(out / "ckpt.pt") and os.path.isfile(out / "last.pt")
    assert torch.load(out / "last.pt", weights_only=True)["iter_num"] == 3


def test_cli_unknown_key():
    """`python train.py --not_a_key=1` is train.main's one line and status 1 (test_cli_run runs the script itself:
    its __main__ is main(sys.argv[1:]))."""
    with pytest.raises(SystemExit) as e:
        train.main(["--not_a_key=1"])
    text = str(e.value)
    assert text.startswith("error: ") and "\n" not in text and e.value.code not in (0, None)
    assert "unknown config key" in text and "not_a_key" in text


def test_sigterm_saves_last_pt_and_the_run_resumes(tiny_dataset, tmp_path):
    """What a study runner's stop sends: SIGTERM. train.py finishes its step, saves last.pt, writes a summary.json
    that says it was interrupted (no test figures: not finished), exits 130 naming the resume command;
    --init_from=resume continues from there."""
    out = tmp_path / "run"
    args = [f"--data_dir={tiny_dataset}", f"--out_dir={out}", "--device=cpu", "--n_layer=1", "--n_embd=16",
            "--n_head=2", "--ffn_hidden=32", "--batch_size=4", "--max_iters=150", "--log_interval=1",
            "--eval_interval=100000", "--early_stop_patience=0"]
    proc = subprocess.Popen([sys.executable, "train.py", *args], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    for line in proc.stdout:
        if line.startswith("iter 3/"):
            proc.terminate()
            break
    rest = proc.stdout.read()
    assert proc.wait(timeout=60) == 130, rest  # 128 + SIGINT: stopped, not finished
    assert "saving last.pt" in rest and "continue with: python train.py" in rest and "--init_from=resume" in rest
    assert json.loads((out / "summary.json").read_text())["stopped"] == "interrupted"  # how far it came
    stopped_at = torch.load(out / "last.pt", weights_only=True)["iter_num"]
    assert stopped_at >= 3
    assert stopped_at < 150, "the run ended before the SIGTERM reached it"
    r = _cli([*args, "--init_from=resume"], tmp_path)  # the same run: the same settings, max_iters included
    assert r.returncode == 0, r.stderr
    assert f"resuming from {out / 'last.pt'} at iteration {stopped_at}" in r.stdout
    assert torch.load(out / "last.pt", weights_only=True)["iter_num"] == 150  # 16 steps an epoch, 10 epochs: 160



# -----------------------------------------------------------------------------
# speed: what the step leaves on the device, and MFU


def test_train_step_leaves_losses_on_the_device_and_mean_loss_weighs_by_examples():
    """train_step hands back tensors (reading them would wait for a GPU); mean_loss weighs each
    micro-batch's loss by its examples, as one big batch would."""
    torch.manual_seed(0)
    m = model.EncoderClassifier(model.EncoderConfig(vocab_size=30, block_size=16, n_layer=1, n_embd=16, n_head=2,
                                                    dropout=0.0))
    micro = [({"idx": torch.randint(3, 30, (b, 5)), "targets": torch.randint(0, 2, (b,))}, b, 5 * b) for b in (3, 1)]
    with torch.no_grad():
        expected = [m(**inputs)[1].item() for inputs, _, _ in micro]
    opt = torch.optim.SGD(m.parameters(), lr=0.0)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    losses, grad_norm = train.train_step(m, micro, opt, scaler, contextlib.nullcontext(), 1.0)
    assert all(isinstance(loss, torch.Tensor) and loss.dim() == 0 for loss, _ in losses)
    assert isinstance(grad_norm, torch.Tensor) and grad_norm.item() > 0
    assert [n for _, n in losses] == [3, 1]
    mean = train.mean_loss(losses, 4)
    assert mean == pytest.approx((3 * expected[0] + expected[1]) / 4, rel=1e-6)
    assert mean != pytest.approx((expected[0] + expected[1]) / 2, rel=1e-3)  # the unweighted mean differs


def test_peak_flops_is_looked_up_by_gpu_name_and_dtype(monkeypatch):
    assert timing.peak_flops("cpu", "float32") is None
    gpus = {"NVIDIA H100 80GB HBM3": ("bfloat16", 989e12), "NVIDIA H100 PCIe": ("bfloat16", 756e12),
            "NVIDIA A100-SXM4-80GB": ("float32", 156e12),  # TF32 tensor cores
            "NVIDIA A10": ("bfloat16", 125e12),  # not the A100 it begins like
            "Tesla V100-SXM2-16GB": ("float16", 125e12), "NVIDIA A10G": ("bfloat16", None),  # no datasheet
            "Tesla T4": ("bfloat16", None)}  # no bf16 tensor cores
    for name, (dtype, peak) in gpus.items():
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
        got = timing.peak_flops("cuda:0", dtype)
        assert (got and got[0]) == peak, name
        if got:
            assert "datasheet" in got[1] and name in got[1]


def test_mfu_is_the_steps_flops_per_second_over_the_peak(tiny_cfg, capsys):
    """With peak_tflops set, each progress line's MFU is (that step's FLOPs / seconds) / peak: against the
    tokens per second logged beside it, exactly that step's FLOPs per token. Without a peak (a CPU),
    there is no MFU, and the start line says so."""
    cfg = tiny_cfg(max_iters=3, log_interval=1, peak_tflops=0.5, early_stop_patience=0)
    summary = train.train(cfg)
    records = [r for r in read_log(cfg) if r["type"] == "train"]
    dataset = data.load_dataset(cfg)
    fresh = train.new_model(cfg, dataset)  # FLOPs are analytic: any weights will do
    stream = data.training_stream(dataset, fresh.cfg, cfg)
    steps = [stream.step(0, i, "cpu") for i in range(3)]
    for r, micro in zip(records, steps):
        per_token = flops.step_flops(fresh, micro, "classification") / sum(t for _, _, t in micro)
        assert r["mfu"] * 0.5e12 / r["tok_per_s"] == pytest.approx(per_token, rel=1e-9)
    counted = [flops.step_flops(fresh, micro, "classification") for micro in steps]
    assert summary["train_flops"] == pytest.approx(sum(counted))
    out = capsys.readouterr().out
    assert "MFU of a peak 0.5 TFLOP/s per device (the peak_tflops setting)" in out and " MFU " in out
    train.train({**cfg, "peak_tflops": 0.0, "overwrite": True})
    assert "no MFU" in capsys.readouterr().out
    assert not any("mfu" in r for r in read_log(cfg) if r["type"] == "train")


def test_compiled_run_saves_plain_weights_and_traces_bucketed_lengths_once(tiny_cfg, tmp_path, monkeypatch):
    """compile=True, with dynamo's "eager" backend (the same tracing and guards as inductor, without its
    code generation, which takes minutes on a CPU): the run equals the uncompiled one, its checkpoints
    hold the plain module's names (no '_orig_mod.'), and bucketed batches of many lengths cost one graph
    for training and one for evaluation (dynamic=True), not one per length."""
    from torch._dynamo.utils import counters
    monkeypatch.setattr(devices, "COMPILE_BACKEND", "eager")
    torch._dynamo.reset()
    counters.clear()
    plain, compiled = (tiny_cfg(out_dir=str(tmp_path / name), max_iters=6, eval_interval=3, compile=flag)
                       for name, flag in (("plain", False), ("compiled", True)))
    _, last_plain = run(plain)
    _, last_compiled = run(compiled)
    assert last_compiled["model"].keys() == last_plain["model"].keys()
    assert not any("_orig_mod" in k for k in last_compiled["model"])
    for k, v in last_plain["model"].items():
        torch.testing.assert_close(last_compiled["model"][k], v, atol=1e-6, rtol=1e-5, msg=k)
    lengths = {len(ids) for ids, _ in (data.ClassificationSplit(plain["data_dir"], "train")[i] for i in range(64))}
    assert len(lengths) > 5  # the batches did come in many lengths
    assert counters["stats"]["unique_graphs"] == 2  # train mode with gradients, eval mode without
    torch._dynamo.reset()


def test_train_reads_as_one_story():
    """train() stays one readable loop: at most 110 lines, no task named in train.py (how a task's batches are
    cut is data.py's training_stream, how it is scored evaluate.py's score_split: a new task is a registry
    entry there, not a branch in the loop), and one process never enters the DDP appendix (every use of `ddp`
    in train() is behind a test of it)."""
    import ast
    import inspect

    source = inspect.getsource(train)
    tree = ast.parse(source)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "train")
    assert fn.end_lineno - fn.lineno + 1 <= 110
    names = set(evaluate.METRICS)
    named = [(n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in names]
    assert named == []
    guarded = set()  # the lines of every `ddp.x` that a test of ddp guards: `if ddp:`, `... if ddp else ...`
    for node in ast.walk(fn):
        if isinstance(node, (ast.If, ast.IfExp)) and "ddp" in ast.unparse(node.test).split():
            for inner in ast.walk(ast.Module(body=node.body if isinstance(node, ast.If) else [ast.Expr(node.body)],
                                             type_ignores=[])):
                if isinstance(inner, ast.Attribute) and ast.unparse(inner.value) == "ddp":
                    guarded.add(id(inner))
    unguarded = [ast.unparse(n) for n in ast.walk(fn) if isinstance(n, ast.Attribute)
                 and ast.unparse(n.value) == "ddp" and id(n) not in guarded]
    assert unguarded == []


def test_a_task_s_own_key_is_refused_for_another_task(tiny_cfg):
    """hyphen_compounds is the seq2seq task's (Task.settings): set for a classifier, the run is refused
    before anything is written."""
    cfg = tiny_cfg(hyphen_compounds=0.2)
    with pytest.raises(configurator.ConfigError, match="hyphen_compounds applies to seq2seq datasets"):
        train.train(cfg)
    assert not os.path.exists(os.path.join(cfg["out_dir"], "log.jsonl"))


@pytest.mark.parametrize("failure", [OSError(28, "No space left on device"),
                                     RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 64 vs 0")])
def test_a_full_disk_while_a_checkpoint_is_written_is_one_error_line(tiny_cfg, monkeypatch, failure):
    """torch.save on a full disk (ENOSPC, or its zip writer's 'unexpected pos'): the run ends in one line that says
    where the disk is full, no half-written file is left, and what was written before stays."""
    cfg = tiny_cfg(max_iters=4, eval_interval=2)
    real, calls = torch.save, []

    def save(obj, path, *args, **kwargs):
        calls.append(path)
        if len(calls) == 3:  # at the second evaluation: the first one's ckpt.pt and last.pt are on disk
            open(path, "wb").write(b"half")
            raise failure
        return real(obj, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)
    with pytest.raises(configurator.UserError, match=f"the disk is full at {re.escape(cfg['out_dir'])}: .* was not "
                                                     f"written"):
        train.train(cfg)
    assert sorted(os.listdir(cfg["out_dir"])) == ["ckpt.pt", "last.pt", "log.jsonl"]  # no .tmp left
    assert torch.load(os.path.join(cfg["out_dir"], "last.pt"), weights_only=True)["iter_num"] == 2
    monkeypatch.setattr(torch, "save", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("another failure")))
    with pytest.raises(RuntimeError, match="another failure"):  # not a full disk: a bug keeps its traceback
        checkpoints.save_checkpoint(os.path.join(cfg["out_dir"], "x.pt"), train.new_model(cfg, data.load_dataset(cfg)))


# -----------------------------------------------------------------------------
# what a run says, and what it never does to an earlier run (issue 65)


def test_an_empty_out_dir_is_one_error_line(tmp_path):
    r = _cli(["config/sst2_recurrent.py", "--out_dir="], tmp_path)
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        "error: out_dir is empty: a run writes its checkpoints and log into a folder: give one"], r.stderr


def test_a_run_keeps_the_log_of_one_killed_before_its_first_checkpoint(tiny_cfg, capsys):
    """An out_dir that holds only a log (a run killed before its first evaluation) is no run to resume or refuse,
    and its log is kept beside (log-1.jsonl, then log-2.jsonl), never deleted without --overwrite."""
    cfg = tiny_cfg(max_iters=2)
    os.makedirs(cfg["out_dir"])
    for k in (1, 2):
        with open(os.path.join(cfg["out_dir"], "log.jsonl"), "w") as f:
            f.write(f'{{"type": "start", "killed": {k}}}\n')
        train.train(cfg)
        kept = os.path.join(cfg["out_dir"], f"log-{k}.jsonl")
        assert json.loads(open(kept).read()) == {"type": "start", "killed": k}
        assert f"kept the log of an earlier run that stopped before its first checkpoint as {kept}" in \
            capsys.readouterr().out
        for f in ("ckpt.pt", "last.pt", "summary.json"):
            os.remove(os.path.join(cfg["out_dir"], f))


def test_a_config_that_changes_nothing_says_it_trains_the_defaults(tmp_path, monkeypatch, capsys):
    empty = tmp_path / "empty.py"
    empty.write_text("# nothing set yet\n")
    monkeypatch.setattr(train, "train", lambda cfg: {"stopped": "max_epochs"})
    train.main([str(empty)])
    assert f"{empty} changes no setting: this run trains the defaults" in capsys.readouterr().out
    train.main([str(empty), "--max_epochs=2"])
    assert "changes no setting" not in capsys.readouterr().out


def test_a_run_says_where_it_writes_and_its_budget(tiny_cfg, capsys):
    cfg = tiny_cfg(max_epochs=2, eval_interval=3)
    train.train(cfg)
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("run: "))
    assert line.startswith(f"run: writing to {cfg['out_dir']}; at most 16 steps (2 epochs of 8 steps)")
    assert "evaluated every 3 steps" in line


def test_the_time_left_counts_the_evaluations_at_their_measured_cost(monkeypatch):
    """After the first evaluation the estimate is the steps left at the mean step time plus the evaluations left
    at the mean evaluation time (the old one, the mean time per step with evaluations in, was off by up to 2.6x)."""
    now = [100.0]
    monkeypatch.setattr(timing.time, "time", lambda: now[0])
    meter = timing.Meter(None, 1, train.RunState(), total_iters=100, eval_every=25)
    for it in range(1, 26):
        now[0] += 1.0  # a step: 1 s
        meter.add(10, 0.0)
    now[0] += 30.0  # the evaluation at step 25: 30 s
    meter.evaluated()
    now[0] += 1.0
    meter.add(10, 0.0)
    eta = meter.read(26)["eta_min"] * 60
    assert eta == pytest.approx(74 * 1.0 + 4 * 30.0)  # 74 steps, the evaluations at 50, 75, 100 and the test's
    for it in range(27, 51):
        now[0] += 1.0
        meter.add(10, 0.0)
    assert meter.read(50)["eta_min"] * 60 == pytest.approx(50 * 1.0 + 4 * 30.0)  # the one at 50 follows this line


def test_ctrl_c_while_the_data_is_prepared_exits_130_in_one_line(tiny_cfg, monkeypatch, capsys):
    """A KeyboardInterrupt before the first step (preparing the data, say) ends the command with 130 and one
    line, and leaves no out_dir behind."""
    cfg = tiny_cfg()
    monkeypatch.setattr(train, "make_config", lambda argv: cfg)
    monkeypatch.setattr(data, "load_dataset", lambda c: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(SystemExit) as stop:
        train.main(["x.py"])
    assert stop.value.code == 130
    assert capsys.readouterr().err.strip() == "interrupted before the first step: nothing of this run was saved"
    assert not os.path.exists(cfg["out_dir"])


def test_the_code_commit_counts_changes_to_the_code_not_to_the_records(tmp_path, monkeypatch):
    """A run's log names the code it ran: '+changes' when a tracked code file differs from the commit, not when
    a record under results/ or a page does (a study commits records while its other runs train)."""
    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    (tmp_path / "train.py").write_text("# the code\n")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "r.json").write_text("{}")
    (tmp_path / "README.md").write_text("a page")
    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "code and records")
    monkeypatch.setattr(records, "__file__", str(tmp_path / "bookkeeping" / "records.py"))  # code_commit asks here
    clean = records.code_commit()
    assert re.fullmatch(r"[0-9a-f]{7,}", clean)
    (tmp_path / "results" / "r.json").write_text('{"a": 1}')
    (tmp_path / "README.md").write_text("another page")
    assert records.code_commit() == clean
    (tmp_path / "train.py").write_text("# the code, edited\n")
    assert records.code_commit() == clean + "+changes"


# -----------------------------------------------------------------------------
# warnings: settings a run cannot honour, one line each before its first step


def warnings_of(total_iters=16, epoch_steps=8, **overrides):
    """checks.run_warnings for train.py's defaults with overrides, on a run of total_iters steps of epoch_steps an
    epoch (eval_interval 0: once an epoch)."""
    cfg = {**train.make_config([]), "max_epochs": 2, **overrides}
    return checks.run_warnings(cfg, total_iters, epoch_steps, cfg["eval_interval"] or epoch_steps, train.DEFAULTS)


@pytest.mark.parametrize("overrides, words", [
    (dict(warmup_iters=16), "warmup_iters=16 is not shorter than the run's 16 iterations: the learning rate never "
                            "reaches learning_rate=0.001"),
    (dict(warmup_iters=20, scheduler="cosine"), "and the cosine never starts"),
    (dict(eval_interval=50), "eval_interval=50 is longer than the run's 16 iterations: it is evaluated once"),
    (dict(log_interval=20), "log_interval=20 is longer than the run's 16 iterations: only the first step's "
                            "progress line"),
    (dict(early_stop_patience=2), "early_stop_patience=2 can never stop this run: stopping takes 2 evaluations "
                                  "without improvement after the first, and the run is evaluated 2 times"),
    (dict(plateau_patience=1), "the plateau schedule can never lower the learning rate: it takes 2 evaluations"),
    (dict(max_iters=100), "max_iters=100 is more than max_epochs=2 allow (2 x 8 steps an epoch): the run stops at "
                          "iteration 16"),
    (dict(scheduler="cosine", min_lr=1e-3), "min_lr=0.001 is not below learning_rate=0.001: the cosine schedule "
                                            "does not decay"),
    (dict(min_lr=1e-5), "min_lr=1e-05 is the cosine schedule's floor; scheduler='plateau' does not read it"),
    (dict(scheduler="cosine", plateau_factor=0.1, plateau_patience=2), "plateau_factor=0.1: the plateau schedule's; scheduler='cosine' "
                                                   "does not read it"),
])
def test_each_setting_the_run_cannot_honour_is_one_warning(overrides, words):
    base = set(warnings_of(early_stop_patience=0, plateau_patience=0))
    found = [w for w in warnings_of(**{"early_stop_patience": 0, "plateau_patience": 0, **overrides})
             if w not in base]
    assert len(found) >= 1 and any(words in w for w in found), found
    assert all("\n" not in w for w in found)


def test_a_sound_config_warns_of_nothing():
    cfg = train.make_config(["config/sst2_recurrent.py"])  # 2 epochs, evaluated every 500 steps
    assert checks.run_warnings(cfg, 2000, 1000, cfg["eval_interval"], train.DEFAULTS) == []
    assert warnings_of(early_stop_patience=0, plateau_patience=0, log_interval=4) == []
    lm = train.make_config(["config/shakespeare_char_baseline.py"])  # 300 steps of random windows, no epochs
    assert checks.run_warnings(lm, lm["max_iters"], float("inf"), lm["eval_interval"], train.DEFAULTS) == []


def test_train_prints_the_warnings_before_its_first_step(tiny_cfg, capsys):
    train.train(tiny_cfg(max_iters=4, warmup_iters=10, eval_interval=50, log_interval=2))
    lines = capsys.readouterr().out.splitlines()
    warned = [i for i, line in enumerate(lines) if line.startswith("warning: ")]
    first_step = next(i for i, line in enumerate(lines) if line.startswith("iter "))
    assert warned and max(warned) < first_step
    said = " ".join(lines[i] for i in warned)
    assert "warmup_iters=10" in said and "eval_interval=50" in said


def test_a_run_says_it_is_under_way_at_its_first_step(tiny_cfg, capsys):
    """A progress line at this process's first step, not only every log_interval steps: a bare run (log_interval
    50, seconds a step) said nothing for two minutes. The opening line names the threads."""
    train.train(tiny_cfg(max_iters=5, log_interval=4, early_stop_patience=0))
    out = capsys.readouterr().out
    assert [line.split()[1] for line in out.splitlines() if line.startswith("iter ")] == ["1/5", "4/5"]
    assert "device cpu (1 thread, from OMP_NUM_THREADS), dtype float32" in out  # conftest.py sets it
