"""
Datasets and batches: the `.bin` token files of a prepared dataset, written and read back; the
registry of datasets and the `prepare` that writes any of them; and the batches that train.py and
evaluate.py cut from a prepared folder and feed to a model.

    python data.py sst2 [--protocol glue_heldout|glue|standard] [--vocab compact|full] [--subset frac10]
    python data.py shakespeare_char [--mirror DIR] [--out_dir DIR]
    python data.py --help                     # every dataset: imdb, multidomain_uci, sst5, piglatin, ...

The .bin format (one array per file, memory-mappable):
    header, 32 bytes little-endian: magic b"TLABBIN\\0" | version u32 | dtype code u32 | count u64 |
                                    crc32 of the payload u32 | 4 reserved bytes
    payload: `count` items of the dtype
A classification split `S` is three such files: S.bin (all token ids, concatenated), S_offsets.bin
(int64, len n+1: sequence i is tokens[offsets[i]:offsets[i+1]]) and S_labels.bin (int64), plus one
meta.json for the folder. A language-modelling split S is one file S.bin of token ids (uint16). A
seq2seq split S is S_src.bin and S_tgt.bin with their S_src_offsets.bin and S_tgt_offsets.bin. A
masked-language-model split is a classification split whose labels are all 0.

Text becomes token ids by tokenizer.py's functions, the same in preparation and at inference. Each
source's download (corpora/sources.py: canonical URL and sha256, downloaded once or read from a mirror)
and parsing is its own module of corpora/, which hands `prepare` a dataset's splits and meta.json's dict
and never imports this file.

Read top to bottom: the .bin format and the splits written in it -> the registry (SST-2's builder,
DATASETS: name -> builder and task), `prepare` and `load_dataset` -> batch streams (one per task;
each batch a pure function of the seed and its position, so a resumed run sees exactly the batches
it would have seen; `training_stream` picks a run's) -> the command line.
"""

import argparse
import json
import math
import os
import shutil
import struct
import sys
import tempfile
import zlib
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from bookkeeping.timing import write_json  # noqa: F401 (data.write_json, the JSON files everyone writes)
from cli.help import HelpFormatter, reader_may_stop
from configurator import UserError, not_a_folder
from corpora.classification import SUBSETS, classification_set, subset_splits
from corpora.imdb import build_imdb, build_imdb_lm
from corpora.llama2c import PRETRAINED, pretrained_file  # noqa: F401 (train.py's data.PRETRAINED)
from corpora.minllama import build_minllama
from corpora.mlm import MASK, mlm_corpus
from corpora.piglatin import EOS, PIG_LATIN_VOCAB, SOS, build_piglatin, mark_taught, seq2seq_with_compounds
from corpora.shakespeare import build_shakespeare_char
from corpora.sources import SOURCES
from corpora.sst2 import PROTOCOLS, sst2_splits
from corpora.uci import build_multidomain_uci
from corpora.zhang_csv import build_multidomain, build_yelp_polarity
from tokenizer import CLS, N_SPECIAL, PAD, UNK, DataError  # noqa: F401 (data.CLS, data.UNK)

# -----------------------------------------------------------------------------
# The .bin array format

MAGIC = b"TLABBIN\0"
VERSION = 1
HEADER = struct.Struct("<8sIIQI4x")  # 32 bytes
DTYPES = {1: np.uint16, 2: np.uint32, 3: np.int64}
DTYPE_CODES = {np.dtype(v): k for k, v in DTYPES.items()}


def write_bin(path, array):
    """Write one 1-D array with its header, atomically (temporary file, then rename)."""
    a = np.ascontiguousarray(array)
    if a.ndim != 1 or a.dtype not in DTYPE_CODES:
        raise ValueError(f"write_bin takes a 1-D array of {list(DTYPE_CODES)}, got {a.dtype} {a.shape}")
    payload = a.tobytes()
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(HEADER.pack(MAGIC, VERSION, DTYPE_CODES[a.dtype], a.size, zlib.crc32(payload)))
        f.write(payload)
    os.replace(tmp, path)


def read_bin(path, verify=True):
    """Memory-map an array written by write_bin, after checking magic, version, dtype, size and
    (with verify=True) the payload's crc32. Any mismatch raises DataError naming the fix."""
    fix = "delete the folder and run `python data.py ...` again to rebuild it"
    if not os.path.isfile(path):
        raise DataError(f"missing data file {path}: prepare the dataset with `python data.py ...`")
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(HEADER.size)
    if len(raw) < HEADER.size:
        raise DataError(f"{path} is too short to be a .bin file ({size} bytes); {fix}")
    magic, version, code, count, crc = HEADER.unpack(raw)
    if magic != MAGIC:
        raise DataError(f"{path} is not a .bin token file of this project (bad magic); {fix}")
    if version != VERSION:
        raise DataError(f"{path} has format version {version}, this code reads {VERSION}; {fix}")
    if code not in DTYPES:
        raise DataError(f"{path} has unknown dtype code {code}; {fix}")
    dtype = np.dtype(DTYPES[code])
    if size != HEADER.size + count * dtype.itemsize:
        raise DataError(f"{path} holds {size} bytes but its header promises {count} x {dtype} "
                        f"(truncated or corrupt); {fix}")
    arr = np.memmap(path, dtype=dtype, mode="r", offset=HEADER.size, shape=(count,)) if count else np.zeros(0, dtype)
    if verify and zlib.crc32(arr.tobytes() if count else b"") != crc:
        raise DataError(f"{path} fails its checksum (corrupt); {fix}")
    return arr


