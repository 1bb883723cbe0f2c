"""
The char-level GPT: causal masking, the embedding-norm variants, tied weights, generation, the
tinyshakespeare data, the LM batch stream and training path, and evaluate.py on LM checkpoints.
(The study runner's tests are in test_study.py.)
"""

import json
import math
import os
from contextlib import nullcontext

import numpy as np
import pytest
import torch

import configurator
import data
import evaluate
import tokenizer
import train
from bookkeeping import flops
from bookkeeping.checkpoints import load_checkpoint
from conftest import fake_downloads
from corpora import sources
from evaluation.table import run_names
from model import GPT, GPTConfig, LayerNorm, RMSNorm


def tiny_gpt(**kw):
    base = dict(vocab_size=11, block_size=9, n_layer=2, n_embd=16, n_head=2, dropout=0.0)
    base.update(kw)
    return GPT(GPTConfig(**base))


# -----------------------------------------------------------------------------
# the model


@pytest.mark.parametrize("attn_impl", ["sdpa", "manual"])
@pytest.mark.parametrize("emb_norm", ["none", "layer", "rms"])
def test_causal_masking(attn_impl, emb_norm):
    """Changing token t never changes the outputs at positions before t (and does change position t)."""
    torch.manual_seed(0)
    model = tiny_gpt(attn_impl=attn_impl, emb_norm=emb_norm).eval()
    idx = torch.randint(0, 11, (2, 9))
    base, _ = model(idx)
    for t in range(9):
        changed = idx.clone()
        changed[:, t] = (changed[:, t] + 1) % 11
        out, _ = model(changed)
        assert torch.equal(out[:, :t], base[:, :t]), f"position < {t} saw token {t}"
        assert not torch.allclose(out[:, t], base[:, t])


def test_sdpa_equals_manual_forward_and_gradient():
    torch.manual_seed(0)
    fast = tiny_gpt(attn_impl="sdpa", block_size=13, n_embd=24, n_head=3)
    ref = tiny_gpt(attn_impl="manual", block_size=13, n_embd=24, n_head=3)
    ref.load_state_dict(fast.state_dict())
    idx = torch.randint(0, 11, (3, 13))
    lf, loss_f = fast(idx, idx.roll(-1, 1))
    lr, loss_r = ref(idx, idx.roll(-1, 1))
    torch.testing.assert_close(lf, lr, atol=1e-5, rtol=1e-5)
    loss_f.backward()
    loss_r.backward()
    for (name, pf), (_, pr) in zip(fast.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(pf.grad, pr.grad, atol=1e-5, rtol=1e-4, msg=name)


def test_variants_differ_only_in_the_embedding_norm():
    """Built from one seed, the three variants hold identical weights everywhere else; the only extra
    parameters are the embedding norm's; and X is exactly the raw sum, its LayerNorm, or its RMSNorm."""
    models = {}
    for kind in ("none", "layer", "rms"):
        torch.manual_seed(3)
        models[kind] = tiny_gpt(emb_norm=kind, bias=True)
    base_sd = models["none"].state_dict()
    for kind in ("layer", "rms"):
        sd = models[kind].state_dict()
        extra = set(sd) - set(base_sd)
        assert set(base_sd) <= set(sd)
        assert extra == ({"emb_norm.weight", "emb_norm.bias"} if kind == "layer" else {"emb_norm.weight"})
        for k, v in base_sd.items():
            assert torch.equal(v, sd[k]), k
    idx = torch.randint(0, 11, (2, 9))
    raw = models["none"].tok_emb(idx) + models["none"].pos_emb(torch.arange(9))
    torch.testing.assert_close(models["none"].embed(idx), raw)
    ln, rms = models["layer"].embed(idx), models["rms"].embed(idx)
    torch.testing.assert_close(ln, torch.nn.functional.layer_norm(raw, (16,), eps=1e-5))
    torch.testing.assert_close(rms, raw / raw.pow(2).mean(-1, keepdim=True).add(1e-5).sqrt())
    assert isinstance(models["layer"].emb_norm, LayerNorm) and isinstance(models["rms"].emb_norm, RMSNorm)
    # at initialization (gain 1) the normalized X has norm ~sqrt(C) = 4 per position (a little less: eps=1e-5
    # is not negligible next to a mean square of ~8e-4); the raw sum has ~0.02 * sqrt(2C)
    assert rms.norm(dim=-1).sub(4.0).abs().max() < 0.1
    assert raw.norm(dim=-1).mean() < 0.5


def test_tied_embeddings_are_one_parameter():
    model = tiny_gpt()
    assert model.head.weight is model.tok_emb.weight
    n_untied = tiny_gpt(tie_embeddings=False).param_counts()["total"]
    assert n_untied - model.param_counts()["total"] == 11 * 16  # the head's own matrix, counted once when tied


@pytest.mark.parametrize("ffn", ["gelu", "swiglu"])
def test_flops_per_forward_matches_flop_counter(ffn):
    from torch.utils.flop_counter import FlopCounterMode

    model = tiny_gpt(attn_impl="manual", ffn=ffn, n_kv_head=1)
    idx = torch.randint(0, 11, (3, 7))
    with FlopCounterMode(display=False) as fc:
        model(idx)
    assert fc.get_total_flops() == flops.forward_flops(model, 7, batch_size=3)


def test_study_model_size():
    """Seed 004: 8 layers, width 128, 8 heads, context 128, tied, about 1.6 M parameters."""
    counts = GPT(GPTConfig()).param_counts()
    C, L = 128, 8
    per_layer = 4 * C * C + 2 * 4 * C * C + 2 * C  # wq wk wv wo, GELU FFN, two LayerNorm gains (no bias)
    assert counts["total"] == L * per_layer + C + 65 * C + 128 * C
    assert 1.55e6 < counts["total"] < 1.65e6


def lively_gpt(seed=0, **kw):
    """tiny_gpt with larger weights than the 0.02 init, so that greedy decoding does not repeat one token."""
    torch.manual_seed(seed)
    model = tiny_gpt(**kw).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.5)
    return model


