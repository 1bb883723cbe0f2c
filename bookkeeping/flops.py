"""
The analytic FLOPs of a model's forward pass, family by family: what the MFU of train.py's progress lines,
the study's FLOPs per sample (evaluate.py) and the benchmarks read. They count the maths model.py writes out,
and a reader of the models may take them by their name, so they live here, beside the timing they serve.
Matrix multiplies only, 2 per multiply-add (torch.utils.flop_counter.FlopCounterMode's convention, which the
tests hold these counts to); norms, softmax, activations, embedding look-ups and the scan's elementwise
multiply-adds are left out.

    block_flops(cfg, T, cross_len, queries)        one Block: projections, attention, feed-forward, cross-attention
    mamba_flops(cfg, T)                            one Block whose token mixer is Mamba's
    forward_flops(model, seq_len, batch_size, ...) a model's forward pass, by its family (FAMILY_FLOPS)
    step_flops(model, micro_batches, task)         a training step's, the MFU's numerator (train.py's meter)
"""

from model import family_of, raw_model


def block_flops(cfg, T, cross_len=0, queries=None):
    """Forward FLOPs of one Block on T positions computing Q = T (or `queries`, as Block.forward): projections
    2*C*(Q*2*C + T*2*C_kv), QK^T and AV 2*2*Q*T*C (the full Q x T, causal or not, as both paths compute it),
    FFN 2*Q*C*F*(3 SwiGLU, 2 GELU), a cross-attention over cross_len states 2*T*C*2*C + 2*cross_len*C*2*C +
    2*2*T*cross_len*C; a Mamba mixer: mamba_flops."""
    if getattr(cfg, "mixer", "attention") == "mamba":
        return mamba_flops(cfg, T)
    C = cfg.n_embd
    Q = T if queries is None else queries
    c_kv = cfg.n_kv_head * (C // cfg.n_head)
    proj = 2 * C * (Q * 2 * C + T * 2 * c_kv)
    attn = 2 * 2 * Q * T * C
    ffn = 2 * Q * C * cfg.ffn_hidden * (3 if cfg.ffn == "swiglu" else 2)
    cross = (2 * T * C * 2 * C + 2 * cross_len * C * 2 * C + 2 * 2 * T * cross_len * C) if cross_len else 0
    return proj + attn + ffn + cross


def mamba_flops(cfg, T):
    """Forward FLOPs of one Mamba Block on T tokens: its projections (in 2*C*2D, x 2*D*(R+2N), dt 2*R*D,
    out 2*D*C), the depthwise convolution 2*D*d_conv, and the readout C_t h_t, 2*D*N, per token. The
    discretization and the scan's elementwise multiply-adds (about 2*D*N per token more) are left out,
    as norms and softmax are for attention."""
    C, D, N, R = cfg.n_embd, cfg.d_inner, cfg.d_state, cfg.dt_rank
    return 2 * T * (C * 2 * D + D * cfg.d_conv + D * (R + 2 * N) + R * D + D * C + D * N)


def stack_flops(m, T, queries=None):
    """The Blocks a token model applies: all on every position but the last, which computes `queries`."""
    return block_flops(m.cfg, T) * (m.depth - 1) + block_flops(m.cfg, T, queries=queries)


def lm_head_flops(m, T):
    """A language model's head: logits over the vocabulary at every position."""
    return 2 * T * m.cfg.n_embd * m.cfg.vocab_size


def encoder_flops(m, T, batch_size, masked=0):
    """The encoder classifier: with [CLS] pooling the last Block computes [CLS] alone (last_queries) and the
    classifier reads one pooled vector; the MLM head scores `masked` positions a sequence (a batch's mean may
    be fractional) against the vocabulary: 6.3 MFLOPs a masked token for the recurrent model on SST-2."""
    cfg = m.cfg
    head = 2 * masked * cfg.n_embd * cfg.vocab_size if masked else 2 * cfg.n_embd * cfg.n_classes
    return batch_size * (stack_flops(m, T, m.last_queries(masked)) + head)


def gpt_flops(m, T, batch_size):
    return batch_size * (stack_flops(m, T) + lm_head_flops(m, T))


def llama_flops(m, T, batch_size):
    """A language model's head, or a classifier's (cls_head: one vector a sequence)."""
    head = 2 * m.cfg.n_embd * m.cfg.n_classes if m.cls_head is not None else lm_head_flops(m, T)
    return batch_size * (stack_flops(m, T) + head)


def encdec_flops(m, T, batch_size):
    """Encoder on a source of T, decoder on a target of T reading it, and the head."""
    enc = block_flops(m.cfg, T) * m.cfg.n_layer
    dec = block_flops(m.cfg, T, cross_len=T) * m.cfg.n_dec_layer
    return batch_size * (enc + dec + lm_head_flops(m, T))


def mamba_model_flops(m, T, batch_size, src_tokens=0):
    """A language model's count, and with the bidirectional pass every layer's mixer again over the batch's
    src_tokens source tokens (bookkeeping/timing.py's step_flops counts them from the batch)."""
    back = m.depth * mamba_flops(m.cfg, src_tokens) if m.cfg.bidirectional else 0
    return batch_size * (stack_flops(m, T) + lm_head_flops(m, T)) + back


def bow_flops(m, T, batch_size):
    """x W as the sparse product it is: one multiply-add per class for each feature occurrence of a sequence of
    T tokens, [CLS] included: T - 1 unigrams and T - n n-grams of each order n. Hashing, counting and
    normalizing are left out, as norms and softmax are for the transformers."""
    occurrences = sum(max(0, T - n) for n in range(1, m.cfg.ngrams + 1))
    return batch_size * 2 * occurrences * m.cfg.n_classes


FAMILY_FLOPS = {"encoder": encoder_flops, "gpt": gpt_flops, "llama": llama_flops, "encdec": encdec_flops,
                "mamba": mamba_model_flops, "bow": bow_flops}


def forward_flops(model, seq_len, batch_size=1, **head):
    """Analytic forward FLOPs of `model` (a module of a family in model.FAMILIES, compiled or not) for a batch
    of batch_size sequences of length seq_len. `head`: what its family's count takes besides (the encoder's
    masked=k, a bidirectional Mamba's src_tokens=n)."""
    m = raw_model(model)
    return FAMILY_FLOPS[family_of(m)](m, seq_len, batch_size, **head)


def step_flops(model, micro_batches, task):
    """Training FLOPs of one step: 3x the analytic forward FLOPs (the backward pass costs about twice the
    forward) of each micro-batch of token ids `idx` (B, T) at its padded length, as its task counts them: a
    seq2seq batch adds its source tokens (src_len), and the masked LM's head scores only the masked positions
    (its micro-batch's count is its masked tokens). Other inputs count 0, and so does a micro-batch of 0
    examples (a DDP process's stand-in)."""
    def head(x, n):
        if task == "mlm":
            return {"masked": n / x["idx"].size(0)}
        return {"src_tokens": int(x["src_len"].sum())} if "src_len" in x else {}

    return float(sum(3 * forward_flops(model, x["idx"].size(1), x["idx"].size(0), **head(x, n))
                     for x, n, _ in micro_batches if "idx" in x and n))
