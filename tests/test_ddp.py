"""
Data-parallel training (DDP) on the CPU, two processes over gloo: they train the same model as one
process with the same step batch (batch_size x grad_accum), to float32 rounding, for a classifier and
a language model; only rank 0 prints and writes; a stop asked of one process stops both after the same
step, and the run resumes under DDP. One run goes through the command line as torchrun starts it, the
others through torch.multiprocessing with the environment torchrun would set. Models have width 16.
Every rendezvous is on a port held from the moment it is picked, so that two runs of this file at once do
not collide, and every run of processes has deadlines, so that a lost process fails a test, never hangs it.
"""

import contextlib
import faulthandler
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch
import torch.multiprocessing as mp
from torch.multiprocessing.spawn import ProcessException

import configurator
import data
import model
import train
from bookkeeping import checks
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


# Every run of several processes has deadlines, so that a missing or stuck process fails the test in
# minutes with its output, never hangs it: the processes' join (train.py's DDP_JOIN_TIMEOUT, which
# without it would wait 30 minutes), and the whole run. Both are several times what the runs take on
# a loaded 2-core machine (the join: seconds; the runs: 5 to 60 s).
JOIN_S = 60
RUN_S = 180


def tail(path, n=3000):
    """The end of a process's output file, for a failure's message (it may not have started writing)."""
    if not os.path.exists(path):
        return "(no output: the process had not started)"
    with open(path, errors="replace") as f:
        return f.read()[-n:] or "(nothing)"


def run_torchrun(args, tmp_path, timeout=RUN_S):
    """`torchrun --standalone --nproc_per_node=2 train.py args`; returns its standard output. --standalone
    hosts the rendezvous on a port the system picks and holds (localhost:0), and hands that store to the
    processes, so two of these at once cannot collide. Output goes to files, not pipes: a process left
    behind by a killed torchrun would keep a pipe open and the read would never end."""
    out, err = tmp_path / "torchrun.out", tmp_path / "torchrun.err"
    with open(out, "w") as fo, open(err, "w") as fe:
        p = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                              "train.py", *args], cwd=REPO_ROOT, stdout=fo, stderr=fe,
                             env={**os.environ, "OMP_NUM_THREADS": "1", "DDP_JOIN_TIMEOUT": str(JOIN_S)})
    late = False
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        late = True
    if late:
        p.terminate()  # torchrun stops its processes on SIGTERM (they run in sessions of their own)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        pytest.fail(f"torchrun did not finish in {timeout} s; its output:\n{tail(out)}\n{tail(err)}")
    if p.returncode:
        pytest.fail(f"torchrun exited with status {p.returncode}; its output:\n{tail(out)}\n{tail(err)}")
    return out.read_text()


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
    stdout = run_torchrun(cli_args(two), tmp_path)
    assert_same_run(two, one)
    assert [r["type"] for r in read_log(two)] == [r["type"] for r in read_log(one)]
    # only rank 0 printed, and only it wrote: one start line, the run's four files and nothing else
    assert [line for line in stdout.splitlines() if line.startswith("model:")] == [
        line for line in stdout.splitlines() if "2 processes (DDP, gloo)" in line]
    assert stdout.count("model:") == 1 and stdout.count("best checkpoint:") == 1
    assert sorted(os.listdir(two["out_dir"])) == ["ckpt.pt", "last.pt", "log.jsonl", "summary.json"]
    stored = json.loads(open(os.path.join(two["out_dir"], "summary.json")).read())
    assert stored["test_accuracy"] == summary["test_accuracy"] and stored["iters"] == 8
    assert stored["train_flops"] == summary["train_flops"]  # summed over both processes, the stand-in not counted


# -----------------------------------------------------------------------------
# runs in two processes started here, with torchrun's environment


def _worker(rank, jobs, logs):
    """One of two processes: train each (config, stop_at, port) in turn, joining on the store at that port.
    With stop_at, rank 1 alone gets a Ctrl-C while it takes step stop_at (as train.py's handler sees one).
    Its output goes to logs[rank], C++ warnings too (file descriptors 1 and 2), for a failure's message."""
    log = open(logs[rank], "w")
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout.reconfigure(line_buffering=True)  # what a killed process printed is in the file
    faulthandler.register(signal.SIGUSR1, file=log, all_threads=True)  # where it is stuck, asked at the deadline
    # torchrun's environment, with its agent's store (the test's, at the job's port) for the rendezvous
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                      TORCHELASTIC_USE_AGENT_STORE="True", DDP_JOIN_TIMEOUT=str(JOIN_S))
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


