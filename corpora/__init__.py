"""
What data.py's datasets are made from, kept beside it so that data.py reads as the lesson (datasets into .bin
files, and the batches cut from them): where each source's files come from and how they arrive intact
(sources.py), and the words of the one task whose data this lab makes itself, Pig Latin (piglatin.py). Neither
writes a .bin file, and neither imports data.py: data.py imports them.
"""
