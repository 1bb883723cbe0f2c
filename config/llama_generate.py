# Mini Llama, text generation with the KV cache (an evaluate.py config: it sets evaluate.py's options).
# python evaluate.py config/llama_generate.py                 the golden greedy story from stories260K
# python evaluate.py config/llama_generate.py --temperature 1.0 --top_p 0.9 --ckpt out/llama_imdb/ckpt.pt
ckpt = "stories260K"  # a pretrained name, a llama2.c .bin/.pt, or a Llama ckpt.pt trained here
prompt = "Once upon a time"
temperature = 0.0  # greedy; > 0 samples (with top_k, top_p or epsilon to cut the tail)
max_new_tokens = 256
