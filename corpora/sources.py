"""
Where each dataset's files come from, and how they arrive intact: the source table (SOURCES: each source's
canonical URL, the files it holds and their sha256; see shared/data/SOURCES.md), the download (once, into
data/_downloads) or the local mirror (--mirror DIR or DATA_MIRROR=DIR), and the checks. corpora/'s modules
name the source and the files they read (`fetch("sst2", mirror)["SST-2/train.tsv"]`); this module only gets
the bytes there and refuses any that fail their sha256, with a DataError that says what to do.

Read top to bottom: SOURCES -> sha256, the download -> fetch (a source's files as bytes: from the mirror, or
downloaded and, for a zip, read out of the archive) -> source_file (the path of one checked file, for what
reads a path, such as a tokenizer) -> archive_file (an archive too large to list file by file, checked whole).
"""

import hashlib
import os
import zipfile

from tokenizer import DataError

_MINLLAMA = "https://raw.githubusercontent.com/neubig/minllama-assignment/main/data"  # one file per URL
_MINLLAMA_FILES = {  # name -> sha256. cfimdb-test.txt is left out: its labels are placeholders (all 0)
    "sst-train.txt": "7aeac81f2a387f2ce7fab98ed8f40ef85cc9c8ad11bcbb63b122e95665cb1f35",
    "sst-dev.txt": "11963c76cd073e68006da0390620aadf5a4b8f775e2f900e92a50b3002e39b9b",
    "sst-test.txt": "bdcc8352d37bdc82113e4a4dd887b824144201539d5a1e49be566232d306a4ba",
    "sst-label-mapping.json": "831e6914e25d9b9eb56ff9095b3f035bdaf1b9568d385a70ef481c82af0382b3",
    "cfimdb-train.txt": "278e200499d1d68a1a9d80e3947a2203cc97130632d8a53f2b9c11de9cb6c699",
    "cfimdb-dev.txt": "b38f0c095c4624e85927116728140e96d0221969b34146f65eae5b5bb24752b8",
    "cfimdb-label-mapping.json": "afeac43f5a5fe8758469078418519df4c8503c2e30e2fcf6c61464fce3d44a36",
}


_TINYLLAMAS = "https://huggingface.co/karpathy/tinyllamas/resolve/main/stories260K"


def one_file_each(base, files):
    """A source of plain files {path: sha256}, each downloaded from base/<its file name>."""
    return {"urls": {rel: f"{base}/{os.path.basename(rel)}" for rel in files}, "files": files}


def _minllama_source(prefix):
    return one_file_each(_MINLLAMA, {f"minllama_sst_cfimdb/{k}": v for k, v in _MINLLAMA_FILES.items()
                                     if k.startswith(prefix)})


