"""
llama2.c's released files, read by name: its tokenizers (tok512, stories260K's 512 pieces; llama2,
Llama 2's 32,000) and the checkpoints a run may start from (stories260K). Their sources, URLs and
sha256 are in sources.py; this module maps each name to its file and returns the path or a
LlamaTokenizer. minllama.py and imdb.py tokenize SST-5, CFIMDB and the IMDB LM corpus with these, and
evaluate.text_encoder encodes a Llama run's texts with them.
"""

import os

from corpora.sources import source_file
from tokenizer import DataError, LlamaTokenizer

LLAMA_TOKENIZERS = {  # name -> (source, file): the tokenizers of llama2.c's models
    "tok512": ("tok512", "tinyllamas/stories260K/tok512.bin"),  # stories260K's 512 pieces
    "llama2": ("llama2_tokenizer", "llama2_tokenizer/tokenizer.bin"),  # Llama 2's 32,000 (stories15M/42M/110M)
}


PRETRAINED = {  # name -> (source, file): checkpoints a run may start from by name (init_from)
    "stories260K": ("stories260K", "tinyllamas/stories260K/stories260K.bin"),
}


def pretrained_file(name, mirror=None):
    """The path of a named pretrained checkpoint (PRETRAINED), from the mirror or downloaded and checked."""
    source, rel = PRETRAINED[name]
    return source_file(source, rel, mirror or os.environ.get("DATA_MIRROR"))


def load_llama_tokenizer(name, mirror=None):
    """A LlamaTokenizer by name (LLAMA_TOKENIZERS: from the mirror, $DATA_MIRROR, or downloaded once
    and checked) or from the path of a tokenizer.bin."""
    if name in LLAMA_TOKENIZERS:
        source, rel = LLAMA_TOKENIZERS[name]
        return LlamaTokenizer.from_file(source_file(source, rel, mirror or os.environ.get("DATA_MIRROR")))
    if not os.path.isfile(name):
        raise DataError(f"tokenizer {name!r}: expected one of {sorted(LLAMA_TOKENIZERS)} or a tokenizer.bin file")
    return LlamaTokenizer.from_file(name)