def held_store():
    """A store on a port the system picks, listening until it is garbage: the store torchrun's agent hosts
    for its processes. A port found free and let go (bind to port 0, close, pass the number on) can be taken
    by any other process before rank 0 binds it again: by another test run's rank 0, or gloo's listening
    sockets, which take ports from the same pool. Then rank 0 fails to bind, and rank 1 joins a stranger's
    store or connects to a gloo socket that never answers, and waits past any timeout (seen: still
    waiting after 60 s with a 10 s timeout)."""
    return torch.distributed.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)


def run_two_processes(jobs, tmp_path, timeout=RUN_S):
    """Run _worker in two processes on [(config, stop_at), ...], each job on a store of its own held here;
    fail with both processes' output if one fails or they do not finish in time."""
    stores = [held_store() for _ in jobs]  # held until this returns
    logs = [str(tmp_path / f"rank{rank}.log") for rank in range(2)]
    ctx = mp.start_processes(_worker, args=([(cfg, stop_at, store.port) for (cfg, stop_at), store in zip(jobs, stores)],
                                            logs), nprocs=2, join=False, start_method="spawn")
    deadline, failure = time.monotonic() + timeout, None
    try:
        while not ctx.join(timeout=1):  # raises if a process failed, with its traceback
            if time.monotonic() > deadline:
                failure = f"the two processes did not finish their {len(jobs)} runs in {timeout} s"
                break
    except ProcessException as e:
        failure = str(e)
    if failure:  # failed here, not in the except block, so that the report is not doubled by the cause
        for p in ctx.processes:
            if p.is_alive():
                os.kill(p.pid, signal.SIGUSR1)  # its Python stack into its output
        time.sleep(1)
        for p in ctx.processes:
            p.kill()
            p.join()
        pytest.fail(failure + "\n" + "".join(f"--- rank {rank}'s output, the end:\n{tail(log)}\n"
                                             for rank, log in enumerate(logs)))


def test_ddp_language_model_and_a_stop_then_resume(tiny_cfg, char_mirror, char_digest, tmp_path):
    """Two runs in two processes: a GPT language model (4 micro-batches of random windows a step), and the
    classifier of the test above, stopped by a Ctrl-C that only the second process gets, then resumed
    (--init_from=resume: both processes load last.pt). Each equals its one-process run."""
    chars = str(tmp_path / "chars")
    data.prepare("shakespeare_char", mirror=char_mirror, out_dir=chars, verbose=False)
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

    run_two_processes([(lm_two, None), (two, 5), ({**two, "init_from": "resume"}, None)], tmp_path)
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
        checks.check_world({"batch_size": 7, "grad_accum": 1}, 2)
    assert not torch.distributed.is_initialized()


def test_a_process_whose_partner_never_comes_fails_in_seconds(monkeypatch):
    """Joining waits DDP_JOIN_TIMEOUT seconds for the other processes, not the collectives' 30 minutes, then
    fails saying what to check. As under torchrun, the store is another's (this test's) and rank 1 only
    connects to it, so nothing but the join's own limit notices that rank 0 never comes. The join runs in a
    thread, so that one with no limit fails this test after 30 s instead of hanging it."""
    store = held_store()
    for key, value in dict(RANK=1, LOCAL_RANK=1, WORLD_SIZE=2, MASTER_ADDR="127.0.0.1", MASTER_PORT=store.port,
                           TORCHELASTIC_USE_AGENT_STORE=True, DDP_JOIN_TIMEOUT=2).items():
        monkeypatch.setenv(key, str(value))
    cfg = {"device": "cpu", "batch_size": 4, "grad_accum": 2}
    errors = []

    def join():
        try:
            with train.processes(cfg):
                pass
        except Exception as e:
            errors.append(e)

    started = time.monotonic()
    thread = threading.Thread(target=join, daemon=True)  # a daemon, left behind if it hangs
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the join still waited for its partner after 30 s"
    assert time.monotonic() - started < 10  # measured: 2.0 s
    assert len(errors) == 1 and isinstance(errors[0], configurator.UserError), errors
    assert re.fullmatch(rf"the other processes did not join within 2 s \(this is rank 1 of 2, the group is at "
                        rf"127\.0\.0\.1:{store.port}\): check that all 2 were started .*DDP_JOIN_TIMEOUT sets the "
                        r"limit in seconds \(.+\)", str(errors[0])), errors[0]  # torch's own words last
    assert not torch.distributed.is_initialized()
    monkeypatch.setenv("DDP_JOIN_TIMEOUT", "soon")
    with pytest.raises(configurator.ConfigError, match=r"DDP_JOIN_TIMEOUT='soon': the seconds"):
        with train.processes(cfg):
            pass


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
