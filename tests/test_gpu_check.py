"""
bench/gpu_check.py, the one command a GPU session runs first, rehearsed on the CPU so that it never meets a device
untried: the command as shipped (`python -m bench.gpu_check --cpu --out DIR`, budgets on, in a process of its own)
passes every section and writes everything under DIR as it goes; a section that overruns or fails costs only
itself and keeps what it measured; a missing data folder is prepared or refused in one line; and every target
of docs/speed.md's GPU table gets a verdict from the figures.
"""

import glob
import json
import os
import subprocess
import sys
import tempfile
import time

import pytest
import torch

import data
from bench import gpu_check, gpu_sections


@pytest.fixture
def check_data(tmp_path, tiny_dataset, char_mirror, char_digest):
    """A --data folder as `--prepare` makes one, from the test fixtures: a prepared SST-2 (the tiny fake one), a
    prepared tinyshakespeare (the fake corpus) and the mirror's stories260K."""
    pytest.importorskip("triton", reason="the rehearsal runs the Triton kernels: pip install -r requirements-test.txt",
                        exc_type=ImportError)
    llamas = os.path.join(os.environ["DATA_MIRROR"], "tinyllamas")
    if not os.path.isfile(os.path.join(llamas, "stories260K", "stories260K.bin")):
        pytest.skip("no stories260K in the mirror")
    root = tmp_path / "data"
    root.mkdir()
    os.symlink(tiny_dataset, root / "sst2_glue_compact")
    os.symlink(llamas, root / "tinyllamas")
    data.prepare_shakespeare_char(mirror=char_mirror, out_dir=str(root / "shakespeare_char"), verbose=False)
    return str(root)


def test_the_rehearsal_as_shipped_passes_and_writes_everything_under_out(check_data, tmp_path):
    """The documented rehearsal, `python -m bench.gpu_check --cpu --data DIR --out DIR`, as a process of its own
    with its budgets: every section passes, within the 90 s the suite allows it (40 s on an idle 2-core VM);
    what comes back is under --out, four plain files and no folder (a borrowed GPU machine returns at most 8 files:
    results, verdicts, each figure as a JSON line, every section's output), its scratch is gone, and each target of
    the GPU table has a verdict."""
    out = tmp_path / "check"
    t0 = time.time()
    scratch = set(glob.glob(os.path.join(tempfile.gettempdir(), "gpu_check_work_*")))
    done = subprocess.run([sys.executable, "-m", "bench.gpu_check", "--cpu", "--data", check_data, "--out", str(out)],
                          cwd=gpu_sections.ROOT, capture_output=True, text=True, timeout=150)
    wall = time.time() - t0
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert wall < 90, wall
    assert sorted(os.listdir(out)) == sorted(gpu_check.RETURNED) == ["figures.jsonl", "gpu_check.json", "gpu_check.md",
                                                                     "sections.log"]
    assert all(os.path.isfile(out / f) for f in gpu_check.RETURNED)
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "gpu_check_work_*"))) == scratch  # removed at the end
    results = json.load(open(out / "gpu_check.json"))
    assert results["passed"] and list(results["sections"]) == list(gpu_check.SECTIONS)
    assert results["conditions"]["mode"] == "cpu rehearsal" and results["conditions"]["torch"] == torch.__version__
    log = open(out / "sections.log").read()  # each section's output under its heading, in the order they ran
    headings = [line.split(":")[0].strip("= ") for line in log.splitlines() if line.startswith("=" * 20)]
    assert headings == list(gpu_check.SECTIONS) and "[ddp] ok   gloo: a one-rank group on cpu" in log
    lines = [json.loads(line) for line in open(out / "figures.jsonl")]
    figures = {(r["section"], r["figure"]["key"]) for r in lines if "figure" in r}
    assert {("kernels", "errors"), ("scan", "results"), ("decode", "rerecord"), ("decode", "speed"),
            ("ddp", "collective"), ("train", "runs"), ("mfu", "results"), ("sst2", "run")} <= figures
    s = results["sections"]
    assert s["decode"]["figures"]["rerecord"] == {"generate_calls": 3, "graph_captures": None, "caches_allocated": 0,
                                                  "graphs_compiled": 0}
    assert s["ddp"]["figures"]["collective"]["equal"] and s["ddp"]["figures"]["setup"]["processes"] == 1
    verdicts = {v["target"]: v for v in results["verdicts"]}
    assert len(verdicts) == 11 and all(v["verdict"] in ("pass", "not measured") for v in verdicts.values())
    assert verdicts["graph breaks, counted for every compiled figure"]["verdict"] == "pass"
    md = open(out / "gpu_check.md").read()
    assert md.startswith("# GPU check (cpu rehearsal): passed")
    for line in ("| target | verdict | figure | threshold |", "## kernels: passed", "| rms_norm, bfloat16 |",
                 "| 8 | triton |", "| float32 | 1 | ours, compiled |", "| sst2_recurrent, bf16, Triton kernels |",
                 "DDP against one process: needs 2 GPUs, not run.", "| compiled |"):
        assert line in md, line
    assert "all sections: passed" in done.stdout and "not measured" in done.stdout


