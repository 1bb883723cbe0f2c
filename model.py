"""
The transformer building blocks of this lab, written out by hand, and the models built from them.

Read the shared parts first, top to bottom: norms -> rotary and sinusoidal positions -> attention and its
key/value cache -> feed-forward -> the one Block -> the table of config choices and initialization -> what
every model shares (`TokenModel`). Then each family, whole, in one place:
    encoder classifier  EncoderConfig, EncoderClassifier: the recurrent-vs-baseline study (and its MLM pretraining)
    (the generative models from here on share sampling and decoding: sample_next, decode, greedy_extend)
    char GPT            GPTConfig, GPT: the embedding-normalization study
    Llama               LoRA (LoRALinear, add_lora, merge_lora), LlamaConfig, Llama (generate: the shared decode)
    encoder-decoder     EncDecConfig, EncoderDecoder: the Pig Latin study's transformer
    Mamba               selective_scan_reference, MambaMixer, MambaState, MambaConfig, Mamba: its other family
                        (its reference math, discretize and scan_sequential, is kernels.py's)
    bag of words        BagOfWordsConfig, BagOfWords: the logistic-regression baseline, no Block
and last the family registry (FAMILIES, build_model, from_pretrained). The fast paths the switches pick (Triton
kernels, the parallel and fused scans, the compiled decode step) are in kernels.py, beside their checks; the
checkpoint format is bookkeeping/checkpoints.py's, each family's analytic FLOPs bookkeeping/flops.py's, llama2.c's
file formats export.py's.

Glossary (code name -> symbol in the study write-ups)
    B, T, C        batch size, sequence length, model width d
    nh, nkv, hs    query heads h, key/value heads (grouped-query attention), head size d_k = d / h
    n_layer        physical layers N_layers
    n_loops        recurrent iterations R (effective depth D_eff = N_layers * R)
    loop_alpha     cross-iteration residual scale alpha in h^(r+1) = F(h^(r)) + alpha * h^(r)

Every neural model shares one `Block` (the bag of words has none). Anything that differs between
model families (norm type, FFN type, position scheme, causal or not, number of key/value heads,
attention or Mamba's SSM as the token mixer, a cross-attention sub-layer) is a field of the config or
an argument of Block, dispatched in exactly one place. A run picks its family with the config key
`model` (see FAMILIES at the end); the family's config dataclass fields are the run's model settings,
with the family's own defaults.
"""

import dataclasses
import math
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn as nn
import torch.nn.functional as F

import kernels
from configurator import ConfigError

# -----------------------------------------------------------------------------
# Normalization layers
#
# Each norm is written out op by op: that is the reference, norm_impl='manual'. The default,
# norm_impl='torch', calls PyTorch's fused F.layer_norm / F.rms_norm, which compute the same function in
# one pass instead of five or six (on a CPU the written-out LayerNorm made the baseline encoder's training
# step 10 % slower than Hugging Face's BERT). norm_impl='triton' calls the fused kernels of kernels.py (a
# GPU, or Triton's interpreter). tests/test_model.py and tests/test_triton_kernels.py hold them equal.

NORM_IMPLS = ("torch", "manual", "triton")


class LayerNorm(nn.Module):
    """LayerNorm (Ba et al. 2016): y = (x - mean) / sqrt(var + eps) * w + b over the last dim.
    The variance is the biased one (divide by C), as in torch.nn.LayerNorm. impl: NORM_IMPLS."""

    def __init__(self, dim, eps=1e-5, bias=True, impl="torch"):
        super().__init__()
        self.eps, self.impl = eps, impl
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x):
        if self.impl == "torch":
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)
        if self.impl == "triton":
            return kernels.layer_norm_triton(x, self.weight, self.bias, self.eps)
        # compute the statistics in float32 even under autocast: a bf16 mean of 384 numbers is coarse
        xf = x.float()
        mean = xf.mean(dim=-1, keepdim=True)
        var = (xf - mean).pow(2).mean(dim=-1, keepdim=True)
        y = (xf - mean) * torch.rsqrt(var + self.eps)
        y = y.to(x.dtype) * self.weight
        return y + self.bias if self.bias is not None else y


class RMSNorm(nn.Module):
    """RMSNorm (Zhang & Sennrich 2019): y = x / sqrt(mean(x^2) + eps) * w. No centring, no bias;
    the norm used by Llama and by the study's encoders. impl: NORM_IMPLS."""

    def __init__(self, dim, eps=1e-5, impl="torch"):
        super().__init__()
        self.eps, self.impl = eps, impl
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        if self.impl == "torch":
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        if self.impl == "triton":
            return kernels.rms_norm_triton(x, self.weight, self.eps)
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return y.to(x.dtype) * self.weight


def make_norm(kind, cfg):
    """The one place a norm type string becomes a module: of width cfg.n_embd, with the config's
    eps, bias (LayerNorm only) and norm_impl."""
    if kind == "rms":
        return RMSNorm(cfg.n_embd, cfg.norm_eps, impl=cfg.norm_impl)
    if kind == "layer":
        return LayerNorm(cfg.n_embd, cfg.norm_eps, bias=cfg.bias, impl=cfg.norm_impl)
    raise ConfigError(f"unknown norm {kind!r}: expected 'rms' or 'layer'")


# -----------------------------------------------------------------------------
# Rotary position embeddings (Su et al. 2021, RoFormer)

def rope_cache(seq_len, head_dim, theta=10000.0, device=None):
    """cos and sin tables for RoPE, each (seq_len, head_dim/2).

    Pair j of a head (dims 2j, 2j+1) rotates by angle p * theta_j at position p,
    with theta_j = theta^(-2j/d) (RoFormer eq. 15)."""
    assert head_dim % 2 == 0, "RoPE needs an even head size"
    pairs = torch.arange(0, head_dim, 2, dtype=torch.float32, device=device)
    inv_freq = theta ** (-pairs / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32, device=device), inv_freq)
    return angles.cos(), angles.sin()


def sinusoid_table(n_pos, dim):
    """The fixed position encoding of Vaswani et al. 2017 (sec. 3.5), (n_pos, dim):
    PE(p, 2i) = sin(p / 10000^(2i/d)),  PE(p, 2i+1) = cos(p / 10000^(2i/d))."""
    inv_freq = 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float32) / dim)  # (ceil(d/2),)
    angles = torch.outer(torch.arange(n_pos, dtype=torch.float32), inv_freq)  # (n_pos, ceil(d/2))
    table = torch.zeros(n_pos, dim)
    table[:, 0::2] = angles.sin()
    table[:, 1::2] = angles.cos()[:, :dim // 2]
    return table


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


ATTN_IMPLS = ("sdpa", "manual", "triton")


class Attention(nn.Module):
    """Multi-head attention with optional grouped-query heads (n_kv_head < n_head), RoPE, key-padding
    masks and a causal flag; cross-attention (a decoder reading the encoder) is the same module with the
    keys and values from another sequence, `kv`, and causal=False. Projections named as Llama's (wq, wk, wv, wo).
    Three paths compute the same function, cfg.attn_impl (ATTN_IMPLS) forcing one: SDPA (the fast path),
    `manual_attention` (the reference, which need_weights=True always takes), and kernels.py's Triton flash
    attention, which reads the key-padding mask and the causal flag itself and has no dropout (refused, not
    silently skipped)."""

    def __init__(self, cfg, causal=None):
        super().__init__()
        self.n_head, self.n_kv_head = cfg.n_head, cfg.n_kv_head
        self.head_dim = cfg.n_embd // cfg.n_head
        self.causal = cfg.causal if causal is None else causal
        self.attn_impl = cfg.attn_impl
        self.dropout = cfg.dropout
        self.wq = nn.Linear(cfg.n_embd, self.n_head * self.head_dim, bias=cfg.bias)
        self.wk = nn.Linear(cfg.n_embd, self.n_kv_head * self.head_dim, bias=cfg.bias)
        self.wv = nn.Linear(cfg.n_embd, self.n_kv_head * self.head_dim, bias=cfg.bias)
        self.wo = nn.Linear(self.n_head * self.head_dim, cfg.n_embd, bias=cfg.bias)

    def forward(self, x, key_mask=None, rope=None, need_weights=False, cache=None, start=0,
                kv=None):
        """x: (B, T, C), the tokens at positions start .. start+T-1; key_mask: bool (B, S), True for
        real keys, False for padding, over all S keys attended to; rope: (cos, sin) or None; cache:
        a KVCache holding the keys and values of positions 0 .. start-1, which this call extends
        (incremental decoding), so S = start + T; kv: (B, S, C), the sequence the keys and values
        come from, if not x (cross-attention). Returns (y, weights), weights None unless asked for.
        start may be a (1,) tensor (a compiled decode step's position, `decode`): then S is the
        whole cache, key_mask hiding what is unwritten."""
        B, T, C = x.shape
        q, k, v = self.project(x, x if kv is None else kv, rope, start)
        if cache is not None:
            k, v = cache.update(start, k, v)  # (B, nkv, S, hs): every key so far
        dropping = self.training and self.dropout
        weights, decoding = None, T == 1 and torch.compiler.is_compiling() and not dropping
        if need_weights or self.attn_impl == "manual":
            y, weights = self.reference(q, k, v, key_mask)
        elif self.attn_impl == "triton" or decoding:  # kernels.py's Triton kernel, or decode step
            y = self.kernel(q, k, v, key_mask)
        else:
            y = self.sdpa(q, k, v, key_mask)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, nh*hs): heads side by side
        return self.wo(y), (weights if need_weights else None)

    def project(self, x, src, rope, start):
        """The queries of x (B, T, C) and the keys and values of src (B, S', C), split into heads
        and, with rope, rotated: (B, nh, T, hs), (B, nkv, S', hs), (B, nkv, S', hs)."""
        (B, T, _), S, hs = x.shape, src.size(1), self.head_dim
        q = self.wq(x).view(B, T, self.n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = self.wk(src).view(B, S, self.n_kv_head, hs).transpose(1, 2)  # (B, nkv, S', hs)
        v = self.wv(src).view(B, S, self.n_kv_head, hs).transpose(1, 2)  # (B, nkv, S', hs)
        if rope is not None:
            # queries sit at positions start .. start+T-1, keys at start .. start+S'-1: the same
            # when they come from x, all S when a Block computes only its first queries (src: the
            # whole sequence). Cross-attention: none
            q = apply_rope(q, *(table_rows(t, start, T) for t in rope))
            k = apply_rope(k, *(table_rows(t, start, k.size(2)) for t in rope))
        return q, k, v

    def mask(self, key_mask, T, S, device):
        """Bool, broadcast to (B, nh, T, S), True = may attend (None: all): padding keys hidden; a
        causal layer's query i (at position S - T + i) sees keys up to there (one new query, T = 1,
        sees every key)."""
        mask = None if key_mask is None else key_mask[:, None, None, :]  # (B, 1, 1, S)
        if self.causal and T > 1:
            causal = torch.ones(T, S, dtype=torch.bool, device=device).tril(S - T)
            mask = causal if mask is None else (mask & causal)
            if key_mask is not None:
                # a padding query before its sequence starts (left padding) sees no key, and a
                # softmax over nothing is NaN, which would leak into later layers: such a row sees
                # every key (its output is never read)
                mask = mask | ~mask.any(-1, keepdim=True)
        return mask

    def sdpa(self, q, k, v, key_mask):
        """The fast path (grouped-query heads without copies: enable_gqa); is_causal serves the
        plain causal case."""
        T, S = q.size(2), k.size(2)
        dropout_p, gqa = self.dropout if self.training else 0.0, self.n_kv_head != self.n_head
        if self.causal and key_mask is None and S == T:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True,
                                                  enable_gqa=gqa)
        mask = self.mask(key_mask, T, S, q.device)
        return F.scaled_dot_product_attention(q, k, v, mask, dropout_p=dropout_p, enable_gqa=gqa)

    def reference(self, q, k, v, key_mask):
        """`manual_attention` -> (y, weights), each key/value head first repeated for its n_head / n_kv_head queries."""
        if self.n_kv_head != self.n_head:
            rep = self.n_head // self.n_kv_head
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)  # (B, nh, S, hs)
        mask = self.mask(key_mask, q.size(2), k.size(2), q.device)
        return manual_attention(q, k, v, mask, self.dropout if self.training else 0.0, self.training)

    def kernel(self, q, k, v, key_mask):
        """kernels.py's paths: the Triton flash attention (attn_impl='triton'; it places query i at S - T + i, reads
        the key mask, and has no dropout: refused), or a compiled decode step's one_query_attention."""
        if self.attn_impl == "triton":
            if self.training and self.dropout > 0:
                raise ConfigError("attn_impl='triton' has no attention dropout: train it with dropout=0, or use 'sdpa'")
            return kernels.flash_attention_triton(q, k, v, key_mask, causal=self.causal and q.size(2) > 1)
        return kernels.one_query_attention(q, k, v, self.mask(key_mask, 1, k.size(2), q.device))


