"""
bench/gpu_check.py, the one command a GPU session runs first, rehearsed on the CPU so that it never meets a device
untried: the command as shipped (`python3 -m bench.gpu_check --cpu --out DIR`, budgets on, in a process of its own)
passes every section and writes everything under DIR as it goes; a section that overruns or fails costs only
itself and keeps what it measured; a check stopped or killed takes its sections' processes with it; the budgets
and the start-up fit in 7 minutes; a missing data folder is prepared or refused in one line; and every target
of docs/speed.md's GPU table gets a verdict from the figures, SST-2's from a run cut before its end too.
"""

import importlib
import json
import os
import signal
import subprocess
import sys
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
    os.symlink(tiny_dataset, root / "sst2_glue_heldout_compact")
    os.symlink(llamas, root / "tinyllamas")
    data.prepare("shakespeare_char", mirror=char_mirror, out_dir=str(root / "shakespeare_char"), verbose=False)
    return str(root)


def test_the_rehearsal_as_shipped_passes_and_writes_everything_under_out(check_data, tmp_path):
    """The documented rehearsal, `python3 -m bench.gpu_check --cpu --data DIR --out DIR`, as a process of its own
    with its budgets: every section passes (33-44 s on the loaded 2-core VM; its budgets bound it, not this test);
    what comes back is under --out, four plain files and no folder (a borrowed GPU machine returns at most 8 files:
    results, verdicts, each figure as a JSON line, every section's output), its scratch is gone, and each target of
    the GPU table has a verdict."""
    out, own_tmp = tmp_path / "check", tmp_path / "tmp"  # its own TMPDIR: other tests' checks make scratch too
    own_tmp.mkdir()
    t0 = time.time()
    done = subprocess.run([sys.executable, "-m", "bench.gpu_check", "--cpu", "--data", check_data, "--out", str(out)],
                          cwd=gpu_sections.ROOT, capture_output=True, text=True, timeout=150,
                          env={**os.environ, "TMPDIR": str(own_tmp)})
    wall = time.time() - t0
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(os.listdir(out)) == sorted(gpu_check.RETURNED) == ["figures.jsonl", "gpu_check.json", "gpu_check.md",
                                                                     "sections.log"]
    assert all(os.path.isfile(out / f) for f in gpu_check.RETURNED)
    assert not [f for f in os.listdir(own_tmp) if f.startswith("gpu_check_work_")]  # its scratch removed at the end
    results = json.load(open(out / "gpu_check.json"))
    assert results["passed"] and list(results["sections"]) == list(gpu_check.SECTIONS)
    assert list(gpu_check.SECTIONS)[0] == "sst2"  # the headline target first
    assert results["conditions"]["mode"] == "cpu rehearsal" and results["conditions"]["torch"] == torch.__version__
    assert 0 < results["startup_s"] < wall and results["stopped"] is None
    log = open(out / "sections.log").read()  # each section's output under its heading, in the order they ran
    headings = [line.split(":")[0].strip("= ") for line in log.splitlines() if line.startswith("=" * 20)]
    assert headings == list(gpu_check.SECTIONS) and "[ddp] ok   gloo: a one-rank group on cpu" in log
    lines = [json.loads(line) for line in open(out / "figures.jsonl")]
    figures = {(r["section"], r["figure"]["key"]) for r in lines if "figure" in r}
    assert {("kernels", "errors"), ("scan", "results"), ("decode", "rerecord"), ("decode", "speed"),
            ("ddp", "collective"), ("ddp", "module"), ("ddp", "losses"), ("train", "runs"), ("mfu", "results"),
            ("sst2", "evaluations"), ("sst2", "run"), ("decode", "compile_s"), ("mfu", "compile_s")} <= figures
    # SST-2's evaluations, each streamed as it landed: before the run's own figure, in step order
    sst2 = [r for r in lines if r.get("section") == "sst2" and "figure" in r]
    keys = [r["figure"]["key"] for r in sst2]
    assert keys.index("evaluations") < keys.index("run")
    evaluations = results["sections"]["sst2"]["figures"]["evaluations"]
    assert [e["iter"] for e in evaluations] == [2, 4] and evaluations[0]["best"]
    assert all(0 < e["s"] < wall for e in evaluations)
    s = results["sections"]
    assert s["decode"]["figures"]["rerecord"] == {"generate_calls": 3, "graph_captures": None, "caches_allocated": 0,
                                                  "graphs_compiled": 0}
    assert s["ddp"]["figures"]["collective"]["equal"] and s["ddp"]["figures"]["setup"]["processes"] == 1
    assert s["ddp"]["figures"]["module"]["error"] <= 1e-5 and s["ddp"]["figures"]["losses"]["max_rel_diff"] <= 2e-3
    assert "train.py joins the process group" in " ".join(s["ddp"]["notes"])  # (and does not wrap one rank in DDP)
    verdicts = {v["target"]: v for v in results["verdicts"]}
    assert len(verdicts) == 12 and all(v["verdict"] in ("pass", "not measured") for v in verdicts.values())
    assert verdicts["DDP (torchrun, NCCL) logs one process's losses"]["verdict"] == "pass"
    assert verdicts["graph breaks, counted for every compiled figure"]["verdict"] == "pass"
    md = open(out / "gpu_check.md").read()
    assert md.startswith("# GPU check (cpu rehearsal): passed")
    for line in ("| target | verdict | figure | threshold |", "## kernels: passed", "| rms_norm, bfloat16 |",
                 "| 8 | triton |", "| float32 | 1 | ours, compiled |", "| sst2_recurrent, bf16, Triton kernels |",
                 "1 process under torchrun (gloo) against one plain process.", "| compiled |", "| 2 | ",
                 "Compiles (cold): decode step ", "Compiles (cold): mfu, compiled "):
        assert line in md, line
    assert "all sections: passed" in done.stdout and "not measured" in done.stdout
    # the Triton it vouches for, by name: the one whose interpreter ran the kernels (issue 65: another may fail)
    vouch = f"so it vouches for Triton {importlib.import_module('triton').__version__} alone"
    assert results["conditions"]["triton"] == importlib.import_module("triton").__version__
    assert vouch in done.stdout and vouch in md


