# Pig Latin transformer with no positions at all: the encoder then sees a bag of characters (its
# self-attention is order-blind) and only the decoder's causal mask orders anything.
import pathlib

exec(pathlib.Path(__file__).with_name("piglatin_transformer.py").read_text())
out_dir = "out/piglatin_transformer_no_pos"
pos = "none"
