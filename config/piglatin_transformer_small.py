# Pig Latin transformer sized to the CPU Mamba's 61 K parameters (width 42, 6 heads of 7, FFN 42:
# 61,866 parameters), for the transformer-vs-Mamba comparison at equal parameters.
import pathlib

exec(pathlib.Path(__file__).with_name("piglatin_transformer.py").read_text())
out_dir = "out/piglatin_transformer_small"
n_embd = 42
n_head = 6
ffn_hidden = 42
