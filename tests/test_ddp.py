"""
Data-parallel training (DDP) on the CPU, two processes over gloo: they train the same model as one
process with the same step batch (batch_size x grad_accum), to float32 rounding, for a classifier and
a language model; only rank 0 prints and writes; a stop asked of one process stops both after the same
step, and the run resumes under DDP. One run goes through the command line as torchrun starts it, the
others through torch.multiprocessing with the environment torchrun would set. Models have width 16.
"""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch
import torch.multiprocessing as mp

import configurator
import data
import model
import train
from conftest import REPO_ROOT

# Two processes add up a step's gradient in another order than one process does (each sums its own
# micro-batches, then the all-reduce sums the two), so the weights agree to float32 rounding, not bitwise.
CLOSE = dict(atol=1e-6, rtol=1e-5)  # measured: 1.2e-7 at most


def read_log(cfg):
    with open(os.path.join(cfg["out_dir"], "log.jsonl")) as f:
        return [json.loads(line) for line in f]


def weights(cfg):
    return torch.load(os.path.join(cfg["out_dir"], "last.pt"), weights_only=True)["model"]


def assert_same_run(ddp_cfg, one_cfg):
    """The DDP run's final weights and logged losses equal the one-process run's, step by step (a second
    writer of the log would double its records)."""
    a, b = weights(ddp_cfg), weights(one_cfg)
    assert a.keys() == b.keys()  # the plain module's names: no 'module.' (DDP) or '_orig_mod.' (compile)
    for k in b:
        torch.testing.assert_close(a[k], b[k], **CLOSE, msg=k)
    log_a, log_b = [[r for r in read_log(cfg) if r["type"] in ("train", "eval")] for cfg in (ddp_cfg, one_cfg)]
    assert [r["type"] for r in log_a] == [r["type"] for r in log_b]
    for ra, rb in zip(log_a, log_b):
        for key in ("iter", "epoch", "best"):
            assert ra.get(key) == rb.get(key), (key, ra, rb)
        for key in ("loss", "grad_norm", "val_loss", "val_accuracy"):
            if key in rb:
                assert ra[key] == pytest.approx(rb[key], rel=1e-5, abs=1e-6), (key, ra, rb)
    assert sum(r["type"] == "train" for r in log_b) >= 4  # the comparison had something to compare


def classifier_cfg(tiny_cfg, out, **kw):
    """64 training examples in micro-batches of 5, 4 per step: 13 micro-batches an epoch, so its last step
    holds one (of 4 examples) and the second process has none; it must still join that step's all-reduce."""
    return tiny_cfg(out_dir=str(out), batch_size=5, grad_accum=4, max_epochs=2, log_interval=1, early_stop_patience=0,
                    **kw)


def cli_args(cfg):
    """--key=value for every setting that differs from train.py's defaults (the tiny model, the data)."""
    defaults = train.make_config([f"--model={cfg['model']}"])
    return [f"--{k}={v}" for k, v in cfg.items() if v != defaults[k]]


def test_torchrun_classifier_equals_one_process(tiny_cfg, tmp_path):
    """`torchrun --nproc_per_node=2 train.py ...` (on the CPU: gloo) against `train.train` in this process."""
    one = classifier_cfg(tiny_cfg, tmp_path / "one")
    two = classifier_cfg(tiny_cfg, tmp_path / "two")
    summary = train.train(one)
    assert summary["iters"] == 8  # 4 steps an epoch, 2 epochs
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                        "train.py", *cli_args(two)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert_same_run(two, one)
    assert [r["type"] for r in read_log(two)] == [r["type"] for r in read_log(one)]
    # only rank 0 printed, and only it wrote: one start line, the run's four files and nothing else
    assert [line for line in r.stdout.splitlines() if line.startswith("model:")] == [
        line for line in r.stdout.splitlines() if "2 processes (DDP, gloo)" in line]
    assert r.stdout.count("model:") == 1 and r.stdout.count("best checkpoint:") == 1
    assert sorted(os.listdir(two["out_dir"])) == ["ckpt.pt", "last.pt", "log.jsonl", "summary.json"]
    stored = json.loads(open(os.path.join(two["out_dir"], "summary.json")).read())
    assert stored["test_accuracy"] == summary["test_accuracy"] and stored["iters"] == 8
    assert stored["train_flops"] == summary["train_flops"]  # summed over both processes, the stand-in not counted