def test_generate_greedy_is_deterministic_and_argmax():
    """Without the cache (the reference) every step takes the argmax after the last block_size tokens."""
    model = lively_gpt()
    prompt = torch.tensor([[1, 2, 3]])
    a = model.generate(prompt, 12, temperature=0, use_cache=False)  # longer than block_size: the context is cropped
    assert torch.equal(a, model.generate(prompt, 12, temperature=0, use_cache=False))
    assert a.shape == (1, 15) and torch.equal(a[:, :3], prompt) and len(set(a[0].tolist())) > 3
    idx = prompt
    with torch.no_grad():
        for _ in range(12):
            logits, _ = model(idx[:, -9:])
            idx = torch.cat((idx, logits[:, -1].argmax(-1, keepdim=True)), 1)
    assert torch.equal(a, idx)
    assert torch.equal(model.generate(prompt, 12, temperature=1.0, top_k=1, use_cache=False), a)  # top-1 is greedy


@pytest.mark.parametrize("kw", [dict(temperature=0), dict(temperature=1.2, top_k=5)], ids=["greedy", "sampled"])
def test_the_cache_gives_the_reference_tokens_within_the_context_and_restarts_past_it(kw):
    """Within the context (9 positions) the cached steps give the reference's tokens (the same generator
    draws); past it the window restarts from the last half context (4 tokens), read in one pass: the
    token after a restart is the model's choice after exactly those tokens."""
    model = lively_gpt()
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    reference = model.generate(prompt, 6, generator=torch.Generator().manual_seed(1), use_cache=False, **kw)
    cached = model.generate(prompt, 6, generator=torch.Generator().manual_seed(1), **kw)
    assert torch.equal(cached, reference)
    long = model.generate(prompt, 20, temperature=0)
    assert long.shape == (2, 23) and torch.equal(long[:, :9], model.generate(prompt, 6, temperature=0, use_cache=False))
    with torch.no_grad():
        assert torch.equal(long[:, 9], model(long[:, 5:9])[0][:, -1].argmax(-1))  # restarted from positions 5..8
        assert torch.equal(long[:, 10], model(long[:, 5:10])[0][:, -1].argmax(-1))  # then a cached step


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
def test_the_compiled_step_decodes_as_the_eager_one(monkeypatch, static):
    """mode='compiled' (graph capture by dynamo's 'eager' backend: no code generated, which takes half a
    minute) gives the eager tokens, within the context and across its restarts, learned positions read at a
    tensor position in the static scheme."""
    import kernels
    monkeypatch.setattr(kernels, "COMPILE_BACKEND", "eager")
    monkeypatch.setattr(kernels, "STATIC_DECODE", ("cpu", "cuda") if static else ("cuda",))
    torch._dynamo.reset()
    model = lively_gpt()
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    for kw in (dict(temperature=0), dict(temperature=1.2, top_k=5)):
        eager = model.generate(prompt, 20, generator=torch.Generator().manual_seed(2), **kw)
        compiled = model.generate(prompt, 20, generator=torch.Generator().manual_seed(2), mode="compiled", **kw)
        assert torch.equal(compiled, eager)


