# Width vs depth, the deep side: the baseline's width (384, 6 heads, FFN 1536) with 3 shared layers
# applied twice (effective depth 6, half the baseline's weights), against 512x6 (config/sst2_wide.py).
# The recipe is config/sst2_baseline.py's.
out_dir = "out/sst2_deep_recurrent"
protocol = "glue_heldout"  # validation held out by whole sentence (config/sst2_recurrent.py)
select_on = "accuracy"  # the checkpoint of best validation accuracy
n_layer = 3
n_loops = 2
loop_alpha = 0.5
n_embd = 384
n_head = 6
ffn_hidden = 1536
batch_size = 64
learning_rate = 1e-3
scheduler = "cosine"
warmup_iters = 300
min_lr = 1e-5
max_epochs = 1
eval_interval = 500
weight_decay = 0.1
dropout = 0.1
