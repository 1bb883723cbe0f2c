"""
Measuring the code rather than teaching it: the benchmarks (speed.py against other implementations,
kernel_speed.py for kernels.py's kernels, gpu_check.py with its sections), and the check that a change which should
only move code trains exactly as before (same_training.py). Tooling: it imports the lesson's files (and
bookkeeping/timing.py, the one timing helper), never lab/ or study.py, and the lesson never imports it.
"""