def test_a_section_stopped_or_failing_costs_only_itself_and_keeps_its_figures(tmp_path, capsys, monkeypatch):
    """Each section in its own process: one that overruns its budget is killed, keeps the figure it wrote before
    and says where it was stopped; one that raises records its error in one line; the check goes on, and the
    exit status says it failed. (Sections that only sleep and raise: the forked processes run no torch op.)"""
    def sleeps(run):
        run.figure("first", 1.5)
        run.reach("the long step")
        time.sleep(60)

    def raises(run):
        run.figure("before", 2)
        raise data.DataError("no prepared dataset in nowhere\nsecond line")
    monkeypatch.setitem(gpu_check.SECTIONS, "scan", gpu_check.Section(sleeps, {"cpu": 1}, "sleeps"))
    monkeypatch.setitem(gpu_check.SECTIONS, "ddp", gpu_check.Section(raises, {"cpu": 5}, "raises"))
    monkeypatch.setattr(gpu_check, "GRACE_S", 0)
    monkeypatch.setattr(gpu_check, "NEEDED", ())
    out = tmp_path / "check"
    code = gpu_check.main(["--cpu", "--sections", "scan", "ddp", "--data", str(tmp_path), "--out", str(out)])
    results = json.load(open(out / "gpu_check.json"))
    scan, ddp = results["sections"]["scan"], results["sections"]["ddp"]
    assert code == 1 and not results["passed"] and not scan["passed"] and not ddp["passed"]
    assert scan["error"].startswith("stopped at its budget of 1 s, during 'the long step'") and scan["elapsed_s"] < 10
    assert scan["figures"] == {"first": 1.5} and ddp["figures"] == {"before": 2}
    assert ddp["error"] == "DataError: no prepared dataset in nowhere"
    streamed = [json.loads(line) for line in open(out / "figures.jsonl")]
    assert any(r.get("section") == "scan" and r.get("figure") == {"key": "first", "value": 1.5} for r in streamed)
    md = open(out / "gpu_check.md").read()
    assert "## scan: FAILED" in md and "## ddp: FAILED" in md and "Error: `DataError" in md
    assert "ddp: FAILED: DataError" in capsys.readouterr().out


def test_a_section_in_a_fresh_interpreter_as_on_a_gpu(tmp_path, monkeypatch):
    """The GPU's way of starting a section (a new `python -m bench.gpu_check --section ...` process, not a fork),
    taken on the CPU with the cheapest section: its arguments make the trip, its record and log come back."""
    monkeypatch.setattr(gpu_check, "FORK", False)
    monkeypatch.setattr(gpu_check, "NEEDED", ())
    ddp = gpu_check.SECTIONS["ddp"]  # (a new interpreter imports torch: seconds more than a fork on a busy CPU)
    monkeypatch.setitem(gpu_check.SECTIONS, "ddp", gpu_check.Section(ddp.run, {"cpu": 60}, ddp.what))
    out = tmp_path / "check"
    assert gpu_check.main(["--cpu", "--sections", "ddp", "--data", str(tmp_path), "--out", str(out), "--work",
                           str(tmp_path / "work")]) == 0
    ddp = json.load(open(out / "gpu_check.json"))["sections"]["ddp"]
    assert ddp["passed"] and ddp["figures"]["collective"]["equal"]
    assert "[ddp] ok   gloo: a one-rank group on cpu" in open(out / "sections.log").read()
    assert os.path.isdir(tmp_path / "work" / "ddp")  # --work given: the section's scratch is kept there


