# Embedding-normalization study, variant LN: X = LayerNorm(E_tok(t) + E_pos(p)). Everything else is
# the baseline's (run first, below), so the two differ in this one layer.
import pathlib

exec(pathlib.Path(__file__).with_name("shakespeare_char_baseline.py").read_text())
out_dir = "out/shakespeare_char_layernorm"
emb_norm = "layer"