def test_compiled_decoding_past_the_recompile_limit_decodes_eagerly(monkeypatch, capsys):
    """The static (CUDA-graph) step compiles a graph per (batch size, autocast dtype); the 9th pair in one process
    is past dynamo's recompile limit (8), where fullgraph=True raised FailOnRecompileLimitHit out of generate
    (issue 40). Now that shape decodes with the step uncompiled, said in one line, with the eager step's tokens.
    Forced on the CPU: the static scheme, dynamo's 'eager' backend; 9 batch sizes."""
    import torch._dynamo

    import kernels
    monkeypatch.setattr(kernels, "COMPILE_BACKEND", "eager")
    monkeypatch.setattr(kernels, "STATIC_DECODE", ("cpu", "cuda"))
    torch._dynamo.reset()
    model = lively_gpt()
    for batch in range(1, 10):
        prompt = (torch.arange(3 * batch).view(batch, 3) * 7) % model.cfg.vocab_size
        eager = model.generate(prompt, 4, temperature=0)
        assert torch.equal(model.generate(prompt, 4, temperature=0, mode="compiled"), eager), batch
    assert capsys.readouterr().out.count("recompile limit") == 1
    torch._dynamo.reset()


def test_generate_sampling_follows_the_generator_seed():
    torch.manual_seed(0)
    model = tiny_gpt()
    prompt = torch.zeros(1, 1, dtype=torch.long)
    draw = [model.generate(prompt, 30, temperature=1.5, generator=torch.Generator().manual_seed(s)) for s in (7, 7, 8)]
    assert torch.equal(draw[0], draw[1])
    assert not torch.equal(draw[0], draw[2])
    with pytest.raises(ValueError, match="temperature"):
        model.generate(prompt, 1, temperature=-1)


def test_generate_top_k_restricts_the_choice():
    torch.manual_seed(0)
    model = tiny_gpt()
    prompt = torch.zeros(1, 1, dtype=torch.long)
    with torch.no_grad():
        top2 = set(torch.topk(model(prompt)[0][0, -1], 2).indices.tolist())
    firsts = {model.generate(prompt, 1, temperature=5.0, top_k=2, generator=torch.Generator().manual_seed(s))[0, 1].item()
              for s in range(40)}
    assert firsts <= top2 and len(firsts) == 2


def test_gpt_config_rejects_nonsense():
    for bad in (dict(emb_norm="batch"), dict(n_embd=10, n_head=3), dict(block_size=0), dict(dropout=1.0)):
        with pytest.raises(ValueError, match="GPTConfig"):
            GPTConfig(**bad)
    with pytest.raises(ValueError, match="block_size"):
        tiny_gpt()(torch.zeros(1, 10, dtype=torch.long))


# -----------------------------------------------------------------------------
# data


