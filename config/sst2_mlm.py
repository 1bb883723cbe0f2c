# Masked-language-model pretraining of the recurrent encoder (BERT's objective, Devlin et al. 2019) on
# in-domain text: SST-2's training sentences plus IMDB's train-half reviews, in SST-2's own vocabulary
# (corpora/mlm.py). Then fine-tune on SST-2: python train.py config/sst2_recurrent_pretrained.py
# python train.py config/sst2_mlm.py  [--max_iters=20 for a quick check]
out_dir = "out/sst2_mlm"
dataset = "sst2_mlm"
protocol = "glue_heldout"  # the SST-2 split whose train sentences (and vocabulary) it uses: the fine-tuning run's
# The architecture of config/sst2_recurrent.py, so the fine-tuning run loads every weight.
n_layer = 3
n_loops = 2
loop_alpha = 0.5
n_embd = 256
n_head = 4
ffn_hidden = 1024
# IMDB's train-half reviews run to 231 words (294 tokens) on average; 128 tokens keeps each one's first
# ~100 words (87 % of them are cut) and a batch of reviews half as long as at 256. SST-2's sentences
# all fit (65 tokens at most).
max_len = 128
batch_size = 64
learning_rate = 1e-3
scheduler = "cosine"
warmup_iters = 200
min_lr = 1e-5
weight_decay = 0.1
dropout = 0.1
# The budget is a number of steps: 2,000 x 64 texts is about 1.5 passes over the 87,935 training texts.
max_iters = 2000
max_epochs = 100  # never the limit: max_iters is
eval_interval = 250  # the masked-token loss on the 1,000 held-out texts, masked the same way every time
