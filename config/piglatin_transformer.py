# Pig Latin with the encoder-decoder transformer: the write-up's best small setting ("Beast Small":
# 2 encoder + 2 decoder layers, width 64, 8 heads, trainable sinusoidal positions, cosine schedule,
# weight decay 0.01, batch 128, lr 3e-3, 100 epochs). 139,328 parameters (the write-up: 143 K).
# python train.py config/piglatin_transformer.py        (6.5 to 12 min on one CPU core; test word accuracy 0.977)
dataset = "piglatin"  # prepared into data/piglatin on first use (words of Pride and Prejudice)
model = "encdec"
out_dir = "out/piglatin_transformer"
n_layer = 2  # encoder layers; the decoder has as many (n_dec_layer = 0)
n_embd = 64
n_head = 8  # the write-up's best of 4 / 8 / 16
ffn_hidden = 64  # 1x the width keeps the model at the write-up's size (4x would be 238 K parameters)
pos = "sinusoidal"
train_pos = True  # the write-up's finding: trained positions 0.962 vs frozen 0.576
dropout = 0.1
batch_size = 128
learning_rate = 3e-3  # the write-up's; at 1e-3 the first 30 epochs learn far more slowly
weight_decay = 0.01
scheduler = "cosine"  # the write-up moved from plateau to cosine annealing
warmup_iters = 100
max_epochs = 100  # 43 steps an epoch: 4,300 steps
early_stop_patience = 0  # the same budget for every run of a comparison
eval_interval = 215  # every 5 epochs: each evaluation also translates the validation words greedily
log_interval = 215