def write_seqs(folder, name, seqs, dtype):
    """Sequences of ids as name.bin (concatenated, in `dtype`) and name_offsets.bin (int64, n + 1)."""
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(s) for s in seqs])
    write_bin(os.path.join(folder, f"{name}.bin"), np.concatenate(seqs).astype(dtype) if seqs else np.zeros(0, dtype))
    write_bin(os.path.join(folder, f"{name}_offsets.bin"), offsets)


def read_seqs(folder, name, verify):
    """What write_seqs wrote: the tokens (memory-mapped) and the offsets (small: copied into memory)."""
    return (read_bin(os.path.join(folder, f"{name}.bin"), verify),
            np.array(read_bin(os.path.join(folder, f"{name}_offsets.bin"), verify)))


def write_meta(folder, meta):
    """meta.json, written last: its presence means the folder is complete."""
    write_json(os.path.join(folder, "meta.json"), meta)


def load_meta(folder):
    path = os.path.join(folder, "meta.json")
    if not os.path.isfile(path):
        raise DataError(f"no prepared dataset in {folder} (meta.json missing): run `python data.py ...`")
    with open(path) as f:
        return json.load(f)


# -----------------------------------------------------------------------------
# The splits of a prepared folder, read back: one class per task's files (a masked-language-model corpus is
# read as a ClassificationSplit)


class ClassificationSplit:
    """One split read back from disk: len(split), split[i] -> (token ids, label)."""

    def __init__(self, folder, split, verify=True):
        self.tokens, self.offsets = read_seqs(folder, split, verify)
        self.labels = np.array(read_bin(os.path.join(folder, f"{split}_labels.bin"), verify))
        ends = len(self.offsets) and self.offsets[-1] != len(self.tokens)
        if len(self.offsets) != len(self.labels) + 1 or ends:
            raise DataError(f"{folder}: {split} offsets, labels and tokens disagree; rebuild with "
                            f"python data.py")
        self.lengths = np.diff(self.offsets)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        ids = self.tokens[self.offsets[i]:self.offsets[i + 1]]
        return np.asarray(ids, dtype=np.int64), int(self.labels[i])


def write_split(folder, split, seqs, labels, dtype):
    write_seqs(folder, split, seqs, dtype)
    write_bin(os.path.join(folder, f"{split}_labels.bin"), np.asarray(labels, dtype=np.int64))


class TokenSplit:
    """A language-modelling split read back from disk: one long uint16 array of token ids."""

    def __init__(self, folder, split, verify=True):
        self.tokens = read_bin(os.path.join(folder, f"{split}.bin"), verify)

    def __len__(self):
        return len(self.tokens)


class PairSplit:
    """A seq2seq split read back from disk: len(split), split[i] -> (source ids, target ids) without
    special tokens; `lengths` are the source lengths (for batching by length); `vocab` the characters
    the ids index (the folder's meta.json)."""

    def __init__(self, folder, split, verify=True):
        self.vocab = load_meta(folder).get("vocab")
        self.src, self.src_offsets = read_seqs(folder, f"{split}_src", verify)
        self.tgt, self.tgt_offsets = read_seqs(folder, f"{split}_tgt", verify)
        if (len(self.src_offsets) != len(self.tgt_offsets) or self.src_offsets[-1] != len(self.src)
                or self.tgt_offsets[-1] != len(self.tgt)):
            raise DataError(f"{folder}: {split} sources, targets and offsets disagree; rebuild with python data.py")
        self.lengths = np.diff(self.src_offsets)

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, i):
        src = np.asarray(self.src[self.src_offsets[i]:self.src_offsets[i + 1]], dtype=np.int64)
        return src, np.asarray(self.tgt[self.tgt_offsets[i]:self.tgt_offsets[i + 1]], dtype=np.int64)


# -----------------------------------------------------------------------------
# The dataset registry: each name has a builder and a task. A builder reads the source and tokenizes
# it: SST-2's are here (the study's own dataset, and the encoder's MLM corpus in its ids), the others'
# in corpora/; `prepare` writes what it returns. The task says how the prepared folder is read (which
# splits, which files) and which batch stream and evaluator a run uses.


