"""
What the commands say about themselves, kept beside the lesson so that train.py and configurator.py read as the
training and the config they are: every command's --help (help.py: argparse's help with each option's default,
and train.py's settings described from their own source, with the config files). train.py imports it for its
help; data.py, export.py, evaluation/ and the tooling import help.py's HelpFormatter. It imports only
configurator.py (never bench/ or lab/), and is handed what it describes: train.py's source and defaults, model.py's
families.
"""