def table_rows(table, start, n):
    """Rows start .. start+n-1 of a per-position table (RoPE's cos or sin). start is an int, or a
    (1,) tensor: a compiled decode step's position, which the graph reads as data, so one graph
    serves every position (a Python int would be baked into it, or guarded on)."""
    if torch.is_tensor(start):
        return table[start + torch.arange(n, device=start.device)]
    return table[start:start + n]


class KVCache:
    """The keys and values one attention layer has computed, for incremental decoding: a step feeds
    only the new tokens and attends to everything before them from here (Pope et al. 2022, sec. 3).
    Buffers are (B, nkv, max_len, hs), allocated once and filled from position 0 up."""

    def __init__(self, batch_size, n_kv_head, max_len, head_dim, device, dtype):
        self.k = torch.zeros(batch_size, n_kv_head, max_len, head_dim, device=device, dtype=dtype)
        self.v = torch.zeros_like(self.k)

    def update(self, start, k, v):
        """Store k, v (B, nkv, T, hs) at positions start .. start+T-1; return all keys and values so far.
        With start a (1,) tensor (a static-shape compiled step) the whole buffers come back, the same
        shape at every position: the caller's key mask hides what is not written yet."""
        if torch.is_tensor(start):
            pos = start + torch.arange(k.size(2), device=k.device)
            # in the cache's dtype, as the slice assignment below stores them: under autocast the keys come in
            # bf16 and the cache holds the parameters' float32, and index_copy_ takes only equal dtypes
            self.k.index_copy_(2, pos, k.to(self.k.dtype))
            self.v.index_copy_(2, pos, v.to(self.v.dtype))
            return self.k, self.v
        end = start + k.size(2)
        if end > self.k.size(2):
            raise ValueError(f"the cache holds {self.k.size(2)} positions; position {end - 1} does not fit")
        self.k[:, :, start:end] = k
        self.v[:, :, start:end] = v
        return self.k[:, :, :end], self.v[:, :, :end]


# -----------------------------------------------------------------------------
# Feed-forward networks

FFN_IMPLS = ("torch", "triton")


class FeedForward(nn.Module):
    """Position-wise FFN, by cfg.ffn:
    'gelu':   W2 GELU(W1 x + b1) + b2                          (Vaswani et al.; GPT-2)
    'swiglu': W2 (SiLU(W1 x) * W3 x)                           (Shazeer 2020, eq. 6; Llama)
    Named as Llama names them (w1 gate, w3 value, w2 output). cfg.ffn_impl='triton' computes SwiGLU's
    SiLU(a) * b in one fused kernel (kernels.py) instead of PyTorch's separate SiLU and multiply."""

    def __init__(self, cfg):
        super().__init__()
        self.kind, self.impl = cfg.ffn, cfg.ffn_impl
        self.w1 = nn.Linear(cfg.n_embd, cfg.ffn_hidden, bias=cfg.bias)
        self.w2 = nn.Linear(cfg.ffn_hidden, cfg.n_embd, bias=cfg.bias)
        swiglu = cfg.ffn == "swiglu"
        self.w3 = nn.Linear(cfg.n_embd, cfg.ffn_hidden, bias=cfg.bias) if swiglu else None

    def forward(self, x):
        if self.kind == "swiglu" and self.impl == "triton":
            h = kernels.swiglu_triton(self.w1(x), self.w3(x))  # one pass over (B, T, F), not three
        elif self.kind == "swiglu":
            h = F.silu(self.w1(x)) * self.w3(x)
        else:
            h = F.gelu(self.w1(x))
        return self.w2(h)  # dropout is applied by the Block, on the output (as GPT-2 and Llama)


# -----------------------------------------------------------------------------
# The one Block

class Block(nn.Module):
    """Pre-norm layer (Xiong et al. 2020), the same for every model family:
        h' = h  + Drop(Mix(Norm1(h)))              Mix: self-attention, or Mamba's SSM (cfg.mixer)
        h" = h' + Drop(CrossAttn(NormX(h'), m))    a decoder's read of the encoder output m (cross=True)
        h  = h" + Drop(FFN(Norm2(h")))             absent when cfg.ffn == 'none' (Mamba's blocks)
    `causal` overrides the config's (an encoder-decoder has both kinds of Block)."""

    def __init__(self, cfg, causal=None, cross=False):
        super().__init__()
        self.norm1 = make_norm(cfg.norm, cfg)
        if getattr(cfg, "mixer", "attention") == "mamba":  # the one place the mixer is picked
            self.attn, self.mamba = None, MambaMixer(cfg)
        else:
            self.attn, self.mamba = Attention(cfg, causal), None
        self.cross = Attention(cfg, causal=False) if cross else None
        self.norm_cross = make_norm(cfg.norm, cfg) if cross else None
        self.norm2 = make_norm(cfg.norm, cfg) if cfg.ffn != "none" else None
        self.ffn = FeedForward(cfg) if cfg.ffn != "none" else None
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, key_mask=None, rope=None, need_weights=False, cache=None, start=0,
                memory=None, memory_mask=None, queries=None):
        """memory: (B, S, C) the encoder output a cross-attention Block reads, memory_mask: bool (B,
        S), True on its real tokens. queries: compute only the first `queries` positions (their
        queries attend to every key; the output is (B, queries, C)): a classifier's last Block, of
        which only [CLS] is read. Returns (x, weights): the self-attention weights, or for a cross
        Block the pair (self-attention weights, cross-attention weights); None unless need_weights.
        """
        mixer = self.attn if self.attn is not None else self.mamba
        if queries is None:
            a, weights = mixer(self.norm1(x), key_mask, rope, need_weights, cache, start)
        else:
            h = self.norm1(x)
            a, weights = self.attn(h[:, :queries], key_mask, rope, need_weights, kv=h)
            x = x[:, :queries]  # every later step of the Block works position by position
        x = x + self.drop(a)
        if self.cross is not None:
            c, cross_weights = self.cross(self.norm_cross(x), memory_mask, None, need_weights,
                                          kv=memory)
            x = x + self.drop(c)
            weights = (weights, cross_weights) if need_weights else None
        if self.ffn is not None:
            x = x + self.drop(self.ffn(self.norm2(x)))
        return x, weights


# -----------------------------------------------------------------------------
# Config checks and initialization shared by every model family

# The values each choice takes, in every config that has it as a field (what a family fixes as a class
# attribute, such as Llama's pos or Mamba's ffn, is no choice). A config class may widen an entry with its own
# `choices` (the encoder-decoder's sinusoidal positions); `choice_checks` reads them both.
CHOICES = {
    "norm": ("rms", "layer"), "emb_norm": ("none", "rms", "layer"), "ffn": ("swiglu", "gelu"),
    "pos": ("rope", "learned", "none"), "attn_impl": ATTN_IMPLS, "norm_impl": NORM_IMPLS, "ffn_impl": FFN_IMPLS,
    "pooling": ("cls", "mean"),  # the encoder classifier's
    "discretization": kernels.DISCRETIZATIONS, "scan": (*kernels.SCANS, "triton"),  # Mamba's
    "conv_impl": ("torch", "matmul"),
    "tf": ("binary", "count", "log"), "doc_norm": ("l2", "l1", "none"),  # the bag of words'
}


def require(cfg, *checks):
    """Raise ConfigError, naming the config class, with the message of the first (ok, message) not ok."""
    for ok, msg in checks:
        if not ok:
            raise ConfigError(f"{type(cfg).__name__}: {msg}")


def at_least_one(cfg, *names):
    """The checks that each of the named fields is at least 1."""
    return [(getattr(cfg, n) >= 1, f"{n}={getattr(cfg, n)} must be at least 1") for n in names]


def choice_checks(cfg):
    """The checks that each field of cfg that CHOICES (or the class's own `choices`) lists holds one of its values."""
    table = {**CHOICES, **getattr(cfg, "choices", {})}
    return [(getattr(cfg, f.name) in table[f.name], f"{f.name}={getattr(cfg, f.name)!r}: expected one of "
             f"{table[f.name]}") for f in fields(cfg) if f.name in table]


def check_block_fields(cfg, *positive):
    """Validate the fields every config with Blocks shares (the ones Block reads, plus embeddings) and its
    choices, fill in the 0-means-default ones, and raise ConfigError naming the config class on nonsense.
    `positive`: the family's own fields that must be at least 1."""
    require(cfg, *at_least_one(cfg, "n_layer", "n_embd", "n_head", *positive),
            (cfg.n_kv_head >= 0 and cfg.ffn_hidden >= 0, f"n_kv_head={cfg.n_kv_head} and ffn_hidden={cfg.ffn_hidden} "
                                                         f"must be >= 0 (0 picks the default)"))
    cfg.n_kv_head = cfg.n_kv_head or cfg.n_head
    cfg.ffn_hidden = cfg.ffn_hidden or 4 * cfg.n_embd
    require(cfg, (cfg.n_embd % cfg.n_head == 0, f"n_embd={cfg.n_embd} is not divisible by n_head={cfg.n_head}"),
            (cfg.n_head % cfg.n_kv_head == 0, f"n_head={cfg.n_head} is not a multiple of n_kv_head={cfg.n_kv_head}"),
            (cfg.pos != "rope" or (cfg.n_embd // cfg.n_head) % 2 == 0, "RoPE needs an even head size"),
            (0.0 <= cfg.dropout < 1.0, f"dropout={cfg.dropout} must be in [0, 1)"), *choice_checks(cfg),
            (cfg.ffn_impl != "triton" or cfg.ffn == "swiglu", "ffn_impl='triton' fuses SwiGLU only: use ffn='swiglu'"))


def register_rope(module, cfg):
    """Give a model its RoPE cos/sin tables as buffers: they follow .to(device) but are not saved,
    being a function of the config."""
    cos, sin = rope_cache(cfg.block_size, cfg.n_embd // cfg.n_head, cfg.rope_theta)
    module.register_buffer("rope_cos", cos, persistent=False)
    module.register_buffer("rope_sin", sin, persistent=False)


def init_weights(model, n_applied_layers):
    """GPT-2's initialization: every Linear and Embedding weight ~ N(0, 0.02), biases zero, norm
    gains one; the projections that write into the residual stream (attention wo, FFN w2) scaled by
    1/sqrt(2 * layers applied), so the residual stream's variance does not grow with depth. (Mamba's
    out_proj writes into it too; its convolution keeps PyTorch's own initialization.)"""
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)
    for name, p in model.named_parameters():
        if name.endswith(("wo.weight", "ffn.w2.weight", "out_proj.weight")):
            nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_applied_layers))


# -----------------------------------------------------------------------------
# What every model family shares: the input embedding, parameter accounting, weight decay

