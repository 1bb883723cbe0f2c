# Control for the recurrent encoder (iso-width): width 256 like config/sst2_recurrent.py, but six layers
# of their own applied once (no weight sharing, no loop), with the recurrent model's recipe and budget.
# Beside sst2_recurrent (3 shared layers x 2 loops) it separates weight sharing from width: the baseline
# differs in both. python train.py config/sst2_w256_6x1.py
out_dir = "out/sst2_w256_6x1"
protocol = "glue_heldout"  # validation held out by whole sentence (config/sst2_recurrent.py)
select_on = "accuracy"  # the checkpoint of best validation accuracy
n_layer = 6
n_loops = 1
n_embd = 256
n_head = 4
ffn_hidden = 1024
batch_size = 64
learning_rate = 1e-3
scheduler = "cosine"
warmup_iters = 300
min_lr = 1e-5
max_epochs = 2  # config/sst2_recurrent.py's budget
eval_interval = 500
weight_decay = 0.1
dropout = 0.1