SOURCES = {
    "sst2": {
        "url": "https://dl.fbaipublicfiles.com/glue/data/SST-2.zip",
        "files": {  # path inside the archive and inside a mirror folder -> sha256
            "SST-2/train.tsv": "48eac26399f8456935f81dd9e3a745c1430adb6c62e233ccfe22db4a0d15d1d1",
            "SST-2/dev.tsv": "54a9c12c77e402fc14d6a66a506f24d999f596b0176eb777c972cccc2f9cc4b0",
        },
    },
    # llama2.c's tokenizers and its smallest model (karpathy/llama2.c and the HF tinyllamas repository)
    "tok512": one_file_each(_TINYLLAMAS, {"tinyllamas/stories260K/tok512.bin":
                                          "037cb335abb25d1fa9e8ecae30ed2a3a8ace9302862ebcdc05d51a6bbb10c312"}),
    "llama2_tokenizer": one_file_each("https://github.com/karpathy/llama2.c/raw/master",
                                      {"llama2_tokenizer/tokenizer.bin":
                                       "50a52ef822ee9e83de5ce9d0be0a025a773d019437f58b5ff9dcafb063ece361"}),
    "stories260K": one_file_each(_TINYLLAMAS, {"tinyllamas/stories260K/stories260K.bin":
                                               "b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696"}),
    # SST-5 and CFIMDB in the NLP course's format (see the minllama section below)
    "sst5": _minllama_source("sst-"),
    "cfimdb": _minllama_source("cfimdb-"),
    # IMDB (Maas et al. 2011): one archive of 50,000 reviews, checked whole (see archive_file). The mirror
    # holds a repack of its labelled part, with the same paths inside and its own checksum.
    "imdb": {"url": "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",
             "sha256": "c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe",
             "mirror_file": "aclImdb_labelled.tar.gz",
             "mirror_sha256": "fc132c2a23a4d23eec474b518907765dbc9c59e648c1e57ac8010670238ed697"},
    # Zhang et al. (2015)'s polarity sets: one archive each, too large for the mirror (a mirror folder may
    # hold the same archive under its own name: the checksum is the canonical one)
    "yelp_polarity": {"url": "https://s3.amazonaws.com/fast-ai-nlp/yelp_review_polarity_csv.tgz",
                      "sha256": "528f22e286cad085948acbc3bea7e58188416546b0e364d0ae4ca0ce666abe35",
                      "mirror_file": "yelp_review_polarity_csv.tgz",
                      "mirror_sha256": "528f22e286cad085948acbc3bea7e58188416546b0e364d0ae4ca0ce666abe35"},
    "amazon_polarity": {"url": "https://s3.amazonaws.com/fast-ai-nlp/amazon_review_polarity_csv.tgz",
                        "sha256": "d2a3ee7a214497a5d1b8eaed7c8d7ba2737de00ada3b0ec46243983efa100361",
                        "mirror_file": "amazon_review_polarity_csv.tgz",
                        "mirror_sha256": "d2a3ee7a214497a5d1b8eaed7c8d7ba2737de00ada3b0ec46243983efa100361"},
    # UCI Sentiment Labelled Sentences (Kotzias et al. 2015): a zip whose folder name has spaces
    "uci_sentences": {
        "url": "https://archive.ics.uci.edu/ml/machine-learning-databases/00331/sentiment%20labelled%20sentences.zip",
        "cache_name": "uci_sentiment_labelled_sentences.zip",
        "files": {"uci_sentiment_sentences/imdb_labelled.txt":
                  "aef2e49e3da25714d61175e3a6e68eeef74a20a2f914318dc3be9947ea86512d",
                  "uci_sentiment_sentences/yelp_labelled.txt":
                  "c76468b7b5c6e56a0804d728345c5f84aa2142ddb214420f61cc9cfd4c00d2ea",
                  "uci_sentiment_sentences/amazon_cells_labelled.txt":
                  "47003fc0a0d4840b00e96e715b6189bad09e7443a3da41c4cbe12ffc79f86ae3"},
        "archive_dir": "sentiment labelled sentences",  # the files' folder inside the zip
    },
    # Pride and Prejudice (Project Gutenberg eBook #1342), the Pig Latin study's words. gutenberg.org's own
    # files (www.gutenberg.org/cache/epub/1342/pg1342.txt) wrap the text in licence boilerplate that changes
    # over time; Project Gutenberg's GitHub copy at a fixed commit is the same text, byte for byte, always.
    "pride_and_prejudice": {
        "url": "https://raw.githubusercontent.com/gutenbergbooks/1342/041e520899f9a02af517d6cb253bc1fdfbf923e2/"
               "1342-0.txt",
        "cache_name": "pride_and_prejudice_1342-0.txt",
        "files": {"gutenberg_pride_and_prejudice/1342-0.txt":
                  "86dab871eec9c0cef97f4cb6313f86c6cc48f6f7809534e65cd3f1c1d486d247"},
    },
    "shakespeare_char": {  # char-rnn's Tiny Shakespeare, a plain text file (no archive)
        "url": "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
        "cache_name": "tinyshakespeare.txt",  # 'input.txt' would say nothing in data/_downloads
        "files": {"tinyshakespeare/input.txt": "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"},
    },
}


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def download(url, dest, timeout=60):
    """Stream url to dest (via a .part file, so a broken download never looks finished)."""
    import requests  # only needed when actually downloading

    print(f"downloading {url}")
    part = dest + ".part"
    with requests.get(url, stream=True, timeout=timeout) as r:
        r.raise_for_status()
        with open(part, "wb") as f:
            for chunk in r.iter_content(chunk_size=1 << 20):
                f.write(chunk)
    os.replace(part, dest)


