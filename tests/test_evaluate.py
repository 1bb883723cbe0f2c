"""evaluate.py: metrics against hand-computed values, and the command line on a tiny checkpoint; bench/speed.py, the
speed benchmark, on tiny cases."""

import argparse
import contextlib
import json
import math
import os
import re
import sys

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import evaluate  # noqa: E402
from bench import speed  # noqa: E402
from bookkeeping import flops  # noqa: E402
from bookkeeping.checkpoints import save_checkpoint  # noqa: E402
from evaluation.options import ListSplit, read_tsv  # noqa: E402
from model import EncoderClassifier, EncoderConfig  # noqa: E402


def test_binary_metrics_by_hand():
    y_true = [1, 1, 1, 1, 0, 0, 0, 0, 0, 1]
    y_pred = [1, 1, 1, 0, 0, 0, 1, 0, 0, 0]
    # TP = 3, FN = 2, FP = 1, TN = 4
    m = evaluate.classification_metrics(y_true, y_pred, 2)
    assert m["confusion_matrix"] == [[4, 1], [2, 3]]  # rows true, columns predicted
    assert m["accuracy"] == pytest.approx(7 / 10)
    assert m["precision"] == pytest.approx(3 / 4)
    assert m["recall"] == pytest.approx(3 / 5)
    assert m["f1"] == pytest.approx(2 * 0.75 * 0.6 / (0.75 + 0.6))
    assert m["mcc"] == pytest.approx((3 * 4 - 1 * 2) / math.sqrt(4 * 5 * 5 * 6))


def test_multiclass_metrics_are_macro_and_mcc_matches_formula():
    y_true = [0, 0, 0, 1, 1, 2, 2, 2, 2]
    y_pred = [0, 1, 0, 1, 2, 2, 2, 0, 2]
    m = evaluate.classification_metrics(y_true, y_pred, 3)
    cm = np.array([[2, 1, 0], [0, 1, 1], [1, 0, 3]])
    assert m["confusion_matrix"] == cm.tolist()
    prec = [2 / 3, 1 / 2, 3 / 4]
    rec = [2 / 3, 1 / 2, 3 / 4]
    f1 = [2 * p * r / (p + r) for p, r in zip(prec, rec)]
    assert m["precision"] == pytest.approx(np.mean(prec))
    assert m["recall"] == pytest.approx(np.mean(rec))
    assert m["f1"] == pytest.approx(np.mean(f1))
    # Gorodkin's R_K: (c*s - sum p_k t_k) / sqrt((s^2 - sum p_k^2)(s^2 - sum t_k^2))
    c, s, p, t = 6, 9, cm.sum(0), cm.sum(1)
    expect = (c * s - p @ t) / math.sqrt((s * s - p @ p) * (s * s - t @ t))
    assert m["mcc"] == pytest.approx(expect)


def test_degenerate_predictions():
    perfect = evaluate.classification_metrics([0, 1, 1, 0], [0, 1, 1, 0], 2)
    assert perfect["mcc"] == pytest.approx(1.0) and perfect["f1"] == pytest.approx(1.0)
    inverted = evaluate.classification_metrics([0, 1, 1, 0], [1, 0, 0, 1], 2)
    assert inverted["mcc"] == pytest.approx(-1.0) and inverted["accuracy"] == 0.0
    constant = evaluate.classification_metrics([0, 1, 1, 0], [0, 0, 0, 0], 2)
    assert constant["mcc"] == 0.0 and constant["precision"] == 0.0 and constant["recall"] == 0.0


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory):
    """A tiny untrained classifier over the full GPT-2 vocabulary, saved as train.py would."""
    folder = tmp_path_factory.mktemp("evalckpt")
    torch.manual_seed(0)
    model = EncoderClassifier(EncoderConfig(vocab_size=50257 + 3, block_size=16, n_layer=1, n_embd=16, n_head=2,
                                            dropout=0.0))
    data_info = {"dir": str(folder / "nodata"), "dataset": "sst2", "task": "classification", "protocol": "glue",
                 "vocab": "full", "max_len": 16, "label_names": ["negative", "positive"], "tokenizer": "tiktoken:gpt2",
                 "preprocessing": "test"}
    paths = []
    for name in ("a", "b"):
        os.makedirs(folder / name)
        path = str(folder / name / "ckpt.pt")
        save_checkpoint(path, model, config={}, data=data_info, iter_num=7, epoch=0, best_val_loss=0.69)
        paths.append(path)
    tsv = folder / "labelled.tsv"
    tsv.write_text("sentence\tlabel\na fine film\t1\nawful , just awful\t0\n"
                   "a long one " + "word " * 40 + "\t1\n")
    return paths, str(tsv)


