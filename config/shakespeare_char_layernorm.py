# Embedding-normalization study, variant LN: X = LayerNorm(E_tok(t) + E_pos(p)). Everything else is
# the baseline's (run first, below), so the two differ in this one layer.
import os

exec(open(os.path.join(os.path.dirname(__file__), "shakespeare_char_baseline.py")).read())
out_dir = "out/shakespeare_char_layernorm"
emb_norm = "layer"