def test_an_out_holding_an_earlier_check_is_refused_and_left_as_it_was(tmp_path, capsys, monkeypatch):
    """A second check into the same --out would write over the first one's results: refused in one line, the
    files unchanged, before any section runs."""
    monkeypatch.setattr(gpu_check, "NEEDED", ())
    out = tmp_path / "check"
    out.mkdir()
    (out / "figures.jsonl").write_text("the first check's figures\n")
    assert gpu_check.main(["--cpu", "--sections", "ddp", "--data", str(tmp_path), "--out", str(out)]) == 2
    printed = capsys.readouterr().out
    assert printed.startswith(f"error: --out {out} holds an earlier check's figures.jsonl") and printed.count("\n") == 1
    assert os.listdir(out) == ["figures.jsonl"] and (out / "figures.jsonl").read_text() == "the first check's figures\n"


def test_missing_data_is_prepared_from_the_mirror_or_refused_in_one_line(tmp_path, capsys, monkeypatch):
    """Without $DATA_MIRROR a --data that lacks a dataset is refused in one line naming the --prepare command;
    with it, --prepare copies stories260K and the tiktoken cache and prepares SST-2 and tinyshakespeare (here
    stand-ins that write their meta.json). Without CUDA and without --cpu, the check says in one line what it
    needs."""
    monkeypatch.delenv("DATA_MIRROR")
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)  # --prepare points it at its folder: restored after
    assert gpu_check.main(["--cpu", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "o")]) == 2
    printed = capsys.readouterr().out
    assert printed.count("\n") == 1 and "python -m bench.gpu_check --prepare --data" in printed
    mirror = tmp_path / "mirror"
    (mirror / "tinyllamas" / "stories260K").mkdir(parents=True)
    (mirror / "tinyllamas" / "stories260K" / "stories260K.bin").write_text("weights")
    (mirror / "tinyllamas" / "stories260K" / "tok512.bin").write_text("tokenizer")
    (mirror / "tiktoken_cache").mkdir()
    monkeypatch.setenv("DATA_MIRROR", str(mirror))
    made = []

    def prepared(mirror, out_dir, **kw):
        made.append(os.path.basename(out_dir))
        os.makedirs(out_dir)
        open(os.path.join(out_dir, "meta.json"), "w").write("{}")
    monkeypatch.setattr(data, "prepare_sst2", prepared)
    monkeypatch.setattr(data, "prepare_shakespeare_char", prepared)
    assert gpu_check.main(["--prepare", "--data", str(tmp_path / "data")]) == 0
    assert made == ["sst2_glue_compact", "shakespeare_char"]
    assert all(os.path.isfile(tmp_path / "data" / p) for p in gpu_check.NEEDED)
    assert os.path.isdir(tmp_path / "data" / "tiktoken_cache")
    if not torch.cuda.is_available():
        capsys.readouterr()
        assert gpu_check.main(["--data", str(tmp_path / "data")]) == 2
        printed = capsys.readouterr().out
        assert printed.startswith("error: the GPU check needs a CUDA GPU")
        assert "python -m bench.gpu_check --cpu" in printed
        assert printed.count("\n") == 1


