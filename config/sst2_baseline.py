# Standard (non-looped) encoder on SST-2, our tuned settings: 6 layers, width 384 (seed Table 4).
# python train.py config/sst2_baseline.py  [--protocol=standard --out_dir=out/sst2_baseline_standard]
out_dir = "out/sst2_baseline"
protocol = "glue_heldout"  # validation: 872 whole GLUE train sentences held out of training; test: GLUE dev (872).
# 'glue' validates on 5 % of GLUE train's phrases (pieces of training sentences: phrase recall); 'standard' is
# the source paper's pooled 80/10/10 split
select_on = "accuracy"  # the checkpoint kept is the one of best validation accuracy, the figure the study reports
n_layer = 6
n_loops = 1  # plain stack: no cross-iteration residual
n_embd = 384
n_head = 6
ffn_hidden = 1536
# The recipe of config/sst2_recurrent.py (lr, batch, schedule, regularization), so the comparison
# changes only the architecture and holds training compute about equal (see max_epochs).
batch_size = 64
learning_rate = 1e-3
scheduler = "cosine"
warmup_iters = 300
min_lr = 1e-5
max_epochs = 1  # equal training compute: one baseline epoch costs about what two recurrent epochs do
eval_interval = 500
weight_decay = 0.1
dropout = 0.1
