"""
data.py: the .bin format and its checks, preprocessing, tokenization, the SST-2 splits (on the real
mirror when it is there, else skipped), and fetching from a mirror or a (faked) download.
"""

import io
import os
import shutil
import struct
import zipfile

import numpy as np
import pytest

import data
import tokenizer
from conftest import need_tokenizer, sha256_file
from corpora import sources, sst2

# -----------------------------------------------------------------------------
# the .bin format


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32, np.int64])
def test_bin_round_trip(tmp_path, dtype):
    info = np.iinfo(dtype)
    a = np.array([0, 1, 2, info.max, 12345, info.min], dtype=dtype)
    path = str(tmp_path / "a.bin")
    data.write_bin(path, a)
    b = data.read_bin(path)
    assert b.dtype == np.dtype(dtype) and np.array_equal(a, b)
    assert os.path.getsize(path) == 32 + a.nbytes  # 32-byte header, then the raw items
    assert os.listdir(tmp_path) == ["a.bin"]  # no temporary file left behind


def test_bin_empty_array(tmp_path):
    data.write_bin(str(tmp_path / "e.bin"), np.zeros(0, np.int64))
    assert data.read_bin(str(tmp_path / "e.bin")).size == 0


def test_write_bin_rejects_other_arrays(tmp_path):
    with pytest.raises(ValueError):
        data.write_bin(str(tmp_path / "f.bin"), np.zeros(3, np.float32))
    with pytest.raises(ValueError):
        data.write_bin(str(tmp_path / "m.bin"), np.zeros((2, 2), np.int64))


def _corrupt(path, offset, new_bytes):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(new_bytes)


@pytest.fixture
def good_bin(tmp_path):
    path = str(tmp_path / "good.bin")
    data.write_bin(path, np.arange(100, dtype=np.uint16))
    return path


def test_read_bin_rejects_bad_magic(good_bin):
    _corrupt(good_bin, 0, b"NOTABIN\0")
    with pytest.raises(data.DataError, match="bad magic"):
        data.read_bin(good_bin)


def test_read_bin_rejects_wrong_version(good_bin):
    _corrupt(good_bin, 8, struct.pack("<I", data.VERSION + 1))
    with pytest.raises(data.DataError, match="version"):
        data.read_bin(good_bin)


def test_read_bin_rejects_unknown_dtype(good_bin):
    _corrupt(good_bin, 12, struct.pack("<I", 99))
    with pytest.raises(data.DataError, match="dtype"):
        data.read_bin(good_bin)


def test_read_bin_rejects_truncated_file(good_bin):
    with open(good_bin, "r+b") as f:
        f.truncate(32 + 150)  # 75 of the 100 uint16 items
    with pytest.raises(data.DataError, match="truncated"):
        data.read_bin(good_bin)
    with open(good_bin, "r+b") as f:
        f.truncate(10)  # not even a header
    with pytest.raises(data.DataError, match="too short"):
        data.read_bin(good_bin)


def test_read_bin_checksum_catches_a_flipped_byte(good_bin):
    with open(good_bin, "rb") as f:
        raw = bytearray(f.read())
    raw[32 + 77] ^= 0x01
    with open(good_bin, "wb") as f:
        f.write(raw)
    with pytest.raises(data.DataError, match="checksum"):
        data.read_bin(good_bin)
    assert data.read_bin(good_bin, verify=False)[38] != 38  # without verify, the corruption shows


def test_read_bin_missing_file(tmp_path):
    with pytest.raises(data.DataError, match="missing"):
        data.read_bin(str(tmp_path / "nope.bin"))


def test_split_files_must_agree(tmp_path):
    data.write_split(str(tmp_path), "train", [np.array([2, 5, 6]), np.array([2, 7])], [1, 0], np.uint16)
    split = data.ClassificationSplit(str(tmp_path), "train")
    assert len(split) == 2 and list(split.lengths) == [3, 2]
    ids, label = split[1]
    assert ids.tolist() == [2, 7] and label == 0
    data.write_bin(str(tmp_path / "train_labels.bin"), np.array([1, 0, 1], np.int64))  # one too many
    with pytest.raises(data.DataError, match="disagree"):
        data.ClassificationSplit(str(tmp_path), "train")


# -----------------------------------------------------------------------------
# preprocessing and tokenization