def test_shakespeare_char_from_the_real_mirror(tmp_path):
    mirror = os.environ["DATA_MIRROR"]
    if not os.path.isfile(os.path.join(mirror, "tinyshakespeare", "input.txt")):
        pytest.skip(f"no tinyshakespeare in {mirror}")
    meta = data.prepare("shakespeare_char", mirror=mirror, out_dir=str(tmp_path), verbose=False)
    assert meta["vocab_size"] == 65 and meta["counts"] == {"train": 1_003_854, "val": 111_540}
    codec = tokenizer.CharCodec(meta["vocab"])
    tr, va = data.TokenSplit(str(tmp_path), "train"), data.TokenSplit(str(tmp_path), "val")
    assert tr.tokens.dtype == np.uint16 and len(tr) == 1_003_854 and len(va) == 111_540
    with open(os.path.join(mirror, "tinyshakespeare", "input.txt")) as f:
        text = f.read()
    assert codec.decode(tr.tokens) + codec.decode(va.tokens) == text


@pytest.fixture
def char_dataset(char_mirror, char_digest, tmp_path):
    out = str(tmp_path / "chars")
    data.prepare("shakespeare_char", mirror=char_mirror, out_dir=out, verbose=False)
    return out


def test_shakespeare_char_download_path(char_mirror, char_digest, monkeypatch, tmp_path):
    """Without a mirror the canonical URL is downloaded once into the cache and verified."""
    with open(os.path.join(char_mirror, "tinyshakespeare", "input.txt"), "rb") as f:
        payload = f.read()
    calls = fake_downloads(monkeypatch, payload)
    cache = str(tmp_path / "cache")
    for _ in range(2):
        assert sources.fetch("shakespeare_char", mirror=None, cache_dir=cache) == {"tinyshakespeare/input.txt": payload}
    assert calls == [sources.SOURCES["shakespeare_char"]["url"]]
    assert calls[0].startswith("https://raw.githubusercontent.com/karpathy/char-rnn/")
    with open(os.path.join(cache, "tinyshakespeare.txt"), "ab") as f:
        f.write(b"tampered")
    with pytest.raises(data.DataError, match="sha256"):
        sources.fetch("shakespeare_char", mirror=None, cache_dir=cache)


def test_shakespeare_char_corrupt_mirror_file(char_mirror, tmp_path):
    """The real digest does not match the fake file: a clear error, and nothing written."""
    out = tmp_path / "never"
    with pytest.raises(data.DataError, match="sha256"):
        data.prepare("shakespeare_char", mirror=char_mirror, out_dir=str(out), verbose=False)
    assert not out.exists()


def test_char_codec_refuses_unknown_characters():
    codec = tokenizer.CharCodec("abc\n")
    assert codec.decode(codec.encode("cab\n")) == "cab\n"
    with pytest.raises(ValueError, match="'z'"):
        codec.encode("az")


# -----------------------------------------------------------------------------
# the LM batch stream (data.py) and the LM path in train.py


def test_lm_batch_is_a_pure_function_of_seed_and_step():
    tokens = np.arange(1000, dtype=np.uint16)
    x, y = data.lm_batch(tokens, 16, 8, seed=1, step=5, device="cpu")
    x2, y2 = data.lm_batch(tokens, 16, 8, seed=1, step=5, device="cpu")
    x3, _ = data.lm_batch(tokens, 16, 8, seed=2, step=5, device="cpu")
    assert torch.equal(x, x2) and torch.equal(y, y2) and not torch.equal(x, x3)
    assert x.shape == (8, 16) and torch.equal(y, x + 1)  # targets are the next token
    assert int(y.max()) <= 999


def test_lm_eval_windows_are_fixed_and_cover_the_split():
    starts = data.lm_eval_starts(111_540, 128)
    assert len(starts) == 871 and starts[0] == 0 and np.all(np.diff(starts) == 128)
    assert starts[-1] + 128 + 1 <= 111_540  # the last window's targets exist
    sub = data.lm_eval_starts(111_540, 128, max_windows=10)
    assert len(sub) == 10 and set(sub) <= set(starts) and sub[0] == 0 and sub[-1] == starts[-1]


