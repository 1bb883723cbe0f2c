"""
The mini Llama-2: RoPE and grouped-query attention against plain references, the FFN width rule,
the key/value cache against recomputation, batched prompts, the sampling cuts, the classification
head, and llama2.c's formats both ways (round trips to bit-identical logits, bad files refused).
"""

import importlib.util
import os
import struct
import subprocess
import sys
import textwrap

import pytest
import torch

import export
import kernels
import model
from bookkeeping import checkpoints
from export import read_llama2c, write_llama2c
from model import KVCache, Llama, LlamaConfig, sample_next

STORIES260K = os.path.join(os.environ["DATA_MIRROR"], "tinyllamas", "stories260K", "stories260K.bin")


def tiny_llama(seed=0, **kw):
    base = dict(vocab_size=40, block_size=24, n_layer=2, n_embd=32, n_head=4, n_kv_head=2, multiple_of=8)
    base.update(kw)
    torch.manual_seed(seed)
    m = Llama(LlamaConfig(**base)).eval()
    with torch.no_grad():  # larger weights than the 0.02 init, so greedy decoding does not just repeat
        for p in m.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.3)
    return m


# -----------------------------------------------------------------------------
# the pieces against plain references


def test_rope_is_the_complex_rotation():
    """apply_rope rotates each adjacent pair (x_2j, x_2j+1) as the complex number x_2j + i x_2j+1
    multiplied by e^(i p theta_j), theta_j = 10000^(-2j/d) (RoFormer; llama2.c's pairing)."""
    B, H, T, D = 2, 3, 7, 8
    x = torch.randn(B, H, T, D, dtype=torch.float64)
    cos, sin = model.rope_cache(T, D)
    got = model.apply_rope(x.float(), cos, sin).double()
    theta = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)  # (D/2,)
    angle = torch.arange(T, dtype=torch.float64)[:, None] * theta  # (T, D/2)
    z = torch.complex(x[..., 0::2], x[..., 1::2]) * torch.polar(torch.ones_like(angle), angle)
    want = torch.stack((z.real, z.imag), dim=-1).flatten(-2)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("attn_impl", ["sdpa", "manual"])
def test_grouped_query_attention_equals_mha_with_shared_heads(attn_impl):
    """GQA with 2 key/value heads for 6 query heads is multi-head attention whose k/v projections
    repeat each shared head three times: build that MHA by hand and compare, forward and backward."""
    cfg = LlamaConfig(vocab_size=10, block_size=16, n_layer=1, n_embd=48, n_head=6, n_kv_head=2,
                      attn_impl=attn_impl)
    torch.manual_seed(0)
    gqa = model.Attention(cfg)
    mha = model.Attention(LlamaConfig(**{**cfg.__dict__, "n_kv_head": 6}))
    hs = 8
    with torch.no_grad():
        mha.wq.weight.copy_(gqa.wq.weight)
        mha.wo.weight.copy_(gqa.wo.weight)
        for name in ("wk", "wv"):  # head h of the MHA uses key/value head h // 3 of the GQA
            w = getattr(gqa, name).weight.view(2, hs, 48)
            getattr(mha, name).weight.copy_(w.repeat_interleave(3, dim=0).reshape(48, 48))
    x = torch.randn(2, 9, 48, requires_grad=True)
    rope = model.rope_cache(16, hs)
    y_gqa, _ = gqa(x, rope=rope)
    y_mha, _ = mha(x, rope=rope)
    torch.testing.assert_close(y_gqa, y_mha, atol=1e-5, rtol=1e-5)
    g = torch.randn_like(y_gqa)
    (gx_gqa,) = torch.autograd.grad(y_gqa, x, g)
    (gx_mha,) = torch.autograd.grad(y_mha, x, g)
    torch.testing.assert_close(gx_gqa, gx_mha, atol=1e-5, rtol=1e-5)


def test_ffn_width_rule():
    """round_up(int(2/3 * 4d), multiple_of): llama2.c's stories15M (d=288) has 768, stories260K
    (d=64, multiple_of=4) 172; Llama-2 7B (d=4096, multiple_of=256) 11008."""
    assert model.llama_ffn_hidden(288, 32) == 768
    assert model.llama_ffn_hidden(64, 4) == 172
    assert model.llama_ffn_hidden(4096, 256) == 11008
    assert LlamaConfig(n_embd=64, n_head=8, multiple_of=4).ffn_hidden == 172 and LlamaConfig().ffn_hidden == 768
    with pytest.raises(ValueError, match="n_classes"):
        LlamaConfig(n_classes=1)


# -----------------------------------------------------------------------------
# the cache and generation


def test_cache_prefill_and_steps_equal_the_full_forward():
    """Logits from a prefill of 5 tokens then 4 single-token steps through the cache equal the logits
    of one forward over all 9 tokens, position by position."""
    m = tiny_llama()
    idx = torch.randint(0, 40, (3, 9))
    full, _ = m(idx)
    cache = m.new_cache(3)
    parts = [m(idx[:, :5], cache=cache, start=0)[0]]
    for t in range(5, 9):
        parts.append(m(idx[:, t:t + 1], cache=cache, start=t)[0])
    torch.testing.assert_close(torch.cat(parts, 1), full, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="does not fit"):
        KVCache(1, 2, 4, 8, "cpu", torch.float32).update(3, torch.zeros(1, 2, 2, 8), torch.zeros(1, 2, 2, 8))


@pytest.mark.parametrize("kw", [dict(temperature=0), dict(temperature=0.9, top_k=5), dict(temperature=1.0, top_p=0.8),
                                dict(temperature=1.0, epsilon=0.02)], ids=["greedy", "top_k", "top_p", "epsilon"])
def test_generation_with_cache_equals_without(kw):
    m = tiny_llama()
    prompts = [[1, 5, 9, 2, 7]] * 2
    with_cache = m.generate(prompts, 15, generator=torch.Generator().manual_seed(3), **kw)
    without = m.generate(prompts, 15, generator=torch.Generator().manual_seed(3), use_cache=False, **kw)
    assert with_cache == without and len(with_cache[0]) == 15
    if kw["temperature"] == 0:
        assert len(set(with_cache[0])) > 2  # not a degenerate repetition: the comparison has teeth


def test_batched_prompts_of_different_lengths_equal_one_at_a_time():
    """Left padding, masked, changes nothing: each row decodes as it would alone (greedy)."""
    m = tiny_llama()
    prompts = [[1, 3, 4, 5, 6, 7, 8], [1], [1, 30, 31]]
    together = m.generate(prompts, 10, temperature=0)
    alone = [m.generate([p], 10, temperature=0)[0] for p in prompts]
    assert together == alone
    logits, _ = m(torch.tensor([[0, 0, 1, 5]]), torch.tensor([[False, False, True, True]]))
    assert torch.isfinite(logits).all()  # a padding query that sees no key stays finite