@pytest.mark.parametrize("raw, clean", [
    ("Hello   WORLD", "hello world"),
    ("\tTabs\nand  newlines ", "tabs and newlines"),
    ("a great<br /><br />film", "a great film"),
    ("<i>Italic</i> title", "italic title"),
    ("see http://example.com/x?y=1 now", "see now"),
    ("visit www.example.org today", "visit today"),
    ("Wow!!!", "wow!"),
    ("hmm... ok", "hmm. ok"),
    ("really??", "really?"),
    ("a -- b ,, c", "a - b , c"),
    ("!? stays", "!? stays"),  # different marks are not a run
    ("", ""),
])
def test_clean_text(raw, clean):
    assert tokenizer.clean_text(raw) == clean


@pytest.fixture(scope="module")
def full_vocab_encoder():
    need_tokenizer()
    return tokenizer.TextEncoder({"max_len": 6, "vocab": "full"})


@pytest.mark.parametrize("text", ["", "   ", "\n\t", "<br />"])
def test_text_encoder_rejects_empty_text(full_vocab_encoder, text):
    with pytest.raises(ValueError, match="empty"):
        full_vocab_encoder(text)


def test_text_encoder_truncates_with_cls_first(full_vocab_encoder):
    enc = full_vocab_encoder
    text = "one two three four five six seven eight"
    gpt2 = enc.enc.encode_ordinary(" " + text)
    assert len(gpt2) > enc.max_len  # really over-long
    ids = enc(text)
    assert ids.dtype == np.int64 and len(ids) == enc.max_len == 6
    assert ids[0] == data.CLS
    assert ids[1:].tolist() == [g + data.N_SPECIAL for g in gpt2[:5]]  # full vocab: GPT-2 id + 3
    short = enc("Two words")
    assert short.tolist() == [data.CLS] + [g + 3 for g in enc.enc.encode_ordinary(" two words")]


def test_compact_vocab_maps_unseen_ids_to_unk():
    m = tokenizer.id_map_from_vocab([5, 9, 100], n_bpe=200)
    assert m[5] == 3 and m[9] == 4 and m[100] == 5
    assert m[6] == data.UNK and m[0] == data.UNK and m.shape == (200,)


# -----------------------------------------------------------------------------
# SST-2 parsing and splitting


def test_parse_sst2_tsv():
    sents, labels = sst2.parse_sst2_tsv(b"sentence\tlabel\nit 's good \t1\na\ttab inside \t0\n\n")
    assert sents == ["it 's good ", "a\ttab inside "] and labels == [1, 0]
    with pytest.raises(data.DataError, match="header"):
        sst2.parse_sst2_tsv(b"text\tlabel\nx\t1\n")
    with pytest.raises(data.DataError, match="label"):
        sst2.parse_sst2_tsv(b"sentence\tlabel\nx\t2\n")


N_TRAIN, N_DEV = 67_349, 872  # GLUE SST-2 train.tsv and dev.tsv


def split_indices(protocol, seed):
    """split_sst2 applied to example *numbers* (train 0..N_TRAIN-1, dev after), so it returns indices."""
    train = (list(range(N_TRAIN)), [0] * N_TRAIN)
    dev = (list(range(N_TRAIN, N_TRAIN + N_DEV)), [1] * N_DEV)
    return {k: v[0] for k, v in sst2.split_sst2(train, dev, protocol, seed).items()}


@pytest.mark.parametrize("protocol, sizes", [
    ("glue", {"train": 63_982, "val": 3_367, "test": 872}),
    ("standard", {"train": 54_576, "val": 6_822, "test": 6_823}),
])
def test_split_sizes_disjoint_and_reproducible(protocol, sizes):
    s = split_indices(protocol, 1337)
    assert {k: len(v) for k, v in s.items()} == sizes
    sets = {k: set(v) for k, v in s.items()}
    assert sum(map(len, sets.values())) == sum(sizes.values())  # no index twice inside a split
    assert not (sets["train"] & sets["val"]) and not (sets["train"] & sets["test"]) and not (sets["val"] & sets["test"])
    if protocol == "glue":
        assert s["test"] == list(range(N_TRAIN, N_TRAIN + N_DEV))  # test = GLUE dev, in order
        assert sets["train"] | sets["val"] == set(range(N_TRAIN))
    else:
        assert sum(sizes.values()) == 68_221 and set().union(*sets.values()) == set(range(68_221))
    assert split_indices(protocol, 1337) == s
    other = split_indices(protocol, 1338)
    assert other["val"] != s["val"] and other["train"] != s["train"]


def test_split_rejects_unknown_protocol():
    with pytest.raises(ValueError, match="protocol"):
        sst2.split_sst2((["a"], [0]), (["b"], [1]), "random", 0)