def test_text_given_twice_scores_both_sentences(tiny_ckpt, capsys):
    """--text given twice: each sentence gets its line, in the order given (before, only the last was scored)."""
    evaluate.main(["--ckpt", tiny_ckpt[0][0], "--text", "a gorgeous , witty film", "--text", "dull", "--device",
                   "cpu"])
    lines = [line for line in capsys.readouterr().out.splitlines() if re.search(r": (negative|positive)  \(", line)]
    assert len(lines) == 2, lines
    evaluate.main(["--ckpt", tiny_ckpt[0][0], "--text", "a gorgeous , witty film", "--device", "cpu"])
    assert capsys.readouterr().out.strip().splitlines()[-1] == lines[0]  # the first line is the first sentence's


def test_text_prints_label_with_probabilities(tiny_ckpt, capsys):
    evaluate.main(["--ckpt", tiny_ckpt[0][0], "--text", "a gorgeous , witty film", "--device", "cpu"])
    out = capsys.readouterr().out
    m = re.search(r": (negative|positive)  \(negative ([0-9.]+), positive ([0-9.]+)\)", out)
    assert m, out
    p_neg, p_pos = float(m.group(2)), float(m.group(3))
    assert p_neg + p_pos == pytest.approx(1.0, abs=2e-3)
    assert m.group(1) == ("positive" if p_pos > p_neg else "negative")


@pytest.mark.parametrize("text, message", [("   <br> ", "empty"), ("word " * 40, "at most 15")])
def test_text_errors_are_clear(tiny_ckpt, capsys, text, message):
    with pytest.raises(SystemExit) as e:
        evaluate.main(["--ckpt", tiny_ckpt[0][0], "--text", text, "--device", "cpu"])
    assert message in str(e.value)


def test_over_long_text_truncated_on_request(tiny_ckpt, capsys):
    evaluate.main(["--ckpt", tiny_ckpt[0][0], "--text", "word " * 40, "--truncate", "--device", "cpu"])
    assert "[truncated]" in capsys.readouterr().out


def test_not_a_checkpoint(tmp_path):
    bogus = tmp_path / "bogus.pt"
    bogus.write_bytes(os.urandom(256))
    plain = tmp_path / "plain.pt"
    torch.save({"weights": torch.zeros(2)}, plain)
    for path in (bogus, plain, tmp_path / "missing.pt"):
        with pytest.raises(SystemExit) as e:
            evaluate.main(["--ckpt", str(path), "--text", "fine"])
        assert "checkpoint" in str(e.value) and "Traceback" not in str(e.value)


