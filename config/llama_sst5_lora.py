# Mini Llama, LoRA fine-tuning on SST-5: adapters of rank 4 on the query and value projections
# (alpha = 1, the course's), the classification head trained, everything else frozen. LoRA gets its
# own learning rate: its update is scaled by alpha/r = 0.25 and starts at zero, so it needs a larger
# step than full fine-tuning (the course reused the full fine-tuning rate for LoRA).
import pathlib

exec(pathlib.Path(__file__).with_name("llama_sst5_finetune.py").read_text())
out_dir = "out/llama_sst5_lora"
lora_rank = 4
lora_alpha = 1.0
lora_targets = "wq,wv"
learning_rate = 1e-2