# -----------------------------------------------------------------------------
# glue_heldout: validation held out by whole sentence, as GLUE's dev split was


def test_sentence_holdout_on_a_phrase_tree():
    # two sentences and their phrases; "good" is in both, "a b" only in the first
    texts = ["a b good c", "a b", "good c", "good", "d good e", "d good", "a b good c"]
    for seed in range(6):
        train, val, dropped = sst2.sentence_holdout(texts, 1, seed)
        assert sorted(train + val + dropped) == list(range(len(texts)))
        (v,) = val
        assert texts[v] in ("a b good c", "d good e")  # only whole sentences are drawn
        assert sst2.sentence_holdout(texts, 1, seed) == (train, val, dropped)  # seeded
        kept = {texts[i] for i in train}
        assert "good" in kept  # the other sentence holds it
        if texts[v] == "a b good c":
            assert kept == {"good", "d good e", "d good"}  # its repeat, "a b" and "good c" are dropped
            assert sorted(dropped) == [1, 2, 6]
        else:
            assert kept == {"a b good c", "a b", "good c", "good"} and dropped == [5]


def test_glue_heldout_holds_out_whole_sentences(real_mirror):
    files = sources.fetch("sst2", mirror=real_mirror)
    texts = sst2.parse_sst2_tsv(files["SST-2/train.tsv"])[0]
    train, val, dropped = sst2.sentence_holdout(texts, 872, 1337)
    assert (len(train), len(val), len(dropped)) == (59_233, 872, 7_244)  # training keeps 88 % of GLUE train
    norm = [" ".join(t.split()) for t in texts]
    training = "\n".join(f" {norm[i]} " for i in train)
    assert not any(f" {norm[i]} " in training for i in val)  # no validation text inside a training text
    held = "\n".join(f" {norm[i]} " for i in val)
    for i in dropped[::20]:  # a dropped phrase: some validation sentence holds it, no training text does
        assert f" {norm[i]} " in held and f" {norm[i]} " not in training
    dev = sst2.parse_sst2_tsv(files["SST-2/dev.tsv"])
    s = sst2.split_sst2((texts, list(range(len(texts)))), dev, "glue_heldout", 1337)  # labels = row numbers
    assert s["train"][1] == train and s["val"][1] == val and s["test"] == dev
    assert {k: len(v[0]) for k, v in s.items()} == {"train": 59_233, "val": 872, "test": 872}


# -----------------------------------------------------------------------------
# fetch: from a mirror, or from a downloaded archive (the download itself is faked)


def test_fetch_from_fixture_mirror(fixture_mirror, fixture_digests):
    with fixture_digests():
        files = sources.fetch("sst2", mirror=fixture_mirror)
    for rel in sources.SOURCES["sst2"]["files"]:
        with open(os.path.join(fixture_mirror, rel), "rb") as f:
            assert files[rel] == f.read()


def test_fetch_rejects_checksum_mismatch(fixture_mirror, fixture_digests, tmp_path):
    bad = tmp_path / "mirror"
    shutil.copytree(fixture_mirror, bad)
    with fixture_digests():
        with open(bad / "SST-2" / "dev.tsv", "ab") as f:
            f.write(b"an extra line \t1\n")
        with pytest.raises(data.DataError, match="sha256"):
            sources.fetch("sst2", mirror=str(bad))


def test_fetch_rejects_real_digests_for_fake_files(fixture_mirror):
    with pytest.raises(data.DataError, match="sha256"):
        sources.fetch("sst2", mirror=fixture_mirror)  # the real SOURCES digests, the fake files


def test_fetch_reports_missing_mirror_file(fixture_mirror, fixture_digests, tmp_path):
    partial = tmp_path / "mirror"
    os.makedirs(partial / "SST-2")
    shutil.copy(os.path.join(fixture_mirror, "SST-2", "train.tsv"), partial / "SST-2")
    with fixture_digests():
        with pytest.raises(data.DataError, match="dev.tsv"):
            sources.fetch("sst2", mirror=str(partial))


def _zip_bytes(members):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, payload in members.items():
            z.writestr(name, payload)
    return buf.getvalue()


@pytest.fixture
def fake_download(monkeypatch, fixture_mirror):
    """Replace sources.download by a function that writes an archive made here; returns the call log."""
    members = {}
    for rel in sources.SOURCES["sst2"]["files"]:
        with open(os.path.join(fixture_mirror, rel), "rb") as f:
            members[rel] = f.read()
    calls = []

    def download(url, dest, timeout=60):
        calls.append(url)
        with open(dest, "wb") as f:
            f.write(_zip_bytes(members))

    monkeypatch.setattr(sources, "download", download)
    return members, calls