def lm_cfg(folder, out, **kw):
    cfg = train.make_config(["--model=gpt"])  # DEFAULTS and the GPT's settings
    cfg.update(dataset="shakespeare_char", data_dir=folder, out_dir=str(out), device="cpu", dtype="float32",
               block_size=16, n_layer=2, n_embd=16, n_head=2, ffn="gelu", norm="layer", pos="learned",
               dropout=0.0, batch_size=8, max_iters=30, eval_interval=10, log_interval=5, scheduler="constant",
               learning_rate=3e-3, warmup_iters=0, early_stop_patience=0, seed=1)
    cfg.update(kw)
    return cfg


def read_log(out):
    with open(os.path.join(out, "log.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_lm_training_learns_and_logs_the_study_metrics(char_dataset, tmp_path):
    summary = train.train(lm_cfg(char_dataset, tmp_path / "a", emb_norm="rms"))
    log = read_log(tmp_path / "a")
    evals = [r for r in log if r["type"] == "eval"]
    assert [r["iter"] for r in evals] == [10, 20, 30]
    assert summary["stopped"] == "max_iters" and summary["iters"] == 30
    vocab = data.load_meta(char_dataset)["vocab_size"]
    assert summary["final_val_loss"] < math.log(vocab) - 0.5  # well below a uniform guess
    assert summary["final_val_ppl"] == pytest.approx(math.exp(summary["final_val_loss"]))
    assert 0 < summary["final_val_accuracy"] < 1 and summary["final_grad_norm"] > 0
    assert "test_loss" not in summary  # a corpus has no test split
    assert summary["metrics"]["final_val_emb_norm"]["better"] == "neither"
    assert summary["metrics"]["final_val_ppl"] == {"label": "final validation perplexity", "better": "lower"}
    assert all("grad_norm" in r for r in log if r["type"] == "train")
    assert evals[-1]["val_emb_norm"] == pytest.approx(summary["final_val_emb_norm"])
    # RMSNorm with gain ~1 puts X near sqrt(C) = 4 per position
    assert 2.0 < summary["final_val_emb_norm"] < 6.0
    with open(tmp_path / "a" / "summary.json") as f:
        stored = json.load(f)
    assert stored["config"]["emb_norm"] == "rms" and stored["final_val_loss"] == summary["final_val_loss"]
    model, ckpt = load_checkpoint(str(tmp_path / "a" / "ckpt.pt"))
    assert ckpt["data"]["task"] == "lm" and model.head.weight is model.tok_emb.weight  # still tied after loading


def test_lm_validation_is_the_same_for_every_seed_and_variant(char_dataset, tmp_path):
    """Two seeds and two variants are scored on the same characters; the figures depend on the model only."""
    a = train.train(lm_cfg(char_dataset, tmp_path / "a", max_iters=4, seed=1))
    b = train.train(lm_cfg(char_dataset, tmp_path / "b", max_iters=4, seed=2, emb_norm="layer"))
    assert a["final_val_n"] == b["final_val_n"] > 0
    model, ckpt = load_checkpoint(str(tmp_path / "a" / "last.pt"))
    again = evaluate.evaluate_lm(model, data.TokenSplit(char_dataset, "val"), "cpu", nullcontext())
    assert again["loss"] == pytest.approx(a["final_val_loss"], abs=1e-6)


def test_lm_resume_equals_one_run(char_dataset, tmp_path, stop_after):
    """12 steps straight == stopped after 6, then resumed to 12: batches, dropout and optimizer state all
    restored."""
    common = dict(dropout=0.1, eval_interval=6)
    train.train(lm_cfg(char_dataset, tmp_path / "one", max_iters=12, **common))
    stop_after(6)
    assert train.train(lm_cfg(char_dataset, tmp_path / "two", max_iters=12, **common))["stopped"] == "interrupted"
    train.train(lm_cfg(char_dataset, tmp_path / "two", max_iters=12, init_from="resume", **common))
    one, _ = load_checkpoint(str(tmp_path / "one" / "last.pt"))
    two, ckpt = load_checkpoint(str(tmp_path / "two" / "last.pt"))
    assert ckpt["iter_num"] == 12
    for (k, v), (_, w) in zip(one.state_dict().items(), two.state_dict().items()):
        assert torch.equal(v, w), k


def test_lm_config_errors(char_dataset, tmp_path):
    with pytest.raises(configurator.ConfigError, match="max_iters"):
        train.train(lm_cfg(char_dataset, tmp_path / "x", max_iters=0))
    with pytest.raises(configurator.ConfigError, match="n_loops.*model='encoder', not of model='gpt'"):
        train.make_config(["--model=gpt", "--n_loops=2"])
    with pytest.raises(configurator.ConfigError, match="emb_norm"):
        train.train(lm_cfg(char_dataset, tmp_path / "x", emb_norm="batch"))
    encoder_on_a_corpus = {**train.make_config([]), **{k: v for k, v in lm_cfg(char_dataset, tmp_path / "x").items()
                                                       if k in train.DEFAULTS}, "model": "encoder"}
    with pytest.raises(configurator.ConfigError, match="does not do the lm task.*\\['gpt', 'llama', 'mamba'\\]"):
        train.train(encoder_on_a_corpus)


def test_study_configs_differ_only_in_the_variant():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cfgs = {v: train.make_config([os.path.join(root, "config", f"shakespeare_char_{v}.py")])
            for v in ("baseline", "layernorm", "rmsnorm")}
    for v, want in (("layernorm", "layer"), ("rmsnorm", "rms")):
        diff = {k for k in cfgs[v] if cfgs[v][k] != cfgs["baseline"][k]}
        assert diff == {"emb_norm", "out_dir"} and cfgs[v]["emb_norm"] == want
    base = cfgs["baseline"]
    assert (base["n_layer"], base["n_embd"], base["n_head"], base["block_size"]) == (8, 128, 8, 128)
    assert (base["batch_size"], base["learning_rate"], base["max_iters"]) == (16, 3e-4, 300)
    long = train.make_config([os.path.join(root, "config", "shakespeare_char.py")])
    assert (long["n_layer"], long["n_embd"], long["n_head"], long["block_size"], long["dropout"]) == (6, 384, 6, 256, 0.2)


# -----------------------------------------------------------------------------
# evaluate.py: LM checkpoints


def test_evaluate_lm_checkpoint(char_dataset, tmp_path, capsys):
    train.train(lm_cfg(char_dataset, tmp_path / "run", max_iters=10))
    out = str(tmp_path / "r.json")
    evaluate.main(["--ckpt", str(tmp_path / "run" / "ckpt.pt"), "--prompt", "ROMEO:", "--max_new_tokens", "25",
                   "--temperature", "0", "--json", out, "--repeats", "1", "--no_cache", "--metrics"])
    with open(out) as f:
        r = json.load(f)
    assert r["ppl"] == pytest.approx(math.exp(r["loss"])) and 0 <= r["accuracy"] <= 1 and r["emb_norm"] > 0
    assert r["sample"].startswith("ROMEO:") and len(r["sample"]) == 6 + 25
    assert r["latency_ms"] > 0 and r["throughput"] > 0 and r["flops_per_token"] > 0
    assert r["decode"] == "eager" and r["tokens_per_s"] > 0 and r["tokens_per_s_no_cache"] > 0  # (too few to compile)
    printed = capsys.readouterr().out
    assert "perplexity" in printed and r["sample"] in printed
    with pytest.raises(SystemExit, match="language model"):
        evaluate.main(["--ckpt", str(tmp_path / "run" / "ckpt.pt"), "--text", "hello"])
    with pytest.raises(SystemExit, match="not in this model's vocabulary"):
        evaluate.main(["--ckpt", str(tmp_path / "run" / "ckpt.pt"), "--prompt", "~", "--no_timing"])


def test_run_names_tell_study_checkpoints_apart():
    assert run_names(["out/study/A/seed1/ckpt.pt", "out/study/B/seed1/ckpt.pt"]) == ["A/seed1", "B/seed1"]
    assert run_names(["out/a/ckpt.pt", "out/b/last.pt"]) == ["a", "b"]
    assert run_names(["x/ckpt.pt", "x/ckpt.pt"]) == ["x/ckpt.pt", "x/ckpt.pt"]
