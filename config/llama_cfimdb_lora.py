# Mini Llama, LoRA (r=4, alpha=1, q and v) on CFIMDB, with LoRA's own learning rate.
import pathlib

exec(pathlib.Path(__file__).with_name("llama_cfimdb_finetune.py").read_text())
out_dir = "out/llama_cfimdb_lora"
lora_rank = 4
lora_alpha = 1.0
lora_targets = "wq,wv"
learning_rate = 1e-2
