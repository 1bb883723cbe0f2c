"""
The transformer building blocks of this lab, written out by hand, and the models built from them.

Read top to bottom: norms -> rotary embeddings -> attention -> feed-forward -> Block -> shared
config checks, initialization and FLOPs -> what every model shares (`TokenModel`) -> encoder
classifier -> causal GPT -> the family registry -> checkpoints.

Glossary (code name -> symbol in the study write-ups)
    B, T, C        batch size, sequence length, model width d
    nh, nkv, hs    query heads h, key/value heads (grouped-query attention), head size d_k = d / h
    n_layer        physical layers N_layers
    n_loops        recurrent iterations R (effective depth D_eff = N_layers * R)
    loop_alpha     cross-iteration residual scale alpha in h^(r+1) = F(h^(r)) + alpha * h^(r)

Every model shares one `Block`. Anything that differs between model families (norm type, FFN type,
position scheme, causal or not, number of key/value heads) is a field of the config, dispatched in
exactly one place. A run picks its family with the config key `model` (see FAMILIES at the end);
the family's config dataclass fields are the run's model settings, with the family's own defaults.
"""

import math
import os
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn as nn
import torch.nn.functional as F

# -----------------------------------------------------------------------------
# Normalization layers (written out; no nn.LayerNorm / F.layer_norm inside the model)


class LayerNorm(nn.Module):
    """LayerNorm (Ba et al. 2016): y = (x - mean) / sqrt(var + eps) * w + b over the last dim.
    The variance is the biased one (divide by C), as in torch.nn.LayerNorm."""

    def __init__(self, dim, eps=1e-5, bias=True):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x):
        # compute the statistics in float32 even under autocast: a bf16 mean of 384 numbers is coarse
        xf = x.float()
        mean = xf.mean(dim=-1, keepdim=True)
        var = (xf - mean).pow(2).mean(dim=-1, keepdim=True)
        y = (xf - mean) * torch.rsqrt(var + self.eps)
        y = y.to(x.dtype) * self.weight
        return y + self.bias if self.bias is not None else y


class RMSNorm(nn.Module):
    """RMSNorm (Zhang & Sennrich 2019): y = x / sqrt(mean(x^2) + eps) * w. No centring, no bias;
    the norm used by Llama and by the study's encoders."""

    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return y.to(x.dtype) * self.weight


def make_norm(kind, dim, eps, bias=True):
    """The one place a norm type string becomes a module."""
    if kind == "rms":
        return RMSNorm(dim, eps)
    if kind == "layer":
        return LayerNorm(dim, eps, bias=bias)
    raise ValueError(f"unknown norm {kind!r}: expected 'rms' or 'layer'")


# -----------------------------------------------------------------------------
# Rotary position embeddings (Su et al. 2021, RoFormer)


def rope_cache(seq_len, head_dim, theta=10000.0, device=None):
    """cos and sin tables for RoPE, each (seq_len, head_dim/2).

    Pair j of a head (dims 2j, 2j+1) rotates by angle p * theta_j at position p,
    with theta_j = theta^(-2j/d) (RoFormer eq. 15)."""
    assert head_dim % 2 == 0, "RoPE needs an even head size"
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32, device=device), inv_freq)
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):
    """Rotate adjacent pairs (x0,x1), (x2,x3), ... of the last dim, as llama2.c does, so pretrained
    Llama checkpoints load without permuting the query/key weights.

    x: (B, nh, T, hs); cos, sin: (T, hs/2). For each pair: (a, b) -> (a cos - b sin, a sin + b cos),
    the complex product (a + ib) * e^(i p theta_j)."""
    xf = x.float().unflatten(-1, (-1, 2))  # (B, nh, T, hs/2, 2)
    a, b = xf[..., 0], xf[..., 1]
    out = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1)
    return out.flatten(-2).to(x.dtype)  # (B, nh, T, hs)


# -----------------------------------------------------------------------------
# Attention


