# Mini Llama, full fine-tuning on CFIMDB (binary, long reviews), from stories260K. Reviews are cut to
# the model's context of 512 tok512 tokens (about half of them are longer). The course's recipe:
# 5 epochs, batch 10, lr 2e-5 on stories42M; here lr 1e-3 for the 260 K-parameter model.
import pathlib

exec(pathlib.Path(__file__).with_name("llama_sst5_finetune.py").read_text())
dataset = "cfimdb"
out_dir = "out/llama_cfimdb_finetune"
max_len = 512  # stories260K's context
batch_size = 10  # the course's
warmup_iters = 30