def test_fetch_downloads_once_and_verifies(fake_download, fixture_digests, tmp_path):
    members, calls = fake_download
    cache = str(tmp_path / "cache")
    with fixture_digests():
        assert sources.fetch("sst2", mirror=None, cache_dir=cache) == members
        assert sources.fetch("sst2", mirror=None, cache_dir=cache) == members  # from the cached archive
    assert calls == [sources.SOURCES["sst2"]["url"]]
    assert os.listdir(cache) == ["SST-2.zip"]


def test_fetch_corrupt_archive(fake_download, fixture_digests, tmp_path):
    cache = tmp_path / "cache"
    os.makedirs(cache)
    (cache / "SST-2.zip").write_bytes(b"this is not a zip file" * 10)
    with fixture_digests(), pytest.raises(data.DataError, match="not the expected archive"):
        sources.fetch("sst2", mirror=None, cache_dir=str(cache))
    (cache / "SST-2.zip").write_bytes(_zip_bytes({"SST-2/train.tsv": b"sentence\tlabel\n"}))  # no dev.tsv
    with fixture_digests(), pytest.raises(data.DataError, match="not the expected archive"):
        sources.fetch("sst2", mirror=None, cache_dir=str(cache))
    assert fake_download[1] == []  # an archive was there, so nothing was downloaded


def test_fetch_wrong_archive_content(fake_download, tmp_path):
    with pytest.raises(data.DataError, match="sha256"):  # the real digests against the fake archive
        sources.fetch("sst2", mirror=None, cache_dir=str(tmp_path / "cache"))


def test_fetch_download_failure_points_to_a_mirror(monkeypatch, tmp_path):
    def offline(url, dest, timeout=60):
        raise ConnectionError("network is unreachable")

    monkeypatch.setattr(sources, "download", offline)
    with pytest.raises(data.DataError, match="mirror"):
        sources.fetch("sst2", mirror=None, cache_dir=str(tmp_path / "cache"))


# -----------------------------------------------------------------------------
# data.prepare("sst2") on the tiny fake mirror (fast): the whole pipeline, reproducibility


def _bin_bytes(folder):
    out = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            out[name] = f.read()
    return out


def test_prepare_fixture_is_reproducible(fixture_mirror, fixture_digests, tiny_dataset, tmp_path):
    with fixture_digests():
        data.prepare("sst2", protocol="standard", mirror=fixture_mirror, out_dir=str(tmp_path / "same"), verbose=False)
        data.prepare("sst2", protocol="standard", mirror=fixture_mirror, out_dir=str(tmp_path / "other"), seed=1,
                     verbose=False)
    same, first = _bin_bytes(tmp_path / "same"), _bin_bytes(tiny_dataset)
    assert same == first  # same seed: identical bytes, meta.json included
    other = _bin_bytes(tmp_path / "other")
    assert other["train_labels.bin"] != first["train_labels.bin"] or other["train.bin"] != first["train.bin"]


def test_prepared_fixture_dataset(tiny_dataset):
    meta = data.load_meta(tiny_dataset)
    assert {k: c["n"] for k, c in meta["counts"].items()} == {"train": 64, "val": 8, "test": 8}
    for split in ("train", "val", "test"):
        s = data.ClassificationSplit(tiny_dataset, split)
        assert len(s) == meta["counts"][split]["n"]
        assert (s.tokens[s.offsets[:-1]] == data.CLS).all() and (s.tokens == data.CLS).sum() == len(s)
        assert int(s.tokens.max()) < meta["vocab_size"] and not (s.tokens == data.PAD).any()
    assert meta["vocab_size"] == data.N_SPECIAL + len(meta["vocab"])


def test_load_meta_missing(tmp_path):
    with pytest.raises(data.DataError, match="meta.json"):
        data.load_meta(str(tmp_path))


# -----------------------------------------------------------------------------
# the real SST-2 mirror (skipped without it): each protocol prepared once per session, ~4 s each

EXPECTED = {"glue": {"train": 63_982, "val": 3_367, "test": 872},
            "standard": {"train": 54_576, "val": 6_822, "test": 6_823}}


@pytest.fixture(scope="session")
def real_prepared(real_mirror, tmp_path_factory):
    cache = {}

    def get(protocol):
        if protocol not in cache:
            out = str(tmp_path_factory.mktemp(f"sst2_{protocol}"))
            cache[protocol] = (out, data.prepare("sst2", protocol=protocol, mirror=real_mirror, out_dir=out,
                                                 verbose=False))
        return cache[protocol]

    return get