def test_a_rehearsal_without_triton_is_one_line_that_says_to_install_it(check_data, tmp_path, monkeypatch, capsys):
    """Triton is the suite's (requirements-test.txt), not the lab's: a rehearsal where it is missing says so
    before any section runs, instead of failing its kernel sections with another reason."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "triton" else real(name, *a))
    assert gpu_check.main(["--cpu", "--data", check_data, "--out", str(tmp_path / "out")]) == 2
    printed = capsys.readouterr().out
    assert printed.startswith("error: the rehearsal runs the Triton kernels") and "pip install triton" in printed
    assert printed.count("\n") == 1 and not os.path.exists(tmp_path / "out")


def test_torchrun_that_times_out_is_a_failed_check_not_a_lost_section(check_data, tmp_path, monkeypatch):
    """The DDP path of two or more GPUs, forced on the CPU (2 gloo processes): the one-rank collective runs and
    is kept, the plain run trains, and a torchrun that outlives the section's time is a failed check with a
    reason, while the section's record (its figures, its other checks) stays."""
    real = subprocess.run

    def times_out(cmd, **kw):
        if cmd[1:3] != ["-m", "torch.distributed.run"]:  # (git, for the run's commit)
            return real(cmd, **kw)
        assert "--nproc_per_node=2" in cmd
        raise subprocess.TimeoutExpired(cmd, kw["timeout"])
    monkeypatch.setattr(subprocess, "run", times_out)
    sizes = dict(gpu_sections.SIZES["cpu"], ddp_processes=2)
    run = gpu_sections.Run("ddp", True, check_data, str(tmp_path / "w"), str(tmp_path / "ddp.json"),
                           time.time() + 60, sizes, stream=str(tmp_path / "figures.jsonl"), started=time.time())
    os.makedirs(run.work)
    gpu_sections.section_ddp(run)
    checks = {c["what"]: c for c in run.record["checks"]}
    assert checks["gloo: a one-rank group on cpu, all_reduce and barrier"]["passed"]
    failed = checks["torchrun (2 processes, gloo) logs the plain run's losses"]
    assert not failed["passed"] and failed["detail"].startswith("torchrun did not finish in")
    assert run.record["error"] is None and run.record["figures"]["setup"]["processes"] == 2
    assert json.load(open(tmp_path / "ddp.json"))["checks"] == run.record["checks"]


def gpu_results():
    """A GPU run's results as the sections write them (figures made up, shapes real)."""
    c = {"mode": "gpu", "date": "today", "commit": "abc1234", "device": "NVIDIA H100 80GB HBM3", "gpus": 1,
         "capability": "9.0", "memory_gb": 79.2, "driver": "550.54.15", "nccl": "2.21.5", "torch": "2.11.0+cu128",
         "cuda": "12.8", "triton": "3.6.0", "transformers": "5.17.0", "python": "3.12.3"}
    section = lambda figures, checks=(): {"budget_s": 100, "elapsed_s": 50.0, "passed": True, "error": None,  # noqa
                                          "notes": [], "checks": list(checks), "figures": figures}
    tables = {"float32": {"1": {"ours, eager": {"tokens_per_s": 400.0, "same_tokens": True},
                                "ours, compiled": {"tokens_per_s": 2400.0, "same_tokens": True, "compile_s": 30.0}}}}
    return {"conditions": c, "elapsed_s": 400.0, "passed": False, "sections": {
        "kernels": section({"tolerance": {"float32": 1e-4, "bfloat16": 3e-2},
                            "errors": {"rms_norm, float32": {"y": 1e-7, "dx": 2e-7, "seconds": 1.0},
                                       "rms_norm, bfloat16": {"y": 4e-3, "dx": 5e-2, "seconds": 1.0}}},
                           [{"what": "rms_norm, float32", "passed": True, "detail": ""},
                            {"what": "rms_norm, bfloat16", "passed": False, "detail": "worst dx 5.0e-02"}]),
        "scan": section({"results": {"1024": {"triton": {"ms": 1.0, "speedup": 40.0, "extra_mb": 9.0}},
                                     "4096": {"triton": {"ms": 3.0, "speedup": 50.0, "extra_mb": 24.0}}}}),
        "decode": section({"rerecord": {"generate_calls": 10, "graph_captures": 0, "caches_allocated": 0,
                                        "graphs_compiled": 0}, "graph_breaks": {"decode step": 0},
                           "speed": {"tokens": 128, "rounds": 2, "prompt": "Once", "tables": tables}},
                          [{"what": "golden text, compiled step", "passed": True, "detail": ""}]),
        "ddp": section({"collective": {"backend": "nccl", "device": "cuda", "world_size": 1, "seconds": 2.0,
                                       "equal": True}, "setup": {"processes": 1}}),
        "mfu": section({"results": {"eager": {"step_ms": 90.0, "tokens_per_s": 1.8e5, "warmup_s": 2.0, "mfu": 0.21},
                                    "compiled": {"step_ms": 60.0, "tokens_per_s": 2.7e5, "warmup_s": 40.0,
                                                 "mfu": 0.32, "graph_breaks": 2}}}),
        "sst2": section({"run": {"best_checkpoint_s": 71.5}})}}