def build_sst2(protocol="glue_heldout", vocab="compact", max_len=256, subset="", mirror=None,
               out_dir=None, seed=1337, verbose=True, **_ignored):
    """SST-2's split under a protocol (corpora/sst2.py), cut to a subset, in GPT-2 BPE ids:
    ({split: (ids, labels)}, meta.json's dict), for `prepare` to write."""
    splits = subset_splits(sst2_splits(protocol, seed, mirror), subset, seed)
    return classification_set(splits, ["negative", "positive"], vocab, max_len, out_dir, verbose,
                              dataset="sst2", protocol=protocol, seed=seed, subset=subset,
                              sources=SOURCES["sst2"])


def build_sst2_mlm(protocol, vocab, mirror=None, seed=1337, verbose=True, **settings):
    """The encoder's MLM corpus (corpora/mlm.py) in the ids of the SST-2 folder of the same protocol and
    vocab, prepared first if missing: a checkpoint pretrained on it fine-tunes on SST-2 as it is."""
    sst2_dir = dataset_dir("sst2", protocol, vocab)
    if not os.path.isfile(os.path.join(sst2_dir, "meta.json")):
        prepare("sst2", protocol=protocol, vocab=vocab, mirror=mirror, out_dir=sst2_dir, seed=seed,
                verbose=verbose)
    return mlm_corpus(load_meta(sst2_dir), sst2_dir, protocol=protocol, vocab=vocab, mirror=mirror,
                      seed=seed, verbose=verbose, **settings)


@dataclass(frozen=True)
class DatasetSpec:
    build: Callable  # (settings as keywords) -> ({split: its ids}, meta.json's dict), unwritten
    task: str  # 'classification' | 'lm' | 'seq2seq' | 'mlm'
    variant: tuple = ()  # the settings that name its folder: data/<name>[_<setting>...]
    tokenizers: tuple = ("",)  # the values `tokenizer` may take ('' = the dataset's own; the first is the default)
    subsets: bool = False  # takes `subset` (SUBSETS); its folder name then holds the subset and a max_len not 256


DATASETS = {
    "sst2": DatasetSpec(build_sst2, "classification", ("protocol", "vocab"), subsets=True),  # GPT-2 BPE
    "imdb": DatasetSpec(build_imdb, "classification", ("vocab",), subsets=True),  # long movie reviews
    "yelp_polarity": DatasetSpec(build_yelp_polarity, "classification", ("vocab",), subsets=True),
    "multidomain": DatasetSpec(build_multidomain, "classification", ("vocab",), subsets=True),  # 3 domains
    "multidomain_uci": DatasetSpec(build_multidomain_uci, "classification", ("vocab",), subsets=True),
    "shakespeare_char": DatasetSpec(build_shakespeare_char, "lm"),  # characters
    "sst5": DatasetSpec(lambda **kw: build_minllama("sst5", **kw), "classification", ("tokenizer",),
                        ("llama2", "tok512")),
    "cfimdb": DatasetSpec(lambda **kw: build_minllama("cfimdb", **kw), "classification", ("tokenizer",),
                          ("llama2", "tok512")),
    "imdb_lm": DatasetSpec(build_imdb_lm, "lm", ("tokenizer",), ("tok512", "llama2")),  # Llama pretraining
    "piglatin": DatasetSpec(build_piglatin, "seq2seq"),  # word -> Pig Latin, characters
    "sst2_mlm": DatasetSpec(build_sst2_mlm, "mlm", ("protocol", "vocab")),  # the encoder's MLM pretraining
}
TASK_SPLITS = {"classification": (ClassificationSplit, ("train", "val", "test")), "lm": (TokenSplit, ("train", "val")),
               "seq2seq": (PairSplit, ("train", "val", "test")), "mlm": (ClassificationSplit, ("train", "val"))}
EXTRA_SPLITS = {"seq2seq": ("unseen",)}  # read when the folder has them (Pig Latin's words from outside the novel;
# a folder prepared before it was added lacks it)


DEFAULT_MAX_LEN = 256  # the study's truncation; a folder prepared with another says so in its name


def dataset_dir(dataset, protocol=None, vocab=None, tokenizer=None, subset="", max_len=None):
    """Where a dataset is prepared by default: data/<dataset>, then the settings of its variant, then (with
    subsets) the subset and a max_len other than 256: data/sst2_glue_compact_frac10, data/sst5_llama2."""
    spec = DATASETS.get(dataset)
    settings = {"protocol": protocol, "vocab": vocab, "tokenizer": tokenizer}
    variant = spec.variant if spec is not None else ("protocol", "vocab")
    parts = [dataset, *(str(settings[k]) for k in variant)]
    if spec is not None and spec.subsets:
        parts += [subset] if subset else []
        parts += [f"len{max_len}"] if max_len and max_len != DEFAULT_MAX_LEN else []
    return os.path.join("data", "_".join(parts))