def test_file_evaluation_side_by_side_and_json(tiny_ckpt, tmp_path, capsys):
    (a, b), tsv = tiny_ckpt
    out_json = tmp_path / "r.json"
    evaluate.main(["--ckpt", a, b, "--file", tsv, "--json", str(out_json), "--device", "cpu", "--repeats", "1",
                   "--timing"])
    out = capsys.readouterr().out
    assert "1 sentences truncated" in out
    header = [line for line in out.splitlines() if line.strip().startswith("a")][0]
    assert header.split() == ["a", "b"]  # two columns, named after the checkpoint folders
    results = json.loads(out_json.read_text())
    assert isinstance(results, list) and len(results) == 2
    keys = ["accuracy", "precision", "recall", "f1", "mcc", "params_total", "params_embedding",
            "params_non_embedding", "size_mb", "flops_per_sample", "latency_ms", "throughput"]
    for r in results:
        assert all(k in r for k in keys)
        assert r["n"] == 3 and sum(map(sum, r["confusion_matrix"])) == 3
        assert r["params_total"] == r["params_embedding"] + r["params_non_embedding"]
        assert r["size_mb"] == pytest.approx(r["params_total"] * 4 / 2**20)
        assert r["latency_ms"] > 0 and r["throughput"] > 0 and r["timed_compiled"] is False

    # the figures are those of the model's own predictions, scored here one sentence at a time
    model, ckpt = evaluate.load(a, "cpu")
    split, _ = read_tsv(tsv, evaluate.text_encoder(ckpt))
    with torch.no_grad():
        preds = [model(torch.from_numpy(split[i][0])[None])[0].argmax().item() for i in range(3)]
    assert results[0]["predictions"] == preds
    assert results[0]["accuracy"] == pytest.approx(np.mean(np.array(preds) == np.array([1, 0, 1])))
    assert results[0]["confusion_matrix"] == evaluate.confusion_matrix([1, 0, 1], preds, 2).tolist()


def test_compiled_timing(tiny_ckpt, tmp_path, monkeypatch):
    """--compile times the classifier compiled (dynamic shapes; CUDA graphs on a GPU). Dynamo's eager backend
    stands in for the compiler here, so the test checks the wiring in seconds: the same metrics, timed."""
    calls = []
    real_compile = torch.compile

    def compile_eager(model, **kw):
        calls.append(kw)
        return real_compile(model, backend="eager", dynamic=kw.get("dynamic"))

    monkeypatch.setattr(torch, "compile", compile_eager)
    (a, _), tsv = tiny_ckpt
    plain, compiled = tmp_path / "plain.json", tmp_path / "compiled.json"
    evaluate.main(["--ckpt", a, "--file", tsv, "--json", str(plain), "--device", "cpu", "--repeats", "1", "--timing"])
    evaluate.main(["--ckpt", a, "--file", tsv, "--json", str(compiled), "--device", "cpu", "--repeats", "1",
                   "--compile"])
    p, c = json.loads(plain.read_text()), json.loads(compiled.read_text())
    assert calls == [{"mode": "default", "dynamic": True}]
    assert c["timed_compiled"] is True and c["latency_ms"] > 0 and c["throughput"] > 0
    assert (c["accuracy"], c["confusion_matrix"]) == (p["accuracy"], p["confusion_matrix"])