@pytest.mark.parametrize("protocol", ["glue", "standard"])
def test_real_sst2_splits(real_prepared, real_mirror, protocol):
    folder, meta = real_prepared(protocol)
    assert {k: c["n"] for k, c in meta["counts"].items()} == EXPECTED[protocol]
    assert sha256_file(os.path.join(real_mirror, "SST-2/train.tsv")) == \
        sources.SOURCES["sst2"]["files"]["SST-2/train.tsv"]
    splits = {k: data.ClassificationSplit(folder, k) for k in EXPECTED[protocol]}
    assert {k: len(v) for k, v in splits.items()} == EXPECTED[protocol]
    for k, s in splits.items():
        starts = s.tokens[s.offsets[:-1]]
        assert (starts == data.CLS).all(), f"{k}: a sequence does not start with [CLS]"
        assert (s.tokens == data.CLS).sum() == len(s)  # and [CLS] appears nowhere else
        assert int(s.tokens.max()) < meta["vocab_size"] and not (s.tokens == data.PAD).any()
        assert s.lengths.max() <= meta["max_len"] and s.lengths.min() >= 2
    assert not (splits["train"].tokens == data.UNK).any()  # the compact vocab is the training vocab

    # the stored sequences are the TextEncoder's output for the split's sentences, in order
    files = sources.fetch("sst2", real_mirror)
    parsed = sst2.parse_sst2_tsv(files["SST-2/train.tsv"]), sst2.parse_sst2_tsv(files["SST-2/dev.tsv"])
    sents = sst2.split_sst2(*parsed, protocol, meta["seed"])
    assert np.array_equal(splits["train"].labels, sents["train"][1])
    assert np.array_equal(splits["test"].labels, sents["test"][1])
    encoder = tokenizer.TextEncoder(meta)
    rng = np.random.default_rng(0)
    for k in ("train", "test"):
        for i in list(range(50)) + rng.choice(len(splits[k]), 150, replace=False).tolist():
            assert np.array_equal(encoder(sents[k][0][i]), splits[k][i][0]), f"{k}[{i}]: {sents[k][0][i]!r}"


def test_real_sst2_same_seed_same_bytes(real_prepared, real_mirror, tmp_path):
    folder, _ = real_prepared("glue")
    data.prepare("sst2", protocol="glue", mirror=real_mirror, out_dir=str(tmp_path / "again"), verbose=False)
    assert _bin_bytes(tmp_path / "again") == _bin_bytes(folder)


def test_help_prints(capsys):
    """`python data.py --help` prints the usage (its --subset help once held a bare '%', which argparse
    reads as a format and crashed on)."""
    with pytest.raises(SystemExit) as e:
        data.main(["--help"])
    assert e.value.code == 0 and "frac<P> (P % of train" in capsys.readouterr().out


def test_ctrl_c_while_a_dataset_is_written_leaves_nothing_and_exits_130(tmp_path, monkeypatch, capsys):
    """python data.py stopped by Ctrl-C while it writes the splits: exit 130 with one line, and no file of the
    dataset left behind (prepare writes into a staging folder and moves the files in, meta.json last)."""
    splits = {"train": ([np.array([2, 5, 6]), np.array([2, 7])], [1, 0]), "val": ([np.array([2, 5])], [0]),
              "test": ([np.array([2, 6])], [1])}
    monkeypatch.setitem(data.DATASETS, "sst2", data.DatasetSpec(lambda **kw: (splits, {"vocab_size": 8}),
                                                               "classification"))
    real, writes = data.write_bin, []

    def write_bin(path, array):
        writes.append(path)
        if len(writes) == 4:  # the second split's first file: the first split is written (in staging)
            raise KeyboardInterrupt
        real(path, array)

    monkeypatch.setattr(data, "write_bin", write_bin)
    out = tmp_path / "sst2"
    with pytest.raises(SystemExit) as stop:
        data.main(["sst2", "--out_dir", str(out)])
    assert stop.value.code == 130
    assert capsys.readouterr().err.strip() == "interrupted: the dataset was not prepared, and nothing of it was written"
    assert not out.exists()  # the folder it made is gone with the staging folder in it
    out.mkdir()
    (out / "notes.txt").write_text("the user's")
    writes.clear()
    with pytest.raises(SystemExit):
        data.main(["sst2", "--out_dir", str(out)])
    assert os.listdir(out) == ["notes.txt"]  # a folder that was there keeps what it held, and only that