# -----------------------------------------------------------------------------
# runs in two processes started here, with torchrun's environment


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, jobs):
    """One of two processes: train each (config, stop_at, port) in turn. With stop_at, rank 1 alone gets a
    Ctrl-C while it takes step stop_at (as train.py's handler sees one)."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1")
    torch.set_num_threads(1)
    real_lr = train.scheduled_lr

    def lr_then_interrupt(cfg, it, total_iters):
        if it == stop_at:
            signal.getsignal(signal.SIGINT)(signal.SIGINT, None)
        return real_lr(cfg, it, total_iters)

    for cfg, stop_at, port in jobs:
        os.environ["MASTER_PORT"] = str(port)
        train.scheduled_lr = lr_then_interrupt if stop_at is not None and rank == 1 else real_lr
        train.train(cfg)


def run_two_processes(jobs, timeout=120):
    """Run _worker in two processes on [(config, stop_at), ...]; fail (not hang) if they do not finish."""
    jobs = [(cfg, stop_at, free_port()) for cfg, stop_at in jobs]
    ctx = mp.start_processes(_worker, args=(jobs,), nprocs=2, join=False, start_method="spawn")
    deadline = time.time() + timeout
    while not ctx.join(timeout=1):  # raises if a process failed, with its traceback
        if time.time() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail(f"the two processes did not finish in {timeout} s")


def test_ddp_language_model_and_a_stop_then_resume(tiny_cfg, char_mirror, char_digest, tmp_path):
    """Two runs in two processes: a GPT language model (4 micro-batches of random windows a step), and the
    classifier of the test above, stopped by a Ctrl-C that only the second process gets, then resumed
    (--init_from=resume: both processes load last.pt). Each equals its one-process run."""
    chars = str(tmp_path / "chars")
    data.prepare_shakespeare_char(mirror=char_mirror, out_dir=chars, verbose=False)
    lm = {**train.make_config(["--model=gpt"]), **dict(
        dataset="shakespeare_char", data_dir=chars, device="cpu", dtype="float32", block_size=16, n_layer=1,
        n_embd=16, n_head=2, ffn="gelu", norm="layer", pos="learned", dropout=0.0, batch_size=4, grad_accum=4,
        max_iters=6, eval_interval=3, log_interval=1, scheduler="constant", learning_rate=3e-3,
        early_stop_patience=0, seed=1)}
    lm_one, lm_two = {**lm, "out_dir": str(tmp_path / "lm_one")}, {**lm, "out_dir": str(tmp_path / "lm_two")}
    one = classifier_cfg(tiny_cfg, tmp_path / "one")
    two = classifier_cfg(tiny_cfg, tmp_path / "two")
    train.train(lm_one)
    train.train(one)

    run_two_processes([(lm_two, None), (two, 5), ({**two, "init_from": "resume"}, None)])
    assert_same_run(lm_two, lm_one)
    assert_same_run(two, one)
    log = read_log(two)
    assert [r["iter"] for r in log if r["type"] == "start"] == [0, 6]  # both stopped after step 6; resumed there
    assert [r["stopped"] for r in log if r["type"] == "summary"] == ["interrupted", "max_epochs"]


# -----------------------------------------------------------------------------
# the pieces


def test_grad_accum_must_split_over_the_processes(tiny_cfg, monkeypatch):
    """Checked before the process group is joined, with the fix in the message."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(configurator.ConfigError, match=r"grad_accum=3 does not split over 2 processes.*"
                                                       r"multiple of 2 \(grad_accum=2 with batch_size=12 keeps"):
        train.train(tiny_cfg(batch_size=8, grad_accum=3))
    with pytest.raises(configurator.ConfigError, match=r"multiple of 2$"):  # 7 examples cannot be halved
        train.check_world({"batch_size": 7, "grad_accum": 1}, 2)
    assert not torch.distributed.is_initialized()


@pytest.mark.parametrize("world", [2, 3])
def test_streams_share_out_each_step(tiny_dataset, world):
    """Ranks 0..world-1 together take exactly a step's micro-batches, rank r those numbered r, r + world, ..."""
    split = data.ClassificationSplit(tiny_dataset, "train")
    stream = data.ClassificationStream(split, 5, 6, seed=3)
    for i in range(stream.steps_per_epoch):
        whole = stream.step(1, i, "cpu")
        shares = [stream.step(1, i, "cpu", rank, world) for rank in range(world)]
        for m, (inputs, n, tokens) in enumerate(whole):
            got, n_got, tokens_got = shares[m % world][m // world]
            assert torch.equal(got["idx"], inputs["idx"]) and (n_got, tokens_got) == (n, tokens)
        assert sum(len(s) for s in shares) == len(whole)
    assert len(whole) == 1 and shares[1] == []  # the epoch's last step: 13 micro-batches = 2 x 6 + 1


def test_unused_parameters_finds_the_idle_head_and_keeps_the_random_state():
    """The encoder pretraining as a masked LM leaves its classification head without a gradient (DDP must
    be told); as a classifier it uses everything. The probe leaves the random state (dropout's) as it found
    it, and no gradient behind."""
    torch.manual_seed(0)
    m = model.EncoderClassifier(model.EncoderConfig(vocab_size=30, block_size=16, n_layer=1, n_embd=16, n_head=2,
                                                    dropout=0.1))
    idx = torch.randint(3, 30, (4, 7))
    mask = torch.ones_like(idx, dtype=torch.bool)
    mlm = {"idx": idx, "key_mask": mask, "mlm_targets": torch.where(torch.arange(7) == 2, idx, -100)}
    classify = {"idx": idx, "key_mask": mask, "targets": torch.tensor([0, 1, 0, 1])}
    state = torch.get_rng_state()
    assert train.unused_parameters(m, (mlm, 4, 28), contextlib.nullcontext()) == ["head.weight", "head.bias"]
    assert train.unused_parameters(m, (classify, 4, 28), contextlib.nullcontext()) == []
    assert torch.equal(torch.get_rng_state(), state) and all(p.grad is None for p in m.parameters())
    m(**classify)
    assert not torch.equal(torch.get_rng_state(), state)  # a forward pass does draw: the probe put it back
