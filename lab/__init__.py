"""
The encoder study's tooling, which study.py drives: what a plan is and how it is checked (plan.py), the runs on
disk and their committed records (runs.py), a cell's rows and data record (cells.py), the statistics over seeds
(stats.py), and the report with its plots (report.py, plots.py). None of it trains or loads a model: train.py
and evaluate.py do, in subprocesses of study.py. Tooling: it imports the lesson's files (train.py, data.py,
bookkeeping/), never bench/ or study.py, and the lesson never imports it.
"""
