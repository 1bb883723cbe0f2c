"""
model.py: every fast path against its plain reference, the accounting against hand formulas, and the
checkpoint format. Tiny sizes, float32, CPU; each test runs in well under a second.
"""

import copy
import dataclasses
import math
import os

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

import model
from bookkeeping import checkpoints, flops
from model import Attention, EncoderClassifier, EncoderConfig

ATOL = 1e-5  # float32 tolerance for two orderings of the same sums at these sizes


def tiny_config(**kw):
    base = dict(vocab_size=37, n_classes=2, block_size=16, n_layer=2, n_loops=1, n_embd=24, n_head=6,
                ffn_hidden=40, dropout=0.0)
    base.update(kw)
    return EncoderConfig(**base)


def padded_batch(lengths, T, vocab_size=37, seed=0):
    """Random ids (B, T) with [CLS]=2 first and [PAD]=0 after each sequence's length; the key mask."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(3, vocab_size, (len(lengths), T), generator=g)
    idx[:, 0] = 2
    mask = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]  # (B, T)
    return idx.masked_fill(~mask, 0), mask


def assert_same_step(a, b, lengths, grad_atol, grad_rtol):
    """Two classifiers computing one function: the same logits on a padded batch of these lengths, and
    the same gradient of the loss for every parameter."""
    idx, mask = padded_batch(lengths, max(lengths))
    targets = torch.arange(len(lengths)) % 2
    (ya, la), (yb, lb) = a(idx, mask, targets), b(idx, mask, targets)
    torch.testing.assert_close(ya, yb, atol=ATOL, rtol=ATOL)
    la.backward()
    lb.backward()
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, atol=grad_atol, rtol=grad_rtol, msg=name)


def pair(cfg, **changes):
    """Two models of the same weights whose configs differ only by `changes`."""
    torch.manual_seed(0)
    a = EncoderClassifier(cfg).eval()
    b = EncoderClassifier(dataclasses.replace(cfg, **changes)).eval()
    b.load_state_dict(a.state_dict())
    return a, b


# -----------------------------------------------------------------------------
# attention: SDPA fast path == manual reference, forward and backward


@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
@pytest.mark.parametrize("n_kv_head", [0, 2, 1], ids=["mha", "gqa2", "mqa"])
@pytest.mark.parametrize("padded", [False, True], ids=["nomask", "keymask"])
def test_attention_sdpa_equals_manual(causal, n_kv_head, padded):
    cfg = tiny_config(n_kv_head=n_kv_head, causal=causal, bias=True)
    torch.manual_seed(0)
    sdpa = Attention(dataclasses.replace(cfg, attn_impl="sdpa"))
    manual = Attention(dataclasses.replace(cfg, attn_impl="manual"))
    manual.load_state_dict(sdpa.state_dict())
    B, T, C = 3, 7, cfg.n_embd  # odd sizes; three different pad lengths
    _, key_mask = padded_batch([7, 5, 2], T)
    key_mask = key_mask if padded else None
    rope = model.rope_cache(cfg.block_size, C // cfg.n_head)
    x = torch.randn(B, T, C)
    grad_out = torch.randn(B, T, C)

    outs, grads = [], []
    for attn in (sdpa, manual):
        xi = x.clone().requires_grad_(True)
        y, w = attn(xi, key_mask, rope)
        assert w is None  # weights only when asked for
        y.backward(grad_out)
        outs.append(y.detach())
        grads.append([xi.grad] + [p.grad for p in attn.parameters()])
    torch.testing.assert_close(outs[0], outs[1], atol=ATOL, rtol=1e-5)
    assert len(grads[0]) == len(grads[1]) == 1 + 8  # x, then wq/wk/wv/wo weight and bias
    for g_sdpa, g_manual in zip(*grads):
        torch.testing.assert_close(g_sdpa, g_manual, atol=ATOL, rtol=1e-5)


def test_attention_weights_respect_masks():
    """need_weights=True returns softmax rows that sum to 1 and put no weight on padding or the future."""
    cfg = tiny_config(causal=True, n_kv_head=2)
    attn = Attention(cfg)
    _, key_mask = padded_batch([7, 5, 2], 7)
    _, w = attn(torch.randn(3, 7, cfg.n_embd), key_mask, None, need_weights=True)
    assert w.shape == (3, cfg.n_head, 7, 7)
    torch.testing.assert_close(w.sum(-1), torch.ones(3, cfg.n_head, 7))
    allowed = key_mask[:, None, None, :] & torch.ones(7, 7, dtype=torch.bool).tril()
    assert (w.masked_select(~allowed.expand_as(w)) == 0).all()


@pytest.mark.parametrize("pooling", ["cls", "mean"])
@pytest.mark.parametrize("kw", [dict(), dict(n_loops=2, n_kv_head=2, ffn="gelu", norm="layer", bias=True),
                                dict(pos="learned", emb_norm="rms")],
                         ids=["rope-swiglu", "loops-gqa-gelu-layer", "learned-pos"])
def test_classifier_same_under_both_attention_paths(pooling, kw):
    cfg = tiny_config(pooling=pooling, **kw)
    sdpa, manual = pair(dataclasses.replace(cfg, attn_impl="sdpa"), attn_impl="manual")
    idx, mask = padded_batch([9, 4, 1], 9)
    targets = torch.tensor([0, 1, 1])
    logits_s, loss_s = sdpa(idx, mask, targets)
    logits_m, loss_m = manual(idx, mask, targets)
    torch.testing.assert_close(logits_s, logits_m, atol=ATOL, rtol=1e-5)
    loss_s.backward()
    loss_m.backward()
    for (name, ps), pm in zip(sdpa.named_parameters(), manual.parameters()):
        torch.testing.assert_close(ps.grad, pm.grad, atol=ATOL, rtol=1e-4, msg=name)


def test_encode_gives_one_attention_map_per_applied_layer():
    """encode(weights=[...]) collects the reference path's maps, one per applied Block, and computes the same
    states as without them (where forward's last Block computes [CLS] alone)."""
    m = EncoderClassifier(tiny_config(n_layer=2, n_loops=3)).eval()
    idx, mask = padded_batch([5, 3], 5)
    weights = []
    h = m.encode(idx, mask, weights=weights)
    assert h.shape == (2, 5, m.cfg.n_embd)
    assert len(weights) == 2 * 3 and all(w.shape == (2, 6, 5, 5) for w in weights)
    torch.testing.assert_close(m.head(h[:, 0]), m(idx, mask)[0], atol=ATOL, rtol=1e-5)
    torch.testing.assert_close(h, m.encode(idx, mask))


@pytest.mark.parametrize("kw", [dict(n_loops=2, pos="rope"), dict(n_loops=1, pos="learned", ffn="gelu", norm="layer",
                                                                  bias=True)], ids=["recurrent", "plain"])
def test_last_block_computing_cls_alone_changes_nothing(kw, monkeypatch):
    """The [CLS] classifier's last Block computes position 0 alone (its query reads every key). Against the
    same model made to compute every position there: the same logits and every gradient the same, with padding,
    RoPE or learned positions, one loop or two; and its FLOPs are the full count less what it skips."""
    cfg = tiny_config(n_embd=24, n_head=4, n_kv_head=2, ffn_hidden=30, dropout=0.0, **kw)
    torch.manual_seed(0)
    cls_only = EncoderClassifier(cfg)
    full = copy.deepcopy(cls_only)
    monkeypatch.setattr(full, "last_queries", lambda masked=0: None)
    assert_same_step(cls_only, full, [9, 4, 6], grad_atol=1e-6, grad_rtol=1e-5)
    T, C, F_ = 9, 24, 30
    # per position skipped: the q and o projections, its attention row, the FFN
    per_position = 2 * C * 2 * C + 2 * 2 * T * C + 2 * C * F_ * (3 if cfg.ffn == "swiglu" else 2)
    assert flops.forward_flops(full, T) - flops.forward_flops(cls_only, T) == (T - 1) * per_position
    assert flops.forward_flops(cls_only, T, masked=2) == flops.forward_flops(full, T, masked=2)  # MLM reads them all


# -----------------------------------------------------------------------------
# norms against torch's own and against the formula


def assert_matches_reference(module, reference, x):
    """module(x) against reference(x, *params) on detached copies of the input and of every parameter:
    the outputs agree, and so do the gradients of the input and of each parameter. Returns module(x)."""
    params = [p.detach().clone().requires_grad_(True) for p in module.parameters()]
    x, x2 = x.detach().clone().requires_grad_(True), x.detach().clone().requires_grad_(True)
    y, y_ref = module(x), reference(x2, *params)
    torch.testing.assert_close(y, y_ref, atol=1e-5, rtol=1e-5)
    g = torch.randn_like(y)
    y.backward(g)
    y_ref.backward(g)
    torch.testing.assert_close(x.grad, x2.grad, atol=1e-4, rtol=1e-4)
    for p, ref in zip(module.parameters(), params, strict=True):
        torch.testing.assert_close(p.grad, ref.grad, atol=1e-4, rtol=1e-4)
    return y


@pytest.mark.parametrize("impl", ["torch", "manual"])
def test_layernorm_matches_torch(impl):
    torch.manual_seed(0)
    x = torch.randn(4, 5, 24) * 3 + 1.5
    ln = model.LayerNorm(24, eps=1e-5, impl=impl)
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()
    assert_matches_reference(ln, lambda x, w, b: F.layer_norm(x, (24,), w, b, eps=1e-5), x)
    assert model.LayerNorm(24, bias=False).bias is None


@pytest.mark.parametrize("impl", ["torch", "manual"])
def test_rmsnorm_matches_formula_and_torch(impl):
    torch.manual_seed(0)
    x = torch.randn(4, 5, 24) * 3 + 0.5
    rms = model.RMSNorm(24, eps=1e-6, impl=impl)
    with torch.no_grad():
        rms.weight.normal_()
    y = assert_matches_reference(rms, lambda x, w: x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w, x)
    if hasattr(F, "rms_norm"):
        torch.testing.assert_close(y, F.rms_norm(x, (24,), rms.weight.detach(), eps=1e-6), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("impl", ["torch", "manual"])
def test_norms_keep_low_precision_dtype(impl):
    x = torch.randn(2, 3, 8).bfloat16()
    assert model.RMSNorm(8, impl=impl).bfloat16()(x).dtype == torch.bfloat16
    assert model.LayerNorm(8, impl=impl).bfloat16()(x).dtype == torch.bfloat16


@pytest.mark.parametrize("kind, bias", [("rms", False), ("layer", False), ("layer", True)])
def test_fused_norm_equals_written_out_norm_in_a_model(kind, bias):
    """norm_impl='torch' (the default: F.rms_norm / F.layer_norm) and 'manual' (op by op) are one function:
    the same logits and the same gradient for every parameter, on odd sizes with padding."""
    cfg = tiny_config(n_embd=30, n_head=3, ffn_hidden=37, norm=kind, bias=bias, emb_norm=kind, norm_impl="torch")
    fused, manual = pair(cfg, norm_impl="manual")
    assert_same_step(fused, manual, [7, 3, 5], grad_atol=1e-5, grad_rtol=1e-4)


def test_make_norm_rejects_unknown_kind():
    with pytest.raises(ValueError, match="unknown norm"):
        model.make_norm("batch", tiny_config())


# -----------------------------------------------------------------------------
# RoPE


def rope_at(vec, positions, T=40, theta=10000.0):
    """apply_rope to one head vector placed at each of `positions` in a length-T sequence."""
    d = vec.numel()
    cos, sin = model.rope_cache(T, d, theta)
    x = vec.expand(1, 1, T, d).contiguous()  # (B=1, nh=1, T, hs): the same vector everywhere
    return model.apply_rope(x, cos, sin)[0, 0, positions]


def test_rope_scores_depend_only_on_relative_position():
    torch.manual_seed(0)
    q, k = torch.randn(16, dtype=torch.float64), torch.randn(16, dtype=torch.float64)
    for m, n in [(3, 1), (0, 5), (7, 7), (2, 11)]:
        base = rope_at(q, m) @ rope_at(k, n)
        for s in (1, 4, 19):
            torch.testing.assert_close(rope_at(q, m + s) @ rope_at(k, n + s), base, atol=1e-5, rtol=1e-5)
    # and it does depend on the offset (otherwise the test above proves nothing)
    assert not torch.allclose(rope_at(q, 3) @ rope_at(k, 1), rope_at(q, 4) @ rope_at(k, 1), atol=1e-3)


def test_rope_preserves_norms():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 40, 16)
    cos, sin = model.rope_cache(40, 16)
    torch.testing.assert_close(model.apply_rope(x, cos, sin).norm(dim=-1), x.norm(dim=-1))


def test_rope_rotates_adjacent_pairs_by_hand():
    a, b, c, d = 0.3, -1.2, 0.7, 2.0
    p, hs = 3, 4
    out = rope_at(torch.tensor([a, b, c, d]), p)
    # pair j = (x_2j, x_2j+1) turns by p * theta_j, theta_j = 10000^(-2j/d): theta_0 = 1, theta_1 = 0.01
    t0, t1 = p * 10000 ** (-0 / hs), p * 10000 ** (-2 / hs)
    expected = [a * math.cos(t0) - b * math.sin(t0), a * math.sin(t0) + b * math.cos(t0),
                c * math.cos(t1) - d * math.sin(t1), c * math.sin(t1) + d * math.cos(t1)]
    torch.testing.assert_close(out, torch.tensor(expected), atol=1e-6, rtol=1e-6)
    # position 0 is the identity
    torch.testing.assert_close(rope_at(torch.tensor([a, b, c, d]), 0), torch.tensor([a, b, c, d]))


# -----------------------------------------------------------------------------
# parameter and FLOP accounting


def expected_param_counts(cfg):
    """The hand count: embeddings, then per layer q/k/v/o + FFN matrices + two norms, final norm, head."""
    C, Fh, hs = cfg.n_embd, cfg.ffn_hidden, cfg.n_embd // cfg.n_head
    c_kv = cfg.n_kv_head * hs
    bias = cfg.bias

    def norm_params(kind):
        return C + (C if kind == "layer" and bias else 0)

    attn = C * C + 2 * C * c_kv + C * C + ((C + 2 * c_kv + C) if bias else 0)
    if cfg.ffn == "swiglu":
        ffn = 3 * C * Fh + ((2 * Fh + C) if bias else 0)
    else:
        ffn = 2 * C * Fh + ((Fh + C) if bias else 0)
    layer = attn + ffn + 2 * norm_params(cfg.norm)
    emb = cfg.vocab_size * C + (cfg.block_size * C if cfg.pos == "learned" else 0)
    emb_norm = 0 if cfg.emb_norm == "none" else norm_params(cfg.emb_norm)
    head = C * cfg.n_classes + cfg.n_classes  # the head always has a bias
    non_emb = emb_norm + cfg.n_layer * layer + norm_params(cfg.norm) + head
    return {"total": emb + non_emb, "embedding": emb, "non_embedding": non_emb, "trainable": emb + non_emb}


@pytest.mark.parametrize("kw", [
    dict(),
    dict(ffn="gelu", norm="layer", bias=True, n_kv_head=2, pos="learned", emb_norm="layer"),
    dict(ffn="swiglu", norm="layer", bias=False, n_kv_head=3, emb_norm="rms", n_classes=3),
], ids=["swiglu-rms", "gelu-layer-bias-gqa-learned", "layer-nobias-gqa3"])
def test_param_counts_match_hand_formula(kw):
    cfg = tiny_config(**kw)
    counts = EncoderClassifier(cfg).param_counts()
    assert counts == expected_param_counts(cfg)
    # recurrence reuses the same weights: more loops, not more parameters
    assert EncoderClassifier(dataclasses.replace(cfg, n_loops=3)).param_counts() == counts


@pytest.mark.parametrize("config_file, expected_non_emb", [
    ("config/sst2_baseline.py", 14_161_538),   # 6 layers x width 384, 6 heads, FFN 1536
    ("config/sst2_recurrent.py", 3_148_034),   # 3 shared layers x width 256, 4 heads, FFN 1024
])
def test_seed_config_param_counts(config_file, expected_non_emb):
    """The two study configs, built from the files through the configurator, against the formula
    and a fixed number (SwiGLU, RMSNorm, no biases; the head keeps its bias)."""
    import train

    repo_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cfg = train.make_config([os.path.join(repo_root, config_file)])
    facts = {"vocab_size": 100, "n_classes": 2, "block_size": 256}  # what a dataset fixes; vocab: embedding only
    with torch.device("meta"):  # count without allocating or initializing the weights
        m = model.build_model(cfg["model"], cfg, facts)
    mcfg = m.cfg
    assert (mcfg.ffn, mcfg.norm, mcfg.bias, mcfg.n_kv_head) == ("swiglu", "rms", False, mcfg.n_head)
    counts = m.param_counts()
    assert counts == expected_param_counts(mcfg)
    assert counts["non_embedding"] == expected_non_emb


@pytest.mark.parametrize("ffn", ["swiglu", "gelu"])
def test_flops_per_forward_matches_flop_counter(ffn):
    cfg = tiny_config(ffn=ffn, n_loops=2, n_head=4, n_kv_head=2, n_embd=16, ffn_hidden=24, n_classes=3)
    manual, sdpa = pair(dataclasses.replace(cfg, attn_impl="manual"), attn_impl="sdpa")
    B, T = 3, 11
    idx, mask = padded_batch([11, 8, 3], T)
    expected = flops.forward_flops(manual, T, batch_size=B)
    with FlopCounterMode(display=False) as fc:
        manual(idx, mask)
    assert fc.get_total_flops() == expected

    # The SDPA path runs the same projections and FFN, but on CPU it calls the fused
    # aten._scaled_dot_product_flash_attention_for_cpu kernel, which FlopCounterMode (torch 2.13)
    # does not count. So its total is either the full formula (where the kernel is counted, e.g. the
    # CUDA kernels) or the formula minus exactly the QK^T and AV matmuls (the last Block's: [CLS] only).
    attn_flops = B * 2 * 2 * cfg.n_embd * T * (T * (cfg.n_layer * cfg.n_loops - 1) + 1)
    with FlopCounterMode(display=False) as fc:
        sdpa(idx, mask)
    assert fc.get_total_flops() in (expected, expected - attn_flops)


# -----------------------------------------------------------------------------
# recurrence: one set of weights applied n_loops times


def test_loops_share_weights_and_follow_the_recurrence():
    cfg = tiny_config(n_layer=2, n_loops=2, loop_alpha=0.5, pooling="mean")
    looped, single = pair(cfg, n_loops=1)
    assert sum(p.numel() for p in looped.parameters()) == sum(p.numel() for p in single.parameters())
    assert len(list(looped.parameters())) == len(list(single.parameters()))

    idx, mask = padded_batch([6, 4], 6)
    rope = (looped.rope_cos, looped.rope_sin)
    # by hand: h <- F(h) + alpha * h, twice, with F the whole stack of layers
    h = looped.embed(idx)
    for _ in range(2):
        h_in = h
        for layer in looped.layers:
            h, _ = layer(h, mask, rope)
        h = h + 0.5 * h_in
    h = looped.norm_f(h)
    m = mask.float()[..., None]
    expected = looped.head((h * m).sum(1) / m.sum(1))
    torch.testing.assert_close(looped(idx, mask)[0], expected)
    # a single pass is a different function (so the check above could fail)
    assert not torch.allclose(single(idx, mask)[0], expected, atol=1e-4)


def test_shared_weight_gradient_sums_over_loops():
    """The gradient of a tied weight equals the sum of the gradients of two untied copies, one per loop."""
    cfg = tiny_config(n_layer=1, n_loops=2, loop_alpha=0.5)
    looped, single = pair(cfg, n_loops=1)
    idx, mask = padded_batch([6, 4], 6)
    targets = torch.tensor([1, 0])
    looped(idx, mask, targets)[1].backward()
    single(idx, mask, targets)[1].backward()

    # unrolled copy: loop r uses its own copy of the layer stack
    copies = [copy.deepcopy(looped.layers) for _ in range(2)]
    for c in copies:
        c.zero_grad(set_to_none=True)
    rope = (looped.rope_cos, looped.rope_sin)
    h = looped.embed(idx).detach()
    for layers in copies:
        h_in = h
        for layer in layers:
            h, _ = layer(h, mask, rope)
        h = h + 0.5 * h_in
    logits = looped.head(looped.norm_f(h)[:, 0])
    F.cross_entropy(logits, targets).backward()

    for (name, p), p0, p1, ps in zip(looped.layers.named_parameters(), copies[0].parameters(),
                                     copies[1].parameters(), single.layers.parameters()):
        torch.testing.assert_close(p.grad, p0.grad + p1.grad, atol=1e-6, rtol=1e-4, msg=name)
        assert not torch.allclose(p.grad, ps.grad, atol=1e-6), f"{name}: 2 loops gave the 1-loop gradient"


# -----------------------------------------------------------------------------
# padding, learning, validation


@pytest.mark.parametrize("attn_impl", ["sdpa", "manual"])
@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_logits_do_not_depend_on_padding(attn_impl, pooling):
    cfg = tiny_config(attn_impl=attn_impl, pooling=pooling, n_loops=2)
    torch.manual_seed(0)
    m = EncoderClassifier(cfg).eval()
    idx, mask = padded_batch([4, 9, 6], 9)
    batched = m(idx, mask)[0]
    for i, n in enumerate([4, 9, 6]):
        alone = m(idx[i:i + 1, :n])[0]  # no padding, no mask
        torch.testing.assert_close(batched[i:i + 1], alone, atol=ATOL, rtol=1e-5)
    # changing the padded ids must not matter either
    torch.testing.assert_close(m(idx.masked_fill(~mask, 7), mask)[0], batched, atol=ATOL, rtol=1e-5)


def test_tiny_model_overfits_a_tiny_batch():
    torch.manual_seed(0)
    cfg = tiny_config(vocab_size=20, n_layer=1, n_loops=1, n_embd=32, n_head=4, ffn_hidden=64)
    m = EncoderClassifier(cfg)
    idx, mask = padded_batch([10, 7, 9, 3, 10, 5, 8, 6], 10, vocab_size=20, seed=1)
    targets = torch.tensor([0, 1, 1, 0, 1, 0, 0, 1])
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    for _ in range(300):
        _, loss = m(idx, mask, targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if loss.item() < 0.01:
            break
    m.eval()
    logits, loss = m(idx, mask, targets)
    assert loss.item() < 0.05
    assert (logits.argmax(-1) == targets).all()


@pytest.mark.parametrize("kw, message", [
    (dict(n_embd=30, n_head=4), "not divisible"),
    (dict(n_head=6, n_kv_head=4), "not a multiple"),
    (dict(n_embd=18, n_head=6), "even head size"),  # head size 3 cannot be rotated in pairs
    (dict(n_layer=0), "n_layer=0 must be at least 1"),
    (dict(n_loops=0), "n_loops=0 must be at least 1"),
    (dict(n_classes=1), "n_classes=1 must be at least 2"),
    (dict(dropout=1.0), "dropout"),
    (dict(ffn="relu"), "ffn="),
    (dict(norm="batch"), "norm="),
    (dict(emb_norm="group"), "emb_norm="),
    (dict(pos="alibi"), "pos="),
    (dict(pooling="max"), "pooling="),
    (dict(attn_impl="flash"), "attn_impl="),
    (dict(norm_impl="apex"), "norm_impl="),
    (dict(ffn_impl="cuda"), "ffn_impl="),
    (dict(ffn="gelu", ffn_impl="triton"), "fuses SwiGLU only"),
])
def test_config_rejects_nonsense(kw, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**kw)


@pytest.mark.parametrize("kw", [dict(n_head=0), dict(n_head=4, n_kv_head=-2), dict(ffn_hidden=-8)])
def test_config_rejects_non_positive_sizes(kw):
    try:
        tiny_config(n_embd=24, **kw)
    except ValueError:
        return
    except Exception as e:  # noqa: BLE001 - the point is which type comes out
        raise AssertionError(f"{kw} raised {type(e).__name__}, not ValueError: {e}")
    raise AssertionError(f"{kw} was accepted")


def test_config_derives_defaults_and_rejects_long_input():
    cfg = tiny_config(n_kv_head=0, ffn_hidden=0)
    assert cfg.n_kv_head == cfg.n_head and cfg.ffn_hidden == 4 * cfg.n_embd
    m = EncoderClassifier(cfg)
    with pytest.raises(ValueError, match="block_size"):
        m(torch.zeros(1, cfg.block_size + 1, dtype=torch.long))


# -----------------------------------------------------------------------------
# checkpoints


def test_checkpoint_round_trip(tmp_path):
    cfg = tiny_config(n_loops=2, n_kv_head=2, pos="learned", norm="layer", bias=True)
    torch.manual_seed(0)
    m = EncoderClassifier(cfg).eval()
    path = str(tmp_path / "ckpt.pt")
    checkpoints.save_checkpoint(path, m, iter_num=7, note="hello")
    loaded, ckpt = checkpoints.load_checkpoint(path)
    assert not loaded.training
    assert loaded.cfg == cfg
    assert ckpt["iter_num"] == 7 and ckpt["note"] == "hello"
    idx, mask = padded_batch([8, 3], 8)
    assert torch.equal(loaded(idx, mask)[0], m(idx, mask)[0])
    assert not [f for f in tmp_path.iterdir() if ".tmp" in f.name]  # the temporary file was renamed


def test_checkpoint_saves_the_unwrapped_module(tmp_path):
    """A torch.compile wrapper keeps the model in `_orig_mod`; saved keys must not carry the prefix."""

    class Wrapper(torch.nn.Module):  # stands in for torch.compile's OptimizedModule
        def __init__(self, inner):
            super().__init__()
            self._orig_mod = inner

    m = EncoderClassifier(tiny_config())
    checkpoints.save_checkpoint(str(tmp_path / "c.pt"), Wrapper(m))
    ckpt = torch.load(tmp_path / "c.pt", weights_only=True)
    assert set(ckpt["model"]) == set(m.state_dict())
    checkpoints.load_checkpoint(str(tmp_path / "c.pt"))


def _expect_checkpoint_error(path, message):
    with pytest.raises(checkpoints.CheckpointError, match=message) as info:
        checkpoints.load_checkpoint(str(path))
    assert type(info.value) is checkpoints.CheckpointError
    assert str(path) in str(info.value)  # the message says which file


def test_checkpoint_errors_are_helpful(tmp_path):
    _expect_checkpoint_error(tmp_path / "missing.pt", "no checkpoint at .*train one first")

    (tmp_path / "random.pt").write_bytes(torch.randint(0, 256, (4096,), dtype=torch.uint8).numpy().tobytes())
    _expect_checkpoint_error(tmp_path / "random.pt", "not a (readable PyTorch )?checkpoint")

    torch.save({"a": 1, "weights": torch.zeros(3)}, tmp_path / "plain.pt")
    _expect_checkpoint_error(tmp_path / "plain.pt", "not a checkpoint")

    torch.save([1, 2, 3], tmp_path / "list.pt")
    _expect_checkpoint_error(tmp_path / "list.pt", "not a checkpoint")

    m = EncoderClassifier(tiny_config())
    checkpoints.save_checkpoint(str(tmp_path / "good.pt"), m)
    ckpt = torch.load(tmp_path / "good.pt", weights_only=True)
    torch.save({**ckpt, "version": 99}, tmp_path / "future.pt")
    _expect_checkpoint_error(tmp_path / "future.pt", "version 99")
    torch.save({**ckpt, "kind": "rwkv"}, tmp_path / "kind.pt")
    _expect_checkpoint_error(tmp_path / "kind.pt", "kind 'rwkv'")
    torch.save({**ckpt, "model_args": {**ckpt["model_args"], "n_layer": 3}}, tmp_path / "mismatch.pt")
    _expect_checkpoint_error(tmp_path / "mismatch.pt", "weights do not match")


def test_checkpoint_kind_is_the_config_family(tmp_path):
    m = EncoderClassifier(tiny_config())
    checkpoints.save_checkpoint(str(tmp_path / "c.pt"), m)
    ckpt = torch.load(tmp_path / "c.pt", weights_only=True)
    assert ckpt["kind"] == "encoder" and ckpt["version"] == checkpoints.CKPT_VERSION == 2
    g = model.GPT(model.GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_embd=16, n_head=2))
    checkpoints.save_checkpoint(str(tmp_path / "g.pt"), g)
    assert torch.load(tmp_path / "g.pt", weights_only=True)["kind"] == "gpt"


def test_version_1_checkpoint_still_loads(tmp_path):
    """Before model families were a config key (version 1) the encoder's kind was 'encoder_classifier';
    such a file loads with the same weights, its kind renamed."""
    torch.manual_seed(0)
    m = EncoderClassifier(tiny_config()).eval()
    checkpoints.save_checkpoint(str(tmp_path / "new.pt"), m)
    ckpt = torch.load(tmp_path / "new.pt", weights_only=True)
    torch.save({**ckpt, "version": 1, "kind": "encoder_classifier"}, tmp_path / "v1.pt")
    loaded, old = checkpoints.load_checkpoint(str(tmp_path / "v1.pt"))
    assert old["version"] == 1 and old["kind"] == "encoder" and isinstance(loaded, EncoderClassifier)
    idx, mask = padded_batch([8, 3], 8)
    assert torch.equal(loaded(idx, mask)[0], m(idx, mask)[0])
    torch.save({**ckpt, "version": 1, "kind": "encoder"}, tmp_path / "v1bad.pt")  # not a version-1 name
    _expect_checkpoint_error(tmp_path / "v1bad.pt", "kind 'encoder'.*version 1")


# -----------------------------------------------------------------------------
# the family registry


def test_family_settings_are_the_config_fields_less_the_data_ones():
    enc = model.family_settings("encoder")
    assert set(enc) == {f.name for f in dataclasses.fields(EncoderConfig)} - {"vocab_size", "n_classes", "block_size"}
    assert enc["n_loops"] == 2 and enc["dropout"] == 0.1  # the encoder's own defaults
    gpt = model.family_settings("gpt")
    assert "n_loops" not in gpt and "pooling" not in gpt and "vocab_size" not in gpt
    assert gpt["block_size"] == 128 and gpt["dropout"] == 0.0 and gpt["tie_embeddings"] is True


def test_build_model_takes_settings_and_data_facts():
    settings = {**model.family_settings("encoder"), "n_layer": 1, "n_embd": 16, "n_head": 2, "unrelated": 5}
    m = model.build_model("encoder", settings, {"vocab_size": 40, "n_classes": 3, "block_size": 12})
    assert (m.cfg.vocab_size, m.cfg.n_classes, m.cfg.block_size, m.cfg.n_embd) == (40, 3, 12, 16)
    with pytest.raises(ValueError, match="n_classes, block_size"):
        model.build_model("encoder", settings, {"vocab_size": 40})  # a corpus has no labels
    with pytest.raises(ValueError, match="expected one of"):
        model.build_model("rwkv", settings, {"vocab_size": 40})
    with pytest.raises(ValueError, match="n_head"):
        model.build_model("encoder", {**settings, "n_head": 3}, {"vocab_size": 40, "n_classes": 2, "block_size": 12})


def test_no_weight_decay_names_vectors_and_embedding_tables():
    cfg = tiny_config(n_layer=2, norm="layer", bias=True, pos="learned", emb_norm="layer")
    m = EncoderClassifier(cfg)
    skip = m.no_weight_decay()
    linear_weights = {f"{n}.weight" for n, mod in m.named_modules() if isinstance(mod, torch.nn.Linear)}
    assert skip == {n for n, _ in m.named_parameters()} - linear_weights
    assert {"tok_emb.weight", "pos_emb.weight", "emb_norm.bias", "head.bias"} <= skip
    g = model.GPT(model.GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_embd=16, n_head=2))
    assert "tok_emb.weight" in g.no_weight_decay()  # the tied head is the table: not decayed either
    assert "layers.0.attn.wq.weight" not in g.no_weight_decay()
