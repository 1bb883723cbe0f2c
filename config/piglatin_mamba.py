# Pig Latin with a decoder-only Mamba over "word [EOS] [SOS] translation [EOS]", scored on the
# translation. The write-up's training recipe (batch 128, lr 3e-3, 100 epochs) with its best
# discretization, bilinear. Mamba's own block sizes (expand 2, d_conv 4) at width 64, 2 layers;
# d_state 8 (Mamba's default is 16) halves the cost of the scan on a CPU: 61,248 parameters.
# python train.py config/piglatin_mamba.py     (10 to 20 s an epoch on one CPU core: the CPU study ran 15 and 50)
dataset = "piglatin"
model = "mamba"
out_dir = "out/piglatin_mamba"
n_layer = 2
n_embd = 64
d_state = 8
discretization = "bilinear"  # the write-up: bilinear 0.833 vs ZOH 0.654 (one seed each)
scan = "sequential"  # at these lengths (< 45) the loop is the fastest scan on a CPU (python -m bench.kernel_speed scan)
scan_chunk = 8  # the loop 8 steps at a time, each chunk's forward and hand-written backward compiled: a training
scan_compile = True  # step 3.6x faster than the loop over every state (0.18 s vs 0.66 s, one quiet CPU core)
dropout = 0.0
batch_size = 128
learning_rate = 3e-3
weight_decay = 0.01
scheduler = "cosine"
warmup_iters = 100
max_epochs = 100
early_stop_patience = 0
eval_interval = 215  # every 5 epochs (greedy decoding of the validation words is a full pass per character)
log_interval = 43
