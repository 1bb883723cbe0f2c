"""
bench/gpu_check.py, the one command a GPU session runs first, rehearsed on the CPU so that it never meets a device
untried: every section at the smallest sizes (Triton in its interpreter, torch.compile capturing graphs with
dynamo's 'eager' backend), then what it writes; and a section that fails, in its own process, costs only itself.
"""

import json
import os

import pytest
import torch

import data
from bench import gpu_check, gpu_sections


@pytest.fixture
def check_data(tmp_path, tiny_dataset, char_mirror, char_digest):
    """A --data folder as the README's GPU section prepares one, from the test fixtures: a prepared SST-2 (the
    tiny fake one), a prepared tinyshakespeare (the fake corpus) and the mirror's stories260K. The rehearsal runs
    the Triton kernels in Triton's interpreter: without triton (requirements-test.txt brings it), it skips."""
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


# the rehearsal's sizes, smaller still: every code path, a few seconds a section
SMALLEST = dict(gpu_sections.SIZES["cpu"], kernel_shape=(1, 5, 16, 2, 24), scan_shape=(1, 5, 3, 2), scan_chunk=2,
                scan_lengths=(8,), scan_dims=(1, 2, 2), golden_tokens=24, gen_tokens=3, gen_batches=(1,),
                rerecord_calls=3, train_steps=2, ddp_steps=2)


def test_the_rehearsal_runs_every_section_and_writes_its_tables(check_data, tmp_path, monkeypatch):
    """`python -m bench.gpu_check --cpu` with every section, in this process (--in_process: the sections' own
    processes cost seconds each; test_a_failing_section_costs_only_itself runs one): every check passes, and the
    results name the conditions, each section's figures and its table. The training runs are cut to one model, the recurrent
    encoder, in each variant."""
    monkeypatch.setitem(gpu_sections.SIZES, "cpu", SMALLEST)
    monkeypatch.setattr(gpu_sections, "TRAIN_CASES", {"sst2_recurrent": gpu_sections.TRAIN_CASES["sst2_recurrent"]})
    monkeypatch.setenv("DATA_MIRROR", os.environ["DATA_MIRROR"])  # (the rehearsal sets it to --data: put back after)
    out = str(tmp_path / "results" / "check")
    code = gpu_check.main(["--cpu", "--in_process", "--data", check_data, "--out", out, "--work", str(tmp_path / "w")])
    results = json.load(open(out + ".json"))
    failed = [(name, c) for name, r in results["sections"].items() for c in r["checks"] if not c["passed"]]
    assert code == 0 and results["passed"] and not failed, failed
    assert list(results["sections"]) == list(gpu_check.SECTIONS)
    assert results["conditions"]["mode"] == "cpu rehearsal" and results["conditions"]["torch"] == torch.__version__
    s = results["sections"]
    errors = s["kernels"]["figures"]["errors"]
    assert len(errors) == 11 + 6  # float32: every case; bfloat16: all but the 5 of attention (the interpreter)
    assert all(e["y"] <= gpu_sections.KERNEL_TOLERANCE[what.rsplit(", ", 1)[1]] for what, e in errors.items())
    assert set(s["scan"]["figures"]["results"]["8"]) == {"sequential", "parallel", "chunked", "triton"}
    assert s["decode"]["figures"]["rerecord"] == {"generate_calls": 3, "graph_captures": None, "caches_allocated": 0,
                                                  "graphs_compiled": 0}
    assert set(s["decode"]["figures"]["speed"]["tables"]) == {"float32", "bfloat16"}
    runs = s["train"]["figures"]["runs"]
    assert list(runs) == ["sst2_recurrent, float32", "sst2_recurrent, bf16, Triton kernels",
                          "sst2_recurrent, as configured", "sst2_recurrent, bf16, Triton kernels, compiled"]
    assert runs["sst2_recurrent, bf16, Triton kernels"]["early_rel_diff"] <= gpu_sections.TRAIN_LOSS_TOLERANCE
    assert s["ddp"]["figures"]["losses"]["max_rel_diff"] <= gpu_sections.DDP_LOSS_TOLERANCE
    md = open(out + ".md").read()
    assert md.startswith("# GPU check (cpu rehearsal): passed")
    for line in ("## kernels: passed", "| rms_norm, bfloat16 |", "| 8 | triton |", "| float32 | 1 | ours, compiled |",
                 "| sst2_recurrent, bf16, Triton kernels |", "1 process(es) under torchrun (gloo)"):
        assert line in md, line


