# config/sst2_recurrent.py, started from the encoder pretrained by masked-language modelling
# (config/sst2_mlm.py): the same settings, so the two runs differ only in where the weights start.
# python train.py config/sst2_mlm.py && python train.py config/sst2_recurrent_pretrained.py
out_dir = "out/sst2_recurrent_pretrained"
init_from = "out/sst2_mlm/ckpt.pt"  # its best checkpoint (lowest masked-token loss on val)
protocol = "glue_heldout"  # validation held out by whole sentence; test = GLUE dev (872); the MLM corpus was built
# from this protocol's train split
select_on = "accuracy"  # the checkpoint of best validation accuracy
n_layer = 3
n_loops = 2  # effective depth 6, same as the baseline
loop_alpha = 0.5  # the source paper's cross-iteration residual
n_embd = 256
n_head = 4
ffn_hidden = 1024
batch_size = 64
learning_rate = 1e-3
scheduler = "cosine"
warmup_iters = 300  # ~0.3 epoch of linear warm-up keeps the first steps stable
min_lr = 1e-5
max_epochs = 2  # the budget of config/sst2_recurrent.py, for a like-for-like comparison
eval_interval = 500  # evaluate twice per epoch: early stopping and model selection see finer steps
weight_decay = 0.1
dropout = 0.1
