"""
What evaluate.py computed, made readable: the table its command line prints, the checkpoints side by side with
each task's lines beneath (table.py), and a seq2seq model's pictures (seq2seq_plots.py, where matplotlib is
imported). Nothing here runs a model or imports evaluate.py: it is handed the results.
"""