def test_a_failing_section_costs_only_itself(tmp_path, capsys, monkeypatch):
    """Each section in its own process: one that overruns its budget is stopped (here the scan, given 1 s: it
    is still importing torch), one whose data is missing fails; each records its error in one line, the check
    goes on from one to the next, and the exit status says it failed. Without CUDA and without --cpu, the
    check says in one line what it needs."""
    scan = gpu_check.Section(gpu_sections.section_scan, {"cpu": 1}, "the scan")
    monkeypatch.setitem(gpu_check.SECTIONS, "scan", scan)
    monkeypatch.setattr(gpu_check, "GRACE_S", 0)
    empty = tmp_path / "empty"
    empty.mkdir()
    out = str(tmp_path / "check")
    code = gpu_check.main(["--cpu", "--sections", "scan", "ddp", "--data", str(empty), "--out", out,
                           "--work", str(tmp_path / "w")])
    results = json.load(open(out + ".json"))
    scan, ddp = results["sections"]["scan"], results["sections"]["ddp"]
    assert code == 1 and not results["passed"] and not scan["passed"] and not ddp["passed"]
    assert scan["error"] == "stopped at its budget of 1 s" and scan["elapsed_s"] < 10
    assert ddp["error"].startswith("DataError: no prepared dataset in") and "\n" not in ddp["error"]
    md = open(out + ".md").read()
    assert "## scan: FAILED" in md and "## ddp: FAILED" in md and "Error: `DataError" in md
    printed = capsys.readouterr().out
    assert "ddp: FAILED: DataError" in printed and "lacks sst2_glue_compact/meta.json" in printed
    if not torch.cuda.is_available():
        assert gpu_check.main([]) == 2
        printed = capsys.readouterr().out
        assert "needs a CUDA GPU" in printed and "python -m bench.gpu_check --cpu" in printed
        assert printed.count("\n") == 1


def test_a_gpu_results_file_names_the_device_and_each_figure(tmp_path):
    """The markdown of a GPU run (conditions as `conditions` writes them on CUDA; one section's figures as the
    decode section records them) names the device, driver and versions, and draws the section's table."""
    results = {"conditions": {"mode": "gpu", "date": "today", "commit": "abc1234", "device": "NVIDIA H100 80GB HBM3",
                              "gpus": 1, "capability": "9.0", "memory_gb": 79.2, "driver": "550.54.15",
                              "nccl": "2.21.5", "torch": "2.11.0+cu128", "cuda": "12.8", "triton": "3.6.0",
                              "transformers": "5.17.0", "python": "3.12.3"},
               "elapsed_s": 400.0, "passed": False,
               "sections": {"decode": {"budget_s": 120, "elapsed_s": 80.0, "passed": False, "error": None, "notes": [],
                                       "checks": [{"what": "golden text, compiled step", "passed": False,
                                                   "detail": "differs from character 7"}],
                                       "figures": {"rerecord": {"generate_calls": 10, "graph_captures": 0,
                                                                "caches_allocated": 0, "graphs_compiled": 0},
                                                   "speed": {"tokens": 256, "rounds": 2, "prompt": "Once",
                                                             "tables": {"bfloat16": {"32": {"ours, compiled": {
                                                                 "tokens_per_s": 51234.5, "same_tokens": True,
                                                                 "compile_s": 12.5}}}}}}}}}
    gpu_check.write_results(str(tmp_path / "r"), results)
    md = open(tmp_path / "r.md").read()
    assert "Device: NVIDIA H100 80GB HBM3 (1 GPU(s), compute capability 9.0, 79.2 GB, driver 550.54.15, NCCL " in md
    assert "torch 2.11.0+cu128 (CUDA 12.8), Triton 3.6.0, transformers 5.17.0" in md
    assert "| bfloat16 | 32 | ours, compiled | 51,234 | yes | 12.5 |" in md and "0 CUDA graph captures" in md
    assert "- FAILED: golden text, compiled step: differs from character 7" in md