def manual_attention(q, k, v, mask=None, dropout_p=0.0, training=False):
    """The reference: softmax(Q K^T / sqrt(d_k) + M) V (Vaswani et al. 2017, eq. 1).

    q: (B, nh, Tq, hs), k, v: (B, nh, Tk, hs); mask: bool, broadcastable to (B, nh, Tq, Tk),
    True where attending is allowed. Returns the output and the attention weights (B, nh, Tq, Tk)."""
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))  # (B, nh, Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = F.softmax(scores.float(), dim=-1).to(q.dtype)
    if training and dropout_p > 0:
        weights = F.dropout(weights, p=dropout_p)
    return weights @ v, weights


class Attention(nn.Module):
    """Multi-head attention with optional grouped-query heads (n_kv_head < n_head), RoPE, key-padding
    masks and a causal flag.

    Two paths compute the same function: the SDPA fast path (F.scaled_dot_product_attention, which
    picks a fused kernel) and `manual_attention` above, which can also return the weights.
    cfg.attn_impl = 'sdpa' | 'manual' forces one; need_weights=True always takes the manual path.
    The projections are separate matrices named as Llama names them (wq, wk, wv, wo)."""

    def __init__(self, cfg):
        super().__init__()
        self.n_head, self.n_kv_head = cfg.n_head, cfg.n_kv_head
        self.head_dim = cfg.n_embd // cfg.n_head
        self.causal = cfg.causal
        self.attn_impl = cfg.attn_impl
        self.dropout = cfg.dropout
        self.wq = nn.Linear(cfg.n_embd, self.n_head * self.head_dim, bias=cfg.bias)
        self.wk = nn.Linear(cfg.n_embd, self.n_kv_head * self.head_dim, bias=cfg.bias)
        self.wv = nn.Linear(cfg.n_embd, self.n_kv_head * self.head_dim, bias=cfg.bias)
        self.wo = nn.Linear(self.n_head * self.head_dim, cfg.n_embd, bias=cfg.bias)

    def forward(self, x, key_mask=None, rope=None, need_weights=False):
        """x: (B, T, C); key_mask: bool (B, T), True for real tokens, False for padding;
        rope: (cos, sin) or None. Returns (y, weights) with weights None unless asked for."""
        B, T, C = x.shape
        q = self.wq(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)
        k = self.wk(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)  # (B, nkv, T, hs)
        v = self.wv(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)  # (B, nkv, T, hs)
        if rope is not None:
            cos, sin = rope[0][:T], rope[1][:T]
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.n_kv_head != self.n_head:
            # grouped-query attention: each key/value head serves n_head / n_kv_head query heads
            rep = self.n_head // self.n_kv_head
            k = k.repeat_interleave(rep, dim=1)  # (B, nh, T, hs)
            v = v.repeat_interleave(rep, dim=1)

        mask = None  # bool, True = may attend; broadcast to (B, nh, Tq, Tk)
        if key_mask is not None:
            mask = key_mask[:, None, None, :]  # (B, 1, 1, T)
        if self.causal:
            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            mask = causal if mask is None else (mask & causal)

        weights = None
        dropout_p = self.dropout if self.training else 0.0
        if need_weights or self.attn_impl == "manual":
            y, weights = manual_attention(q, k, v, mask, dropout_p, self.training)
        elif self.causal and key_mask is None:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, nh*hs): heads side by side
        return self.wo(y), (weights if need_weights else None)


# -----------------------------------------------------------------------------
# Feed-forward networks


class FeedForward(nn.Module):
    """Position-wise FFN, by cfg.ffn:
    'gelu':   W2 GELU(W1 x + b1) + b2                          (Vaswani et al.; GPT-2)
    'swiglu': W2 (SiLU(W1 x) * W3 x)                           (Shazeer 2020, eq. 6; Llama)
    SwiGLU has three matrices of width ffn_hidden; the gate W1 and the value W3 are kept apart and
    named as Llama names them (w1 gate, w3 value, w2 output)."""

    def __init__(self, cfg):
        super().__init__()
        self.kind = cfg.ffn
        self.w1 = nn.Linear(cfg.n_embd, cfg.ffn_hidden, bias=cfg.bias)
        self.w2 = nn.Linear(cfg.ffn_hidden, cfg.n_embd, bias=cfg.bias)
        self.w3 = nn.Linear(cfg.n_embd, cfg.ffn_hidden, bias=cfg.bias) if cfg.ffn == "swiglu" else None

    def forward(self, x):
        if self.kind == "swiglu":
            h = F.silu(self.w1(x)) * self.w3(x)
        else:
            h = F.gelu(self.w1(x))
        return self.w2(h)  # dropout is applied by the Block, on the output (as GPT-2 and Llama)