def alive(pid):
    """Whether process `pid` runs (a zombie, dead and not yet reaped by its new parent, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def gone(pids, within=10.0):
    """Whether every one of `pids` is gone within `within` seconds."""
    end = time.time() + within
    while any(alive(p) for p in pids) and time.time() < end:
        time.sleep(0.1)
    return not any(alive(p) for p in pids)


def test_a_section_stopped_or_failing_costs_only_itself_and_keeps_its_figures(tmp_path, capsys, monkeypatch):
    """Each section in its own process: one that overruns its budget is stopped with the processes it started,
    keeps the figure it wrote before and says where it was stopped; one that raises records its error in one
    line; the check goes on, and the exit status says it failed. (Sections that only sleep and raise: the forked
    processes run no torch op.)"""
    def sleeps(run):
        run.figure("first", 1.5)
        run.figure("child", subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]).pid)
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
    assert scan["figures"]["first"] == 1.5 and ddp["figures"] == {"before": 2}
    assert gone([scan["figures"]["child"]])  # the section's own child, stopped with it
    assert ddp["error"] == "DataError: no prepared dataset in nowhere"
    streamed = [json.loads(line) for line in open(out / "figures.jsonl")]
    assert any(r.get("section") == "scan" and r.get("figure") == {"key": "first", "value": 1.5} for r in streamed)
    md = open(out / "gpu_check.md").read()
    assert "## scan: FAILED" in md and "## ddp: FAILED" in md and "Error: `DataError" in md
    assert "ddp: FAILED: DataError" in capsys.readouterr().out


DRIVER = """
import os, subprocess, sys, time
sys.path.insert(0, {root!r})
from bench import gpu_check

def sleeps(run):  # a section that starts a process of its own and waits
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    with open({pids!r} + ".tmp", "w") as f:
        f.write(f"{{os.getpid()}} {{child.pid}}")
    os.replace({pids!r} + ".tmp", {pids!r})
    time.sleep(120)

gpu_check.SECTIONS = {{"ddp": gpu_check.Section(sleeps, {{"cpu": 100, "gpu": 100}}, "sleeps")}}
gpu_check.NEEDED = ()
gpu_check.FORK = {fork}
gpu_check.section_command = lambda argv: [sys.executable, __file__, "section"] + argv  # this file, fresh
if sys.argv[1:2] == ["section"]:
    sys.exit(gpu_check.main(sys.argv[2:]))
