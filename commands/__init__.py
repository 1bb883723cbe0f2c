"""
What the commands say about themselves and about the settings they are given, kept beside the lesson so that
train.py and configurator.py read as the training and the config they are: every command's --help (help.py:
argparse's help with each option's default, and train.py's settings described from their own source, with the
config files), and train.py's checks of a run's settings, the refusals before any work and the warnings once the
run's length is known (checks.py). train.py imports both; data.py, export.py, evaluation/ and the tooling import
help.py's HelpFormatter. It imports only configurator.py and bookkeeping/ (never bench/ or lab/), and is handed
what it describes or checks against: train.py's source and defaults, model.py's families, data.py's pretrained
names.
"""