# -----------------------------------------------------------------------------
# The one Block


class Block(nn.Module):
    """Pre-norm transformer layer (Xiong et al. 2020), the same for every model family:
        h' = h  + Drop(Attn(Norm1(h)))
        h  = h' + Drop(FFN(Norm2(h')))
    A later decoder adds a cross-attention sub-layer here, and a Mamba model swaps `attn` for a
    mixer with the same (x, key_mask, rope) -> (y, weights) signature."""

    def __init__(self, cfg):
        super().__init__()
        self.norm1 = make_norm(cfg.norm, cfg.n_embd, cfg.norm_eps, cfg.bias)
        self.attn = Attention(cfg)
        self.norm2 = make_norm(cfg.norm, cfg.n_embd, cfg.norm_eps, cfg.bias)
        self.ffn = FeedForward(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, key_mask=None, rope=None, need_weights=False):
        a, weights = self.attn(self.norm1(x), key_mask, rope, need_weights)
        x = x + self.drop(a)
        x = x + self.drop(self.ffn(self.norm2(x)))
        return x, weights


# -----------------------------------------------------------------------------
# Config checks and initialization shared by every model family


def check_block_fields(cfg, positive=()):
    """Validate the fields every config shares (the ones Block reads, plus embeddings), fill in the
    0-means-default ones, and raise ValueError naming the config class on nonsense."""
    name = type(cfg).__name__
    for field in ("n_layer", "n_embd", "n_head", *positive):
        if getattr(cfg, field) < 1:
            raise ValueError(f"{name}: {field}={getattr(cfg, field)} must be at least 1")
    if cfg.n_kv_head < 0 or cfg.ffn_hidden < 0:
        raise ValueError(f"{name}: n_kv_head={cfg.n_kv_head} and ffn_hidden={cfg.ffn_hidden} "
                         f"must be >= 0 (0 picks the default)")
    if cfg.n_kv_head == 0:
        cfg.n_kv_head = cfg.n_head
    if cfg.ffn_hidden == 0:
        cfg.ffn_hidden = 4 * cfg.n_embd
    checks = [
        (cfg.n_embd % cfg.n_head == 0, f"n_embd={cfg.n_embd} is not divisible by n_head={cfg.n_head}"),
        (cfg.n_head % cfg.n_kv_head == 0, f"n_head={cfg.n_head} is not a multiple of n_kv_head={cfg.n_kv_head}"),
        (cfg.pos != "rope" or (cfg.n_embd // cfg.n_head) % 2 == 0, "RoPE needs an even head size"),
        (0.0 <= cfg.dropout < 1.0, f"dropout={cfg.dropout} must be in [0, 1)"),
        (cfg.ffn in ("swiglu", "gelu"), f"ffn={cfg.ffn!r}: expected 'swiglu' or 'gelu'"),
        (cfg.norm in ("rms", "layer"), f"norm={cfg.norm!r}: expected 'rms' or 'layer'"),
        (cfg.emb_norm in ("none", "rms", "layer"), f"emb_norm={cfg.emb_norm!r}: expected 'none', 'rms' or 'layer'"),
        (cfg.pos in ("rope", "learned", "none"), f"pos={cfg.pos!r}: expected 'rope', 'learned' or 'none'"),
        (cfg.attn_impl in ("sdpa", "manual"), f"attn_impl={cfg.attn_impl!r}: expected 'sdpa' or 'manual'"),
    ]
    for ok, msg in checks:
        if not ok:
            raise ValueError(f"{name}: {msg}")


def register_rope(module, cfg):
    """Give a model its RoPE cos/sin tables as buffers: they follow .to(device) but are not saved,
    being a function of the config."""
    cos, sin = rope_cache(cfg.block_size, cfg.n_embd // cfg.n_head, cfg.rope_theta)
    module.register_buffer("rope_cos", cos, persistent=False)
    module.register_buffer("rope_sin", sin, persistent=False)


def init_weights(model, n_applied_layers):
    """GPT-2's initialization: every Linear and Embedding weight ~ N(0, 0.02), biases zero, norm
    gains one; the projections that write into the residual stream (attention wo, FFN w2) scaled by
    1/sqrt(2 * layers applied), so the residual stream's variance does not grow with depth."""
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)
    for name, p in model.named_parameters():
        if name.endswith("wo.weight") or name.endswith("ffn.w2.weight"):
            nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_applied_layers))