def test_generation_stops_at_eos_and_at_the_context():
    m = tiny_llama()
    free = m.generate([[1, 2]], 12, temperature=0)[0]
    eos = free[4]
    stopped = m.generate([[1, 2]], 12, temperature=0, eos_id=eos)[0]
    assert stopped == free[:free.index(eos) + 1]  # up to and including the first EOS
    assert len(m.generate([[1] * 20], 50, temperature=0)[0]) == 24 - 20  # the context is 24
    with pytest.raises(ValueError, match="at least one token"):
        m.generate([[]], 3)


@pytest.mark.parametrize("nkv", [1, 2, 4])
def test_one_query_attention_is_manual_attention(nkv):
    """The compiled decode step's attention (one query against the cache, grouped heads in place) equals
    the written-out reference with the key/value heads repeated, with and without a key mask."""
    B, nh, S, hs = 3, 4, 7, 8
    q, k, v = torch.randn(B, nh, 1, hs), torch.randn(B, nkv, S, hs), torch.randn(B, nkv, S, hs)
    mask = torch.rand(B, 1, 1, S) > 0.4
    mask[..., -1] = True  # the newest key is always there
    rep = nh // nkv
    for m in (None, mask):
        want, _ = model.manual_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), m)
        torch.testing.assert_close(kernels.one_query_attention(q, k, v, m), want, atol=1e-6, rtol=1e-5)


@pytest.fixture
def traced_compile(monkeypatch):
    """torch.compile with dynamo's 'eager' backend: the compiled step's graph capture (fullgraph, its
    dynamic or static shapes, its guards) without inductor's code generation, which takes half a minute
    (`test_stories260k_greedy_golden_compiled_by_inductor` does that, on request). Yields a switch to
    the static (CUDA graphs) path on the CPU."""
    monkeypatch.setattr(kernels, "COMPILE_BACKEND", "eager")

    def static(on):
        monkeypatch.setattr(kernels, "STATIC_DECODE", ("cpu", "cuda") if on else ("cuda",))
    return static


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
@pytest.mark.parametrize("kw", [dict(temperature=0), dict(temperature=0.9, top_k=20, top_p=0.9, epsilon=0.01)],
                         ids=["greedy", "sampled"])
def test_the_compiled_step_decodes_as_the_eager_one(traced_compile, static, kw):
    """mode='compiled' gives the eager tokens under the same generator (sampling draws from the step's
    logits outside the graph: every cut at once here), for prompts of different lengths (left padding
    masked) and a prompt of one token (its first steps run eagerly), without recompiling per token: both
    shape schemes."""
    traced_compile(static)
    m = tiny_llama()
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    for prompts in ([[1, 5, 9, 2, 7], [1, 3], [1, 30, 31, 4]], [[1]]):
        eager = m.generate(prompts, 15, generator=torch.Generator().manual_seed(3), **kw)
        compiled = m.generate(prompts, 15, generator=torch.Generator().manual_seed(3), mode="compiled", **kw)
        assert compiled == eager and len(eager[0]) == 15
    if kw["temperature"] == 0:
        assert len(set(eager[0])) > 2  # not a degenerate repetition: the comparison has teeth
    compiles = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert compiles == 2, compiles  # one graph per batch shape, for every position
    with pytest.raises(ValueError, match="mode="):
        m.generate([[1]], 3, mode="fast")


def test_the_static_step_decodes_under_bf16_autocast(traced_compile):
    """The CUDA-graph step (forced on the CPU) under bf16 autocast, as `evaluate.py --dtype bfloat16` runs
    generate: the keys arrive in bf16 and the cache holds float32, and the step stores them as the eager step
    does (index_copy_ refused the mix). Greedy tokens equal the eager step's under the same autocast."""
    traced_compile(True)
    m = tiny_llama()
    prompts = [[1, 5, 9, 2, 7], [1, 3]]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert m.layers[0].attn.wk(torch.ones(1, 32)).dtype == torch.bfloat16  # what reaches the cache
        eager = m.generate(prompts, 12, temperature=0)
        compiled = m.generate(prompts, 12, temperature=0, mode="compiled")
    assert compiled == eager and len(set(eager[0])) > 2


def test_one_dynamic_graph_whatever_the_first_batch_equals(traced_compile):
    """The dynamic step compiles once for every batch size from 2 on, also when its first batch happens to equal
    one of the model's sizes or the prompt's length: 2 key/value heads, a head size of 8, a prompt of 3 tokens.
    (dynamo gave equal sizes one symbol, so such a first batch made a graph for itself, and the next compiled.)"""
    traced_compile(False)
    m = tiny_llama(n_layer=1)  # n_kv_head 2, head size 32 / 4 = 8
    for first in (2, 8, 3):
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        for batch in (first, 5):
            m.generate([[1, 5, 9]] * batch, 3, temperature=0, mode="compiled")
        graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        assert graphs == 1, f"first batch {first}: {graphs} graphs"


def test_the_static_step_keeps_one_cache_and_one_graph(traced_compile, monkeypatch):
    """10 generate calls of one batch size on the CUDA-graph path (forced on the CPU), of prompts and lengths that
    vary, allocate the KV cache once and write it in place at one address, and compile once: a CUDA graph replays
    on the addresses it recorded, so a cache per call would record the graph again at every call, and a graph per
    length would compile again. Each call's tokens are the eager step's."""
    traced_compile(True)
    made = []
    real_init = model.KVCache.__init__

    def counting_init(self, *args, **kwargs):
        made.append(self)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(model.KVCache, "__init__", counting_init)
    m = tiny_llama()
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    calls = [([[1, 5, 9], [1, 3]], 8), ([[1, 5], [1, 3, 4, 6]], 6), ([[1, 2, 3], [1, 7]], 11)]
    for i in range(10):
        prompts, n = calls[i % 3]
        want = m.generate(prompts, n, temperature=0)  # the eager step: caches as long as the sequence
        assert m.generate(prompts, n, temperature=0, mode="compiled") == want
    static = [c for c in made if c.k.size(2) == m.cfg.block_size]  # the compiled step's: the whole context
    assert len(static) == m.cfg.n_layer  # one cache per layer, made once, written in place
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1


