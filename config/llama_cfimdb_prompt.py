# Mini Llama, zero-shot sentiment on CFIMDB by prompting (an evaluate.py config). Our CFIMDB test split
# is the course's dev set: the course's test file has placeholder labels and is never scored.
# python evaluate.py config/llama_cfimdb_prompt.py [--ckpt out/llama_imdb/ckpt.pt]
ckpt = "stories260K"  # a pretrained name, a llama2.c .bin/.pt, or a Llama language model trained here
zero_shot = "cfimdb"
split = "test"  # = the course's dev set
no_timing = True
