# Mini Llama, zero-shot sentiment on SST-5 by prompting (an evaluate.py config: it sets evaluate.py's
# options). Each sentence becomes "<text> Is this movie awful, bad, average, good, or excellent? This
# movie is" and the most likely next label word wins. No training.
# python evaluate.py config/llama_sst5_prompt.py [--ckpt out/llama_imdb/ckpt.pt] [--split test]
ckpt = "stories260K"  # a pretrained name, a llama2.c .bin/.pt, or a Llama language model trained here
zero_shot = "sst5"
split = "val"  # the course's dev set, where its reference figures were measured
no_timing = True