def test_every_target_gets_a_verdict_with_its_figure_and_threshold(tmp_path):
    """From a GPU run's figures: pass, FAIL or not measured for each target of the GPU table, each with its
    figure and threshold, in the markdown too, with the device's conditions."""
    results = gpu_results()
    results["verdicts"] = gpu_check.verdicts(results, "gpu")
    v = {r["target"].split(",")[0] if r["target"].startswith("Triton kernels") else r["target"]: r
         for r in results["verdicts"] if not r["target"].startswith("Triton kernels")}
    kernels = [r for r in results["verdicts"] if r["target"].startswith("Triton kernels")]
    assert [r["verdict"] for r in kernels] == ["pass", "FAIL"] and "5.0e-02" in kernels[1]["figure"]
    assert v["Triton scan >= 10x the sequential scan at T = 1,024"]["verdict"] == "pass"
    flat = v["Triton scan's memory beyond inputs, gradients and output flat in T"]
    assert flat["verdict"] == "FAIL" and flat["figure"] == "9.0 MB at T = 1,024, 24.0 MB at T = 4,096"
    assert v["config/sst2_recurrent.py to its best checkpoint, from its process's start"]["verdict"] == "FAIL"
    mfu = v["MFU of the baseline encoder, bf16, batch 64 x 256 tokens, a training step"]
    assert mfu["verdict"] == "pass" and mfu["figure"] == "32.0% (compiled)" and mfu["threshold"] == ">= 30 %"
    decode = v["CUDA-graph decode >= 5x eager at batch 1, float32, with llama2.c's golden text"]
    assert decode["verdict"] == "pass" and decode["figure"].startswith("6.0x")
    assert v["no CUDA-graph re-recording over 10 generate calls"]["verdict"] == "pass"
    breaks = v["graph breaks, counted for every compiled figure"]
    assert breaks["verdict"] == "FAIL" and "mfu: compiled 2" in breaks["figure"]
    assert v["NCCL: a communicator and an all_reduce on one device"]["verdict"] == "pass"
    assert v["DDP (torchrun, NCCL) logs one process's losses"] == {
        "target": "DDP (torchrun, NCCL) logs one process's losses", "verdict": "not measured",
        "figure": "needs 2 GPUs: not run", "threshold": "relative difference <= 0.002"}
    gpu_check.write_results(str(tmp_path), results)
    md = open(tmp_path / "gpu_check.md").read()
    assert "Device: NVIDIA H100 80GB HBM3 (1 GPU(s), compute capability 9.0, 79.2 GB, driver 550.54.15, NCCL " in md
    assert "torch 2.11.0+cu128 (CUDA 12.8), Triton 3.6.0, transformers 5.17.0" in md
    assert "| float32 | 1 | ours, compiled | 2,400 | yes | 30.0 |" in md and "0 CUDA graph captures" in md
    assert "| MFU of the baseline encoder, bf16, batch 64 x 256 tokens, a training step | pass | 32.0% (compiled) |" in md
    assert "| compiled | 60.0 |" in md and "A one-rank nccl group on cuda" in md
