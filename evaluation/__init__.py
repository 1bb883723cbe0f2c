"""
evaluate.py's own package, what it needs beside what it computes: its options, declared with their help, checked
together and against each checkpoint, and what they name read (options.py), with the option types that state their
range and the check that holds values to them (ranges.py, which bench/speed.py's command line uses too); then what
it computed, made readable: the table its command line prints (table.py), a seq2seq model's pictures
(seq2seq_plots.py, where matplotlib is imported), and where a Pig Latin model fails (piglatin_errors.py: `python
-m evaluation.piglatin_errors` reads a study's committed predictions; its accuracy_by groups evaluate.py's seq2seq
figures by rule too). The tables and pictures are handed the results; nothing here imports evaluate.py (which
imports this package), bench/ or lab/.
"""
