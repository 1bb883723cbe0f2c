"""
Measuring the code rather than teaching it: benchmarks and timing helpers, and the check that a change which
should only move code trains exactly as before (same_training.py).
"""
