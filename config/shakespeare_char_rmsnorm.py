# Embedding-normalization study, variant RMS: X = RMSNorm(E_tok(t) + E_pos(p)). Everything else is
# the baseline's (run first, below).
import os

exec(open(os.path.join(os.path.dirname(__file__), "shakespeare_char_baseline.py")).read())
out_dir = "out/shakespeare_char_rmsnorm"
emb_norm = "rms"