def check_subset(dataset, subset):
    """DataError if a subset is asked of a (registered) dataset that has none."""
    if subset and dataset in DATASETS and not DATASETS[dataset].subsets:
        raise DataError(f"subset={subset!r}: {dataset} has no subsets (they are for "
                        f"{', '.join(k for k, v in DATASETS.items() if v.subsets)})")


def resolve_tokenizer(dataset, tokenizer):
    """The tokenizer setting a dataset is prepared with ('' picks its default), or DataError."""
    spec = DATASETS.get(dataset)
    if spec is None:
        return tokenizer
    if tokenizer not in (*spec.tokenizers, ""):
        raise DataError(f"tokenizer={tokenizer!r} does not apply to {dataset} (it takes "
                        f"{' or '.join(repr(t) for t in spec.tokenizers)})")
    return tokenizer or spec.tokenizers[0]


class Dataset:
    """A prepared dataset folder, read back: `meta` (its meta.json), `task`, and `splits` ({name:
    ClassificationSplit, TokenSplit or PairSplit}, memory-mapped; Pig Latin's held-out splits also
    hold `taught`, the pieces of the training words)."""

    def __init__(self, folder):
        self.folder = folder
        self.meta = load_meta(folder)
        self.task = self.meta.get("task")
        if self.task not in TASK_SPLITS:
            raise DataError(f"{folder}/meta.json names task {self.task!r}, expected one of "
                            f"{sorted(TASK_SPLITS)}; "
                            f"rebuild the folder with `python data.py ...`")
        reader, names = TASK_SPLITS[self.task]
        held = {f.split("_")[0].split(".")[0] for f in os.listdir(folder)}  # splits it has files of
        names += tuple(s for s in EXTRA_SPLITS.get(self.task, ()) if s in held)
        self.splits = {s: reader(folder, s) for s in names}
        if self.meta.get("vocab") == PIG_LATIN_VOCAB:  # each held-out split knows what was taught,
            mark_taught(self.splits)  # group its compounds by whether their parts occur in training

    def facts(self):
        """What the data fixes about a model: the vocabulary size, the number of classes (0 for a
        corpus without labels: language modelling, MLM), and for a labelled set the longest sequence
        (block_size). A model family takes what it needs."""
        out = {"vocab_size": self.meta["vocab_size"]}
        out["n_classes"] = len(self.meta.get("label_names", []))  # 0: no labels
        if "max_len" in self.meta or "block_size" in self.meta:  # a seq2seq set: its longest sequence
            out["block_size"] = self.meta.get("max_len", self.meta.get("block_size"))
        return out

    def info(self):
        """The record a checkpoint keeps of its data: the folder and meta.json, less the counts and
        the source list (the vocabulary stays: a checkpoint must be read with its own)."""
        kept = {k: v for k, v in self.meta.items() if k not in ("counts", "sources")}
        return {"dir": self.folder, **kept}

    def check_matches(self, info, what):
        """DataError if `info` (a checkpoint's data record) was made with other data than this
        folder."""
        words = {"task": "task", "tokenizer": "tokenizer", "vocab": "vocabulary", "max_len": "max_len"}
        differ = [w for k, w in words.items() if k in info and info[k] != self.meta.get(k)]
        if differ:
            raise DataError(f"{self.folder} was prepared with another {', '.join(differ)} than {what}; delete the "
                            f"folder (it is rebuilt) or set a matching data_dir")


def check_out_folder(folder, option):
    """A DataError if a dataset cannot be prepared into `folder`: a file is in the way (it, or a path above it)."""
    problem = not_a_folder(folder)
    if problem:
        raise DataError(f"{option} {folder}: {problem}; a dataset is prepared into a folder: give a new or "
                        f"existing one")


def prepare(dataset, protocol="glue_heldout", vocab="compact", tokenizer="", subset="", out_dir=None,
            **settings):
    """Prepare a registered dataset into out_dir (default: dataset_dir's) and return its meta.json: its
    builder reads and tokenizes the source, then each split is written in the files its task's split
    class reads (ids as uint16, or uint32 for a vocabulary past 65,535), and meta.json last."""
    spec = DATASETS[dataset]
    tokenizer = tokenizer or spec.tokenizers[0]
    out_dir = out_dir or dataset_dir(dataset, protocol, vocab, tokenizer, subset,
                                     settings.get("max_len"))
    splits, meta = spec.build(protocol=protocol, vocab=vocab, tokenizer=tokenizer, subset=subset,
                              out_dir=out_dir, **settings)
    dtype = np.uint16 if meta["vocab_size"] <= 65535 else np.uint32
    created = not os.path.isdir(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".prepare-", dir=out_dir)  # a stop halfway leaves nothing behind
    try:
        for name, split in splits.items():
            if spec.task == "lm":  # the ids, one after another
                write_bin(os.path.join(staging, f"{name}.bin"), np.asarray(split, dtype))
            elif spec.task == "seq2seq":  # (sources, targets)
                write_seqs(staging, f"{name}_src", split[0], dtype)
                write_seqs(staging, f"{name}_tgt", split[1], dtype)
            else:  # classification and mlm: (sequences, labels)
                write_split(staging, name, *split, dtype)
        for f in os.listdir(staging):
            os.replace(os.path.join(staging, f), os.path.join(out_dir, f))
        write_meta(out_dir, meta)  # last: a folder with a meta.json is whole
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if created and not os.listdir(out_dir):
            os.rmdir(out_dir)
    return meta


