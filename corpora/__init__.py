"""
What data.py's datasets are made from, kept beside it so that data.py reads as the lesson (datasets
into .bin files, and the batches cut from them): where each source's files come from and how they
arrive intact (sources.py), and each source's reading and parsing, one module per source, each
returning a dataset's splits and meta.json's dict for data.py to write (sst2.py, imdb.py,
zhang_csv.py, uci.py, shakespeare.py, piglatin.py, minllama.py, mlm.py; classification.py holds what
the GPT-2 BPE sets share, llama2c.py llama2.c's tokenizers and checkpoints by name). None writes a
.bin file, and none imports data.py: data.py imports them.
"""