def test_file_with_bad_line(tiny_ckpt, tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("sentence\tlabel\ngood\t1\nno label here\n")
    with pytest.raises(SystemExit) as e:
        evaluate.main(["--ckpt", tiny_ckpt[0][0], "--file", str(bad), "--no_timing"])
    assert "bad.tsv:3" in str(e.value)


def test_labelled_file_problems_are_one_line_naming_the_file(tiny_ckpt, tmp_path):
    cases = {"latin1.tsv": ("un café\t1\n".encode("latin-1"), "latin1.tsv: not UTF-8 text (invalid"),
             "blank.tsv": (b"good\t1\n<br />\t0\n", "blank.tsv:2: text '<br />' is empty after preprocessing"),
             "labels.tsv": (b"good\t1\nbad\t2\n", f"labels.tsv has labels [2]; {tiny_ckpt[0][0]} knows 0..1 "
                            f"(negative, positive)"),
             "header.tsv": (b"sentence\tlabel\n", "header.tsv holds no labelled lines")}
    for name, (payload, message) in cases.items():
        (tmp_path / name).write_bytes(payload)
        with pytest.raises(SystemExit) as e:
            evaluate.main(["--ckpt", tiny_ckpt[0][0], "--file", str(tmp_path / name), "--no_timing"])
        assert str(e.value).startswith("error: ") and message in str(e.value) and "\n" not in str(e.value), name


def test_checkpoint_of_a_training_run_on_its_test_split(tiny_cfg, tmp_path, capsys):
    """The default path: a checkpoint written by train.py, evaluated on its own run's test split,
    gives the accuracy train.py reported for its best checkpoint."""
    import train

    cfg = tiny_cfg(max_iters=6)
    summary = train.train(cfg)
    out_json = tmp_path / "r.json"
    evaluate.main(["--ckpt", os.path.join(cfg["out_dir"], "ckpt.pt"), "--no_timing", "--json", str(out_json)])
    r = json.loads(out_json.read_text())
    assert r["n"] == 8  # the tiny dataset's test split
    assert r["accuracy"] == pytest.approx(summary["test_accuracy"])
    assert r["f1"] == pytest.approx(summary["test_f1"]) and r["mcc"] == pytest.approx(summary["test_mcc"])
    assert r["loss"] == pytest.approx(summary["test_loss"], rel=1e-5)
    assert "latency_ms" not in r


# -----------------------------------------------------------------------------
# the speed benchmark (python -m bench.speed), on tiny cases

FAKE_NANOGPT = '''
from dataclasses import dataclass

import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    vocab_size: int
    block_size: int
    n_layer: int
    n_head: int
    n_embd: int
    dropout: float
    bias: bool


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.emb, self.head = nn.Embedding(cfg.vocab_size, cfg.n_embd), nn.Linear(cfg.n_embd, cfg.vocab_size)
        print("number of parameters: (nanoGPT prints this)")

    def forward(self, idx, targets):
        logits = self.head(self.emb(idx))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
'''


def test_bench_times_every_contestant_and_names_the_attention_kernel(tmp_path, monkeypatch, capsys):
    """bench/speed.py on two tiny cases: our model under each switch and a peer (a stand-in for nanoGPT's model.py,
    loaded from its path), all timed, ratios against our default row, the attention kernel that ran named,
    and the conditions saved. Hugging Face is hidden, so the test is the same with or without it."""
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError: no HF peers
    (tmp_path / "model.py").write_text(FAKE_NANOGPT)
    monkeypatch.setattr(speed, "BENCH_CASES", [
        speed.BenchCase("tiny encoder", "encoder", dict(n_layer=1, n_loops=2, n_embd=16, n_head=2, ffn_hidden=24),
                           4, 9),
        speed.BenchCase("tiny gpt", "gpt", dict(vocab_size=11, block_size=8, n_layer=1, n_embd=16, n_head=2,
                                                   dropout=0.0, bias=False), 2, 8)])
    out_json = tmp_path / "bench.json"
    speed.main(["--rounds", "1", "--bench_steps", "1", "--device", "cpu", "--nanogpt",
                   str(tmp_path / "model.py"), "--json", str(out_json)])
    out = capsys.readouterr().out
    saved = json.loads(out_json.read_text())
    assert saved["conditions"]["transformers"] is None and saved["conditions"]["torch"] == torch.__version__
    encoder, gpt = saved["cases"]
    assert (encoder["batch"], encoder["seq"]) == (4, 9)
    assert list(encoder["contestants"]) == ["ours", "ours, manual attention", "ours, manual norms"]
    assert list(gpt["contestants"]) == ["ours", "ours, manual attention", "ours, manual norms", "nanoGPT"]
    for case in saved["cases"]:
        rows = case["contestants"]
        assert rows["ours"]["train_ratio"] == 1.0 and rows["ours"]["infer_ratio"] == 1.0
        for row in rows.values():
            assert row["train_ms"] > 0 and row["infer_ms"] > 0 and row["peak_mb"] is None  # memory: CUDA only
            assert row["train_ratio"] == pytest.approx(row["train_ms"] / rows["ours"]["train_ms"])
        assert "scaled_dot_product" not in rows["ours"]["attention"] and "attention" in rows["ours"]["attention"]
        assert rows["ours, manual attention"]["attention"] == "math (matmul, softmax)"
    # the encoder is the recurrent model: 2 loops of 1 layer, 3x the analytic forward FLOPs per step
    from model import EncoderClassifier, EncoderConfig
    tiny = EncoderClassifier(EncoderConfig(vocab_size=speed.BENCH_VOCAB, n_layer=1, n_loops=2, n_embd=16, n_head=2,
                                           ffn_hidden=24))
    assert encoder["train_flops_per_step"] == 3 * flops.forward_flops(tiny, 9, 4)
    assert "tiny gpt: B=2, T=8" in out and re.search(r"^nanoGPT +[\d.]+", out, re.M)
    assert "number of parameters" not in out  # the peer's own printing is kept out of the table


FAKE_MAMBAPY = {"lm.py": """
import torch
class LM(torch.nn.Module):  # a stand-in for mamba.py's LM: an embedding and a head, built from its config
    def __init__(self, config, vocab_size):
        super().__init__()
        self.emb, self.head = torch.nn.Embedding(vocab_size, config.d), torch.nn.Linear(config.d, vocab_size)
    def forward(self, tokens):
        return self.head(self.emb(tokens))
""", "mamba.py": """
class MambaConfig:
    def __init__(self, d_model, n_layers, d_state, expand_factor, d_conv, pscan):
        self.d = d_model
"""}


def test_mamba_bench_times_each_scan_path_the_peers_and_the_matmul_floor(tmp_path, monkeypatch, capsys):
    """--cases mamba on a tiny Mamba: each of our scan paths, a peer found at --mambapy (a stand-in package built
    from its config class at our shape), the one not found left out with one line, and the matmuls alone; every row
    timed, ratios against the config's path. (Whether the floor is below every model is the benchmark's figure to
    measure, not this test's: one round of a tiny step is noise; see test_matmul_floor_does_the_steps_matmuls.)"""
    (tmp_path / "mambapy").mkdir()
    for name, text in FAKE_MAMBAPY.items():
        (tmp_path / "mambapy" / name).write_text(text)
    monkeypatch.setattr(sys, "path", list(sys.path))  # (the benchmark puts the peer's folder on it)
    monkeypatch.setattr(speed, "MAMBA_LARGE", dict(speed.MAMBA_LARGE, n_layer=1, n_embd=16, d_state=4, d_conv=4))
    monkeypatch.setattr(speed, "MAMBA_PATHS", speed.MAMBA_PATHS[:2] + [("ours, chunked 4", dict(scan_chunk=4))])
    r = speed.mamba_bench(argparse.Namespace(rounds=1, bench_steps=1, mambapy=str(tmp_path),
                                             mamba_minimal=str(tmp_path / "missing.py")), "cpu", batch=3, seq=9)
    out = capsys.readouterr().out
    rows = r["training"]
    assert list(rows) == ["ours, sequential, every state", "ours, parallel, every state", "ours, chunked 4",
                          "mamba.py, parallel scan", "matmuls alone (the floor)"]
    assert rows["ours, chunked 4"]["ratio"] == 1.0 and all(row["step_s"] > 0 for row in rows.values())
    assert rows["mamba.py, parallel scan"]["params"] == 30 * 16 + 16 * 30 + 30
    assert "(mamba-minimal: no row: no file at --mamba_minimal" in out and "mamba.py: no row" not in out
    assert rows["matmuls alone (the floor)"]["params"] is None  # (not a model)


def test_matmul_floor_does_the_steps_matmuls():
    """The floor does, for every nn.Linear of the model, the forward x W^T and the backward's g W and g^T x over
    batch * seq rows: the shapes of a training step's matmuls, no more."""
    from model import Mamba, MambaConfig
    m = Mamba(MambaConfig(**dict(speed.MAMBA_LARGE, n_layer=1, n_embd=16, d_state=4, d_conv=4)))
    linears = [l.weight.shape for l in m.modules() if isinstance(l, torch.nn.Linear)]
    products = speed.matmul_floor(m, batch=3, seq=9)()
    assert len(products) == len(linears) > 1
    for (out_f, in_f), (y, dx, dw) in zip(linears, products):
        assert y.shape == (27, out_f) and dx.shape == (27, in_f) and dw.shape == (out_f, in_f)


def test_bench_refuses_unknown_cases_and_missing_peer(tmp_path):
    with pytest.raises(SystemExit, match="no case matches"):
        speed.main(["--cases", "no such case"])
    with pytest.raises(SystemExit, match="no such file"):
        speed.main(["--nanogpt", str(tmp_path / "missing.py")])
    with pytest.raises(SystemExit, match="^error: --rounds 0: an integer >= 1$"):
        speed.main(["--rounds", "0"])


def test_interleaved_timing_times_the_models_in_turns(tiny_ckpt, monkeypatch):
    """--interleave: every round times each model once (its batch-1 sentences, then its batched pass), so a
    slow spell of the machine falls on all of them; each gets a median latency and a throughput."""
    torch.manual_seed(0)
    models = [EncoderClassifier(EncoderConfig(vocab_size=50, block_size=16, n_layer=k, n_embd=16, n_head=2,
                                              dropout=0.0)) for k in (1, 2)]
    rng = np.random.default_rng(0)
    split = ListSplit([(rng.integers(0, 50, size=int(rng.integers(2, 16))), i % 2) for i in range(12)])
    order, timed = [], evaluate.timed

    def spy(fn, device):  # which model each timed call ran, read from the closure's cell
        order.append(next(c.cell_contents for c in fn.__closure__ if isinstance(c.cell_contents, EncoderClassifier)))
        return timed(fn, device)

    monkeypatch.setattr(evaluate, "timed", spy)
    rows = evaluate.interleaved_timing([(m, split) for m in models], "cpu", contextlib.nullcontext(), rounds=2,
                                       batch_size=4, n=5, n_throughput=8)
    per_round = [models[0]] * 6 + [models[1]] * 6  # 5 sentences at batch 1 and one batched pass, per model
    assert order == per_round * 2
    assert all(r["latency_ms"] > 0 and r["throughput"] > 0 for r in rows) and len(rows) == 2
    a, b = tiny_ckpt[0]
    with pytest.raises(SystemExit, match="--interleave times classifiers on their test splits"):
        evaluate.main(["--ckpt", a, b, "--interleave", "--file", tiny_ckpt[1], "--device", "cpu"])


def test_untrained_architectures_are_timed_only_beside_interleave(tiny_ckpt, tmp_path):
    """--untrained times a run's architecture from its recorded settings (fresh weights); it needs
    --interleave, an existing file, and a run's full settings."""
    a = tiny_ckpt[0][0]
    partial = tmp_path / "partial.py"
    partial.write_text("n_layer = 2\n")
    cases = [(["--ckpt", a, "--untrained", "x.py"], "--untrained times architectures beside checkpoints: give "
                                                     "--interleave"),
             (["--ckpt", a, "--interleave", "--untrained", str(tmp_path / "none.py")], "no such file"),
             (["--interleave", "--untrained", str(partial)], "not a run's full settings \\(no model, dataset\\)")]
    for args, message in cases:
        with pytest.raises(SystemExit, match=message):
            evaluate.main([*args, "--device", "cpu"])


# -----------------------------------------------------------------------------
# quick commands are quick: a sample or a --file gives its answer without scoring the split or timing


TIMERS = ("latency_ms", "throughput", "generation_speed", "translation_speed", "timed")  # (interleaved_timing of
# nothing, [], times nothing)


def forbid(monkeypatch, names):
    """Make each of evaluate's functions `names` fail the test if called."""
    for name in names:
        def called(*args, _name=name, **kwargs):
            raise AssertionError(f"evaluate.{_name} was called")
        monkeypatch.setattr(evaluate, name, called)


@pytest.fixture(scope="module")
def char_lm(tmp_path_factory):
    """A tiny character GPT whose data folder does not exist: scoring its validation windows would fail."""
    from model import GPT, GPTConfig
    folder = tmp_path_factory.mktemp("charlm")
    torch.manual_seed(0)
    path = str(folder / "ckpt.pt")
    save_checkpoint(path, GPT(GPTConfig(vocab_size=12, block_size=16, n_layer=1, n_embd=16, n_head=2)),
                    config={"dataset": "shakespeare_char", "data_dir": str(folder / "nodata")},
                    data={"dir": str(folder / "nodata"), "dataset": "shakespeare_char", "task": "lm",
                          "vocab": list("abcdefghij \n")}, iter_num=1, epoch=0, best_val_loss=2.0)
    return path


def test_a_sample_is_the_sample_alone(char_lm, monkeypatch, capsys):
    """--prompt: the sample, with no validation scores and no timing (the data folder is not even there)."""
    forbid(monkeypatch, TIMERS + ("evaluate_lm", "checkpoint_dataset"))
    [r] = evaluate.main(["--ckpt", char_lm, "--prompt", "abc", "--max_new_tokens", "5", "--device", "cpu"])
    assert r["sample"].startswith("abc") and len(r["sample"]) == 8 and "loss" not in r and "latency_ms" not in r
    out = capsys.readouterr().out
    assert "evaluated on a prompt" in out and "not timed" in out and r["sample"] in out


def test_a_sample_adds_metrics_and_timing_when_asked(char_lm, monkeypatch):
    calls = []
    monkeypatch.setattr(evaluate, "checkpoint_dataset", lambda ckpt, path: type("D", (), {"splits": {"val": None}}))
    monkeypatch.setattr(evaluate, "evaluate_lm", lambda *a: calls.append("metrics") or {"loss": 1.0, "n": 3})
    monkeypatch.setattr(evaluate, "generation_speed", lambda *a, **k: calls.append("timing") or (1.0, 2.0))
    argv = ["--ckpt", char_lm, "--prompt", "abc", "--max_new_tokens", "3", "--device", "cpu", "--repeats", "1"]
    [r] = evaluate.main([*argv, "--metrics"])
    assert calls == ["metrics"] and r["loss"] == 1.0 and "tokens_per_s" not in r
    [r] = evaluate.main([*argv, "--timing"])
    assert calls == ["metrics", "timing"] and "loss" not in r and r["tokens_per_s"] > 0
    [r] = evaluate.main(["--ckpt", char_lm, "--max_new_tokens", "3", "--device", "cpu", "--repeats", "1"])
    assert calls[2:] == ["metrics", "timing"]  # the checkpoint alone: its whole report, as before
    with pytest.raises(SystemExit, match="^error: --timing and --no_timing: give one$"):
        evaluate.main([*argv, "--timing", "--no_timing"])


def test_a_file_is_scored_without_timing_and_a_checkpoint_alone_is_timed(tiny_ckpt, monkeypatch):
    (a, _), tsv = tiny_ckpt
    forbid(monkeypatch, TIMERS + ("checkpoint_dataset",))
    [r] = evaluate.main(["--ckpt", a, "--file", tsv, "--device", "cpu"])
    assert r["n"] == 3 and "accuracy" in r and "latency_ms" not in r
    split = ListSplit([(np.array([2, 5, 7]), 1), (np.array([2, 9]), 0)])
    monkeypatch.setattr(evaluate, "checkpoint_dataset", lambda ckpt, path: type("D", (), {"splits": {"test": split}}))
    calls = []
    monkeypatch.setattr(evaluate, "latency_ms", lambda *a, **k: calls.append("latency") or 1.0)
    monkeypatch.setattr(evaluate, "throughput", lambda *a, **k: calls.append("throughput") or 2.0)
    [r] = evaluate.main(["--ckpt", a, "--device", "cpu"])  # the model card's use: metrics and latency
    assert calls == ["latency", "throughput"] and r["n"] == 2 and r["latency_ms"] == 1.0


def test_llama_generate_config_gives_its_story_untimed(monkeypatch, capsys):
    """python evaluate.py config/llama_generate.py: the greedy story, not timed (its prompt makes it a sample)."""
    if not os.path.isfile(os.path.join(os.environ["DATA_MIRROR"], "tinyllamas", "stories260K", "stories260K.bin")):
        pytest.skip("no stories260K in the mirror")
    forbid(monkeypatch, TIMERS)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    [r] = evaluate.main([os.path.join(root, "config", "llama_generate.py"), "--max_new_tokens", "8", "--device", "cpu"])
    assert r["task"] == "generate" and r["sample"].startswith("Once upon a time") and "tokens_per_s" not in r