sys.exit(gpu_check.main(["--cpu", "--sections", "ddp", "--data", {data!r}, "--out", {out!r}]))
"""


@pytest.mark.parametrize("fork, sig", [(True, signal.SIGTERM), (False, signal.SIGKILL)],
                         ids=["forked section, check stopped by SIGTERM", "fresh interpreter, check killed"])
def test_a_stopped_or_killed_check_takes_its_sections_down(tmp_path, fork, sig):
    """A check stopped (SIGTERM, as a timeout sends it) stops its running section and the processes that
    started, writes what it has (the section's error says the check was stopped) and exits 128 + 15; a check
    killed outright (SIGKILL) leaves no section behind either: the kernel tells the section (PR_SET_PDEATHSIG),
    which stops its process group. Both ways of starting a section: a fork (the CPU's) and a fresh interpreter
    (the GPU's), the check's real code in a process of its own."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG and /proc are Linux's")
    pids, out = tmp_path / "pids", tmp_path / "out"
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER.format(root=gpu_sections.ROOT, pids=str(pids), fork=fork, data=str(tmp_path),
                                    out=str(out)))
    check = subprocess.Popen([sys.executable, str(driver)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    end = time.time() + 60
    while not pids.exists() and check.poll() is None and time.time() < end:
        time.sleep(0.1)
    assert pids.exists(), check.communicate(timeout=5)[0] if check.poll() is not None else "no section in 60 s"
    section, child = map(int, pids.read_text().split())
    assert alive(section) and alive(child)
    check.send_signal(sig)
    printed = check.communicate(timeout=30)[0]
    assert gone([section, child]), printed
    if sig == signal.SIGTERM:
        assert check.returncode == 128 + signal.SIGTERM, printed
        results = json.load(open(out / "gpu_check.json"))
        assert results["stopped"] == "SIGTERM" and not results["passed"]
        assert results["sections"]["ddp"]["error"].startswith("the check was stopped (SIGTERM)")
        assert "STOPPED by SIGTERM" in open(out / "gpu_check.md").read()
    else:
        assert check.returncode == -signal.SIGKILL


def test_budgets_and_start_up_fit_in_seven_minutes():
    """The GPU budgets, the check's start-up and the grace after the last section stay within 7 minutes (420 s) of
    the device's 10-minute limit for one command; each compile's estimate, with its margin, fits in its section's
    budget."""
    budgets = {name: s.budget_s["gpu"] for name, s in gpu_check.SECTIONS.items()}
    assert gpu_check.TOTAL_S["gpu"] == sum(budgets.values()) + gpu_check.GRACE_S
    assert gpu_check.STARTUP_S + gpu_check.TOTAL_S["gpu"] <= gpu_check.LIMIT_S == 420
    assert list(budgets)[0] == "sst2" and budgets["sst2"] > 60  # the goal's 60 s, and the run's end after it
    for section, compile_name in (("decode", "decode step"), ("train", "train, compiled"), ("mfu", "mfu, compiled")):
        budgeted = gpu_sections.COMPILE_MARGIN * gpu_sections.COMPILE_S["gpu"][compile_name]
        assert budgeted + 6 < budgets[section], (section, budgeted, budgets[section])  # (6 s: the process's start)


def test_sst2_evaluations_land_as_they_are_written(tmp_path):
    """SST-2's run is followed as it trains: each evaluation record its log.jsonl gains is a figure in
    figures.jsonl within a fraction of a second, a new best timed by ckpt.pt's write, so a section stopped before
    the run ends keeps them all."""
    out_dir = tmp_path / "run"
    out_dir.mkdir()
    stream = tmp_path / "figures.jsonl"
    run = gpu_sections.Run("sst2", True, str(tmp_path), str(tmp_path), str(tmp_path / "sst2.json"),
                           time.time() + 60, gpu_sections.SIZES["cpu"], stream=str(stream), started=time.time() - 5)

    def streamed():
        if not stream.exists():
            return []
        return [json.loads(line)["figure"]["value"] for line in open(stream) if '"figure"' in line]

    def append(record, partial=""):
        with open(out_dir / "log.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n" + partial)
    with gpu_sections.evaluations_as_they_land(run, str(out_dir), every=0.05):
        append({"type": "train", "iter": 1, "loss": 0.7})
        (out_dir / "ckpt.pt").write_text("weights")
        append({"type": "eval", "iter": 2, "best": True, "val_loss": 0.69, "val_accuracy": 0.61},
               partial='{"type": "ev')
        time.sleep(0.5)
        first = streamed()
        assert first and first[-1] == [{"iter": 2, "val_loss": 0.69, "val_accuracy": 0.61, "best": True,
                                        "s": first[-1][0]["s"]}]
        assert 5 <= first[-1][0]["s"] < 7  # ckpt.pt's write, counted from the section's process start
        with open(out_dir / "log.jsonl", "a") as f:  # the rest of the line that was being written
            f.write('al", "iter": 4, "best": false, "val_loss": 0.71}\n')
    assert [e["iter"] for e in streamed()[-1]] == [2, 4] and run.record["figures"]["evaluations"][1]["best"] is False


def test_a_section_in_a_fresh_interpreter_as_on_a_gpu(check_data, tmp_path, monkeypatch):
    """The GPU's way of starting a section (a new `python3 -m bench.gpu_check --section ...` process, sys.executable,
    not a fork), taken on the CPU with the cheapest section: its arguments make the trip, its record and log come
    back, and SST-2's evaluations are followed from that process as they land."""
    monkeypatch.setattr(gpu_check, "FORK", False)
    sst2 = gpu_check.SECTIONS["sst2"]  # (a new interpreter imports torch: seconds more than a fork on a busy CPU)
    monkeypatch.setitem(gpu_check.SECTIONS, "sst2", gpu_check.Section(sst2.run, {"cpu": 60}, sst2.what))
    assert gpu_check.section_command(["--section", "sst2"])[:3] == [sys.executable, "-m", "bench.gpu_check"]
    out = tmp_path / "check"
    assert gpu_check.main(["--cpu", "--sections", "sst2", "--data", check_data, "--out", str(out), "--work",
                           str(tmp_path / "work")]) == 0
    sst2 = json.load(open(out / "gpu_check.json"))["sections"]["sst2"]
    assert sst2["passed"] and [e["iter"] for e in sst2["figures"]["evaluations"]] == [2, 4]
    assert "[sst2] ok   config/sst2_recurrent.py trains to its best checkpoint" in open(out / "sections.log").read()
    assert os.path.isdir(tmp_path / "work" / "sst2")  # --work given: the section's scratch is kept there


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
    assert printed.count("\n") == 1 and "python3 -m bench.gpu_check --prepare --data" in printed
    mirror = tmp_path / "mirror"
    (mirror / "tinyllamas" / "stories260K").mkdir(parents=True)
    (mirror / "tinyllamas" / "stories260K" / "stories260K.bin").write_text("weights")
    (mirror / "tinyllamas" / "stories260K" / "tok512.bin").write_text("tokenizer")
    (mirror / "tiktoken_cache").mkdir()
    monkeypatch.setenv("DATA_MIRROR", str(mirror))
    made = []

    def prepared(dataset, mirror, out_dir, **kw):
        made.append(os.path.basename(out_dir))
        os.makedirs(out_dir)
        open(os.path.join(out_dir, "meta.json"), "w").write("{}")
    monkeypatch.setattr(data, "prepare", prepared)
    assert gpu_check.main(["--prepare", "--data", str(tmp_path / "data")]) == 0
    assert made == ["sst2_glue_heldout_compact", "shakespeare_char"]
    assert all(os.path.isfile(tmp_path / "data" / p) for p in gpu_check.NEEDED)
    assert os.path.isdir(tmp_path / "data" / "tiktoken_cache")
    if not torch.cuda.is_available():
        capsys.readouterr()
        assert gpu_check.main(["--data", str(tmp_path / "data")]) == 2
        printed = capsys.readouterr().out
        assert printed.startswith("error: the GPU check needs a CUDA GPU")
        assert "python3 -m bench.gpu_check --cpu" in printed
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
                                       "equal": True},
                        "module": {"seconds": 1.0, "error": 3e-7, "parameters": 64, "unused": [],
                                   "model": "study baseline 6x384", "batch": 8, "T": 64},
                        "setup": {"processes": 1, "what": "config/sst2_recurrent.py, dropout 0", "steps": 40,
                                  "dtype": "float32", "grad_accum": 1, "backend": "nccl"},
                        "losses": {"best_val_loss": [0.69, 0.69], "max_rel_diff": 1e-7}}),
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
    assert v["DistributedDataParallel on a one-rank NCCL group: the plain module's gradients"]["verdict"] == "pass"
    assert v["DDP (torchrun, NCCL) logs one process's losses"] == {
        "target": "DDP (torchrun, NCCL) logs one process's losses", "verdict": "pass",
        "figure": "1.0e-07 (1 process under torchrun)", "threshold": "relative difference <= 0.002"}
    gpu_check.write_results(str(tmp_path), results)
    md = open(tmp_path / "gpu_check.md").read()
    assert "Device: NVIDIA H100 80GB HBM3 (1 GPU(s), compute capability 9.0, 79.2 GB, driver 550.54.15, NCCL " in md
    assert "torch 2.11.0+cu128 (CUDA 12.8), Triton 3.6.0, transformers 5.17.0" in md
    assert "| float32 | 1 | ours, compiled | 2,400 | yes | 30.0 |" in md and "0 CUDA graph captures" in md
    assert "| MFU of the baseline encoder, bf16, batch 64 x 256 tokens, a training step | pass | 32.0% (compiled) |" in md
    assert "| compiled | 60.0 |" in md and "A one-rank nccl group on cuda" in md
    assert "1 process under torchrun (nccl) against one plain process" in md