class TokenModel(nn.Module):
    """The pieces every family needs, written once. A subclass builds `tok_emb` (and, if its config asks
    for them, `pos_emb`, `emb_norm`) and a `head`, sets `depth` (the Blocks one forward applies)
    and declares `tasks` (data.py's task names whose batches its forward takes)."""

    tasks = ()
    emb_scale = 1.0  # the token embedding's multiplier in `embed` (the encoder-decoder's is sqrt(d))

    def embed(self, idx, start=0):
        """The input to the first block, before dropout: E_tok(t) (+ E_pos(p)), normalized by
        emb_norm if the config asks for it. idx holds positions start .. start+T-1. (A family with
        emb_scale != 1 multiplies E_tok(t) by it first.)"""
        T = idx.size(1)
        if not torch.is_tensor(start) and start + T > self.cfg.block_size:  # (a tensor: decode's)
            raise ValueError(f"sequence of length {start + T} is longer than "
                             f"block_size={self.cfg.block_size}")
        h = self.tok_emb(idx)  # (B, T, C)
        if self.emb_scale != 1.0:
            h = h * self.emb_scale
        if self.pos_emb is not None:
            h = h + self.pos_emb(torch.arange(T, device=idx.device) + start)  # (T, C), over B
        return self.emb_norm(h) if self.emb_norm is not None else h

    def rope(self):
        """The (cos, sin) tables for attention, or None when positions are not rotary."""
        return (self.rope_cos, self.rope_sin) if self.cfg.pos == "rope" else None

    @staticmethod
    def cross_entropy(logits, targets):
        """Mean cross-entropy, in float32, of logits (..., V) on targets (...): class ids (B,) or
        token ids (B, T), -100 where not scored. None without targets."""
        if targets is None:
            return None
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))

    def step(self, idx, start, key_mask, cache):
        """The next-token logits (B, V) after idx (B, T), the tokens at positions start .. start+T-1 (the
        cache holds those before): `decode`'s step, the one compiled, for a causal language model whose
        forward takes key_mask, cache and start (GPT, Llama)."""
        return self(idx, key_mask=key_mask, cache=cache, start=start)[0][:, -1]

    def new_cache(self, batch_size, max_len=None, n_layers=None):
        """One empty KVCache per causal layer (n_layers, default cfg.n_layer), for max_len positions (default:
        the whole context)."""
        cfg = self.cfg
        p = self.tok_emb.weight
        return [KVCache(batch_size, cfg.n_kv_head, max_len or cfg.block_size, cfg.n_embd // cfg.n_head, p.device,
                        p.dtype) for _ in range(n_layers or cfg.n_layer)]

    def param_counts(self):
        """Total, embedding (token/position/segment tables) and non-embedding parameter counts.
        Shared weights count once: a looped layer however many times it runs, a tied output head
        (the token table itself) not at all beyond the table."""
        total = sum(p.numel() for p in self.parameters())  # parameters() yields a shared tensor once
        emb = sum(m.weight.numel() for m in self.modules() if isinstance(m, nn.Embedding))
        trainable = sum(p.numel() for p in self.parameters() if p.requires_grad)
        return {"total": total, "embedding": emb, "non_embedding": total - emb, "trainable": trainable}

    def no_weight_decay(self):
        """Names of the parameters AdamW must not decay: vectors (norm gains, biases) and embedding
        tables. Decaying a norm gain fights the norm; decaying an embedding row pulls the rows of
        rare tokens towards zero. A family with other such parameters (Mamba's A_log) adds them
        here."""
        tables = {f"{n}.weight" for n, m in self.named_modules() if isinstance(m, nn.Embedding)}
        return {name for name, p in self.named_parameters() if p.dim() < 2 or name in tables}


# -----------------------------------------------------------------------------
# Encoder classifier: the recurrent-vs-baseline study

@dataclass
class EncoderConfig:
    """Encoder classifier. Defaults are the study's recurrent model (source write-up, Table 5):
    3 shared layers x 2 loops, width 256, 4 heads, FFN 1024, RoPE, SwiGLU, RMSNorm.
    The baseline (Table 4) is n_layer=6, n_loops=1, n_embd=384, n_head=6, ffn_hidden=1536."""

    vocab_size: int = 50257 + 3  # GPT-2 BPE + [PAD], [UNK], [CLS] (see data.py); compact vocabs are smaller
    n_classes: int = 2  # SST-2 is binary; the prepared dataset's label_names fix it for a run (none: 2)
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
    emb_norm: str = "none"  # normalization of the summed embedding: 'none' | 'layer' | 'rms'
    dropout: float = 0.1
    bias: bool = False  # biases in Linear and LayerNorm; off as in Llama
    pooling: str = "cls"  # 'cls': hidden state at position 0 ([CLS]); 'mean': mean over real tokens
    attn_impl: str = "sdpa"  # 'sdpa' (F.scaled_dot_product_attention) | 'manual' | 'triton' (kernels.py)
    norm_impl: str = "torch"  # 'torch' (F.layer_norm / F.rms_norm) | 'manual' (written out) | 'triton'
    ffn_impl: str = "torch"  # SwiGLU's SiLU(a) * b: 'torch' | 'triton' (one fused kernel)
    causal: bool = False  # encoders see both directions
    # fields a run takes from its prepared dataset (vocabulary, label names, max_len), not from config files
    data_fields = ("vocab_size", "n_classes", "block_size")
    # what a run starting from a trained checkpoint may set anew (the *_impl paths compute the same function)
    tunable = ("dropout", "attn_impl", "norm_impl", "ffn_impl")

    def __post_init__(self):
        check_block_fields(self, "n_loops", "vocab_size", "block_size")
        if self.n_classes == 0:
            # A dataset without labels (the MLM corpus) gives 0: the model still gets SST-2's binary head,
            # which pretraining never reads, so it gets no gradient and AdamW leaves it as initialized; a
            # run fine-tuning on SST-2 then starts from it as from a fresh one.
            self.n_classes = 2
        require(self, (self.n_classes >= 2, f"n_classes={self.n_classes} must be at least 2"))


class EncoderClassifier(TokenModel):
    """Token embedding (+ learned positions) -> optional embedding norm ->
    the layer stack applied n_loops times -> final norm -> pooled state -> linear head; or, to pretrain
    it by masked-language modelling, final norm -> the masked positions' logits over the vocabulary.

    Recurrence (source write-up): for n_loops > 1, h^(r+1) = F(h^(r)) + alpha * h^(r), where F is the
    whole stack of n_layer Blocks with shared weights. n_loops = 1 is the plain encoder, with no extra
    residual. Parameters do not grow with n_loops; compute grows linearly."""

    tasks = ("classification", "mlm")

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.cfg = cfg
        self.depth = cfg.n_layer * cfg.n_loops  # Blocks applied per forward
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.pos_emb = nn.Embedding(cfg.block_size, cfg.n_embd) if cfg.pos == "learned" else None
        self.emb_norm = None if cfg.emb_norm == "none" else make_norm(cfg.emb_norm, cfg)
        self.drop = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm_f = make_norm(cfg.norm, cfg)
        self.head = nn.Linear(cfg.n_embd, cfg.n_classes, bias=True)
        self.mlm_head = MaskedLMHead()  # pretraining's (mlm_targets), tied to tok_emb: no weights
        if cfg.pos == "rope":
            register_rope(self, cfg)
        init_weights(self, self.depth)

    def forward(self, idx, key_mask=None, targets=None, mlm_targets=None):
        """idx: (B, T) token ids with [CLS] at position 0; key_mask: bool (B, T), True for real
        tokens (None = no padding); targets: (B,) class ids. Returns (logits (B, n_classes), loss or
        None), or with mlm_targets instead of targets, the masked-language-model head's
        (MaskedLMHead)."""
        if mlm_targets is not None:
            if targets is not None:
                raise ValueError("give targets (classification) or mlm_targets (masked-language "
                                 "modelling), not both")
            return self.mlm_head(self.encode(idx, key_mask), mlm_targets, self.tok_emb.weight)
        # [CLS] pooling reads one position of the last Block, whose every step after attention is
        # position by position: it computes [CLS] alone, attending to every key (the same logits; 14
        # % fewer FLOPs here)
        h = self.encode(idx, key_mask, queries=self.last_queries())
        if self.cfg.pooling == "cls":
            pooled = h[:, 0]  # (B, C): the [CLS] position
        else:
            m = torch.ones_like(idx, dtype=h.dtype) if key_mask is None else key_mask.to(h.dtype)
            pooled = (h * m[..., None]).sum(1) / m.sum(1, keepdim=True).clamp(min=1.0)
        logits = self.head(self.drop(pooled))
        return logits, self.cross_entropy(logits, targets)

    def encode(self, idx, key_mask=None, queries=None, weights=None):
        """The final-normed states (B, T, C): the n_layer Blocks applied n_loops times, with the
        cross-iteration residual. queries: the last Block computes only the first `queries`
        positions; weights: a list that gets each applied Block's attention weights (attention
        maps)."""
        cfg = self.cfg
        h = self.drop(self.embed(idx))
        rope = self.rope()
        for loop in range(cfg.n_loops):
            h_in = h
            for i, layer in enumerate(self.layers):
                final = loop == cfg.n_loops - 1 and i == cfg.n_layer - 1
                asked = weights is not None
                h, w = layer(h, key_mask, rope, asked, queries=queries if final else None)
                if weights is not None:
                    weights.append(w)
            if cfg.n_loops > 1:
                h = h + cfg.loop_alpha * h_in[:, :h.size(1)]  # cross-iteration residual
        return self.norm_f(h)

    def last_queries(self, masked=0):
        """[CLS] pooling reads one position, which the last Block computes alone; mean pooling and
        MLM read all."""
        return 1 if self.cfg.pooling == "cls" and not masked else None

class MaskedLMHead(nn.Module):
    """The encoder's head while it pretrains by masked-language modelling (Devlin et al. 2019, sec. 3.1): the
    final states h (B, T, C) at the masked positions against the token table, tied (Press & Wolf 2017), so it
    has no weights of its own and what pretraining learns is all in the classifier's. mlm_targets (B, T): the
    original id at each masked position, -100 elsewhere (data.mlm_mask). Returns the masked positions' logits
    (n_masked, vocab_size), row-major, and their mean cross-entropy. Only masked positions are scored: the
    vocabulary-wide product at every position cost a third of a step."""

    def forward(self, h, mlm_targets, table):
        scored = mlm_targets != -100
        logits = h[scored] @ table.T  # (n_masked, vocab_size)
        return logits, TokenModel.cross_entropy(logits, mlm_targets[scored])

# -----------------------------------------------------------------------------
# Sampling and decoding, shared by the generative families below (the encoder above never decodes): the next
# token (every language model's generate), the causal language models' decoding loop (GPT, Llama), and the
# seq2seq families' greedy decoding (the encoder-decoder, Mamba)

def sample_next(logits, temperature=1.0, top_k=None, top_p=None, epsilon=None, generator=None):
    """The next token (B, 1) from the last position's logits (B, V).
    temperature 0: the most likely token (greedy, deterministic). Otherwise the logits are divided by
    the temperature, then cut, each cut renormalizing what is left:
      top_k    keep the k most likely tokens (Fan et al. 2018);
      epsilon  drop tokens whose probability is below epsilon (Hewitt et al. 2022, epsilon sampling);
      top_p    keep the fewest most likely tokens whose probabilities reach p (Holtzman et al. 2020);
    and a token is drawn with `generator` (a torch.Generator, for reproducible samples). The most
    likely token always survives the cuts, so something is left to draw."""
    logits = logits.float()
    if temperature < 0:
        raise ValueError(f"temperature={temperature} must be >= 0")
    if temperature == 0:
        return logits.argmax(-1, keepdim=True)
    logits = logits / temperature
    if top_k is not None and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k).values[:, -1:]  # (B, 1): the k-th largest
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = F.softmax(logits, -1)
    if epsilon is not None and epsilon > 0:
        keep = probs >= epsilon
        keep.scatter_(-1, probs.argmax(-1, keepdim=True), True)
        probs = probs * keep
    if top_p is not None and 0 < top_p < 1:
        sorted_p, order = probs.sort(-1, descending=True)
        # a token stays if the mass before it is still short of top_p (so the first always stays)
        cut = (sorted_p.cumsum(-1) - sorted_p) >= top_p * sorted_p.sum(-1, keepdim=True)
        probs = probs.scatter(-1, order, sorted_p.masked_fill(cut, 0.0))
    return torch.multinomial(probs, 1, generator=generator)  # multinomial renormalizes