def load_dataset(cfg):
    """The Dataset a run config names (keys dataset, data_dir, protocol, vocab, tokenizer, subset,
    max_len), prepared first if its folder is missing (from $DATA_MIRROR when set, else downloaded).
    A data_dir given explicitly is read as it was prepared."""
    name = cfg["dataset"]
    tokenizer = resolve_tokenizer(name, cfg.get("tokenizer", ""))
    subset = cfg.get("subset", "")
    check_subset(name, subset)
    folder = cfg.get("data_dir") or dataset_dir(name, cfg.get("protocol"), cfg.get("vocab"), tokenizer,
                                                subset, cfg.get("max_len"))
    if not os.path.isfile(os.path.join(folder, "meta.json")):
        check_out_folder(folder, "data_dir")
        if name not in DATASETS:
            raise DataError(f"no prepared data in {folder} and no preparer for dataset {name!r} "
                            f"(known: {', '.join(sorted(DATASETS))})")
        print(f"{folder} not found: preparing {name}")
        length = {"max_len": cfg["max_len"]} if cfg.get("max_len") else {}  # else the builder's
        prepare(name, protocol=cfg.get("protocol"), vocab=cfg.get("vocab"), tokenizer=tokenizer,
                subset=subset, mirror=os.environ.get("DATA_MIRROR"), out_dir=folder, **length)
    dataset = Dataset(folder)
    asked = cfg.get("max_len")
    if not cfg.get("data_dir") and asked and dataset.meta.get("max_len", asked) != asked:
        raise DataError(f"{folder} was prepared with max_len {dataset.meta['max_len']}, the run asks for "
                        f"{asked}; delete the folder (it is rebuilt) or set data_dir to another")
    if name in DATASETS and dataset.task != DATASETS[name].task:
        raise DataError(f"{folder} holds a {dataset.task} dataset, but {name!r} is a "
                        f"{DATASETS[name].task} dataset; "
                        f"check data_dir")
    return dataset


# -----------------------------------------------------------------------------
# Batch streams. A stream cuts a training split into optimizer steps: `steps_per_epoch` (None for a
# stream that draws at random and so has no epochs: all its steps are in epoch 0), and
# `step(epoch, i, device, rank=0, world=1)` -> the micro-batches of step i of that epoch, each a tuple
# (model inputs as keyword arguments, examples, tokens), a pure function of (seed, epoch, i). With
# `world` processes training together (DDP), process `rank` takes the step's micro-batches rank,
# rank + world, rank + 2 world, ...: together they take the same micro-batches as one process would.
# Counts are made on the CPU, before the copy to the device, so that reading them never waits for it.


def to_device(t, device):
    """A CPU tensor on `device`. To a GPU through pinned (page-locked) memory with a non-blocking
    copy: the host goes on building the next batch while this one travels, and a copy from pinned
    memory is one DMA with no staging. (The pinned buffer stays reserved until the copy is done:
    torch's pinned-memory allocator records the copy's stream.)"""
    if str(device).startswith("cuda"):
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def mask_if_padded(mask):
    """A batch's key mask (a CPU tensor, so asking costs no GPU sync), or None when the batch has no
    padding. A model given None attends without a mask, and on a GPU SDPA may then take its flash
    kernel, which takes no mask (a masked batch gets the memory-efficient one). With length
    bucketing 39-46 % of SST-2's training batches have one length (64 or 256 a batch), and padding
    is 6-10 % of the tokens."""
    return None if bool(mask.all()) else mask


def shard(micro_batches, rank, world):
    """Process `rank`'s share of a step's micro-batches (any list): rank, rank + world, ..."""
    return micro_batches[rank::world]


def on_device(inputs, device):
    """A batch's inputs {name: CPU tensor or None} on `device`, the Nones left out."""
    return {k: to_device(v, device) for k, v in inputs.items() if v is not None}