@pytest.mark.parametrize("evaluations, verdict, figure", [
    ([(500, True, 31.0), (1000, True, 44.5), (1500, False, 58.0)], "not measured",
     "cut before the run ended: its last best checkpoint so far written at 44.5 s (3 evaluations)"),
    ([(500, True, 31.0), (1000, True, 61.2)], "FAIL",
     "cut before the run ended: its last best checkpoint so far written at 61.2 s (2 evaluations)"),
    ([], "not measured", "not reached")])
def test_sst2_cut_before_its_end_is_judged_from_the_evaluations_it_reached(tmp_path, evaluations, verdict, figure):
    """SST-2 stopped at its budget before its run ended has no time to its best checkpoint, but its evaluations:
    a best written at 60 s or later fails the goal already; one written before may still be followed by a
    better one (not measured, with what it reached); none reached, not measured. The table shows each."""
    results = gpu_results()
    results["sections"]["sst2"]["figures"] = {"evaluations": [{"iter": i, "val_loss": 0.5, "val_accuracy": 0.75,
                                                               "best": b, "s": t} for i, b, t in evaluations]}
    results["verdicts"] = gpu_check.verdicts(results, "gpu")
    v = next(r for r in results["verdicts"] if r["target"].startswith("config/sst2_recurrent.py"))
    assert (v["verdict"], v["figure"]) == (verdict, figure)
    gpu_check.write_results(str(tmp_path), results)
    md = open(tmp_path / "gpu_check.md").read()
    assert all(f"| {i} | 0.5000 | 0.7500 | {'yes' if b else ''} | {t:.1f} |" in md for i, b, t in evaluations)


def test_the_check_reads_sst2_where_and_as_the_config_trains_it():
    """The one folder name the check prepares SST-2 into and trains from is data.py's default folder for the
    protocol that config/sst2_recurrent.py trains on (the check once prepared `glue` after the configs moved on)."""
    import train
    cfg = train.make_config([os.path.join(gpu_sections.ROOT, "config", "sst2_recurrent.py")])
    assert cfg["protocol"] == gpu_sections.SST2_PROTOCOL == "glue_heldout"
    folder = data.dataset_dir("sst2", gpu_sections.SST2_PROTOCOL, "compact")
    assert folder == os.path.join("data", gpu_sections.SST2_FOLDER)
    assert f"{gpu_sections.SST2_FOLDER}/meta.json" in gpu_check.NEEDED
    assert gpu_sections.TRAIN_CASES["sst2_recurrent"][1] == gpu_sections.SST2_FOLDER
