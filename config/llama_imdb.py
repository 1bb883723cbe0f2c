# Mini Llama, pretrained from scratch on movie reviews: a language model with stories260K's shape (5 layers,
# width 64, 8 query and 4 key/value heads, SwiGLU 172, tok512's 512 tokens; 260 K parameters) on IMDB's
# 24,500 test-half reviews (corpora/imdb.py's build_imdb_lm says why not the train half), so the
# sentiment runs can start from a model trained here as well as from stories260K (trained by llama2.c on
# TinyStories).
# python train.py config/llama_imdb.py
# python evaluate.py config/llama_generate.py --ckpt out/llama_imdb/ckpt.pt --prompt "This movie"
model = "llama"
dataset = "imdb_lm"
tokenizer = "tok512"  # stories260K's: the two checkpoints read the same ids
out_dir = "out/llama_imdb"
block_size = 256  # the sentiment runs read at most 256 tokens (stories260K was trained with 512)
n_layer = 5
n_embd = 64
n_head = 8
n_kv_head = 4  # grouped-query attention, as stories260K
multiple_of = 4  # SwiGLU width round_up(2/3 * 4 * 64, 4) = 172, as stories260K
dropout = 0.0  # one pass over a fraction of 18 M tokens: nothing to regularize
batch_size = 32  # 8,192 tokens a step
max_iters = 600  # 4.9 M tokens, a quarter of the corpus: what one CPU core trains in about half an hour
learning_rate = 3e-3  # a 260 K-parameter model takes a large step
scheduler = "cosine"
warmup_iters = 30
min_lr = 3e-4
beta2 = 0.99
weight_decay = 0.1
eval_interval = 100
eval_windows = 256  # 65,536 validation tokens, the same windows at every evaluation and for every run
log_interval = 25
early_stop_patience = 0  # a fixed budget