def pad_rows(rows, value):
    """Lists of ids -> a (B, longest) int64 tensor, padded on the right with value."""
    out = np.full((len(rows), max(len(r) for r in rows)), value, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return torch.from_numpy(out)


def collate(items, device):
    """[(ids, label), ...] -> idx (B, T) padded with [PAD] to the longest sequence in the batch,
    key_mask (B, T) True on real tokens, labels (B,)."""
    idx = pad_rows([ids for ids, _ in items], PAD)
    mask = idx != PAD
    labels = torch.tensor([lab for _, lab in items], dtype=torch.long)
    return to_device(idx, device), to_device(mask, device), to_device(labels, device)


def epoch_batches(split, batch_size, seed, epoch, bucket=True):
    """The index batches of one epoch, a pure function of (seed, epoch). With bucket=True each
    window of 50 batches is sorted by length before cutting (a batch holds similar lengths), then
    batches shuffle."""
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(split))
    if bucket:
        window = 50 * batch_size
        windows = np.array_split(order, max(1, math.ceil(len(order) / window)))
        order = np.concatenate([w[np.argsort(split.lengths[w], kind="stable")] for w in windows])
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))] if bucket else batches


class ClassificationStream:
    """Shuffled epochs over a labelled split: batches from `epoch_batches`, grad_accum of them per
    optimizer step (the last step of an epoch may have fewer). A subclass with other batches
    (Seq2SeqStream, MLMStream) changes only `micro_batch`."""

    fixed_shape = False  # batches padded to their bucket's longest sequence: their length changes

    def __init__(self, split, batch_size, grad_accum, seed, bucket=True):
        self.split, self.batch_size, self.grad_accum = split, batch_size, grad_accum
        self.seed, self.bucket = seed, bucket
        self.steps_per_epoch = math.ceil(len(split) / (batch_size * grad_accum))
        self._plan = (None, None)  # (epoch, its steps): one epoch's plan, made once

    def step(self, epoch, i, device, rank=0, world=1):
        """Step i's micro-batches, or process `rank`'s share of them (the last step of an epoch may
        hold fewer than `world`, leaving a process none)."""
        if self._plan[0] != epoch:
            batches = epoch_batches(self.split, self.batch_size, self.seed, epoch, self.bucket)
            steps = range(0, len(batches), self.grad_accum)
            self._plan = (epoch, [batches[j:j + self.grad_accum] for j in steps])
        return [self.micro_batch([self.split[j] for j in b], device, (epoch, i, m))
                for m, b in shard(list(enumerate(self._plan[1][i])), rank, world)]

    def micro_batch(self, items, device, where):
        """(model inputs, examples, tokens) for the split's items [(ids, label), ...]; `where` is
        the micro-batch's place, (epoch, step, index in the step), for a subclass that draws at
        random."""
        idx, mask, labels = collate(items, "cpu")
        inputs = {"idx": idx, "key_mask": mask_if_padded(mask), "targets": labels}
        return on_device(inputs, device), len(items), int(mask.sum())


def seq2seq_collate(pairs, layout, device):
    """[(source ids, target ids), ...] -> a seq2seq model's inputs as keyword arguments. Source = word
    [EOS]; target input = [SOS] translation; target output = translation [EOS], -100 (not scored) on
    padding. layout 'pair': src (B, S), src_mask (B, S), idx (B, T), targets (B, T), padded on the
    right; 'joined': idx = source + target input and targets = -100 under the source, then target
    output, (B, S + T), padded on the right, and src_len (B,), each source's length (a bidirectional
    Mamba reads the source backwards)."""
    if layout == "pair":
        rows = [(list(s) + [EOS], [SOS] + list(t), list(t) + [EOS]) for s, t in pairs]
        src = pad_rows([r[0] for r in rows], PAD)
        out = {"src": src, "src_mask": src != PAD, "idx": pad_rows([r[1] for r in rows], PAD),
               "targets": pad_rows([r[2] for r in rows], -100)}
    elif layout == "joined":
        rows = [(list(s) + [EOS, SOS] + list(t), [-100] * (len(s) + 1) + list(t) + [EOS]) for s, t in pairs]
        out = {"idx": pad_rows([r[0] for r in rows], PAD), "targets": pad_rows([r[1] for r in rows], -100),
               "src_len": torch.tensor([len(s) + 1 for s, _ in pairs])}
    else:
        raise ValueError(f"seq2seq layout {layout!r}: expected 'pair' or 'joined'")
    return on_device(out, device)


class Seq2SeqStream(ClassificationStream):
    """Shuffled epochs over a seq2seq split, batched by source length as ClassificationStream does,
    collated in the model family's layout. A micro-batch's count of examples is its count of scored
    target tokens: the loss is a mean per character, so train_step weights micro-batches by those."""

    def __init__(self, split, layout, batch_size, grad_accum, seed, bucket=True):
        super().__init__(split, batch_size, grad_accum, seed, bucket)
        self.layout = layout

    def micro_batch(self, items, device, where):
        """(model inputs, scored target tokens, tokens the model reads) for [(source, target), ...]."""
        inputs = seq2seq_collate(items, self.layout, "cpu")
        n_tokens = sum(len(src) + len(tgt) + 2 for src, tgt in items)  # with [EOS] and [SOS]
        n_scored = int((inputs["targets"] != -100).sum())
        return on_device(inputs, device), n_scored, n_tokens


