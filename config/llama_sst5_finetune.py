# Mini Llama, full fine-tuning with a classification head on SST-5 (5 classes), from llama2.c's
# stories260K (its 512-token tokenizer). The course's recipe is 5 epochs, batch 80, lr 2e-5 on the
# 42 M-parameter stories42M; this 260 K-parameter model needs a larger step (lr 1e-3).
# python train.py config/llama_sst5_finetune.py   then   python evaluate.py --ckpt out/llama_sst5_finetune/ckpt.pt
model = "llama"
dataset = "sst5"
tokenizer = "tok512"  # stories260K's own; 'llama2' (32,000) goes with stories15M/42M/110M
init_from = "stories260K"  # or a path to a llama2.c .bin/.pt or a ckpt.pt of ours
out_dir = "out/llama_sst5_finetune"
max_len = 256  # SST-5's longest sentence is 199 tok512 tokens: nothing is cut
dropout = 0.1  # on the pooled state before the head, and in the blocks
batch_size = 80  # the course's
max_epochs = 5  # the course's
learning_rate = 1e-3
scheduler = "cosine"  # decay over the 5 epochs
warmup_iters = 20
min_lr = 1e-5
weight_decay = 0.01
eval_interval = 0  # once per epoch; ckpt.pt keeps the best validation loss
early_stop_patience = 0  # all 5 epochs, as the course
log_interval = 25
