"""
What train.py and evaluate.py need at run time beside their story: a run's files, its out_dir lock, a stop asked
for by a signal, which configs are the same run, the summary record and the conditions a log holds (records.py),
the checkpoint format (checkpoints.py), the checks of a run's settings, refused or warned of (checks.py), and the
one timing helper with train.py's progress meter and MFU (timing.py). The lesson's files import it, and the tooling
(bench/, lab/, study.py) reads runs and times code with the same helpers. It imports only the lesson's lower files
(configurator.py, model.py), never bench/ or lab/: those import the lesson, not the reverse.
"""
