# The source paper's protocol, exactly, for the baseline model: GLUE train+dev pooled and split 80/10/10,
# AdamW lr 3e-5, batch 16, grad clip 1.0, ReduceLROnPlateau(factor 0.5, patience 2) on validation
# loss, early stopping (patience 3, min_delta 1e-3), the best-validation checkpoint kept.
# python train.py config/sst2_baseline_paper.py
out_dir = "out/sst2_baseline_paper"
protocol = "standard"
n_layer = 6
n_loops = 1
n_embd = 384
n_head = 6
ffn_hidden = 1536
batch_size = 16
learning_rate = 3e-5
weight_decay = 0.01  # AdamW's usual default; the seed states none
scheduler = "plateau"
plateau_factor = 0.5
plateau_patience = 2
early_stop_patience = 3
early_stop_min_delta = 1e-3
eval_interval = 0  # once per epoch: the source paper's patience counts epochs
max_epochs = 50  # the seed sets no cap; early stopping ends the run
grad_clip = 1.0
dropout = 0.1