def download_once(url, local):
    """Download url to local unless it is there already; a failure says how to work offline."""
    if os.path.isfile(local):
        return
    os.makedirs(os.path.dirname(local) or ".", exist_ok=True)
    try:
        download(url, local)
    except Exception as e:
        raise DataError(f"could not download {url} ({e}); without a network, set the environment variable "
                        f"DATA_MIRROR=DIR to a local copy of the source files, such as this project's shared/data "
                        f"(data.py also takes --mirror DIR)") from None


def cached(name, rel, cache_dir):
    """Where a download of source `name` keeps its file `rel`: a file of its own (a source of `urls`), or
    the source's one download (the file itself, or the archive holding it)."""
    src = SOURCES[name]
    if "urls" in src:
        return os.path.join(cache_dir, name, os.path.basename(rel))
    return os.path.join(cache_dir, src.get("cache_name", os.path.basename(src["url"])))


def fetch(name, mirror=None, cache_dir="data/_downloads"):
    """{relative path: bytes} of the files of source `name`, each checked against its sha256: read from
    mirror/<relative path>, or downloaded once into cache_dir (its `urls`, or its one `url`: the file
    itself or an archive holding the files)."""
    src = SOURCES[name]
    out, where = {}, {}
    if mirror:
        for rel in src["files"]:
            where[rel] = os.path.join(mirror, rel)
            if not os.path.isfile(where[rel]):
                raise DataError(f"mirror {mirror} has no {rel}; point DATA_MIRROR (data.py: --mirror) at a copy of "
                                f"shared/data")
            with open(where[rel], "rb") as f:
                out[rel] = f.read()
    elif "urls" in src:  # several plain files, each at its own address
        for rel, url in src["urls"].items():
            where[rel] = cached(name, rel, cache_dir)
            download_once(url, where[rel])
            with open(where[rel], "rb") as f:
                out[rel] = f.read()
    else:
        local = cached(name, None, cache_dir)
        download_once(src["url"], local)
        where = dict.fromkeys(src["files"], local)
        if not local.endswith(".zip"):  # a single plain file: the download is the file
            (rel,) = src["files"]
            with open(local, "rb") as f:
                out[rel] = f.read()
        else:
            try:
                with zipfile.ZipFile(local) as z:
                    for rel in src["files"]:  # the mirror's path, or the same name in archive_dir
                        inside = f"{src['archive_dir']}/{os.path.basename(rel)}" if "archive_dir" in src else rel
                        out[rel] = z.read(inside)
            except (zipfile.BadZipFile, KeyError) as e:
                raise DataError(f"{local} is not the expected archive ({e}); delete it and run again") from None
    for rel, digest in src["files"].items():
        if sha256(out[rel]) != digest:
            raise DataError(f"{name}: {rel} has sha256 {sha256(out[rel])}, expected {digest} "
                            f"(corrupt or a different version); replace {where[rel]}")
    return out


def source_file(name, rel, mirror=None, cache_dir="data/_downloads"):
    """The path of one verified file of source `name`: in the mirror, or downloaded into cache_dir
    (for what reads a path, such as a tokenizer)."""
    fetch(name, mirror, cache_dir)  # downloads if needed and checks every file's sha256
    return os.path.join(mirror, rel) if mirror else cached(name, rel, cache_dir)


def archive_file(name, mirror=None, cache_dir="data/_downloads"):
    """The path of source `name`'s archive, its sha256 checked: the mirror's copy (mirror_file) or the
    canonical download (url), once into cache_dir. For archives of too many files to list one by one."""
    src = SOURCES[name]
    if mirror:
        path, digest = os.path.join(mirror, src["mirror_file"]), src["mirror_sha256"]
        if not os.path.isfile(path):
            raise DataError(f"mirror {mirror} has no {src['mirror_file']}: put a copy of {src['url']} there under "
                            f"that name, or unset DATA_MIRROR (data.py: leave out --mirror) to download it")
    else:
        path, digest = os.path.join(cache_dir, os.path.basename(src["url"])), src["sha256"]
        download_once(src["url"], path)
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    if h.hexdigest() != digest:
        raise DataError(f"{name}: {path} has sha256 {h.hexdigest()}, expected {digest} (corrupt or a different "
                        f"version); delete it and run again")
    return path