MLM_RATE = 0.15  # the share of word tokens a masked-language model predicts (Devlin et al. 2019, sec. 3.1)


def mlm_mask(idx, vocab_size, rng, rate=MLM_RATE):
    """BERT's corruption for masked-language modelling (Devlin et al. 2019, sec. 3.1 and appendix A.1)
    of token ids idx (B, T), an int64 array: in each row, round(rate * n) of its n word tokens (at least
    one) are chosen at random to be predicted; [PAD], [CLS] and [UNK] (no word to recover) never are. Of
    the chosen, 80 % become MASK, 10 % a random word id, 10 % stay, so the model cannot tell which
    positions are scored and must model every word. Returns (inputs, targets): targets hold the original
    id where chosen, -100 elsewhere. Every random number comes from rng, seeded."""
    words = idx >= N_SPECIAL  # (B, T)
    n = words.sum(1)
    k = np.minimum(n, np.maximum(1, np.rint(rate * n))).astype(np.int64)  # (B,) targets per row
    scores = np.where(words, rng.random(idx.shape), 2.0)  # uniform in [0, 1) on words; the rest rank last
    chosen = scores.argsort(1, kind="stable").argsort(1) < k[:, None]  # each row's k lowest scores
    action = rng.random(idx.shape)
    inputs = np.where(chosen & (action < 0.8), MASK, idx)
    inputs = np.where(chosen & (action >= 0.8) & (action < 0.9), rng.integers(N_SPECIAL, vocab_size, idx.shape), inputs)
    return inputs, np.where(chosen, idx, -100)


class MLMStream(ClassificationStream):
    """Shuffled epochs over an unlabelled split, batched by length as ClassificationStream does, each
    micro-batch masked by `mlm_mask` seeded by (seed, epoch, step, micro-batch): a resumed run sees the
    masks it would have seen. A micro-batch counts its masked tokens as its examples: the loss is a mean
    per masked token, so a step's gradient is the mean over all of them, however they are cut."""

    def __init__(self, split, vocab_size, batch_size, grad_accum, seed, bucket=True):
        super().__init__(split, batch_size, grad_accum, seed, bucket)
        self.vocab_size = vocab_size

    def micro_batch(self, items, device, where):
        """({idx, key_mask, mlm_targets}, masked tokens, tokens the model reads) for [(ids, label), ...]."""
        idx, mask, _ = collate(items, "cpu")
        inputs, targets = mlm_mask(idx.numpy(), self.vocab_size, np.random.default_rng([self.seed, *where]))
        targets = torch.from_numpy(targets)
        batch = {"idx": torch.from_numpy(inputs), "key_mask": mask_if_padded(mask), "mlm_targets": targets}
        return on_device(batch, device), int((targets != -100).sum()), int(mask.sum())


def lm_windows(tokens, starts, block_size, device):
    """Inputs x (B, T) = tokens[s : s+T] and targets y (B, T) = tokens[s+1 : s+T+1] for each start s."""
    x = np.stack([tokens[s:s + block_size] for s in starts]).astype(np.int64)
    y = np.stack([tokens[s + 1:s + 1 + block_size] for s in starts]).astype(np.int64)
    return to_device(torch.from_numpy(x), device), to_device(torch.from_numpy(y), device)


def lm_batch(tokens, block_size, batch_size, seed, step, device):
    """lm_windows at batch_size uniformly drawn starts, a pure function of (seed, step), so a resumed run
    draws exactly the batches it would have drawn."""
    if len(tokens) < block_size + 2:
        raise DataError(f"a split of {len(tokens)} tokens is too short for windows of {block_size}")
    rng = np.random.default_rng([seed, *np.atleast_1d(step)])
    starts = rng.integers(0, len(tokens) - block_size, size=batch_size)  # last start: len - T - 1
    return lm_windows(tokens, starts, block_size, device)


def lm_eval_starts(n_tokens, block_size, max_windows=0):
    """Start offsets of the validation windows: consecutive, non-overlapping windows of block_size
    targets covering the split (111,540 characters -> 871 windows of 128), so every variant and
    every seed is scored on exactly the same characters. max_windows > 0 keeps that many, evenly spaced."""
    starts = np.arange(0, n_tokens - block_size, block_size)  # window s predicts tokens s+1 .. s+T
    if 0 < max_windows < len(starts):
        starts = starts[np.linspace(0, len(starts) - 1, max_windows).round().astype(np.int64)]
    return starts


