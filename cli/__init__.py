"""
What the command lines are given, apart from what they compute: option types that state their range and the
check that holds values to them (options.py, for evaluate.py and bench/speed.py), then evaluate.py's options,
checked together and against each checkpoint, and what they name read (evaluate_options.py).
"""
