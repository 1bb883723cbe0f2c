# Width vs depth, the wide side: a plain 6-layer encoder at width 512 (8 heads, FFN 2048), the source paper's
# planned 512x6 against 384x3x2 (config/sst2_deep_recurrent.py). The recipe is config/sst2_baseline.py's.
# python study.py config/sst2_wide.py config/sst2_deep_recurrent.py --seeds 1 2 3
out_dir = "out/sst2_wide"
protocol = "glue_heldout"  # validation held out by whole sentence (config/sst2_recurrent.py)
select_on = "accuracy"  # the checkpoint of best validation accuracy
n_layer = 6
n_loops = 1
n_embd = 512
n_head = 8
ffn_hidden = 2048
batch_size = 64
learning_rate = 1e-3
scheduler = "cosine"
warmup_iters = 300
min_lr = 1e-5
max_epochs = 1
eval_interval = 500
weight_decay = 0.1
dropout = 0.1
