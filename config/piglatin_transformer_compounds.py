# Pig Latin transformer trained with hyphenated compounds of its own training words added (train.py's
# hyphen_compounds, corpora/piglatin.py's hyphen_compounds): two or three plain training words joined by hyphens, source to
# source and translation to translation. The novel's 138 hyphenated training words are too few for the model
# to learn that a compound is translated part by part (the base setting: 0.44 on hyphenated test words); the
# compounds teach it from data, with no rule in the decoding. Everything else is the base setting's, at the
# same number of steps. Off in the write-up's replication runs (hyphen_compounds = 0 by default).
import pathlib

exec(pathlib.Path(__file__).with_name("piglatin_transformer.py").read_text())
out_dir = "out/piglatin_transformer_compounds"
hyphen_compounds = 0.25  # 1,366 compounds beside the 5,465 training words: a fifth of the training set
max_iters = 4300  # the base run's 100 epochs of 43 steps: equal compute (here about 81 epochs of 53 steps)