def test_epsilon_sampling_never_draws_a_filtered_token():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.04, 0.01])
    logits = probs.log().expand(20000, 5)
    drawn = sample_next(logits, 1.0, epsilon=0.05, generator=torch.Generator().manual_seed(0))[:, 0]
    assert set(drawn.tolist()) == {0, 1, 2}  # 0.04 and 0.01 are below epsilon
    freq = torch.bincount(drawn, minlength=5).float() / len(drawn)
    torch.testing.assert_close(freq[:3], probs[:3] / probs[:3].sum(), atol=0.015, rtol=0)  # renormalized
    # everything below epsilon: the most likely token is kept
    assert set(sample_next(logits[:50], 1.0, epsilon=0.9)[:, 0].tolist()) == {0}


def test_top_p_and_top_k_keep_what_they_should():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.04, 0.01])
    logits = probs.log().expand(20000, 5)
    gen = torch.Generator().manual_seed(1)
    assert set(sample_next(logits, 1.0, top_p=0.75, generator=gen)[:, 0].tolist()) == {0, 1}  # 0.5 < 0.75 <= 0.8
    assert set(sample_next(logits, 1.0, top_p=0.8, generator=gen)[:, 0].tolist()) == {0, 1}
    assert set(sample_next(logits, 1.0, top_p=0.81, generator=gen)[:, 0].tolist()) == {0, 1, 2}
    assert set(sample_next(logits, 1.0, top_k=2, generator=gen)[:, 0].tolist()) == {0, 1}
    assert sample_next(logits[:3], 0.0).tolist() == [[0]] * 3


# -----------------------------------------------------------------------------
# classification head


def test_classifier_reads_the_last_real_token_and_ignores_right_padding():
    m = tiny_llama(n_classes=3)
    idx = torch.randint(3, 40, (1, 6))
    alone, _ = m(idx)
    padded = torch.cat([idx, torch.zeros(1, 3, dtype=torch.long)], 1)
    mask = torch.tensor([[True] * 6 + [False] * 3])
    with_pad, loss = m(padded, mask, targets=torch.tensor([2]))
    torch.testing.assert_close(with_pad, alone, atol=1e-5, rtol=1e-5)
    assert with_pad.shape == (1, 3) and loss > 0
    assert "cls_head.weight" in dict(m.named_parameters())


# -----------------------------------------------------------------------------
# LoRA


def test_lora_starts_at_the_base_model_and_trains_only_adapters_and_head(tmp_path):
    base = tiny_llama(n_classes=3)
    torch.manual_seed(5)
    lora = Llama(LlamaConfig(**{**base.cfg.__dict__, "lora_rank": 4, "lora_alpha": 8.0}))
    missing, unexpected = lora.load_state_dict(base.state_dict(), strict=False)
    assert not unexpected and all("lora_" in k for k in missing)  # W0 keeps nn.Linear's key
    idx = torch.randint(3, 40, (4, 7))
    torch.testing.assert_close(lora.eval()(idx)[0], base(idx)[0])  # B = 0: the update starts at nothing
    trainable = {n for n, p in lora.named_parameters() if p.requires_grad}
    assert trainable == {f"layers.{i}.attn.{w}.lora_{ab}" for i in range(2) for w in ("wq", "wv") for ab in "AB"} | \
        {"cls_head.weight", "cls_head.bias"}
    counts = lora.param_counts()
    # per layer: wq's A (4 x 32) and B (32 x 4), wv's A (4 x 32) and B (16 x 4: two key/value heads of 8)
    assert counts["trainable"] == 2 * (4 * 32 + 32 * 4 + 4 * 32 + 16 * 4) + 3 * 32 + 3 < counts["total"] // 10

    frozen = {n: p.detach().clone() for n, p in lora.named_parameters() if not p.requires_grad}
    opt = torch.optim.AdamW([p for p in lora.parameters() if p.requires_grad], lr=0.05, weight_decay=0.1)
    lora.train()
    for _ in range(5):
        opt.zero_grad()
        lora(idx, targets=torch.tensor([0, 1, 2, 0]))[1].backward()
        opt.step()
    assert all(torch.equal(p, frozen[n]) for n, p in lora.named_parameters() if n in frozen)
    assert lora.layers[0].attn.wq.lora_B.abs().max() > 0