DECODE_MODES = ("eager", "compiled")  # decode's step: eager, or compiled (kernels.compiled_decoding)


def decode(model, idx, mask, P, pick, eos_id=None, use_cache=True, mode="eager"):
    """The decoding loop of the causal language models (Llama, GPT). idx (B, P + steps) holds the prompts
    in its first P columns, left-padded; mask (B, P + steps) is True on real tokens, None without padding.
    Fills columns P, P+1, ... with pick(logits (B, V)) -> (B,), the next token of each row, and stops
    when every row has produced eos_id. Returns the number of columns filled.
    use_cache=False runs the whole sequence again at every step (the reference). With the cache, the prompt
    goes through once (prefill), then one token a step, eagerly (mode 'eager') or through the compiled step
    of kernels.compiled_decoding (mode 'compiled', the fast path; tests/test_llama.py holds the tokens equal)."""
    B, total = idx.shape
    dev = idx.device
    cache = compiled = None
    if use_cache and mode == "compiled":
        cache, compiled = kernels.compiled_decoding(model, idx, mask)
    elif use_cache:
        cache = model.new_cache(B, total)
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    end = P
    for t in range(P, total):
        key_mask = mask[:, :t] if mask is not None else None
        if not use_cache:
            logits = model.step(idx[:, :t], 0, key_mask, None)
        elif t == P:  # prefill: the whole prompt at once
            logits = model.step(idx[:, :t], 0, key_mask, cache)
        elif compiled is None or t - 1 < 2:  # (the compiled step serves positions from 2 on: compile_step)
            logits = model.step(idx[:, t - 1:t], t - 1, key_mask, cache)
        else:
            logits = compiled(idx[:, t - 1:t], t - 1)
        idx[:, t] = pick(logits)
        end = t + 1
        if eos_id is not None:
            done |= idx[:, t] == eos_id
            if bool(done.all()):
                break
    return end


# Sequence to sequence: the Pig Latin study's two families (the encoder-decoder and Mamba). A seq2seq batch is a
# source (a word and [EOS]) and a target (its translation): the decoder reads [SOS] + target and predicts
# target + [EOS]. How a family takes the pair is its config's `seq2seq_layout` (data.py cuts the batches so):
#     'pair'    an encoder reads the source, a decoder the target input (src, src_mask, idx, targets)
#     'joined'  one causal model reads source and target input as one sequence (idx, targets), and
#               only the target part is scored (targets -100 elsewhere: cross_entropy's ignore_index)


