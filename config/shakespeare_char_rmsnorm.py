# Embedding-normalization study, variant RMS: X = RMSNorm(E_tok(t) + E_pos(p)). Everything else is
# the baseline's (run first, below).
import pathlib

exec(pathlib.Path(__file__).with_name("shakespeare_char_baseline.py").read_text())
out_dir = "out/shakespeare_char_rmsnorm"
emb_norm = "rms"