def test_lora_merge_gives_the_same_outputs():
    lora = tiny_llama(lora_rank=2, lora_alpha=4.0, lora_targets="wq,wk,wv,wo,w1,w2,w3")
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.2)  # as if trained
    merged = model.merge_lora(lora)
    assert merged.cfg.lora_rank == 0 and not any("lora_" in n for n, _ in merged.named_parameters())
    assert all(p.requires_grad for p in merged.parameters())
    idx = torch.randint(0, 40, (3, 10))
    torch.testing.assert_close(merged(idx)[0], lora(idx)[0], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(merged.layers[0].attn.wq.weight, lora.layers[0].attn.wq.weight)  # it did fold
    with pytest.raises(ValueError, match="lora_targets"):
        LlamaConfig(lora_rank=2, lora_targets="wq,wz")


# -----------------------------------------------------------------------------
# llama2.c formats


@pytest.mark.parametrize("version", [0, 1, "pt"])
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_llama2c_round_trip_is_bit_identical(tmp_path, version, tied):
    m = tiny_llama(tie_embeddings=tied)
    path = str(tmp_path / f"m.{'pt' if version == 'pt' else 'bin'}")
    write_llama2c(m, path, version)
    back = read_llama2c(path)
    assert back.cfg.tie_embeddings == tied and back.cfg.ffn_hidden == m.cfg.ffn_hidden
    idx = torch.randint(0, 40, (2, 11))
    assert torch.equal(back(idx)[0], m(idx)[0])
    assert not [f for f in tmp_path.iterdir() if ".tmp" in f.name]


def test_llama2c_export_folds_lora_adapters(tmp_path):
    lora = tiny_llama(lora_rank=2)
    with torch.no_grad():
        lora.layers[1].attn.wv.lora_B.normal_(0, 0.3)
    write_llama2c(lora, str(tmp_path / "m.bin"), 0)
    idx = torch.randint(0, 40, (2, 9))
    torch.testing.assert_close(read_llama2c(str(tmp_path / "m.bin"))(idx)[0], lora(idx)[0], atol=1e-5, rtol=1e-5)


def test_export_from_the_command_line(tmp_path, capsys):
    """export.py --ckpt ckpt.pt --export PATH: a LoRA-tuned language model of ours in each of llama2.c's
    formats (the version from --export_version, or the path), its logits read back equal; an existing file
    kept, a classifier refused."""
    lora = tiny_llama(lora_rank=2)
    with torch.no_grad():
        lora.layers[1].attn.wv.lora_B.normal_(0, 0.3)
    ckpt = str(tmp_path / "ckpt.pt")
    checkpoints.save_checkpoint(ckpt, lora, data={"task": "lm"}, config={})
    idx = torch.randint(0, 40, (2, 9))
    for name, version in [("m.bin", []), ("m1.bin", ["--export_version", "1"]), ("m.pt", [])]:
        r = export.main(["--ckpt", ckpt, "--export", str(tmp_path / name), *version])
        torch.testing.assert_close(read_llama2c(str(tmp_path / name))(idx)[0], lora(idx)[0], atol=1e-5, rtol=1e-5)
        assert r["version"] == {"m.bin": 0, "m1.bin": 1, "m.pt": "pt"}[name] and r["max_logit_difference"] < 1e-5
    assert (tmp_path / "m1.bin").read_bytes()[:4] == b"24ka" and "wrote" in capsys.readouterr().out
    before = (tmp_path / "m.bin").read_bytes()
    with pytest.raises(SystemExit, match="already there; it is not replaced"):
        export.main(["--ckpt", ckpt, "--export", str(tmp_path / "m.bin"), "--export_version", "1"])
    assert (tmp_path / "m.bin").read_bytes() == before
    checkpoints.save_checkpoint(str(tmp_path / "cls.pt"), tiny_llama(n_classes=2), data={"task": "classification"}, config={})
    with pytest.raises(SystemExit, match="writes Llama language models; .* is a classifier"):
        export.main(["--ckpt", str(tmp_path / "cls.pt"), "--export", str(tmp_path / "c.bin")])


def test_llama2c_bin_layout_by_hand(tmp_path):
    """Version 0 as run.c reads it: the 7-int header (vocab negative when the head is not shared), the
    token table right after it, and the file's exact size; version 1's 256-byte header."""
    m = tiny_llama(tie_embeddings=False)
    write_llama2c(m, str(tmp_path / "v0.bin"), 0)
    raw = (tmp_path / "v0.bin").read_bytes()
    assert struct.unpack("<7i", raw[:28]) == (32, m.cfg.ffn_hidden, 2, 4, 2, -40, 24)
    first_row = torch.tensor(struct.unpack("<32f", raw[28:28 + 128]))
    assert torch.equal(first_row, m.tok_emb.weight[0])
    n_params = sum(p.numel() for p in m.parameters())
    assert len(raw) == 28 + 4 * (n_params + 2 * 24 * 4)  # + the RoPE cos and sin tables (24 x 8/2 each)
    write_llama2c(m, str(tmp_path / "v1.bin"), 1)
    raw1 = (tmp_path / "v1.bin").read_bytes()
    assert raw1[:4] == b"24ka" and struct.unpack("<i", raw1[4:8]) == (1,) and raw1[36] == 0
    assert len(raw1) == 256 + 4 * n_params


def test_llama2c_bad_files_are_refused_clearly(tmp_path):
    m = tiny_llama()
    write_llama2c(m, str(tmp_path / "good.bin"), 0)
    good = (tmp_path / "good.bin").read_bytes()
    cases = {"missing.bin": None, "short.bin": good[:20], "truncated.bin": good[:-4],
             "noise.bin": bytes(range(256)) * 4,
             "v2.bin": struct.pack("<Ii", export.LLAMA2C_MAGIC, 2) + good[28:]}
    messages = {"missing.bin": "no llama2.c checkpoint", "short.bin": "too short", "truncated.bin": "truncated",
                "noise.bin": "does not start with a llama2.c header", "v2.bin": "version 2.*int8"}
    for name, payload in cases.items():
        if payload is not None:
            (tmp_path / name).write_bytes(payload)
        with pytest.raises(checkpoints.CheckpointError, match=messages[name]):
            read_llama2c(str(tmp_path / name))
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(checkpoints.CheckpointError, match="'model' and 'model_args'"):
        read_llama2c(str(tmp_path / "other.pt"))
    with pytest.raises(ValueError, match="RMSNorm"):
        write_llama2c(tiny_llama(norm="layer"), str(tmp_path / "x.bin"))


def test_stories260k_loads_with_its_documented_shape():
    if not os.path.isfile(STORIES260K):
        pytest.skip(f"no stories260K at {STORIES260K}")
    m = read_llama2c(STORIES260K)
    c = m.cfg
    assert (c.n_embd, c.n_layer, c.n_head, c.n_kv_head, c.vocab_size, c.block_size, c.ffn_hidden) == \
        (64, 5, 8, 4, 512, 512, 172)
    assert c.tie_embeddings and 255_000 < m.param_counts()["total"] < 265_000  # "260K"


# -----------------------------------------------------------------------------
# fine-tuning from a pretrained checkpoint through train.py


def test_finetune_a_llama2c_checkpoint_with_lora_through_train(tmp_path):
    """init_from a llama2.c .bin on a classification set of the same vocabulary: the architecture and
    weights come from the file, the head is new, LoRA trains adapters and head only, and the frozen
    weights in the run's checkpoint are exactly the file's."""
    import train
    from test_train import make_micro_dataset

    folder = make_micro_dataset(tmp_path / "micro", n_train=16, vocab_size=40)
    pre = tiny_llama(seed=1)
    write_llama2c(pre, str(tmp_path / "pre.bin"), 0)
    base = dict(data_dir=folder, out_dir=str(tmp_path / "run"), device="cpu", dtype="float32", batch_size=8,
                max_iters=4, eval_interval=2, scheduler="constant", learning_rate=1e-2, early_stop_patience=0)
    cfg = {**train.make_config(["--model=llama"]), **base, "init_from": str(tmp_path / "pre.bin"), "lora_rank": 2,
           "lora_alpha": 2.0, "dropout": 0.0}
    summary = train.train(cfg)
    assert summary["iters"] == 4 and "test_accuracy" in summary
    tuned, ckpt = checkpoints.load_checkpoint(str(tmp_path / "run" / "last.pt"))
    assert tuned.cfg.n_embd == 32 and tuned.cfg.n_classes == 2 and tuned.cfg.lora_rank == 2
    for name, p in pre.state_dict().items():
        assert torch.equal(tuned.state_dict()[name], p), name  # frozen: W0, embedding, norms
    assert tuned.layers[0].attn.wq.lora_B.abs().max() > 0 and tuned.cls_head.weight.abs().max() > 0

    # full fine-tuning moves the base weights; a clashing architecture or vocabulary is refused
    full = train.train({**cfg, "lora_rank": 0, "out_dir": str(tmp_path / "full")})
    assert full["iters"] == 4
    moved, _ = checkpoints.load_checkpoint(str(tmp_path / "full" / "last.pt"))
    assert not torch.equal(moved.layers[0].attn.wq.weight, pre.layers[0].attn.wq.weight)
    import configurator
    fresh = {**cfg, "out_dir": str(tmp_path / "refused")}  # a new out_dir: the refusals are about the checkpoint
    with pytest.raises(configurator.ConfigError, match="n_embd=64 \\(checkpoint: 32\\)"):
        train.train({**fresh, "n_embd": 64})
    other = make_micro_dataset(tmp_path / "other", n_train=8, vocab_size=30)
    with pytest.raises(configurator.ConfigError, match="30 tokens, the checkpoint's 40"):
        train.train({**fresh, "data_dir": other})
    with pytest.raises(configurator.ConfigError, match="no such file"):
        train.train({**fresh, "init_from": str(tmp_path / "nothing.bin")})


def test_label_log_likelihoods_by_hand():
    """Zero-shot scoring of two-token and one-token labels after prompts of different lengths, against
    a step-by-step computation of the same conditional probabilities."""
    import evaluate

    m = tiny_llama()
    prompts, labels = [[1, 5, 6, 7], [1, 9]], [[11, 12], [13]]
    scores = evaluate.label_log_likelihoods(m, prompts, labels, "cpu", batch_size=3)
    assert scores.shape == (2, 2)
    for i, p in enumerate(prompts):
        for j, lab in enumerate(labels):
            seq, want = list(p), 0.0
            for t in lab:
                want += torch.log_softmax(m(torch.tensor([seq]))[0][0, -1], -1)[t].item()
                seq.append(t)
            assert scores[i, j].item() == pytest.approx(want, abs=1e-4)


# -----------------------------------------------------------------------------
# the golden test: llama2.c's documented output of stories260K


from bench.speed import STORIES260K_GREEDY as GOLDEN_260K  # noqa: E402  (llama2.c's expected text; gpu_check.py's too)


def test_stories260k_greedy_golden():
    """Greedy decoding from BOS reproduces llama2.c's output for 200 positions, with the cache and
    without it (the documented first sentence, and the rest of its test's expected text)."""
    import tokenizer

    tok_path = os.path.join(os.path.dirname(STORIES260K), "tok512.bin")
    if not (os.path.isfile(STORIES260K) and os.path.isfile(tok_path)):
        pytest.skip("no stories260K in the mirror")
    m = read_llama2c(STORIES260K)
    tok = tokenizer.LlamaTokenizer.from_file(tok_path)
    out = m.generate([[tok.bos_id]], 200, temperature=0)[0]
    text = tok.decode([tok.bos_id] + out)
    assert text.startswith("Once upon a time, there was a little girl named Lily. She loved to play outside in the park.")
    assert text == GOLDEN_260K
    assert m.generate([[tok.bos_id]], 60, temperature=0, use_cache=False)[0] == out[:60]


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
def test_stories260k_greedy_golden_compiled(traced_compile, static):
    """The golden text again through the compiled step (graph capture: `traced_compile`), both shape schemes."""
    traced_compile(static)
    if not os.path.isfile(STORIES260K):
        pytest.skip("no stories260K in the mirror")
    m = read_llama2c(STORIES260K)
    golden = m.generate([[1]], 200, temperature=0)[0]
    assert m.generate([[1]], 200, temperature=0, mode="compiled")[0] == golden


@pytest.mark.skipif(os.environ.get("COMPILE_TESTS") != "1", reason="inductor takes half a minute: COMPILE_TESTS=1 runs it")
def test_stories260k_greedy_golden_compiled_by_inductor():
    """The golden text from inductor's C++ code (what `evaluate.py --decode compiled` runs on a CPU). The
    benchmark (`python -m bench.speed --cases generate`) checks the same tokens on every run."""
    if not os.path.isfile(STORIES260K):
        pytest.skip("no stories260K in the mirror")
    m = read_llama2c(STORIES260K)
    assert m.generate([[1]], 200, temperature=0, mode="compiled")[0] == m.generate([[1]], 200, temperature=0)[0]


def test_evaluate_generates_from_a_llama2c_file(tmp_path, capsys, traced_compile):
    """evaluate.py --ckpt on a llama2.c .bin: the golden text at temperature 0 from the compiled step,
    tokens/s and the compile time apart, and a clear error for a file that is neither ours nor llama2.c's.
    --decode auto compiles only when the command generates enough tokens to repay it."""
    import evaluate

    if not os.path.isfile(STORIES260K):
        pytest.skip("no stories260K in the mirror")
    out = str(tmp_path / "g.json")
    evaluate.main(["--ckpt", STORIES260K, "--temperature", "0", "--max_new_tokens", "40", "--repeats", "1",
                   "--json", out, "--device", "cpu", "--gen_batch", "3", "--no_cache", "--decode", "compiled"])
    import json
    r = json.loads(open(out).read())
    assert r["task"] == "generate" and r["new_tokens"] == 40 and r["gen_batch"] == 3 and r["decode"] == "compiled"
    assert r["compile_s"] >= 0
    assert all(r[k] > 0 for k in ("tokens_per_s", "tokens_per_s_batch", "tokens_per_s_no_cache",
                                  "tokens_per_s_batch_no_cache"))
    assert GOLDEN_260K.startswith(r["sample"]) and len(r["sample"]) > 100
    assert r["sample_args"]["tokenizer"] == "tok512"
    assert "generation, batch 1 (tokens/s)" in capsys.readouterr().out
    args = evaluate.parse_args(["--ckpt", STORIES260K])
    decode_mode, repays = evaluate_options.decode_mode, evaluate_options.COMPILE_REPAYS
    assert (decode_mode(args, 2_000), decode_mode(args, repays)) == ("eager", "compiled")
    assert "too few to repay" in capsys.readouterr().out
    (tmp_path / "junk.bin").write_bytes(b"\0" * 64)
    with pytest.raises(SystemExit, match="llama2.c header"):
        evaluate.main(["--ckpt", str(tmp_path / "junk.bin"), "--device", "cpu"])


def test_a_llama_trained_here_samples_with_the_decode_step_asked_for(traced_compile, monkeypatch):
    """evaluate.py's sample from a Llama language model trained here (lm_report's sample_text) takes --decode
    and --no_cache as the char GPT's does: the step asked for generates it, it is timed with the cache and
    without, and the text is the eager step's. (It called generate without them, so both were ignored.)"""
    import evaluate
    if not os.path.isfile(os.path.join(os.path.dirname(STORIES260K), "tok512.bin")):
        pytest.skip("no tok512 in the mirror")
    m = tiny_llama(vocab_size=512, block_size=32)
    ckpt = {"data": {"dir": "run", "vocab": "tok512"}}  # what a checkpoint of imdb_lm records
    modes = []
    real_decode = model.decode
    # Llama.generate calls decode(model, idx, mask, P, pick, eos_id, use_cache, mode)
    monkeypatch.setattr(model, "decode", lambda *a: modes.append((a[7], a[6])) or real_decode(*a))
    args = evaluate.parse_args(["--ckpt", "run/ckpt.pt", "--prompt", "Once", "--max_new_tokens", "6", "--temperature",
                                "0", "--repeats", "1", "--decode", "compiled", "--no_cache"])
    text, figures = evaluate.sample_text(m, ckpt, args.prompt, args, "cpu")
    assert figures["decode"] == "compiled" and figures["tokens_per_s"] > 0 and figures["tokens_per_s_no_cache"] > 0
    assert ("compiled", True) in modes and ("eager", False) in modes  # (mode, use_cache) of each generate
    args.decode, args.no_timing = "eager", True
    assert evaluate.sample_text(m, ckpt, args.prompt, args, "cpu") == (text, {"decode": "eager"})


def test_generation_bench_checks_every_contestant_against_ours(monkeypatch, traced_compile, capsys):
    """python -m bench.speed --cases generate on stories260K (8 new tokens here, the compiled step captured by
    dynamo's eager backend): a table per batch size, positive tokens/s, each contestant's tokens checked
    against ours (Hugging Face's row where transformers is installed), a --runc that is not there refused."""
    from bench import speed
    if not os.path.isfile(STORIES260K):
        pytest.skip("no stories260K in the mirror")
    monkeypatch.setattr(speed, "GEN_TOKENS", 8)
    monkeypatch.setattr(speed, "GEN_BATCHES", (1, 3))
    r = speed.main(["--cases", "generate", "--rounds", "1", "--device", "cpu"])[-1]
    assert r["case"] == "generate" and set(r["tables"]) == {1, 3}
    for table in r["tables"].values():
        assert table["ours, compiled"]["ratio"] == 1.0 and all(f["tokens_per_s"] > 0 for f in table.values())
        assert all(f["same_tokens"] for f in table.values())
    assert "same tokens as ours" in capsys.readouterr().out
    # without the compiled step (gpu_check.py's fallback when it cannot be built): the eager one is the reference
    from types import SimpleNamespace
    r = speed.generation_bench(SimpleNamespace(rounds=1, runc=None), "cpu", tokens=4, batches=(2,), compiled=False)
    assert "ours, compiled" not in r["tables"][2] and r["tables"][2]["ours, eager"]["ratio"] == 1.0
    with pytest.raises(SystemExit, match="--runc nowhere/run.c: no such file"):
        speed.main(["--cases", "generate", "--rounds", "1", "--runc", "nowhere/run.c"])


def needs_transformers():
    """Skip where transformers is not installed (only the benchmark's Hugging Face rows need it); imported as the
    benchmark imports it."""
    from bench.hugging_face import import_transformers
    if import_transformers() is None:
        pytest.skip("transformers is not installed (pip install transformers: the benchmark's Hugging Face rows)")


def test_hugging_face_peers_build_beside_our_kernels():
    """transformers 5.25 imports Hugging Face's `kernels` package as its models load, and in the lab `kernels` is our
    kernels.py (model.py imports it by that name): bench.hugging_face.import_transformers keeps them apart, so the
    benchmark's peers, BERT and GPT-2, build and give a finite loss, and `kernels` is still ours. In a fresh
    interpreter, as `python -m bench.speed` is one: in this one transformers may have been imported already."""
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed (pip install transformers: the benchmark's Hugging Face rows)")
    code = textwrap.dedent("""
        import sys
        import torch
        import kernels
        from bench import speed
        encoder = speed.BenchCase("tiny encoder", "encoder", dict(n_layer=1, n_embd=16, n_head=2, ffn="gelu",
                                                                  ffn_hidden=24, dropout=0.0), 2, 9)
        gpt = speed.BenchCase("tiny gpt", "gpt", dict(vocab_size=11, block_size=8, n_layer=1, n_embd=16, n_head=2,
                                                      dropout=0.0, bias=False), 2, 8)
        for case in (encoder, gpt):
            for name, (module, loss) in speed.peer_models(case, case.seq).items():
                print(name, bool(torch.isfinite(loss(module, speed.bench_batch(case, case.batch, case.seq, "cpu")))))
        print("kernels is ours:", sys.modules["kernels"] is kernels and hasattr(kernels, "flash_attention_triton"))
    """)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.splitlines() == ["HF BERT True", "HF GPT-2 True", "kernels is ours: True"]


def test_hugging_face_llama_on_our_weights_gives_our_logits():
    """hf_llama: LlamaForCausalLM holding a tiny Llama's weights (query and key rows reordered for its
    rotate-half RoPE; grouped-query heads) computes our logits."""
    needs_transformers()
    from bench import speed
    m = tiny_llama(n_kv_head=2)
    idx = torch.randint(0, 40, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(speed.hf_llama(m)(idx).logits, m(idx)[0], atol=1e-4, rtol=1e-4)


@pytest.mark.skipif(not os.environ.get("LLAMA2C_DIR"), reason="LLAMA2C_DIR names a llama2.c checkout")
def test_generation_bench_runs_llama2c(monkeypatch, traced_compile):
    """With --runc, run.c is compiled here, runs our stories260K export and writes our greedy text."""
    from bench import speed
    monkeypatch.setattr(speed, "GEN_TOKENS", 16)
    monkeypatch.setattr(speed, "GEN_BATCHES", (1,))
    r = speed.main(["--cases", "generate", "--rounds", "1", "--device", "cpu",
                       "--runc", os.path.join(os.environ["LLAMA2C_DIR"], "run.c")])[-1]
    row = r["tables"][1]["llama2.c run.c (cc -O3)"]
    assert row["same_tokens"] and row["tokens_per_s"] > 0


# -----------------------------------------------------------------------------
# pretraining on movie reviews (corpora/imdb.py's build_imdb_lm), zero-shot prompting, evaluate.py config files

import io  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import tarfile  # noqa: E402
from pathlib import Path  # noqa: E402

import data  # noqa: E402
import evaluate  # noqa: E402
from corpora import imdb, llama2c, sources  # noqa: E402
from evaluation import options as evaluate_options  # noqa: E402


@pytest.fixture
def review_mirror(tmp_path, monkeypatch):
    """A mirror with the real tok512 tokenizer, a small IMDB archive in aclImdb's layout (12 reviews a
    half; every train-half review says 'trainhalf') and a fake CFIMDB; DATA_MIRROR points at it and the
    working directory is a fresh folder (data/ is prepared there)."""
    tok = os.path.join(os.environ["DATA_MIRROR"], "tinyllamas", "stories260K", "tok512.bin")
    if not os.path.isfile(tok):
        pytest.skip("no tok512 in the mirror")
    root = tmp_path / "mirror"
    (root / "tinyllamas" / "stories260K").mkdir(parents=True)
    (root / "tinyllamas" / "stories260K" / "tok512.bin").write_bytes(open(tok, "rb").read())
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for half in ("test", "train"):
            for i in range(12):
                label, rating = ("pos", 8 + i % 3) if i % 2 else ("neg", 1 + i % 4)
                word = "trainhalf" if half == "train" else "fine"
                text = f"Review {i} of the {half} half.<br /><br />It was {word} and {label}."
                info = tarfile.TarInfo(f"aclImdb/{half}/{label}/{i}_{rating}.txt")
                info.size = len(text.encode())
                tar.addfile(info, io.BytesIO(text.encode()))
        readme = tarfile.TarInfo("aclImdb/README")
        tar.addfile(readme, io.BytesIO(b""))
    (root / "aclImdb_labelled.tar.gz").write_bytes(buf.getvalue())
    monkeypatch.setitem(sources.SOURCES["imdb"], "mirror_sha256", sources.sha256(buf.getvalue()))
    (root / "minllama_sst_cfimdb").mkdir()
    files = {"cfimdb-train.txt": "".join(f"{i % 2} ||| this movie number {i} was {'good' if i % 2 else 'bad'} .\n"
                                         for i in range(40)),
             "cfimdb-dev.txt": "".join(f"{i % 2} ||| a dev review {i} , {'good' if i % 2 else 'bad'}\n"
                                       for i in range(10)),
             "cfimdb-label-mapping.json": json.dumps(["bad", "good"])}
    for name, text in files.items():
        (root / "minllama_sst_cfimdb" / name).write_text(text)
        monkeypatch.setitem(sources.SOURCES["cfimdb"]["files"], f"minllama_sst_cfimdb/{name}",
                            sources.sha256(text.encode()))
    monkeypatch.setenv("DATA_MIRROR", str(root))
    monkeypatch.chdir(tmp_path)
    return str(root)


def test_imdb_lm_corpus_from_the_test_half(review_mirror, tmp_path):
    """Each review of IMDB's test half, '<br />' read as a newline, as [BOS] + its ids, a seeded few held
    out for validation; no train-half review is read."""
    meta = data.prepare("imdb_lm", tokenizer="tok512", mirror=review_mirror, out_dir="lm", n_val=3, verbose=False)
    assert meta["task"] == "lm" and meta["vocab_size"] == 512 and meta["tokenizer"] == "llama2c:tok512"
    assert {k: c["reviews"] for k, c in meta["counts"].items()} == {"train": 9, "val": 3}
    tok = llama2c.load_llama_tokenizer("tok512", review_mirror)
    texts = []
    for k in ("train", "val"):
        ids = data.TokenSplit("lm", k).tokens.tolist()
        assert ids[0] == tok.bos_id and len(ids) == meta["counts"][k]["tokens"]
        starts = [i for i, t in enumerate(ids) if t == tok.bos_id] + [len(ids)]
        texts += [tok.decode(ids[a:b]) for a, b in zip(starts, starts[1:])]
    assert sorted(texts) == sorted(f"Review {i} of the test half.\n\nIt was fine and {'pos' if i % 2 else 'neg'}."
                                   for i in range(12))
    again = data.prepare("imdb_lm", tokenizer="tok512", mirror=review_mirror, out_dir="again", n_val=3, verbose=False)
    assert again["counts"] == meta["counts"]  # the split is seeded
    with pytest.raises(data.DataError, match="n_val=12: the archive holds 12 test-half reviews"):
        data.prepare("imdb_lm", tokenizer="tok512", mirror=review_mirror, out_dir="lm", n_val=12, verbose=False)
    train_half = imdb.read_imdb(sources.archive_file("imdb", review_mirror), "train")  # neg 0, 2, .., then pos 1, 3, ..
    assert train_half[1] == ("Review 2 of the train half.\n\nIt was trainhalf and neg.", 0, 3)
    assert train_half[6] == ("Review 1 of the train half.\n\nIt was trainhalf and pos.", 1, 9)
    assert [r[1:] for r in imdb.read_imdb(sources.archive_file("imdb", review_mirror), "test")][:2] == [(0, 1), (0, 3)]


def test_imdb_archive_is_checked_whole_and_downloaded_once(review_mirror, tmp_path, monkeypatch):
    monkeypatch.setitem(sources.SOURCES["imdb"], "mirror_sha256", "0" * 64)
    with pytest.raises(data.DataError, match="aclImdb_labelled.tar.gz has sha256 .*expected 0000"):
        sources.archive_file("imdb", review_mirror)
    with pytest.raises(data.DataError, match="mirror .* has no aclImdb_labelled.tar.gz"):
        sources.archive_file("imdb", str(tmp_path))
    calls = []

    def fake_download(url, dest, timeout=60):
        calls.append(url)
        with open(dest, "wb") as f:
            f.write(open(os.path.join(review_mirror, "aclImdb_labelled.tar.gz"), "rb").read())

    monkeypatch.setattr(sources, "download", fake_download)
    monkeypatch.setitem(sources.SOURCES["imdb"], "sha256",
                        sources.sha256(open(os.path.join(review_mirror, "aclImdb_labelled.tar.gz"), "rb").read()))
    for _ in range(2):
        path = sources.archive_file("imdb", None, cache_dir=str(tmp_path / "cache"))
    assert calls == ["https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"]
    assert path == str(tmp_path / "cache" / "aclImdb_v1.tar.gz")
    (tmp_path / "junk.tar.gz").write_bytes(b"not a tar")
    with pytest.raises(data.DataError, match="not a readable IMDB archive"):
        imdb.read_imdb(str(tmp_path / "junk.tar.gz"), "test")


def test_pretrain_a_llama_then_sample_and_prompt_it(review_mirror, capsys):
    """train.py pretrains a (tiny) Llama on the review corpus; evaluate.py samples from the checkpoint
    with its tokenizer, and uses it as a zero-shot classifier on (fake) CFIMDB: the prompts are the
    course's template, the scores label_log_likelihoods', the prediction their argmax."""
    import train

    cfg = {**train.make_config(["--model=llama"]), "dataset": "imdb_lm", "tokenizer": "tok512", "out_dir": "run",
           "device": "cpu", "dtype": "float32", "block_size": 48, "n_layer": 1, "n_embd": 16, "n_head": 2,
           "n_kv_head": 1, "multiple_of": 8, "batch_size": 4, "max_iters": 6, "eval_interval": 3,
           "scheduler": "constant", "learning_rate": 1e-2, "early_stop_patience": 0}
    data.prepare("imdb_lm", tokenizer="tok512", mirror=review_mirror, out_dir="data/imdb_lm_tok512", n_val=4,
                 verbose=False)  # where train.py looks (500 validation reviews would be all of them)
    summary = train.train(cfg)
    assert summary["iters"] == 6 and summary["best_val_loss"] < 6.0  # ln 512 = 6.24: it learnt something
    evaluate.main(["--ckpt", "run/ckpt.pt", "--prompt", "It was", "--max_new_tokens", "5", "--temperature", "0",
                   "--no_timing", "--metrics", "--json", "lm.json"])
    r = json.loads(open("lm.json").read())
    assert r["task"] == "lm" and r["sample"].startswith("It was") and r["ppl"] > 1

    evaluate.main(["--ckpt", "run/ckpt.pt", "--zero_shot", "cfimdb", "--split", "test", "--json", "zs.json"])
    r = json.loads(open("zs.json").read())
    scores = torch.tensor(r["label_log_likelihoods"])
    assert r["task"] == "zero-shot" and r["n"] == 10 and r["labels"] == [i % 2 for i in range(10)]
    assert r["predictions"] == scores.argmax(1).tolist()
    assert r["accuracy"] == sum(p == y for p, y in zip(r["predictions"], r["labels"])) / 10
    assert r["prompt"] == "<text> Is this movie bad or good? This movie is"
    m, _ = checkpoints.load_checkpoint("run/ckpt.pt")
    tok = llama2c.load_llama_tokenizer("tok512")
    test = data.load_dataset({"dataset": "cfimdb", "tokenizer": "tok512"}).splits["test"]
    with pytest.raises(data.DataError, match="prepared with max_len 256, the run asks for 64; delete the folder"):
        data.load_dataset({"dataset": "cfimdb", "tokenizer": "tok512", "max_len": 64})  # data/ holds one folder
    prompts, label_ids, y, cut = evaluate_options.zero_shot_inputs(tok, test, ["bad", "good"], m.cfg.block_size)
    assert tok.decode(prompts[3]) == "a dev review 3 , good Is this movie bad or good? This movie is" and cut == 0
    assert [tok.decode(ids) for ids in label_ids] == [" bad", " good"]
    assert torch.allclose(evaluate.label_log_likelihoods(m, prompts, label_ids, "cpu"), scores, atol=1e-5)
    # a text too long for the context is cut from its end, so prompt and label fit
    frame = len(prompts[3]) - len(tok.encode("a dev review 3 , good", bos=False))  # BOS and the question
    short, _, _, cut = evaluate_options.zero_shot_inputs(tok, test, ["bad", "good"], frame + 3 + 4)  # 4 tokens of text
    assert cut == 10 and all(len(q) == frame + 4 for q in short) and short[3][:5] == prompts[3][:5]
    with pytest.raises(ValueError, match="a context of 20 tokens cannot hold the zero-shot prompt"):
        evaluate_options.zero_shot_inputs(tok, test, ["bad", "good"], 20)
    train.train({**cfg, "dataset": "cfimdb", "out_dir": "cls", "max_iters": 1, "eval_interval": 0, "block_size": 256})
    with pytest.raises(SystemExit, match="not a Llama language model"):
        evaluate.main(["--ckpt", "cls/ckpt.pt", "--zero_shot", "cfimdb"])


def test_zero_shot_counts_the_texts_cut_at_preparation_and_for_the_context(review_mirror, monkeypatch, capsys):
    """A text can be cut twice: to max_len (256) when the data is prepared, and again so that the prompt
    fits the model's context. The test split here: 3 reviews far over 256 tokens (cut at preparation, and
    then again: 255 tokens of text do not fit a context of 64), 2 of about 100 (cut for the context only)
    and 5 short ones (never cut). The report states both counts."""
    tok = llama2c.load_llama_tokenizer("tok512", review_mirror)
    lengths = [300] * 3 + [100] * 2 + [3] * 5  # words; 'the' is one token of tok512 (checked below)
    dev = "".join(f"{i % 2} ||| {' '.join(['the'] * n)}\n" for i, n in enumerate(lengths))
    assert [len(tok.encode(line.split(" ||| ")[1], bos=True)) for line in dev.splitlines()] == [n + 1 for n in lengths]
    (Path(review_mirror) / "minllama_sst_cfimdb" / "cfimdb-dev.txt").write_text(dev)
    monkeypatch.setitem(sources.SOURCES["cfimdb"]["files"], "minllama_sst_cfimdb/cfimdb-dev.txt",
                        sources.sha256(dev.encode()))
    write_llama2c(tiny_llama(vocab_size=512, block_size=64), "lm.bin", 0)  # a vocabulary of 512: tok512
    evaluate.main(["--ckpt", "lm.bin", "--zero_shot", "cfimdb", "--split", "test", "--json", "zs.json",
                   "--device", "cpu"])
    r = json.loads(open("zs.json").read())
    assert (r["n"], r["prepared_max_len"], r["context"]) == (10, 256, 64)
    assert r["texts_cut_at_preparation"] == 3 and r["texts_cut"] == 5
    printed = capsys.readouterr().out
    assert re.search(r"^texts of \S+: 3 of 10 cut to 256 tokens when the data was prepared, 5 cut again to fit the "
                     r"prompt in its context of 64$", printed, re.M)
    rows = {line[:34].strip(): line[34:].strip() for line in printed.splitlines()}
    assert rows["texts cut at data preparation"] == "3" and rows["texts cut again to fit the context"] == "5"


def test_evaluate_config_files_set_options(tmp_path):
    """A config file for evaluate.py sets its options (the command line wins); an unknown name is an
    error naming the closest option."""
    p = evaluate_options.parser()
    good = tmp_path / "gen.py"
    good.write_text("ckpt = 'stories260K'\ntemperature = 0.0\nmax_new_tokens = 7\n")
    p.set_defaults(**evaluate_options.config_defaults(p, [str(good)]))
    args = p.parse_args(["--max_new_tokens", "9"])
    assert (args.ckpt, args.temperature, args.max_new_tokens) == (["stories260K"], 0.0, 9)
    bad = tmp_path / "bad.py"
    bad.write_text("temprature = 0.0\n")
    with pytest.raises(SystemExit, match="unknown option 'temprature' in .*bad.py \\(did you mean 'temperature'"):
        evaluate.main([str(bad)])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for name, want in [("llama_generate", dict(temperature=0.0, prompt="Once upon a time")),
                       ("llama_sst5_prompt", dict(zero_shot="sst5", split="val")),
                       ("llama_cfimdb_prompt", dict(zero_shot="cfimdb", split="test"))]:
        got = evaluate_options.config_defaults(p, [os.path.join(root, "config", f"{name}.py")])
        assert got["ckpt"] == ["stories260K"] and {k: got[k] for k in want} == want