class LMStream:
    """Random windows of a token split: step i's micro-batch m is `lm_batch(..., step=(i, m))`. There
    are no passes over the data to count, so no epochs: every step is in epoch 0."""

    steps_per_epoch = None
    fixed_shape = True  # every batch is batch_size windows of block_size

    def __init__(self, split, block_size, batch_size, grad_accum, seed):
        self.tokens, self.block_size, self.batch_size = split.tokens, block_size, batch_size
        self.grad_accum, self.seed = grad_accum, seed

    def step(self, epoch, i, device, rank=0, world=1):
        """Step i's micro-batches, or process `rank`'s share of them."""
        assert epoch == 0, "an LMStream has no epochs"
        out = []
        for m in shard(range(self.grad_accum), rank, world):
            x, y = lm_batch(self.tokens, self.block_size, self.batch_size, self.seed, (i, m), device)
            out.append(({"idx": x, "targets": y}, x.size(0), x.numel()))
        return out


def training_stream(dataset, model_cfg, cfg):
    """The batches a run trains on, as its dataset's task cuts them: shuffled epochs of labelled
    examples (classification), of them with masked words (mlm: the masks draw random ids, so the
    stream knows the vocabulary), of (source, target) pairs in the model family's layout (seq2seq,
    with hyphen_compounds' extra training words), or random windows of block_size tokens (lm)."""
    train, task = dataset.splits["train"], dataset.task
    b, accum, seed = cfg["batch_size"], cfg["grad_accum"], cfg["seed"]
    if task == "lm":
        return LMStream(train, model_cfg.block_size, b, accum, seed)
    if task == "mlm":
        return MLMStream(train, model_cfg.vocab_size, b, accum, seed, cfg["bucket"])
    if task == "seq2seq":
        if cfg["hyphen_compounds"]:  # compounds of its words added (seq2seq_with_compounds)
            share = cfg["hyphen_compounds"]
            train = seq2seq_with_compounds(dataset, share, seed, model_cfg.block_size)
        return Seq2SeqStream(train, model_cfg.seq2seq_layout, b, accum, seed, cfg["bucket"])
    return ClassificationStream(train, b, accum, seed, cfg["bucket"])


def main(argv=None):
    p = argparse.ArgumentParser(prog="python data.py", formatter_class=HelpFormatter,
                                description="Download (or read from --mirror) and prepare a dataset into .bin token "
                                "files. train.py and evaluate.py prepare what they need on first use; this does it "
                                "ahead, or with other options.")
    p.add_argument("dataset", choices=sorted(DATASETS), metavar="DATASET",
                   help="the dataset to prepare: " + ", ".join(sorted(DATASETS)))
    p.add_argument("--protocol", default="glue_heldout", choices=PROTOCOLS, help="SST-2's split protocol: "
                   "glue_heldout (validation = 872 whole GLUE train sentences held out of training, test = GLUE dev), "
                   "glue (validation = 5 %% of GLUE train's phrases, pieces of training sentences: phrase recall; "
                   "test = GLUE dev) or standard (train + dev pooled, 80/10/10)")
    p.add_argument("--vocab", default="compact", choices=["compact", "full"], help="GPT-2 BPE ids: compact (the ids "
                   "seen in training) or full (all 50,257)")
    p.add_argument("--tokenizer", default="", help="sst5, cfimdb, imdb_lm: the Llama tokenizer, 'llama2' or 'tok512' "
                   "(default: llama2 for sst5 and cfimdb, tok512 for imdb_lm)")
    p.add_argument("--max_len", type=int, default=DEFAULT_MAX_LEN, help="tokens per sequence incl. [CLS] "
                   "(default 256)")
    p.add_argument("--subset", default="", help="sst2, imdb, yelp_polarity, multidomain(_uci): " + SUBSETS.replace("%", "%%"))
    p.add_argument("--mirror", default=os.environ.get("DATA_MIRROR"),
                   help="read source files from this folder instead of downloading (default: $DATA_MIRROR)")
    p.add_argument("--out_dir", default=None, help="default: data/<dataset>_<protocol>_<vocab> "
                   "(data/shakespeare_char for the character corpus, which ignores --protocol/--vocab/--max_len)")
    p.add_argument("--seed", type=int, default=1337, help="seed of the splits, subsets and samples")
    a = p.parse_args(argv)
    try:
        tokenizer = resolve_tokenizer(a.dataset, a.tokenizer)
        check_subset(a.dataset, a.subset)
        if a.out_dir is not None:
            check_out_folder(a.out_dir, "--out_dir")
        prepare(a.dataset, protocol=a.protocol, vocab=a.vocab, tokenizer=tokenizer, max_len=a.max_len,
                subset=a.subset, mirror=a.mirror, out_dir=a.out_dir, seed=a.seed)
    except UserError as e:  # bad input: one line; a bug keeps its traceback
        sys.exit(f"error: {e}")
    except KeyboardInterrupt:  # what was being written is removed (prepare's staging folder)
        print("interrupted: the dataset was not prepared, and nothing of it was written", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    with reader_may_stop():  # `python data.py --help | head` ends quietly
        main()