def block_flops(cfg, T):
    """Forward FLOPs of one Block on a sequence of length T, matrix multiplies only (2 per
    multiply-add, the convention of torch.utils.flop_counter.FlopCounterMode):
        projections 2*T*C*(2*C + 2*C_kv),  QK^T and AV 2 * 2*T*T*C (the full T x T, also when causal,
        as both attention paths compute it),  FFN 2*T*C*F*(3 for SwiGLU, 2 for GELU)."""
    C = cfg.n_embd
    c_kv = cfg.n_kv_head * (C // cfg.n_head)
    proj = 2 * T * C * (2 * C + 2 * c_kv)
    attn = 2 * 2 * T * T * C
    ffn = 2 * T * C * cfg.ffn_hidden * (3 if cfg.ffn == "swiglu" else 2)
    return proj + attn + ffn

# -----------------------------------------------------------------------------
# What every model family shares: the input embedding, parameter accounting, FLOPs, weight decay


class TokenModel(nn.Module):
    """The pieces every family needs, written once. A subclass builds `tok_emb` (and, if its config
    asks for them, `pos_emb`, `seg_emb`, `emb_norm`), a `head`, and sets `depth`, the number of
    Blocks one forward applies; it defines `head_flops(T)`.

    Class attributes a family declares:
        tasks   the tasks (data.py's task names) whose batches its forward takes"""

    tasks = ()

    def embed(self, idx, segments=None):
        """The input to the first block, before dropout: E_tok(t) (+ E_pos(p)) (+ E_seg(s)),
        normalized by emb_norm if the config asks for it."""
        T = idx.size(1)
        if T > self.cfg.block_size:
            raise ValueError(f"sequence of length {T} is longer than block_size={self.cfg.block_size}")
        h = self.tok_emb(idx)  # (B, T, C)
        if self.pos_emb is not None:
            h = h + self.pos_emb(torch.arange(T, device=idx.device))  # (T, C) broadcast over B
        if getattr(self, "seg_emb", None) is not None:
            h = h + self.seg_emb(segments if segments is not None else torch.zeros_like(idx))
        return self.emb_norm(h) if self.emb_norm is not None else h

    def rope(self):
        """The (cos, sin) tables for attention, or None when positions are not rotary."""
        return (self.rope_cos, self.rope_sin) if self.cfg.pos == "rope" else None

    def param_counts(self):
        """Total, embedding (token/position/segment tables) and non-embedding parameter counts.
        Shared weights count once: a looped layer however many times it runs, a tied output head
        (the token table itself) not at all beyond the table."""
        total = sum(p.numel() for p in self.parameters())  # parameters() yields a shared tensor once
        emb = sum(m.weight.numel() for m in self.modules() if isinstance(m, nn.Embedding))
        return {"total": total, "embedding": emb, "non_embedding": total - emb}

    def flops_per_forward(self, seq_len, batch_size=1):
        """Analytic forward FLOPs for a batch of sequences of length seq_len: `block_flops` per applied
        Block plus the output head. Norms, softmax and embedding look-ups are left out."""
        return batch_size * (block_flops(self.cfg, seq_len) * self.depth + self.head_flops(seq_len))

    def no_weight_decay(self):
        """Names of the parameters AdamW must not decay: vectors (norm gains, biases) and embedding
        tables. Decaying a norm gain fights the norm; decaying an embedding row pulls the rows of rare
        tokens towards zero. A family with other such parameters (Mamba's A_log) adds them here."""
        tables = {f"{name}.weight" for name, m in self.named_modules() if isinstance(m, nn.Embedding)}
        return {name for name, p in self.named_parameters() if p.dim() < 2 or name in tables}


# -----------------------------------------------------------------------------
# Encoder classifier: the recurrent-vs-baseline study


@dataclass
class EncoderConfig:
    """Encoder classifier. Defaults are the study's recurrent model (seed write-up, Table 5):
    3 shared layers x 2 loops, width 256, 4 heads, FFN 1024, RoPE, SwiGLU, RMSNorm.
    The baseline (Table 4) is n_layer=6, n_loops=1, n_embd=384, n_head=6, ffn_hidden=1536."""

    vocab_size: int = 50257 + 3  # GPT-2 BPE + [PAD], [UNK], [CLS] (see data.py); compact vocabs are smaller
    n_classes: int = 2  # SST-2 is binary; the prepared dataset's label_names fix it for a run
    block_size: int = 256  # longest input incl. [CLS]; the study truncates at 256 tokens
    n_layer: int = 3  # physical (weight-bearing) layers
    n_loops: int = 2  # times the layer stack is applied; 1 = standard encoder
    loop_alpha: float = 0.5  # cross-iteration residual scale, seed: h <- F(h) + 0.5 h
    n_embd: int = 256
    n_head: int = 4
    n_kv_head: int = 0  # 0 means n_head (plain multi-head attention); fewer = grouped-query
    ffn_hidden: int = 0  # 0 means 4 * n_embd, the study's 4x expansion
    ffn: str = "swiglu"  # 'swiglu' | 'gelu'
    norm: str = "rms"  # 'rms' | 'layer', used in every Block and at the end
    norm_eps: float = 1e-5
    pos: str = "rope"  # 'rope' (inside attention) | 'learned' (added to embeddings) | 'none'
    rope_theta: float = 10000.0
    n_segments: int = 0  # >0 adds a segment/type embedding (BERT's T(type)); 0 = none
    emb_norm: str = "none"  # normalization of the summed embedding: 'none' | 'layer' | 'rms'
    dropout: float = 0.1
    bias: bool = False  # biases in Linear and LayerNorm; off as in Llama
    pooling: str = "cls"  # 'cls': hidden state at position 0 ([CLS]); 'mean': mean over real tokens
    attn_impl: str = "sdpa"  # 'sdpa' | 'manual'; both compute the same function
    causal: bool = False  # encoders see both directions
    # fields a run takes from its prepared dataset (vocabulary, label names, max_len), not from config files
    data_fields = ("vocab_size", "n_classes", "block_size")

    def __post_init__(self):
        check_block_fields(self, ("n_loops", "vocab_size", "block_size"))
        checks = [
            (self.n_classes >= 2, f"n_classes={self.n_classes} must be at least 2"),
            (self.pooling in ("cls", "mean"), f"pooling={self.pooling!r}: expected 'cls' or 'mean'"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ValueError(f"{type(self).__name__}: {msg}")


class EncoderClassifier(TokenModel):
    """Token embedding (+ learned positions) (+ segment embedding) -> optional embedding norm ->
    the layer stack applied n_loops times -> final norm -> pooled state -> linear head.

    Recurrence (seed write-up): for n_loops > 1, h^(r+1) = F(h^(r)) + alpha * h^(r), where F is the
    whole stack of n_layer Blocks with shared weights. n_loops = 1 is the plain encoder, with no extra
    residual. Parameters do not grow with n_loops; compute grows linearly."""

    tasks = ("classification",)

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.cfg = cfg
        self.depth = cfg.n_layer * cfg.n_loops  # Blocks applied per forward
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.pos_emb = nn.Embedding(cfg.block_size, cfg.n_embd) if cfg.pos == "learned" else None
        self.seg_emb = nn.Embedding(cfg.n_segments, cfg.n_embd) if cfg.n_segments > 0 else None
        self.emb_norm = None if cfg.emb_norm == "none" else make_norm(cfg.emb_norm, cfg.n_embd, cfg.norm_eps, cfg.bias)
        self.drop = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm_f = make_norm(cfg.norm, cfg.n_embd, cfg.norm_eps, cfg.bias)
        self.head = nn.Linear(cfg.n_embd, cfg.n_classes, bias=True)
        if cfg.pos == "rope":
            register_rope(self, cfg)
        init_weights(self, self.depth)

    def forward(self, idx, key_mask=None, targets=None, segments=None, need_weights=False):
        """idx: (B, T) token ids with [CLS] at position 0; key_mask: bool (B, T), True for real tokens
        (None = no padding); targets: (B,) class ids. Returns (logits (B, n_classes), loss or None);
        with need_weights=True returns (logits, loss, [attention weights per applied layer])."""
        cfg = self.cfg
        h = self.drop(self.embed(idx, segments))
        rope = self.rope()
        all_weights = []
        for _ in range(cfg.n_loops):
            h_in = h
            for layer in self.layers:
                h, w = layer(h, key_mask, rope, need_weights)
                all_weights.append(w)
            if cfg.n_loops > 1:
                h = h + cfg.loop_alpha * h_in  # cross-iteration residual
        h = self.norm_f(h)
        if cfg.pooling == "cls":
            pooled = h[:, 0]  # (B, C): the [CLS] position
        else:
            m = torch.ones_like(idx, dtype=h.dtype) if key_mask is None else key_mask.to(h.dtype)
            pooled = (h * m[..., None]).sum(1) / m.sum(1, keepdim=True).clamp(min=1.0)
        logits = self.head(self.drop(pooled))
        loss = F.cross_entropy(logits.float(), targets) if targets is not None else None
        if need_weights:
            return logits, loss, all_weights
        return logits, loss

    def head_flops(self, seq_len):
        return 2 * self.cfg.n_embd * self.cfg.n_classes  # one pooled vector per sequence


# -----------------------------------------------------------------------------
# Decoder-only language model: the char-level GPT of the embedding-normalization study


@dataclass
class GPTConfig:
    """Causal LM. Defaults are the study's model (seed 004, section 4): a GPT-2-style pre-LN decoder
    with 8 layers, width 128, 8 heads, context 128, GELU FFN of width 4d, LayerNorm, learned
    positions and tied input/output embeddings; about 1.6 M parameters on 65 characters.
    nanoGPT's shakespeare_char model is n_layer=6, n_embd=384, n_head=6, block_size=256, dropout=0.2."""

    vocab_size: int = 65  # tinyshakespeare's characters (data.py writes the exact count into meta.json)
    block_size: int = 128  # context length L, also the length of every training window
    n_layer: int = 8
    n_embd: int = 128
    n_head: int = 8
    n_kv_head: int = 0  # 0 means n_head
    ffn_hidden: int = 0  # 0 means 4 * n_embd, GPT-2's expansion
    ffn: str = "gelu"  # 'gelu' (GPT-2) | 'swiglu'
    norm: str = "layer"  # the norm inside every Block and at the end: 'layer' (GPT-2) | 'rms'
    norm_eps: float = 1e-5
    pos: str = "learned"  # 'learned' E_pos added to E_tok (GPT-2) | 'rope' | 'none'
    rope_theta: float = 10000.0
    emb_norm: str = "none"  # the study's variable, applied to E_tok + E_pos: 'none' (A) | 'layer' (LN) | 'rms' (RMS)
    dropout: float = 0.0
    bias: bool = False  # as nanoGPT's shakespeare_char config: a little faster, no worse
    tie_embeddings: bool = True  # the output head reuses E_tok (Press & Wolf 2017)
    attn_impl: str = "sdpa"  # 'sdpa' | 'manual'
    causal = True  # a class attribute, not a field: a GPT is causal by definition (Block reads it)
    data_fields = ("vocab_size",)  # the corpus fixes the vocabulary; the context length is a setting

    def __post_init__(self):
        check_block_fields(self, ("vocab_size", "block_size"))


class GPT(TokenModel):
    """Token embedding + learned positions -> optional embedding norm (the study's variants) ->
    n_layer causal Blocks -> final norm -> logits over the vocabulary (tied to the token embedding).

    The three variants of the study differ only in `emb_norm`, i.e. in what becomes the input to
    the first block:  A: X = E_tok(t) + E_pos(p);  LN: X = LayerNorm(E_tok(t) + E_pos(p));
    RMS: X = RMSNorm(E_tok(t) + E_pos(p)). `embed` returns exactly this X."""

    tasks = ("lm",)

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.depth = cfg.n_layer
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.pos_emb = nn.Embedding(cfg.block_size, cfg.n_embd) if cfg.pos == "learned" else None
        self.drop = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm_f = make_norm(cfg.norm, cfg.n_embd, cfg.norm_eps, cfg.bias)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.head.weight = self.tok_emb.weight  # one Parameter, two uses
        if cfg.pos == "rope":
            register_rope(self, cfg)
        init_weights(self, cfg.n_layer)
        # Registered last, so that every other parameter has the same name and the same place in
        # parameters() in all three variants. (It draws no random numbers: gains start at one.)
        self.emb_norm = None if cfg.emb_norm == "none" else make_norm(cfg.emb_norm, cfg.n_embd, cfg.norm_eps, cfg.bias)

    def forward(self, idx, targets=None):
        """idx: (B, T) token ids; targets: (B, T) the next token at each position, or None.
        Returns (logits (B, T, vocab_size), mean cross-entropy over all positions or None)."""
        x = self.drop(self.embed(idx))
        rope = self.rope()
        for layer in self.layers:
            x, _ = layer(x, None, rope)
        logits = self.head(self.norm_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss

    def head_flops(self, seq_len):
        return 2 * seq_len * self.cfg.n_embd * self.cfg.vocab_size  # logits at every position

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
        """Extend idx (B, T) by max_new_tokens sampled tokens, feeding back the last block_size.
        temperature=0 takes the most likely token (greedy, deterministic); otherwise logits are
        divided by the temperature, cut to the top_k most likely tokens if given, and sampled
        with `generator` (a torch.Generator, for reproducible samples)."""
        if temperature < 0:
            raise ValueError(f"temperature={temperature} must be >= 0")
        was_training = self.training
        self.eval()
        for _ in range(max_new_tokens):
            logits, _ = self(idx[:, -self.cfg.block_size:])
            logits = logits[:, -1].float()  # (B, V): the prediction for the next position
            if temperature == 0:
                nxt = logits.argmax(-1, keepdim=True)
            else:
                logits = logits / temperature
                if top_k is not None and top_k < logits.size(-1):
                    kth = torch.topk(logits, top_k).values[:, -1:]  # (B, 1): the k-th largest
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                nxt = torch.multinomial(F.softmax(logits, -1), 1, generator=generator)
            idx = torch.cat((idx, nxt), dim=1)
        self.train(was_training)
        return idx


# -----------------------------------------------------------------------------
# The model families: the config key `model` picks one

FAMILIES = {"encoder": (EncoderConfig, EncoderClassifier), "gpt": (GPTConfig, GPT)}


def family_settings(family):
    """The settings a config file may give for a family, with the family's defaults: its config
    dataclass's fields, less those the prepared dataset fixes (`data_fields`)."""
    cfg_cls, _ = FAMILIES[family]
    return {f.name: f.default for f in fields(cfg_cls) if f.name not in cfg_cls.data_fields}


def build_model(family, settings, facts):
    """A new model of `family` from a run's settings (any dict holding the family's keys) and the
    dataset's facts (vocab_size, and n_classes and block_size for a labelled set). Raises ValueError
    naming what is wrong: an unknown family, a fact the data does not give, or a bad setting."""
    if family not in FAMILIES:
        raise ValueError(f"model={family!r}: expected one of {sorted(FAMILIES)}")
    cfg_cls, model_cls = FAMILIES[family]
    missing = [k for k in cfg_cls.data_fields if k not in facts]
    if missing:
        raise ValueError(f"model {family!r} takes {', '.join(missing)} from its dataset, which does not give it")
    args = {k: settings[k] for k in family_settings(family)}
    args.update({k: facts[k] for k in cfg_cls.data_fields})
    return model_cls(cfg_cls(**args))


def family_of(model):
    """The family name of a model (its config's type decides), for checkpoints."""
    cfg_type = type(raw_model(model).cfg)
    return next(name for name, (cfg_cls, _) in FAMILIES.items() if cfg_type is cfg_cls)


# -----------------------------------------------------------------------------
# Checkpoints: one format for train, evaluate and sampling

CKPT_FORMAT = "transformer-lab-checkpoint"
CKPT_VERSION = 2  # 2: `kind` is the family name ('encoder' | 'gpt'); run state as written by train.py's RunState
OLD_KINDS = {1: {"encoder_classifier": "encoder", "gpt": "gpt"}}  # version -> its kind names -> today's


class CheckpointError(RuntimeError):
    """A file that is missing, unreadable, or not a checkpoint written by this project."""


def raw_model(model):
    """The module under a torch.compile wrapper, so saved keys carry no '_orig_mod.' prefix."""
    return getattr(model, "_orig_mod", model)


def save_checkpoint(path, model, **extra):
    """Write {format, version, kind, model_args, model, **extra} atomically: to a temporary file in
    the same folder, then os.replace, so an interrupted write never leaves a half-written checkpoint."""
    m = raw_model(model)
    state = {"format": CKPT_FORMAT, "version": CKPT_VERSION, "kind": family_of(m),
             "model_args": asdict(m.cfg), "model": m.state_dict(), **extra}
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_checkpoint(path, device="cpu"):
    """Load a checkpoint of ours with weights_only=True. Returns (model, checkpoint dict); the model is
    in eval mode on `device`. Version 1 checkpoints (before model families were a config key) load
    too, their kind renamed. Anything else raises CheckpointError with what to do about it."""
    if not os.path.isfile(path):
        raise CheckpointError(f"no checkpoint at {path}: train one first (python train.py config/...)")
    try:
        ckpt = torch.load(path, map_location=device, weights_only=True)
    except Exception as e:  # pickle errors, truncated zips, random bytes, foreign pickled objects
        # (torch's own message suggests weights_only=False, which would run arbitrary pickled code)
        raise CheckpointError(f"{path} is not a checkpoint of this project: torch.load(weights_only=True) "
                              f"cannot read it ({type(e).__name__})") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != CKPT_FORMAT:
        raise CheckpointError(f"{path} is a PyTorch file but not a checkpoint written by this project's train.py")
    version = ckpt.get("version")
    if not isinstance(version, int) or (version != CKPT_VERSION and version not in OLD_KINDS):
        raise CheckpointError(f"{path} has checkpoint version {version}; this code reads versions "
                              f"{sorted([*OLD_KINDS, CKPT_VERSION])}")
    kind = ckpt.get("kind") if version == CKPT_VERSION else OLD_KINDS[version].get(ckpt.get("kind"))
    if kind not in FAMILIES:
        raise CheckpointError(f"{path} holds a model of kind {ckpt.get('kind')!r}, unknown to this code "
                              f"(checkpoint version {version}; known families: {sorted(FAMILIES)})")
    ckpt["kind"] = kind
    cfg_cls, model_cls = FAMILIES[kind]
    model = model_cls(cfg_cls(**ckpt["model_args"]))
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError as e:
        raise CheckpointError(f"{path}: weights do not match the stored model config ({e})") from None
    return model.to(device).eval(), ckpt