def greedy_extend(next_logits, idx, steps, eos_id):
    """Greedy decoding shared by the seq2seq families: append the most likely next token to idx (B, T)
    up to `steps` times, next_logits(idx) giving the last position's logits (B, V), until every row has
    produced eos_id. Returns only the new tokens (B, <= steps); a row that ended repeats eos_id."""
    done = torch.zeros(idx.size(0), dtype=torch.bool, device=idx.device)
    start = idx.size(1)
    for _ in range(steps):
        nxt = next_logits(idx).argmax(-1).masked_fill(done, eos_id)  # (B,)
        idx = torch.cat((idx, nxt[:, None]), dim=1)
        done |= nxt == eos_id
        if bool(done.all()):
            break
    return idx[:, start:]


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
    attn_impl: str = "sdpa"  # 'sdpa' (F.scaled_dot_product_attention) | 'manual' | 'triton' (kernels.py)
    norm_impl: str = "torch"  # 'torch' (F.layer_norm / F.rms_norm) | 'manual' (written out) | 'triton'
    ffn_impl: str = "torch"  # SwiGLU's SiLU(a) * b: 'torch' | 'triton' (one fused kernel)
    causal = True  # a class attribute, not a field: a GPT is causal by definition (Block reads it)
    data_fields = ("vocab_size",)  # the corpus fixes the vocabulary; the context length is a setting
    tunable = ("dropout", "attn_impl", "norm_impl", "ffn_impl")

    def __post_init__(self):
        check_block_fields(self, "vocab_size", "block_size")


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
        self.norm_f = make_norm(cfg.norm, cfg)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.head.weight = self.tok_emb.weight  # one Parameter, two uses
        if cfg.pos == "rope":
            register_rope(self, cfg)
        init_weights(self, cfg.n_layer)
        # Registered last, so that every other parameter has the same name and the same place in
        # parameters() in all three variants. (It draws no random numbers: gains start at one.)
        self.emb_norm = None if cfg.emb_norm == "none" else make_norm(cfg.emb_norm, cfg)

    def forward(self, idx, targets=None, key_mask=None, cache=None, start=0):
        """idx: (B, T) token ids at positions start .. start+T-1; targets: (B, T) the next token at each
        position, or None; key_mask, cache: for decoding (see Llama.forward and `decode`).
        Returns (logits (B, T, vocab_size), mean cross-entropy over all positions or None)."""
        x = self.drop(self.embed(idx, start=start))
        rope = self.rope()
        for i, layer in enumerate(self.layers):
            x, _ = layer(x, key_mask, rope, cache=None if cache is None else cache[i], start=start)
        logits = self.head(self.norm_f(x))
        return logits, self.cross_entropy(logits, targets)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None, use_cache=True,
                 mode="eager"):
        """Extend idx (B, T) by max_new_tokens tokens, sampled as sample_next says (temperature 0: greedy).
        Without the cache (the reference) every step runs the last block_size tokens again. With it
        (`decode`: eager or compiled) tokens come one step each while the sequence fits the context, the same
        tokens as the reference; past the context, learned positions cannot slide (a token's embedding
        holds its absolute position), so the window restarts from the last half context, read in one pass,
        and every token still sees at least block_size/2 tokens before it (the reference sees block_size)."""
        if temperature < 0:
            raise ValueError(f"temperature={temperature} must be >= 0")
        if mode not in DECODE_MODES:
            raise ValueError(f"mode={mode!r}: expected one of {DECODE_MODES}")
        was_training = self.training
        self.eval()
        pick = lambda logits: sample_next(logits, temperature, top_k=top_k, generator=generator)[:, 0]  # noqa: E731
        L, left = self.cfg.block_size, max_new_tokens
        use_cache = use_cache and L >= 2  # (a context of one token has no half to restart from)
        while left > 0:
            if not use_cache:
                window = idx[:, -L:]
            else:
                window = idx if idx.size(1) < L else idx[:, -max(1, L // 2):]
            P = window.size(1)
            steps = min(left, L - P) if use_cache else 1
            buf = torch.cat((window, window.new_zeros(window.size(0), steps)), dim=1)
            end = decode(self, buf, None, P, pick, use_cache=use_cache, mode=mode)
            idx = torch.cat((idx, buf[:, P:end]), dim=1)
            left -= end - P
        self.train(was_training)
        return idx


# -----------------------------------------------------------------------------
# Llama 2 (Touvron et al. 2023), small: the mini-Llama of llama2.c and the NLP course's assignment, with the
# course's LoRA fine-tuning. (Its generate runs the shared `decode` above; its files, llama2.c's formats, are
# export.py's.)
#
# --- LoRA: low-rank adapters on frozen projections (Hu et al. 2021)

LORA_TARGETS = {"wq": "attn", "wk": "attn", "wv": "attn", "wo": "attn", "w1": "ffn", "w2": "ffn", "w3": "ffn"}


class LoRALinear(nn.Module):
    """A frozen linear map W0 plus a trainable low-rank update (Hu et al. 2021, eq. 3):
        h = W0 x + (alpha / r) B A x,   A: (r, in), B: (out, r)
    B starts at zero, so training starts from W0 exactly; A starts as nn.Linear's own weights do
    (Kaiming-uniform), so B's first gradients are not zero. `weight` keeps nn.Linear's name, so the
    frozen matrix has the same key as without adapters."""

    def __init__(self, linear, rank, alpha):
        super().__init__()
        if linear.bias is not None:
            raise ValueError("LoRALinear wraps bias-free projections (Llama has no biases)")
        self.weight = nn.Parameter(linear.weight.detach().clone(), requires_grad=False)  # W0: (out, in)
        self.lora_A = nn.Parameter(torch.empty(rank, linear.in_features))
        self.lora_B = nn.Parameter(torch.zeros(linear.out_features, rank))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.scale = alpha / rank

    def forward(self, x):
        return F.linear(x, self.weight) + F.linear(F.linear(x, self.lora_A), self.lora_B) * self.scale

    def merged_weight(self):
        """W0 + (alpha / r) B A: one matrix that computes the same map, for inference or export."""
        return self.weight + self.scale * (self.lora_B @ self.lora_A)


def add_lora(model, rank, alpha, targets):
    """Put LoRA adapters on the named projections of every Block, and freeze everything but the
    adapters and a classification head (the course's LoRA fine-tuning)."""
    for layer in model.layers:
        for name in targets:
            parent = getattr(layer, LORA_TARGETS[name])
            setattr(parent, name, LoRALinear(getattr(parent, name), rank, alpha))
    for name, p in model.named_parameters():
        p.requires_grad_("lora_" in name or name.startswith("cls_head."))


def merge_lora(model):
    """The same model without adapters: each W0 replaced by W0 + (alpha/r) B A, nothing frozen.
    Its outputs equal the adapted model's up to rounding."""
    cfg = dataclasses.replace(model.cfg, lora_rank=0)
    merged = type(model)(cfg).to(model.tok_emb.weight.device)
    sd = {}
    for name, m in model.named_modules():
        if isinstance(m, LoRALinear):
            sd[f"{name}.weight"] = m.merged_weight()
    state = {k: v for k, v in model.state_dict().items() if "lora_" not in k}
    state.update(sd)
    merged.load_state_dict(state)
    return merged.train(model.training)


# --- The model


def llama_ffn_hidden(n_embd, multiple_of):
    """Llama's SwiGLU width: two thirds of 4d (so three matrices cost what GPT's two of width 4d
    do), rounded up to a multiple of multiple_of: round_up(int(2/3 * 4d), multiple_of)."""
    hidden = int(2 * (4 * n_embd) / 3)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


@dataclass
class LlamaConfig:
    """A Llama-2 decoder: RMSNorm (pre-norm), rotary positions, grouped-query attention, SwiGLU FFN,
    no biases, output head tied to the token embedding or not. Defaults are llama2.c's stories15M
    (6 layers, width 288, 6 heads, context 256, 32,000 tokens); stories260K is n_layer=5, n_embd=64,
    n_head=8, n_kv_head=4, ffn_hidden=172, block_size=512 on 512 tokens."""

    vocab_size: int = 32000  # the Llama-2 SentencePiece vocabulary; the tokenizer fixes it
    block_size: int = 256  # context length (llama2.c: max_seq_len)
    n_layer: int = 6
    n_embd: int = 288
    n_head: int = 6
    n_kv_head: int = 0  # 0 means n_head; fewer = grouped-query attention (GQA)
    ffn_hidden: int = 0  # 0 means llama_ffn_hidden(n_embd, multiple_of)
    multiple_of: int = 32  # llama2.c's rounding of the FFN width
    norm: str = "rms"  # 'rms' (Llama) | 'layer' (the course's option)
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    dropout: float = 0.0
    tie_embeddings: bool = True  # llama2.c's tinyllamas share the output head with the embedding
    attn_impl: str = "sdpa"  # 'sdpa' (F.scaled_dot_product_attention) | 'manual' | 'triton' (kernels.py)
    norm_impl: str = "torch"  # 'torch' (F.layer_norm / F.rms_norm) | 'manual' (written out) | 'triton'
    ffn_impl: str = "torch"  # SwiGLU's SiLU(a) * b: 'torch' | 'triton' (one fused kernel)
    n_classes: int = 0  # > 0: a classification head on the last token's state instead of the LM head
    lora_rank: int = 0  # > 0: LoRA adapters of this rank on lora_targets; everything else but cls_head is frozen
    lora_alpha: float = 1.0  # the adapters' update is scaled by lora_alpha / lora_rank (the course: r=4, alpha=1)
    lora_targets: str = "wq,wv"  # comma-separated projections to adapt: wq, wk, wv, wo (attention), w1, w2, w3 (FFN)
    # what Block and the shared checks read, fixed for every Llama (class attributes, not fields)
    ffn, pos, emb_norm, bias, causal = "swiglu", "rope", "none", False, True
    data_fields = ("vocab_size", "n_classes")
    tunable = ("dropout", "attn_impl", "norm_impl", "ffn_impl", "lora_rank", "lora_alpha", "lora_targets")

    def __post_init__(self):
        if self.ffn_hidden == 0 and self.multiple_of >= 1:
            self.ffn_hidden = llama_ffn_hidden(self.n_embd, self.multiple_of)
        check_block_fields(self, "vocab_size", "block_size", "multiple_of")
        unknown = set(self.lora_targets.split(",")) - set(LORA_TARGETS)
        require(self, (self.n_classes == 0 or self.n_classes >= 2,
                       f"n_classes={self.n_classes}: 0 (a language model) or at least 2"),
                (not (self.lora_rank < 0 or (self.lora_rank and unknown) or self.lora_alpha <= 0),
                 f"lora_rank={self.lora_rank} (>= 0), lora_alpha={self.lora_alpha} (> 0), lora_targets="
                 f"{self.lora_targets!r} (a comma-separated subset of {list(LORA_TARGETS)})"))


class Llama(TokenModel):
    """Token embedding -> n_layer causal Blocks (RoPE inside attention) -> final RMSNorm -> logits over
    the vocabulary, or, with n_classes > 0, a linear classifier on the final state of each sequence's
    last real token (the course's LlamaEmbeddingClassifier). Parameter names map to llama2.c's by
    export.LLAMA2C_NAMES; `generate` decodes with a key/value cache."""

    tasks = ("lm", "classification")

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.cfg = cfg
        self.depth = cfg.n_layer
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.pos_emb = self.emb_norm = None  # positions are rotary, inside attention
        self.drop = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm_f = make_norm(cfg.norm, cfg)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.head.weight = self.tok_emb.weight
        self.cls_head = nn.Linear(cfg.n_embd, cfg.n_classes) if cfg.n_classes else None
        register_rope(self, cfg)
        init_weights(self, cfg.n_layer)
        if cfg.lora_rank:
            add_lora(self, cfg.lora_rank, cfg.lora_alpha, cfg.lora_targets.split(","))

    def forward(self, idx, key_mask=None, targets=None, cache=None, start=0):
        """idx: (B, T) token ids at positions start .. start+T-1; key_mask: bool (B, start+T), True on
        real tokens (padding is on the right for classification, on the left for batched prompts);
        cache: one KVCache per layer (see generate). A language model returns (logits (B, T, V), mean
        next-token cross-entropy or None) for targets (B, T); a classifier (n_classes > 0) returns
        (logits (B, n_classes), cross-entropy or None) for targets (B,)."""
        h = self.drop(self.embed(idx, start=start))
        rope = self.rope()
        for i, layer in enumerate(self.layers):
            h, _ = layer(h, key_mask, rope, cache=None if cache is None else cache[i], start=start)
        h = self.norm_f(h)
        if self.cls_head is not None:
            # the last real token has read the whole sequence (causal attention)
            last = key_mask.sum(1) - 1 if key_mask is not None else torch.full_like(idx[:, 0], idx.size(1) - 1)
            logits = self.cls_head(self.drop(h[torch.arange(h.size(0), device=h.device), last]))  # (B, n_classes)
            return logits, self.cross_entropy(logits, targets)
        logits = self.head(h)  # (B, T, V)
        return logits, self.cross_entropy(logits, targets)

    @torch.no_grad()
    def generate(self, prompts, max_new_tokens, temperature=1.0, top_k=None, top_p=None, epsilon=None,
                 eos_id=None, generator=None, use_cache=True, mode="eager"):
        """Continue each prompt (a list of token-id lists, lengths may differ) by up to max_new_tokens
        tokens, stopping a sequence at eos_id (kept) and every sequence at the context length.
        Prompts are padded on the left and the padding masked out, so each row sees only its own
        tokens; RoPE depends only on relative position, so the shift changes nothing. With use_cache,
        the prompt is run once and each step feeds one token (KVCache), eagerly or compiled (mode, see
        `decode`); without, every step runs the whole sequence again (the reference the cache is tested
        against). Sampling: sample_next. Returns the new tokens of each sequence, a list of lists."""
        if isinstance(prompts, torch.Tensor):
            prompts = prompts.tolist()
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token (llama2.c starts from BOS = 1)")
        if mode not in DECODE_MODES:
            raise ValueError(f"mode={mode!r}: expected one of {DECODE_MODES}")
        B, P = len(prompts), max(len(p) for p in prompts)
        steps = max(0, min(max_new_tokens, self.cfg.block_size - P))
        dev = self.tok_emb.weight.device
        idx = torch.zeros(B, P + steps, dtype=torch.long, device=dev)
        mask = torch.zeros(B, P + steps, dtype=torch.bool, device=dev)
        for b, p in enumerate(prompts):
            idx[b, P - len(p):P] = torch.tensor(p, dtype=torch.long)
            mask[b, P - len(p):] = True
        was_training = self.training
        self.eval()
        pick = lambda logits: sample_next(logits, temperature, top_k, top_p, epsilon, generator)[:, 0]  # noqa: E731
        end = decode(self, idx, mask if bool((~mask[:, :P]).any()) else None, P, pick, eos_id, use_cache, mode)
        self.train(was_training)
        new = idx[:, P:end].tolist()
        return [row[:row.index(eos_id) + 1] if eos_id in row else row for row in new]


# -----------------------------------------------------------------------------
# Encoder-decoder (Vaswani et al. 2017): the Pig Latin study's transformer, the 'pair' layout

@dataclass
class EncDecConfig:
    """Encoder-decoder transformer (Vaswani et al. 2017), pre-norm. Defaults are the Pig Latin
    write-up's best small setting: 2 encoder + 2 decoder layers, width 64, 8 heads, trainable
    sinusoidal positions. The write-up's ablations vary n_head (4/8/16), n_embd (32/64), layers
    (2/4/8) and the positions (frozen, trainable, none)."""

    vocab_size: int = 30  # Pig Latin: 26 letters, "-", [PAD], [SOS], [EOS]; the data fixes it
    block_size: int = 64  # longest source or target sequence incl. its special token; the data fixes it
    n_layer: int = 2  # encoder layers
    n_dec_layer: int = 0  # decoder layers; 0 means n_layer
    n_embd: int = 64
    n_head: int = 8
    n_kv_head: int = 0  # 0 means n_head
    ffn_hidden: int = 0  # 0 means 4 * n_embd
    ffn: str = "gelu"  # 'gelu' | 'swiglu'
    norm: str = "layer"  # 'layer' | 'rms'
    norm_eps: float = 1e-5
    pos: str = "sinusoidal"  # 'sinusoidal' (Vaswani sec. 3.5) | 'learned' | 'rope' | 'none'
    train_pos: bool = True  # 'sinusoidal': start from the sinusoid and train it (True) or keep it frozen
    emb_scale: bool = True  # Vaswani sec. 3.4: tokens N(0, 1/d) times sqrt(d), on the sinusoid's scale (entries
    # in [-1, 1]); off, tokens start at N(0, 0.02) as in every other family here, and on Pig Latin nothing was
    # learned in 20 epochs, with trained or frozen positions (docs/piglatin_mamba.md)
    rope_theta: float = 10000.0
    emb_norm: str = "none"
    dropout: float = 0.1
    bias: bool = True  # biases in Linear and LayerNorm, as the original transformer
    tie_embeddings: bool = True  # one character table for source, target and the output head
    attn_impl: str = "sdpa"  # 'sdpa' (F.scaled_dot_product_attention) | 'manual' | 'triton' (kernels.py)
    norm_impl: str = "torch"  # 'torch' (F.layer_norm / F.rms_norm) | 'manual' (written out) | 'triton'
    ffn_impl: str = "torch"  # SwiGLU's SiLU(a) * b: 'torch' | 'triton' (one fused kernel)
    causal = True  # the decoder's self-attention; the encoder's Blocks are built non-causal
    choices = {"pos": ("sinusoidal", "learned", "rope", "none")}  # CHOICES's, and the sinusoid
    seq2seq_layout = "pair"
    data_fields = ("vocab_size", "block_size")
    tunable = ("dropout", "attn_impl", "norm_impl", "ffn_impl")

    def __post_init__(self):
        require(self, (self.n_dec_layer >= 0, f"n_dec_layer={self.n_dec_layer} must be >= 0 (0 means n_layer)"))
        self.n_dec_layer = self.n_dec_layer or self.n_layer
        check_block_fields(self, "vocab_size", "block_size")


class EncoderDecoder(TokenModel):
    """Source tokens -> n_layer non-causal Blocks -> norm = memory; target input -> n_dec_layer causal
    Blocks, each also cross-attending to the memory -> norm -> logits (tied to the token table).
    `translate` decodes greedily. Positions (one table for source and target) are added to the token
    embeddings: a sinusoid, frozen or trained from there, learned from N(0, 0.02), rotary, or none."""

    tasks = ("seq2seq",)

    def __init__(self, cfg: EncDecConfig):
        super().__init__()
        self.cfg = cfg
        self.depth = cfg.n_layer + cfg.n_dec_layer
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.pos_emb = nn.Embedding(cfg.block_size, cfg.n_embd) if cfg.pos in ("learned", "sinusoidal") else None
        self.emb_norm = None if cfg.emb_norm == "none" else make_norm(cfg.emb_norm, cfg)
        self.drop = nn.Dropout(cfg.dropout)
        self.encoder = nn.ModuleList(Block(cfg, causal=False) for _ in range(cfg.n_layer))
        self.enc_norm = make_norm(cfg.norm, cfg)
        self.decoder = nn.ModuleList(Block(cfg, causal=True, cross=True) for _ in range(cfg.n_dec_layer))
        self.norm_f = make_norm(cfg.norm, cfg)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.head.weight = self.tok_emb.weight
        if cfg.pos == "rope":
            register_rope(self, cfg)
        init_weights(self, self.depth)
        if cfg.emb_scale:
            self.emb_scale = math.sqrt(cfg.n_embd)
            nn.init.normal_(self.tok_emb.weight, std=cfg.n_embd ** -0.5)
        if cfg.pos == "sinusoidal":  # after init_weights, which would overwrite it
            with torch.no_grad():
                self.pos_emb.weight.copy_(sinusoid_table(cfg.block_size, cfg.n_embd))
            self.pos_emb.weight.requires_grad_(cfg.train_pos)

    def encode(self, src, src_mask=None, weights=None):
        """src: (B, S) -> memory (B, S, C). Appends each layer's self-attention weights to `weights`
        if a list is given."""
        h = self.drop(self.embed(src))
        for layer in self.encoder:
            h, w = layer(h, src_mask, self.rope(), weights is not None)
            if weights is not None:
                weights.append(w)
        return self.enc_norm(h)

    def decode(self, idx, memory, src_mask=None, weights=None, cache=None, start=0):
        """idx: (B, T) target input ([SOS] + target so far) at positions start .. start+T-1 -> logits
        (B, T, V); cache: one KVCache per decoder layer holding the positions before start (translate).
        Appends each layer's (self-attention, cross-attention) weights to `weights` if a list is given."""
        h = self.drop(self.embed(idx, start=start))
        for i, layer in enumerate(self.decoder):
            h, w = layer(h, None, self.rope(), weights is not None, cache=None if cache is None else cache[i],
                         start=start, memory=memory, memory_mask=src_mask)
            if weights is not None:
                weights.append(w)
        return self.head(self.norm_f(h))

    def forward(self, src, idx, src_mask=None, targets=None, need_weights=False):
        """src: (B, S) source ids ending in [EOS], right-padded; src_mask: bool (B, S), True on real
        tokens; idx: (B, T) [SOS] + target; targets: (B, T) target + [EOS], -100 where padded.
        Returns (logits (B, T, V), mean cross-entropy per target token or None); with need_weights also
        {'encoder': [(B, nh, S, S) per layer], 'decoder': [...(B, nh, T, T)], 'cross': [...(B, nh, T, S)]}."""
        enc_w, dec_w = ([], []) if need_weights else (None, None)
        logits = self.decode(idx, self.encode(src, src_mask, enc_w), src_mask, dec_w)
        loss = self.cross_entropy(logits, targets)
        if need_weights:
            return logits, loss, {"encoder": enc_w, "decoder": [w[0] for w in dec_w], "cross": [w[1] for w in dec_w]}
        return logits, loss

    @torch.no_grad()
    def translate(self, src, max_new_tokens, sos_id, eos_id, src_mask=None, use_cache=True):
        """Greedy decoding: the most likely next token each step, until every row has produced eos_id
        or max_new_tokens (at most block_size - 1). src: (B, S). Returns (B, steps) token ids; a row
        that ended repeats eos_id to the end. The memory is computed once; with use_cache the decoder
        feeds one token a step, its self-attention keys and values kept (KVCache; the cross-attention's
        keys come from the memory again each step, a source word of a few characters); without, it runs
        the whole target so far each step (the reference)."""
        was_training = self.training
        self.eval()
        memory = self.encode(src, src_mask)
        idx = torch.full((src.size(0), 1), sos_id, dtype=torch.long, device=src.device)
        steps = min(max_new_tokens, self.cfg.block_size - 1)
        if use_cache:
            cache = self.new_cache(src.size(0), steps + 1, self.cfg.n_dec_layer)
            step = lambda x: self.decode(x[:, -1:], memory, src_mask, cache=cache, start=x.size(1) - 1)[:, -1]  # noqa: E731
        else:
            step = lambda x: self.decode(x, memory, src_mask)[:, -1]  # noqa: E731
        out = greedy_extend(step, idx, steps, eos_id)
        self.train(was_training)
        return out

# -----------------------------------------------------------------------------
# Mamba (Gu & Dao 2023): the Pig Latin study's other family, the 'joined' layout. Its selective state-space
# mixer is a Block's other token mixer (cfg.mixer = 'mamba', in place of attention); read here: the scan's
# reference, the mixer and its recurrent state, the config and the model. The math the reference runs is
# kernels.py's (model.py imports kernels.py, never the reverse): read `discretize` there (Delta, A, B, x ->
# A-bar_t, B-bar_t x_t, eq. 4) and `scan_sequential` (the loop h_t = A-bar_t h_{t-1} + B-bar_t x_t, eq. 2a).
# Which scan runs: the default scan='parallel' (with scan_chunk=0) goes selective_scan_reference ->
# kernels.selective_scan -> kernels.scan_parallel, Blelloch's scan (`_blelloch`, differentiated by autograd);
# config/piglatin_mamba.py and piglatin_mamba_large.py pick the chunked scan, compiled, whose backward is written
# out by hand. The fast scans (log-space, chunked, Triton) are kernels.py's, beside the loop and the discretizations;
# the convolution as a matmul (causal_conv_matmul, conv_impl='matmul') is here, beside MambaMixer.
#
# Glossary (code name -> symbol in the Mamba paper, Algorithm 2 and section 3)
#     D = d_inner    expanded width E * d (E = expand); the SSM runs on each of the D channels apart
#     N = d_state    state size per channel
#     A_log          A = -exp(A_log), (D, N): a diagonal, negative state matrix per channel (S4D-real init)
#     delta          step size Delta = softplus(dt_proj(x_proj(x)) + bias) > 0, (B, T, D): input-dependent
#     Bm, Cm         B and C, (B, T, N): input-dependent input and output maps (the "selection")
#     a_bar, bx_bar  the discretized A-bar_t and B-bar_t x_t, (B, T, D, N)
#     h              the state, h_t = A-bar_t h_{t-1} + B-bar_t x_t (eq. 2a); y_t = C_t h_t + D x_t (eq. 2b)
#     D_skip         the skip D of eq. 2b (named so it is not read as the width)
#     z              the gate branch: the output is y * SiLU(z) (Figure 3)

discretize, DISCRETIZATIONS = kernels.discretize, kernels.DISCRETIZATIONS  # (kernels.py's: the fast scans' inputs)


def selective_scan_reference(x, delta, A, Bm, Cm, discretization="zoh_approx", scan="sequential"):
    """The output of Mamba's selective SSM before its skip and gate, y (B, T, D), the plain way: every
    state materialized. x, delta: (B, T, D); A: (D, N); Bm, Cm: (B, T, N).
        a_bar, bx_bar = discretize(delta, A, Bm, x)     (B, T, D, N) each
        h_t = a_bar_t h_{t-1} + bx_bar_t                 the scan, (B, T, D, N)
        y_t = sum_n C_t[n] h_t[:, n]                     (B, T, D)
    What the fused scans (kernels.selective_scan_chunked, kernels.selective_scan_triton) compute without
    storing h, and `scan` picks the algorithm of the middle step (kernels.SCANS)."""
    a_bar, bx_bar = discretize(delta, A, Bm, x, discretization)
    h = kernels.selective_scan(a_bar, bx_bar, scan)  # (B, T, D, N)
    return (h @ Cm[..., None]).squeeze(-1)  # (B, T, D): C_t h_t, per channel


def causal_conv_matmul(x, weight, bias):
    """MambaMixer's causal depthwise convolution, nn.Conv1d(D, D, K, groups=D, padding=K - 1) cut to its first T
    outputs, as one (T, T) matrix product per channel: y_t = sum_k w_k x_{t-K+1+k} is y = W x for the banded
    lower-triangular Toeplitz W[t, s] = w[K - 1 - (t - s)] (0 <= t - s < K, else 0). T^2 multiply-adds per channel,
    not T K, but one batched matmul (torch.bmm) instead of a depthwise convolution: about 4x faster forward and backward
    at Mamba large's T ~ 40, K = 16 on one CPU core. x: (B, T, D); weight: (D, 1, K); bias: (D,) -> (B, T, D)."""
    T, K = x.size(1), weight.size(-1)
    # u[d, T - 1 + j] = w[d, K - 1 - j] for lags j in [0, K), else 0 (a negative pad cuts lags >= T); then
    # W[d, t, s] = u[d, T - 1 + t - s]: u's length-T windows, each reversed
    u = F.pad(weight[:, 0].flip(-1), (T - 1, T - K))  # (D, 2T - 1)
    y = torch.bmm(x.permute(2, 0, 1).contiguous(), u.unfold(-1, T, 1).flip(-1).transpose(1, 2))  # (D, B, T)
    if y.requires_grad:  # y's gradient arrives (B, T, D)-strided, which bmm's backward copies matrix by matrix
        y.register_hook(lambda g: g.contiguous())  # (D, B, T): one copy instead (4-9 % of Mamba large's step)
    return y.permute(1, 2, 0) + bias  # (B, T, D)


class MambaMixer(nn.Module):
    """The selective SSM of Mamba (Gu & Dao 2023, Algorithm 2 and Figure 3), on x (B, T, C):
        x, z = in_proj(x)                          two branches of width D
        x = SiLU(causal depthwise conv(x))         a short local mix along time (kernel d_conv)
        delta, B, C = x_proj(x)                    input-dependent: this is what makes it "selective"
        delta = softplus(dt_proj(delta))           low rank (dt_rank), then one step size per channel
                                                   (divided by sqrt(n_embd) with cfg.dt_div_sqrt)
        h_t = A-bar_t h_{t-1} + B-bar_t x_t        the scan (kernels.selective_scan), per channel and state
        y = C_t h_t + D_skip x_t;  y = y * SiLU(z);  out_proj(y)
    cfg.scan and cfg.discretization pick the algorithms. It has Attention's (x, key_mask, rope, ...) ->
    (y, weights) signature, so Block can hold either; it is causal by construction and reads no positions
    (the recurrence is the position), and padding must be on the right."""

    def __init__(self, cfg):
        super().__init__()
        D, N, R = cfg.d_inner, cfg.d_state, cfg.dt_rank
        self.cfg = cfg
        self.in_proj = nn.Linear(cfg.n_embd, 2 * D, bias=cfg.bias)
        self.conv = nn.Conv1d(D, D, cfg.d_conv, groups=D, padding=cfg.d_conv - 1, bias=True)  # depthwise
        self.x_proj = nn.Linear(D, R + 2 * N, bias=False)
        self.dt_proj = nn.Linear(R, D, bias=True)
        self.A_log = nn.Parameter(torch.log(torch.arange(1, N + 1, dtype=torch.float32)).repeat(D, 1))  # (D, N)
        self.D_skip = nn.Parameter(torch.ones(D))
        self.out_proj = nn.Linear(D, cfg.n_embd, bias=cfg.bias)

    def reset_dt(self):
        """Mamba's step-size initialization (its section 3.6): dt_proj's bias set so that
        softplus(bias) = Delta_0, with Delta_0 log-uniform in [dt_min, dt_max] per channel.
        (Called after the model's generic initialization, which zeroes biases.)"""
        cfg = self.cfg
        u = torch.rand(cfg.d_inner)
        dt = torch.exp(u * (math.log(cfg.dt_max) - math.log(cfg.dt_min)) + math.log(cfg.dt_min))
        with torch.no_grad():
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # the inverse of softplus

    def step_size(self, dt):
        """Delta (B, T, D), one step size per channel, from the low-rank dt (B, T, R): softplus(dt_proj(dt)),
        divided by sqrt(n_embd) if cfg.dt_div_sqrt (the Pig Latin write-up's change for stable training)."""
        delta = F.softplus(self.dt_proj(dt))
        return delta / math.sqrt(self.cfg.n_embd) if self.cfg.dt_div_sqrt else delta

    def forward(self, x, key_mask=None, rope=None, need_weights=False, cache=None, start=0):
        """x (B, T, C) -> (y (B, T, C), None). With cache (a MambaState) the tokens go through the recurrence
        one at a time from the state the cache holds, which they advance (decoding: `step`)."""
        if cache is not None:
            return torch.cat([self.step(x[:, t:t + 1], cache) for t in range(x.size(1))], dim=1), None
        cfg = self.cfg
        B, T, _ = x.shape
        xz = self.in_proj(x)  # (B, T, 2D)
        x, z = xz.chunk(2, dim=-1)  # (B, T, D) each
        if cfg.conv_impl == "matmul":  # the same convolution as a Toeplitz matrix per channel (T^2, not T d_conv)
            x = causal_conv_matmul(x, self.conv.weight, self.conv.bias)  # (B, T, D)
        else:
            x = self.conv(x.transpose(1, 2))[..., :T].transpose(1, 2)  # (B, T, D): keep the causal part
        x = F.silu(x)
        dt, Bm, Cm = self.x_proj(x).split([cfg.dt_rank, cfg.d_state, cfg.d_state], dim=-1)
        delta = self.step_size(dt)  # (B, T, D)
        A = -torch.exp(self.A_log.float())  # (D, N)
        ssm = (x.float(), delta.float(), A, Bm.float(), Cm.float(), cfg.discretization)
        if cfg.scan == "triton":  # one kernel forward, one backward: no (B, T, D, N) tensor at all
            y = kernels.selective_scan_triton(*ssm, chunk=cfg.scan_chunk or 64)
        elif cfg.scan_chunk:  # the same y, its (B, T, D, N) states held for scan_chunk steps at a time
            y = kernels.selective_scan_chunked(*ssm, chunk=cfg.scan_chunk, scan=cfg.scan,
                                               compile=cfg.scan_compile and kernels.CHUNK_COMPILE_BACKEND)
        else:  # discretize, scan every state (B, T, D, N), y_t = C_t h_t per channel
            y = selective_scan_reference(*ssm, scan=cfg.scan)  # (B, T, D)
        y = (y + self.D_skip * x.float()).to(x.dtype)
        y = y * F.silu(z)
        return self.out_proj(y), None

    def step(self, x, state):
        """One token x (B, 1, C) -> y (B, 1, C), the same function as forward at that position: the
        convolution reads the inputs `state` keeps, the scan advances its h by one step (Mamba's recurrent
        mode, Gu & Dao 2023 sec. 3.4: constant time and memory per token)."""
        cfg = self.cfg
        x, z = self.in_proj(x).chunk(2, dim=-1)  # (B, 1, D) each
        window = torch.cat((state.conv, x.transpose(1, 2)), dim=2)  # (B, D, d_conv): the conv's receptive field
        state.conv = window[:, :, 1:]
        x = F.silu((window * self.conv.weight[:, 0]).sum(-1) + self.conv.bias)[:, None]  # (B, 1, D)
        dt, Bm, Cm = self.x_proj(x).split([cfg.dt_rank, cfg.d_state, cfg.d_state], dim=-1)
        delta = self.step_size(dt)  # (B, 1, D)
        A = -torch.exp(self.A_log.float())  # (D, N)
        a_bar, bx_bar = discretize(delta.float(), A, Bm.float(), x.float(), cfg.discretization)  # (B, 1, D, N)
        state.h = a_bar[:, 0] * state.h + bx_bar[:, 0]  # (B, D, N)
        y = (state.h @ Cm.float()[:, 0, :, None]).squeeze(-1)[:, None]  # (B, 1, D)
        y = (y + self.D_skip * x.float()).to(x.dtype)
        return self.out_proj(y * F.silu(z))


class MambaState:
    """A Mamba layer's recurrent state, for decoding a token at a time: the causal convolution's last
    d_conv - 1 inputs (B, D, d_conv - 1) and the SSM state h (B, D, N), both zero before the first token."""

    def __init__(self, batch_size, cfg, device, dtype):
        self.conv = torch.zeros(batch_size, cfg.d_inner, cfg.d_conv - 1, device=device, dtype=dtype)
        self.h = torch.zeros(batch_size, cfg.d_inner, cfg.d_state, device=device, dtype=torch.float32)


@dataclass
class MambaConfig:
    """A decoder-only Mamba (Gu & Dao 2023): token embedding -> n_layer Blocks whose mixer is the
    selective SSM (no attention, no FFN: Mamba's own block) -> RMSNorm -> logits. No positions: the
    recurrence orders the tokens. Defaults are Mamba's (expand 2, d_state 16, d_conv 4, dt_rank
    ceil(d/16), Delta_0 in [0.001, 0.1]) at the Pig Latin write-up's width 64 and 2 layers."""

    vocab_size: int = 30  # the data fixes it (Pig Latin: 30 characters)
    block_size: int = 128  # longest sequence (Mamba reads no positions: this only bounds decoding)
    n_layer: int = 2
    n_embd: int = 64
    d_state: int = 16  # N
    d_conv: int = 4  # the causal depthwise convolution's kernel
    expand: int = 2  # E: d_inner = E * n_embd
    dt_rank: int = 0  # R, the rank of Delta's projection; 0 means ceil(n_embd / 16)
    dt_min: float = 0.001  # the range Delta starts in (log-uniform per channel)
    dt_max: float = 0.1
    dt_div_sqrt: bool = False  # Delta divided by sqrt(n_embd), the write-up's stabilizer ("we divide delta by
    #                            sqrt(hidden size)"); Delta then starts in [dt_min, dt_max] / sqrt(n_embd)
    discretization: str = "zoh_approx"  # 'zoh_approx' (Mamba's) | 'zoh' (exact) | 'bilinear' (S4's)
    scan: str = "parallel"  # 'sequential' (the reference loop) | 'parallel' (Blelloch) | 'logspace' (Heinsen)
    #                         | 'triton' (kernels.selective_scan_triton, fused: a GPU, or Triton's interpreter)
    scan_chunk: int = 0  # 0: every state (B, T, D, N) at once; k > 0: k steps at a time, recomputed in the
    #                      backward (kernels.selective_scan_chunked: memory independent of T), `scan` within a
    #                      chunk's forward; with scan='triton', the steps between the states its forward saves (0: 64)
    scan_compile: bool = False  # with scan_chunk: each chunk's forward and hand-written backward compiled (inductor)
    conv_impl: str = "torch"  # 'torch' (nn.Conv1d) | 'matmul' (causal_conv_matmul: the same, faster for short T)
    bidirectional: bool = False  # each layer's mixer also reads the source backwards, its own weights, the output
    #                              added at the source's positions (Mamba.source_backwards); seq2seq batches only
    norm: str = "rms"
    norm_eps: float = 1e-5
    norm_impl: str = "torch"  # 'torch' (F.rms_norm) | 'manual' (written out) | 'triton' (kernels.py)
    dropout: float = 0.0
    bias: bool = False  # in in_proj and out_proj, as Mamba
    tie_embeddings: bool = True
    # what Block and TokenModel read, fixed for every Mamba (class attributes, not fields)
    mixer, ffn, pos, emb_norm, causal = "mamba", "none", "none", "none", True
    seq2seq_layout = "joined"
    data_fields = ("vocab_size",)
    tunable = ("dropout", "scan", "scan_chunk", "scan_compile", "conv_impl", "norm_impl")  # each computes one function

    def __post_init__(self):
        if self.dt_rank == 0:
            self.dt_rank = math.ceil(self.n_embd / 16)
        self.d_inner = self.expand * self.n_embd  # derived, not a field
        positive = ("vocab_size", "block_size", "n_layer", "n_embd", "d_state", "d_conv", "expand", "dt_rank")
        require(self, *at_least_one(self, *positive),
                (self.scan_chunk >= 0, f"scan_chunk={self.scan_chunk}: 0 (all states at once) or a chunk length"),
                (0 < self.dt_min <= self.dt_max, f"need 0 < dt_min={self.dt_min} <= dt_max={self.dt_max}"),
                *choice_checks(self), (not (self.scan == "triton" and self.scan_compile),
                                       "scan_compile compiles the chunked PyTorch scan; scan='triton' is a kernel "
                                       "already"),
                (0.0 <= self.dropout < 1.0, f"dropout={self.dropout} must be in [0, 1)"))


class Mamba(TokenModel):
    """Decoder-only Mamba: a language model, and for seq2seq a model of word [EOS] [SOS] translation
    [EOS] scored on the translation (the 'joined' layout)."""

    tasks = ("seq2seq", "lm")

    def __init__(self, cfg: MambaConfig):
        super().__init__()
        self.cfg = cfg
        self.depth = cfg.n_layer
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.pos_emb = self.emb_norm = None
        self.drop = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm_f = make_norm(cfg.norm, cfg)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.head.weight = self.tok_emb.weight
        init_weights(self, cfg.n_layer)
        for layer in self.layers:
            layer.mamba.reset_dt()

    def forward(self, idx, targets=None, cache=None, src_len=None):
        """idx: (B, T) token ids (padding on the right); targets: (B, T) the next token, -100 where not
        scored; cache: one MambaState per layer (new_cache), which these tokens continue and advance;
        src_len: (B,) each source's length, word and [EOS] (data.seq2seq_collate's), given where idx holds
        whole sources: the bidirectional pass reads it. Returns (logits (B, T, V), mean cross-entropy over
        the scored targets or None)."""
        if self.cfg.bidirectional and src_len is None and cache is None:
            raise ValueError("bidirectional=True reads each source backwards: it takes seq2seq batches (src_len)")
        h = self.drop(self.embed(idx))
        order = self.reversed_sources(src_len) if self.cfg.bidirectional and src_len is not None else None
        for i, layer in enumerate(self.layers):
            back = self.source_backwards(layer, h, *order) if order is not None else 0
            h, _ = layer(h, cache=None if cache is None else cache[i])
            h = h + back  # h + Drop(Mix(Norm1(h))) + Drop(Mix(Norm1(h) read backwards)), on the source
        logits = self.head(self.norm_f(h))
        return logits, self.cross_entropy(logits, targets)

    def reversed_sources(self, src_len):
        """(in_src (B, S), rev (B, S, C)) for src_len (B,), once a forward: S the longest source (the pass reads
        (B, S, C), not the whole (B, T, C)); rev each source's positions backwards, a permutation, its own inverse."""
        t = torch.arange(int(src_len.max()), device=src_len.device)
        in_src = t < src_len[:, None]
        return in_src, torch.where(in_src, src_len[:, None] - 1 - t, t)[..., None].expand(-1, -1, self.cfg.n_embd)

    def source_backwards(self, layer, h, in_src, rev):
        """The bidirectional pass over the source (cfg.bidirectional; Caduceus's BiMamba ties the two directions'
        weights too): `layer`'s own mixer reads each source from its [EOS] back to its first letter, and its
        output goes to the source's positions, zero elsewhere. A letter then also sees the letters after it
        in its word; the target still sees nothing after itself. h (B, T, C) -> (B, T, C)."""
        y, _ = layer.mamba(layer.norm1(h).gather(1, rev))  # causal over each reversed source: reads source only
        return F.pad(layer.drop(y.gather(1, rev)) * in_src[..., None], (0, 0, 0, h.size(1) - rev.size(1)))

    def new_cache(self, batch_size, max_len=None, n_layers=None):
        """One empty MambaState per layer (a recurrent state has no length: max_len is not needed)."""
        p = self.tok_emb.weight
        return [MambaState(batch_size, self.cfg, p.device, p.dtype) for _ in range(self.cfg.n_layer)]

    @torch.no_grad()
    def translate(self, src, max_new_tokens, sos_id, eos_id, src_mask=None, use_cache=True):
        """Greedy decoding in the joined layout: src (B, S) holds words of one length ending in [EOS]
        (no padding: a causal model would read it); [SOS] follows, then the most likely token each step.
        Returns (B, steps) as EncoderDecoder.translate does. With use_cache the tokens go through the
        recurrence once each (MambaState); without, every step runs the whole sequence again (the
        reference)."""
        if src_mask is not None and not bool(src_mask.all()):
            raise ValueError("Mamba.translate takes sources of one length (no padding)")
        was_training = self.training
        self.eval()
        sos = torch.full((src.size(0), 1), sos_id, dtype=torch.long, device=src.device)
        idx = torch.cat((src, sos), dim=1)
        src_len = torch.full((src.size(0),), src.size(1), device=src.device)
        step = lambda x: self(x, src_len=src_len)[0][:, -1]  # noqa: E731
        if use_cache:
            state, fed = self.new_cache(src.size(0)), [0]

            def step(x):  # noqa: F811  (the tokens the state has not seen: all of them first, then the newest)
                logits = self(x[:, fed[0]:], cache=state, src_len=None if fed[0] else src_len)[0][:, -1]
                fed[0] = x.size(1)
                return logits
        out = greedy_extend(step, idx, min(max_new_tokens, self.cfg.block_size - idx.size(1)), eos_id)
        self.train(was_training)
        return out

    def no_weight_decay(self):
        """As every family, plus A_log: decaying it would pull A towards -1 for every state."""
        return super().no_weight_decay() | {f"layers.{i}.mamba.A_log" for i in range(self.cfg.n_layer)}


# -----------------------------------------------------------------------------
# Bag of words + logistic regression: the non-neural anchor of the encoder study
#
# The baseline a text classifier has to beat (unigrams and bigrams: Wang & Manning 2012, "Baselines and
# Bigrams"): a document is the vector x of its unigram and n-gram weights, and the classifier is one linear
# map, logits = x W + b, trained by cross-entropy. Nothing here is a Block, and no word order is read
# beyond the n-grams themselves.
#
# Features, all from the token ids the transformers read (the same vocabulary, [CLS] and padding):
#     unigram t      feature t                                  (rows 0 .. vocab_size - 1)
#     n-gram t1..tn  feature vocab_size + h_n, 2 <= n <= ngrams, with h_0 = n and
#                    h_k = (h_(k-1) * NGRAM_HASH_PRIME + t_k) mod n_buckets   (the hashing trick, Weinberger
#                    et al. 2009: no n-gram vocabulary to build, at the price of collisions)
# An [UNK] (a word outside the compact vocabulary: in test sentences only) is a feature like any other; never
# seen in training, its row stays 0, but it takes its share of the document's norm.
# Weights per document, as scikit-learn's TfidfVectorizer computes them without IDF (the model sees no data
# when it is built, so it has no document frequencies):  v(tf) = 1 ('binary'), tf ('count') or 1 + log tf
# ('log', sublinear_tf), then x = v / ||v|| (doc_norm 'l2' or 'l1'; 'none' keeps v). W is an
# nn.EmbeddingBag of width n_classes, so x W is a weighted sum of the rows a document's features look up.

NGRAM_HASH_PRIME = 1_000_003  # the polynomial hash's multiplier: odd, so multiplying by it modulo a power of two
# (2^20 buckets) is a bijection that loses nothing of the hash so far


@dataclass
class BagOfWordsConfig:
    """Logistic regression on a bag of unigrams and hashed n-grams. Defaults: unigrams + bigrams, binary
    weights, L2-normalized per document, as the usual TF-IDF + logistic regression baseline (0.82 on SST-2's
    GLUE dev), less the IDF; 2^20 bigram buckets hold SST-2's bigrams with few collisions."""

    vocab_size: int = 50257 + 3  # the dataset's token ids (data.py: GPT-2 BPE + [PAD], [UNK], [CLS]); compact: fewer
    n_classes: int = 2  # the prepared dataset's label_names fix it for a run
    ngrams: int = 2  # the longest n-gram: 1 = unigrams only, 2 = also adjacent pairs (hashed), ...
    n_buckets: int = 2**20  # rows for the hashed n-grams (all orders share them)
    tf: str = "binary"  # a feature's value from its count in the document: 'binary' | 'count' | 'log' (1 + log tf)
    doc_norm: str = "l2"  # divide each document's vector by its norm: 'l2' (TfidfVectorizer's) | 'l1' | 'none'
    data_fields = ("vocab_size", "n_classes")
    tunable = ()  # everything here changes the function; a checkpoint fixes it all

    def __post_init__(self):
        # (n_buckets: the hash's h * NGRAM_HASH_PRIME stays far inside int64 below 2^31 buckets, and more would
        # not fit in memory)
        require(self, (self.vocab_size >= 1, f"vocab_size={self.vocab_size} must be at least 1"),
                (self.n_classes >= 2, f"n_classes={self.n_classes} must be at least 2 (a classifier needs labels)"),
                (self.ngrams >= 1, f"ngrams={self.ngrams} must be at least 1 (1 = unigrams only)"),
                (self.ngrams == 1 or 1 <= self.n_buckets <= 2**31, f"n_buckets={self.n_buckets}: 1 .. 2^31 for "
                                                                   f"n-grams"), *choice_checks(self))
        self.n_features = self.vocab_size + (self.n_buckets if self.ngrams > 1 else 0)  # derived, not a field


class BagOfWords(nn.Module):
    """logits = x W + b (the section's comment). A classifier with the encoder's forward signature, so train.py
    and evaluate.py drive it as they drive the encoder; not a TokenModel, having no Blocks."""

    tasks = ("classification",)
    depth = 0  # Blocks applied per forward (evaluate.py reports it as the effective depth)

    def __init__(self, cfg: BagOfWordsConfig):
        super().__init__()
        self.cfg = cfg
        self.weight = nn.EmbeddingBag(cfg.n_features, cfg.n_classes, mode="sum")
        self.bias = nn.Parameter(torch.zeros(cfg.n_classes))
        # Zero, the usual start of logistic regression (its loss is convex: the optimum does not depend on
        # the start). A seed then changes only the order of the batches.
        nn.init.zeros_(self.weight.weight)

    def features(self, idx, key_mask=None):
        """The document vectors x, sparse: (ids (B, L), weights (B, L)) such that x W is the sum over l of
        weights[:, l] * W[ids[:, l]], one entry per occurrence of a feature. idx: (B, T) token ids with [CLS]
        (or another start token) at position 0, which is skipped; key_mask: bool (B, T), False on padding."""
        cfg = self.cfg
        B, T = idx.shape
        real = torch.ones_like(idx, dtype=torch.bool) if key_mask is None else key_mask.clone()
        real[:, 0] = False  # [CLS] is in every document: a second bias, and a share of every norm
        ids, keep = [idx], [real]
        for n in range(2, cfg.ngrams + 1):
            # the n-gram starting at t: tokens t .. t+n-1, all real; the hash starts from n, so an n-gram's
            # order is part of its key
            m = max(0, T - n + 1)  # n-grams in a row of T tokens
            h = torch.full_like(idx[:, :m], n)  # (B, m)
            ok = torch.ones_like(real[:, :m])
            for k in range(n):
                h = (h * NGRAM_HASH_PRIME + idx[:, k:k + m]) % cfg.n_buckets
                ok = ok & real[:, k:k + m]
            ids.append(cfg.vocab_size + h)
            keep.append(ok)
        ids, keep = torch.cat(ids, 1), torch.cat(keep, 1)  # (B, L): L = T + (T-1) + ... + (T-ngrams+1)
        # tf: how often each occurrence's feature occurs in its document (one key per document and feature;
        # the occurrences that do not count share the key -1 and get weight 0 below)
        key = torch.where(keep, torch.arange(B, device=idx.device)[:, None] * cfg.n_features + ids, -1)
        _, inverse, counts = torch.unique(key, return_inverse=True, return_counts=True)
        tf = counts[inverse].float()  # (B, L)
        value = {"binary": torch.ones_like(tf), "count": tf, "log": 1 + torch.log(tf)}[cfg.tf]
        w = torch.where(keep, value / tf, 0.0)  # a feature's tf occurrences sum to its value v
        if cfg.doc_norm == "l2":
            norm = (w * value).sum(1, keepdim=True).sqrt()  # sum over occurrences of v^2 / tf = sum of v^2
        elif cfg.doc_norm == "l1":
            norm = w.sum(1, keepdim=True)  # values are positive: the sum of v
        else:
            norm = torch.ones_like(w[:, :1])
        # a document with no feature (only [CLS]) has the vector 0: its logits are the bias
        return torch.where(keep, ids, 0), w / norm.clamp(min=1e-12)

    def forward(self, idx, key_mask=None, targets=None):
        """idx: (B, T) token ids, [CLS] first; key_mask: bool (B, T), True for real tokens (None = no
        padding); targets: (B,) class ids. Returns (logits (B, n_classes), cross-entropy or None)."""
        ids, w = self.features(idx, key_mask)
        logits = self.weight(ids, per_sample_weights=w) + self.bias  # (B, n_classes): x W + b
        return logits, TokenModel.cross_entropy(logits, targets)

    def param_counts(self):
        """The table W is looked up by feature id, as the transformers' token tables are by token id: it
        counts as embedding, which leaves the bias as the only non-embedding parameters."""
        emb, total = self.weight.weight.numel(), sum(p.numel() for p in self.parameters())
        trainable = sum(p.numel() for p in self.parameters() if p.requires_grad)
        return {"total": total, "embedding": emb, "non_embedding": total - emb, "trainable": trainable}

    def no_weight_decay(self):
        """Only the bias. AdamW's weight decay is this model's L2 penalty (the C of scikit-learn's
        LogisticRegression, though decoupled from the gradient: each step shrinks W by lr * weight_decay), so
        the table must be decayed, although TokenModel exempts the transformers' embedding tables. The bias is
        not penalized, as in scikit-learn."""
        return {"bias"}


# -----------------------------------------------------------------------------
# The model families: the config key `model` picks one

FAMILIES = {"encoder": (EncoderConfig, EncoderClassifier), "gpt": (GPTConfig, GPT), "llama": (LlamaConfig, Llama),
            "encdec": (EncDecConfig, EncoderDecoder), "mamba": (MambaConfig, Mamba),
            "bow": (BagOfWordsConfig, BagOfWords)}


def family_settings(family):
    """The settings a config file may give for a family, with the family's defaults: its config
    dataclass's fields, less those the prepared dataset fixes (`data_fields`)."""
    cfg_cls, _ = FAMILIES[family]
    return {f.name: f.default for f in fields(cfg_cls) if f.name not in cfg_cls.data_fields}


def build_model(family, settings, facts):
    """A new model of `family` from a run's settings (any dict holding the family's keys) and the
    dataset's facts (vocab_size, and n_classes and block_size for a labelled set). Raises
    ConfigError naming what is wrong: an unknown family, a fact the data does not give, or a bad
    setting."""
    if family not in FAMILIES:
        raise ConfigError(f"model={family!r}: expected one of {sorted(FAMILIES)}")
    cfg_cls, model_cls = FAMILIES[family]
    missing = [k for k in cfg_cls.data_fields if k not in facts]
    if missing:
        raise ConfigError(f"model {family!r} takes {', '.join(missing)} from its dataset, "
                          f"which does not give it")
    args = {k: settings[k] for k in family_settings(family)}
    args.update({k: facts[k] for k in cfg_cls.data_fields})
    return model_cls(cfg_cls(**args))


def from_pretrained(pretrained, family, settings, facts):
    """A model of `family` that starts from `pretrained`: its architecture and weights, with the run's
    own `tunable` settings (dropout, LoRA, ...) and the dataset's facts (a classification head sized
    by n_classes is new, and starts from scratch). An architecture setting the run gives explicitly
    (not the family default) must agree with the checkpoint's; the vocabularies must be the same.
    Returns (model, names of the tensors that start fresh)."""
    cfg_cls, model_cls = FAMILIES[family]
    if type(pretrained.cfg) is not cfg_cls:
        raise ConfigError(f"the checkpoint holds a {family_of(pretrained)!r} model, not a {family!r} one")
    if getattr(pretrained.cfg, "lora_rank", 0):
        pretrained = merge_lora(pretrained)
    own = asdict(pretrained.cfg)
    defaults = family_settings(family)
    clash = [f"{k}={settings[k]!r} (checkpoint: {own[k]!r})" for k in defaults
             if k not in cfg_cls.tunable and settings.get(k, defaults[k]) not in (defaults[k], own[k])]
    if clash:
        raise ConfigError(f"the run sets architecture that the checkpoint fixes: {', '.join(clash)}")
    if facts.get("vocab_size", own["vocab_size"]) != own["vocab_size"]:
        raise ConfigError(f"the dataset's vocabulary has {facts['vocab_size']} tokens, the checkpoint's "
                         f"{own['vocab_size']}: prepare the data with the checkpoint's tokenizer")
    args = {**own, **{k: settings[k] for k in cfg_cls.tunable},
            **{k: facts[k] for k in cfg_cls.data_fields if k in facts}}
    model = model_cls(cfg_cls(**args))
    new, old = model.state_dict(), pretrained.state_dict()
    state = {k: v for k, v in old.items() if k in new and new[k].shape == v.shape}
    missing, _ = model.load_state_dict(state, strict=False)
    # new by design: a classification head (or one for another number of classes) and LoRA adapters
    lost = [k for k in missing if not (k.startswith("cls_head.") or "lora_" in k or k in old)]
    if lost:
        raise ConfigError(f"the checkpoint lacks weights the model needs: {lost[:5]}")
    return model, sorted(missing)


def family_of(model):
    """The family name of a model (its config's type decides), for checkpoints."""
    cfg_type = type(raw_model(model).cfg)
    return next(name for name, (cfg_cls, _) in FAMILIES.items() if cfg_type is cfg_cls)


def raw_model(model):
    """The module under a torch.compile wrapper, so saved keys carry no '_orig_mod.' prefix."""
    return getattr(model, "_orig_mod", model)
