# The char-level GPT at nanoGPT's shakespeare_char scale: 6 layers, width 384, 6 heads, context 256,
# dropout 0.2 (10.7 M parameters). Target: validation loss <= 1.47 (nanoGPT reports 1.4697 after
# 5,000 iterations with these settings). A GPU job: 5.8e15 FLOPs in all (forward + backward), about
# 3 minutes on an A100 by nanoGPT's account, but some 30 hours on a 2-core CPU.
# python train.py config/shakespeare_char.py  then  python evaluate.py --ckpt out/shakespeare_char/ckpt.pt
dataset = "shakespeare_char"
model = "gpt"  # the causal LM of model.py (GPTConfig: its settings and defaults)
out_dir = "out/shakespeare_char"
block_size = 256
n_layer = 6
n_embd = 384
n_head = 6
ffn = "gelu"
ffn_hidden = 0  # 4 * 384
norm = "layer"
pos = "learned"
emb_norm = "none"
bias = False
dropout = 0.2  # the model sees each character ~80 times in 5,000 steps: it overfits without it
batch_size = 64
learning_rate = 1e-3  # nanoGPT's: small models tolerate a large lr
max_iters = 5000
scheduler = "cosine"  # over a full budget the decay pays off (unlike the 300-step study)
warmup_iters = 100
min_lr = 1e-4  # learning_rate / 10, as nanoGPT (Chinchilla's advice)
beta2 = 0.99  # few tokens per step, so a shorter second-moment memory
weight_decay = 0.1
grad_clip = 1.0
eval_interval = 250  # on all 111,540 validation characters (435 windows of 256); ckpt.pt keeps the best
log_interval = 50
early_stop_patience = 0  # the full 5,000 steps, as nanoGPT; the best checkpoint guards against late overfitting
