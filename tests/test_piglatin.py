"""
The Pig Latin study: the rules and the dataset (data.py), the encoder-decoder and Mamba (model.py),
the seq2seq task (train.py) and its evaluation, error analysis and pictures (evaluate.py).

Models are tiny (width 16-32) and the dataset is built from a short fake novel, so every test runs in
seconds on a CPU; one test reads the real mirror's novel and checks the counts docs/piglatin_mamba.md gives
and its split, and one checks the prepared data/piglatin's four splits against each other (skipped if not prepared).
"""

import io
import json
import math
import os
import tarfile
from contextlib import nullcontext
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import data
import evaluate
import model as M
import tokenizer
import train
from bookkeeping import checkpoints, flops
from conftest import fake_downloads
from corpora import piglatin, sources

NOVEL = "pride_and_prejudice"
REL = "gutenberg_pride_and_prejudice/1342-0.txt"
TEXT = """CHAPTER I.

It is a truth universally acknowledged, that a single man in possession of a good fortune must be in
want of a wife. Mr. Bennet’s daughters--Jane’s sisters--walked in the pleasure-grounds; a
good-humoured young man, quite square in his rhythm, was strengthening his thoughtfulness. Don’t!
The brown conditioning is yellow; XV. Tête-à-tête. Every quiet queen quoted equal quantities.
""" + " ".join(f"{a}{b}{c}" for a in "bcdfgst" for b in "aeiou" for c in ["t", "n", "ck", "sh", "mp", "rd"])


# the fake IMDB reviews the unseen words come from: new words of each rule, words the novel has (brown,
# quite), one too long for the context, a possessive and a word with a digit (neither is a word here), and a
# compound of a word that is a part of the novel's compounds (good-good: good always trains), and a word the
# novel has only inside a compound (grounds, of pleasure-grounds: not unseen)
REVIEWS = ["A well-made film, brown and quite gripping; its over-the-top ending rocks.<br />Strange but fun.",
           "Xkcd fans: the antidisestablishmentarianism-supercalifragilistic gag is old. Director's cut. Grounds!",
           "Utterly awful, yet rhythm and yellow-green scenes: eight out of ten. Sci-fi r2d2 bits. A good-good cast."]


def imdb_tgz(reviews=REVIEWS):
    """An archive in aclImdb's layout: each review once in each half."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for half in ("train", "test"):
            for i, text in enumerate(reviews):
                info = tarfile.TarInfo(f"aclImdb/{half}/{'pos' if i % 2 else 'neg'}/{i}_{8 if i % 2 else 2}.txt")
                info.size = len(text.encode())
                tar.addfile(info, io.BytesIO(text.encode()))
    return buf.getvalue()


@pytest.fixture
def novel_mirror(tmp_path, monkeypatch):
    """A mirror holding a short fake 1342-0.txt and a small IMDB archive, with sources.SOURCES pointing at their
    sha256s."""
    path = tmp_path / "mirror" / REL
    path.parent.mkdir(parents=True)
    path.write_text(TEXT, encoding="utf-8")
    monkeypatch.setitem(sources.SOURCES[NOVEL]["files"], REL, sources.sha256(path.read_bytes()))
    archive = imdb_tgz()
    (tmp_path / "mirror" / sources.SOURCES["imdb"]["mirror_file"]).write_bytes(archive)
    monkeypatch.setitem(sources.SOURCES["imdb"], "mirror_sha256", sources.sha256(archive))
    return str(tmp_path / "mirror")


@pytest.fixture
def pig_data(novel_mirror, tmp_path):
    out = str(tmp_path / "piglatin")
    data.prepare("piglatin", mirror=novel_mirror, out_dir=out, verbose=False)
    return out


# -----------------------------------------------------------------------------
# the rules and the words


@pytest.mark.parametrize("word, pig", [
    ("brown", "ownbray"), ("conditioning", "onditioningcay"), ("is", "isway"),  # the write-up's three
    ("pleasure-grounds", "easureplay-oundsgray"), ("strengthening", "engtheningstray"),
    ("thoughtfulness", "oughtfulnessthay"), ("good-humoured", "oodgay-umouredhay"),  # its error table's truths
    ("yellow", "ellowyay"), ("rhythm", "ythmrhay"), ("my", "ymay"),  # y: consonant first, vowel after
    ("quite", "itequay"), ("square", "aresquay"), ("equal", "equalway"),  # qu moves as one
    ("mr", "mray"), ("a", "away"), ("a-b", "away-bay"),
])
def test_pig_latin_rules(word, pig):
    assert piglatin.pig_latin(word) == pig


@pytest.mark.parametrize("bad", ["", "Brown", "don't", "a--b", "-a", "tête", "b1"])
def test_pig_latin_refuses_what_it_does_not_define(bad):
    with pytest.raises(ValueError, match="lower-case letters"):
        piglatin.pig_latin(bad)


def test_rule_names():
    assert [piglatin.pig_latin_rule(w) for w in ("brown", "is", "a-b", "mr", "my")] == \
        ["consonant", "vowel", "hyphenated", "no vowel", "consonant"]


def test_novel_words_keeps_plain_and_hyphenated_words_only():
    words = piglatin.novel_words(TEXT)
    assert words == sorted(set(words))
    for w in ("pleasure-grounds", "good-humoured", "mr", "xv", "daughters", "sisters", "chapter", "i"):
        assert w in words
    # possessives, contractions and accented words are left out whole, not cut into new words
    for w in ("bennet’s", "bennet", "jane", "t", "don’t", "tête-à-tête", "tête", "te"):
        assert w not in words
    assert "daughters--jane" not in words and "sisters--walked" not in words  # a dash is not a hyphen


# -----------------------------------------------------------------------------
# which words may be in which split


def split_words(ds):
    codec = tokenizer.CharCodec(piglatin.PIG_LATIN_VOCAB)
    return {k: [codec.decode(s[i][0]) for i in range(len(s))] for k, s in ds.splits.items()}


def check_no_held_out_word_occurs_elsewhere(splits):
    """The split's rule, for every pair of splits: no word is in two splits, and no held-out word (val, test,
    unseen) occurs in a word of another split, whole or inside it (piglatin.word_pieces). A training word may be
    a part of a held-out compound (a compound of known words), and an unseen compound may hold any novel
    word (the novel's val and test words are as new to the model as the review's own). Returns the words
    found inside another split's words, by (outer split, inner split)."""
    inside = {}
    for outer in splits:
        outer_pieces = piglatin.pieces_of(splits[outer])
        for inner in splits:
            if inner == outer:
                continue
            assert not set(splits[outer]) & set(splits[inner]), f"words in {outer} and in {inner}"
            inside[outer, inner] = set(splits[inner]) & outer_pieces
            if inner != "train" and outer != "unseen":
                assert not inside[outer, inner], f"{inner} words inside {outer} words: {sorted(inside[outer, inner])}"
    return inside


def test_word_pieces():
    assert piglatin.word_pieces("brown") == {"brown"}
    assert piglatin.word_pieces("re-read") == {"re-read", "re", "read"}
    assert piglatin.word_pieces("sea-bathing-place") == {"sea-bathing-place", "sea-bathing", "bathing-place", "sea",
                                                     "bathing", "place"}  # not sea-place: it is not in the word
    assert piglatin.pieces_of(["re-read", "read", "a-b"]) == {"re-read", "re", "read", "a-b", "a", "b"}


NOVEL_WORDS = sorted(["re", "read", "re-read", "bathing", "place", "bathing-place", "sea-bathing", "sea-bathing-place",
                      "century", "eighteenth-century", "good", "good-humoured", "ill-bred", "self", "conceit",
                      "self-conceit", "brown", "is", "quite", "yellow", "mr", "rhythm", "equal", "square", "strong",
                      "thoughtful", "house", "garden", "letter", "sister", "walk", "ball"])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_split_novel_trains_every_word_that_is_part_of_another(seed):
    """A word that is part of another word (re, read, bathing, sea-bathing, century, good, self, conceit, ...)
    is always a training word; val and test are drawn from the rest, at their sizes; a training word may be
    part of a held-out compound."""
    split = piglatin.split_novel(NOVEL_WORDS, seed, 4, 5)
    assert [len(split[k]) for k in ("val", "test")] == [4, 5] and sorted(sum(split.values(), [])) == NOVEL_WORDS
    parts = {"re", "read", "bathing", "place", "sea-bathing", "century", "good", "self", "conceit"}
    assert parts <= set(split["train"])
    check_no_held_out_word_occurs_elsewhere(split)
    assert all(split[k] == sorted(split[k]) for k in split)
    assert split == piglatin.split_novel(NOVEL_WORDS, seed, 4, 5)
    assert {k: v for k, v in split.items() if k != "train"} != \
        {k: v for k, v in piglatin.split_novel(NOVEL_WORDS, seed + 10, 4, 5).items() if k != "train"}


def test_unseen_words_occur_nowhere_in_the_novel():
    """A review word that is a novel word, or a part of one (bathing, re, sea-bathing), is not unseen; one that
    holds a novel word (bathing-suit, brown-ish) is, and so is one that only spells like it (rereading)."""
    texts = ["Bathing, re and read; sea-bathing at the bathing-suit place-holder.", "Brown-ish brown; rereading."]
    novel = ["bathing-place", "re-read", "sea-bathing-place", "brown"]
    got, qualified = piglatin.unseen_words(texts, novel, 43)
    assert got == ["and", "at", "bathing-suit", "brown-ish", "place-holder", "rereading", "the"] and qualified == 7
    sample, _ = piglatin.unseen_words(texts, novel, 43, n=3)
    assert len(sample) == 3 and set(sample) < set(got) and sample == piglatin.unseen_words(texts, novel, 43, n=3)[0]


def test_the_pair_check_catches_the_old_leaks():
    """check_no_held_out_word_occurs_elsewhere fails on each leak the first split had."""
    for leaky in ({"train": ["eighteenth-century"], "test": ["century"]},  # a test word inside a training compound
                  {"train": ["bathing-place"], "unseen": ["bathing"]},  # an unseen one
                  {"train": ["self"], "val": ["self"]}):  # a word in two splits
        with pytest.raises(AssertionError):
            check_no_held_out_word_occurs_elsewhere(leaky)
    allowed = {"train": ["good", "humoured"], "test": ["good-humoured"], "unseen": ["good-humoured-ish"]}
    assert check_no_held_out_word_occurs_elsewhere(allowed)["test", "train"] == {"good", "humoured"}


# -----------------------------------------------------------------------------
# the prepared dataset


def test_unseen_split_holds_review_words_the_novel_lacks(pig_data):
    """The unseen split: every word of the fake reviews that occurs nowhere in the novel (not even inside a
    compound) and that fits the context, with its translation; its composition by rule in meta.json."""
    ds = data.Dataset(pig_data)
    assert list(ds.splits) == ["train", "val", "test", "unseen"]
    codec, split = tokenizer.CharCodec(piglatin.PIG_LATIN_VOCAB), ds.splits["unseen"]
    pairs = [(codec.decode(s), codec.decode(t)) for s, t in (split[i] for i in range(len(split)))]
    words = [w for w, _ in pairs]
    assert all(t == piglatin.pig_latin(w) for w, t in pairs)
    novel, block = set(piglatin.novel_words(TEXT)), ds.meta["block_size"]
    everything = piglatin.novel_words(" ".join(REVIEWS).replace("<br />", "\n"))
    fits = [w for w in everything if len(w) + len(piglatin.pig_latin(w)) + 2 <= block]
    assert words == sorted(w for w in fits if w not in piglatin.pieces_of(novel))  # fewer than UNSEEN_WORDS: all
    assert not novel & set(words) and {"brown", "quite", "grounds"} <= set(everything) - set(words)
    assert {"well-made", "over-the-top", "xkcd", "utterly", "yellow-green", "sci-fi"} <= set(words)
    assert "antidisestablishmentarianism-supercalifragilistic" in set(everything) - set(fits)
    assert not {"director", "directors", "br", "r2d2"} & set(words)  # a possessive is left out; <br /> is no word
    rules = [piglatin.pig_latin_rule(w) for w in words]
    assert ds.meta["counts"]["unseen"]["rules"] == {r: rules.count(r) for r in sorted(set(rules))}
    assert ds.meta["unseen"] == {"from": "the IMDB reviews, both halves (6)", "qualified": len(words),
                                 "sample": len(words)}


def test_unseen_sample_is_seeded_and_leaves_the_novel_split_alone(novel_mirror, tmp_path):
    codec = tokenizer.CharCodec(piglatin.PIG_LATIN_VOCAB)

    def words(seed, n_unseen):
        out = str(tmp_path / f"{seed}_{n_unseen}")
        data.prepare("piglatin", mirror=novel_mirror, out_dir=out, seed=seed, n_unseen=n_unseen, verbose=False)
        ds = data.Dataset(out)
        return {k: [codec.decode(s[i][0]) for i in range(len(s))] for k, s in ds.splits.items()}, ds.meta

    (a, meta), (b, _), (c, _), (every, _) = words(1, 8), words(1, 8), words(2, 8), words(1, 10**6)
    assert len(a["unseen"]) == 8 < meta["unseen"]["qualified"] == len(every["unseen"])
    assert a["unseen"] == b["unseen"] != c["unseen"] and a["unseen"] == sorted(a["unseen"])
    assert set(a["unseen"]) < set(every["unseen"])
    assert all(a[k] == every[k] for k in ("train", "val", "test"))  # the sample's size leaves the novel's split
    n_val = len(piglatin.novel_words(TEXT)) // 10
    novel = piglatin.split_novel(piglatin.novel_words(TEXT), 1, n_val, n_val)
    assert all(a[k] == novel[k] for k in ("train", "val", "test"))  # the novel's split alone, unseen words aside


def test_a_folder_without_the_unseen_split_still_reads(pig_data):
    for side in ("src", "tgt"):
        for suffix in ("", "_offsets"):
            os.remove(os.path.join(pig_data, f"unseen_{side}{suffix}.bin"))
    assert list(data.Dataset(pig_data).splits) == ["train", "val", "test"]


def test_prepare_splits_are_disjoint_and_decode(pig_data):
    ds = data.Dataset(pig_data)
    assert ds.task == "seq2seq" and ds.meta["vocab"] == piglatin.PIG_LATIN_VOCAB
    assert ds.facts()["vocab_size"] == 30 and ds.meta["specials"] == {"pad": 0, "sos": 1, "eos": 2}
    codec = tokenizer.CharCodec(ds.meta["vocab"])
    seen = {}
    for name, split in ds.splits.items():
        if name == "unseen":
            continue
        for i in range(len(split)):
            src, tgt = split[i]
            word = codec.decode(src)
            assert codec.decode(tgt) == piglatin.pig_latin(word)
            assert word not in seen, f"{word} in {seen.get(word)} and {name}"
            seen[word] = name
        assert list(split.lengths) == [len(split[i][0]) for i in range(len(split))]
    assert sorted(seen) == piglatin.novel_words(TEXT)
    n = len(seen)
    assert (len(ds.splits["val"]), len(ds.splits["test"])) == (n // 10, n // 10)
    assert ds.meta["block_size"] == max(len(w) + len(piglatin.pig_latin(w)) + 2 for w in seen)
    check_no_held_out_word_occurs_elsewhere(split_words(ds))


def test_prepare_is_deterministic_and_seeded(novel_mirror, tmp_path):
    def words(out, seed):
        data.prepare("piglatin", mirror=novel_mirror, out_dir=out, seed=seed, verbose=False)
        split, codec = data.Dataset(out).splits["val"], tokenizer.CharCodec(piglatin.PIG_LATIN_VOCAB)
        return [codec.decode(split[i][0]) for i in range(len(split))]

    a, b = words(str(tmp_path / "a"), 1), words(str(tmp_path / "b"), 1)
    assert a == b and a != words(str(tmp_path / "c"), 2)


def real_novel_words():
    mirror = os.environ["DATA_MIRROR"]
    if not os.path.isfile(os.path.join(mirror, REL)):
        pytest.skip(f"no {REL} in {mirror}")
    raw = sources.fetch(NOVEL, mirror)[REL]  # sha256 checked
    return piglatin.novel_words(raw.decode("utf-8"))


def test_real_novel_counts():
    """The mirror's Pride and Prejudice: the counts docs/piglatin_mamba.md states, and its split by the rule."""
    words = real_novel_words()
    assert len(words) == 6829 and sum("-" in w for w in words) == 188
    split = piglatin.split_novel(words, 1337, 682, 682)
    assert [len(split[k]) for k in ("train", "val", "test")] == [5465, 682, 682]
    inside = {p for w in words for p in piglatin.word_pieces(w) if p != w} & set(words)
    assert len(inside) == 191 and inside <= set(split["train"])
    assert {"century", "eighteenth", "self"} <= inside  # the reviewer's cases (test and val words before) train now
    assert {"bathing", "re"} <= piglatin.pieces_of(words) - set(words)  # (unseen before): parts of novel compounds
    check_no_held_out_word_occurs_elsewhere(split)


def test_real_prepared_split_teaches_no_held_out_word():
    """The prepared data/piglatin (python data.py piglatin, from the mirror), every pair of its four splits:
    the rule holds, and the only words inside another split's words are the ones it allows, of which the real
    data has each kind. A folder prepared by the old rule fails here: rebuild it."""
    folder = data.dataset_dir("piglatin")
    if not os.path.isfile(os.path.join(folder, "meta.json")):
        pytest.skip(f"{folder} is not prepared (python data.py piglatin)")
    splits = split_words(data.Dataset(folder))
    words = real_novel_words()
    assert {k: v for k, v in splits.items() if k != "unseen"} == piglatin.split_novel(words, 1337, 682, 682), \
        f"{folder} was prepared by another split rule: python data.py piglatin rebuilds it"
    assert len(splits["unseen"]) == 3000 and not set(splits["unseen"]) & piglatin.pieces_of(words)
    inside = check_no_held_out_word_occurs_elsewhere(splits)
    assert {pair for pair, found in inside.items() if found} == {
        ("val", "train"), ("test", "train"), ("unseen", "train"), ("unseen", "val"), ("unseen", "test")}


def test_download_path_and_corrupt_file(novel_mirror, monkeypatch, tmp_path):
    payload = open(os.path.join(novel_mirror, REL), "rb").read()
    calls = fake_downloads(monkeypatch, payload)
    cache = str(tmp_path / "cache")
    for _ in range(2):
        assert sources.fetch(NOVEL, mirror=None, cache_dir=cache) == {REL: payload}
    assert calls == [sources.SOURCES[NOVEL]["url"]]  # once: the second read is from the cache
    assert calls[0].startswith("https://raw.githubusercontent.com/gutenbergbooks/1342/")
    with open(os.path.join(cache, sources.SOURCES[NOVEL]["cache_name"]), "ab") as f:
        f.write(b"tampered")
    with pytest.raises(data.DataError, match="sha256"):
        sources.fetch(NOVEL, mirror=None, cache_dir=cache)


def test_corrupt_split_is_refused(pig_data):
    data.write_bin(os.path.join(pig_data, "val_tgt_offsets.bin"), np.array([0, 1], dtype=np.int64))
    with pytest.raises(data.DataError, match="disagree"):
        data.Dataset(pig_data)


# -----------------------------------------------------------------------------
# batches in the two layouts


def test_collate_layouts_line_up():
    pairs = [(np.array([5, 6, 7]), np.array([6, 7, 5, 4])), (np.array([8]), np.array([8, 9, 10]))]
    pair = data.seq2seq_collate(pairs, "pair", "cpu")
    assert pair["src"].tolist() == [[5, 6, 7, 2], [8, 2, 0, 0]]
    assert pair["src_mask"].tolist() == [[True] * 4, [True, True, False, False]]
    assert pair["idx"].tolist() == [[1, 6, 7, 5, 4], [1, 8, 9, 10, 0]]
    assert pair["targets"].tolist() == [[6, 7, 5, 4, 2], [8, 9, 10, 2, -100]]
    joined = data.seq2seq_collate(pairs, "joined", "cpu")
    for row, (src, tgt) in enumerate(pairs):
        x, y = joined["idx"][row].tolist(), joined["targets"][row].tolist()
        scored = [i for i, t in enumerate(y) if t != -100]
        # the scored positions read [SOS] + translation and predict translation + [EOS]
        assert [x[i] for i in scored] == [1, *tgt] and [y[i] for i in scored] == [*tgt, 2]
        assert x[:len(src) + 1] == [*src, 2]
    with pytest.raises(ValueError, match="layout"):
        data.seq2seq_collate(pairs, "stacked", "cpu")


# -----------------------------------------------------------------------------
# the models


def encdec(**kw):
    torch.manual_seed(0)
    args = dict(vocab_size=30, block_size=24, n_layer=1, n_embd=16, n_head=2, ffn_hidden=16, dropout=0.0)
    return M.EncoderDecoder(M.EncDecConfig(**{**args, **kw})).eval()


def mamba(**kw):
    torch.manual_seed(0)
    args = dict(vocab_size=30, block_size=40, n_layer=2, n_embd=16, d_state=4, scan="sequential")
    return M.Mamba(M.MambaConfig(**{**args, **kw})).eval()


def batch(layout, n=3):
    rng = np.random.default_rng(0)
    pairs = [(rng.integers(3, 30, size=k), rng.integers(3, 30, size=k + 2)) for k in (4, 6, 5)[:n]]
    return data.seq2seq_collate(pairs, layout, "cpu")


def test_sinusoid_table():
    t = M.sinusoid_table(5, 6)
    p, i = 3, 1
    assert torch.isclose(t[p, 2 * i], torch.tensor(np.sin(p / 10000 ** (2 * i / 6)), dtype=torch.float32))
    assert torch.isclose(t[p, 2 * i + 1], torch.tensor(np.cos(p / 10000 ** (2 * i / 6)), dtype=torch.float32))
    assert M.sinusoid_table(4, 5).shape == (4, 5)  # an odd width works too


def test_positions_frozen_or_trained():
    frozen, trained = encdec(train_pos=False), encdec(train_pos=True)
    for m in (frozen, trained):
        assert torch.equal(m.pos_emb.weight, M.sinusoid_table(24, 16))
    assert not frozen.pos_emb.weight.requires_grad and trained.pos_emb.weight.requires_grad
    counts = frozen.param_counts()
    assert counts["trainable"] == counts["total"] - 24 * 16
    assert encdec(pos="none").pos_emb is None and encdec(pos="learned").pos_emb.weight.std() < 0.05


def test_embedding_scale():
    """Vaswani sec. 3.4: tokens N(0, 1/d) times sqrt(d) (unit scale, as the sinusoid), or, with
    emb_scale off, this project's N(0, 0.02) as they are."""
    idx = torch.tensor([[3, 4, 5]])
    for scaled in (True, False):
        m = encdec(emb_scale=scaled, pos="none", vocab_size=300, n_embd=32, n_head=2)
        std = m.tok_emb.weight.std().item()
        assert abs(std - (32 ** -0.5 if scaled else 0.02)) < 0.1 * std
        factor = 32 ** 0.5 if scaled else 1.0
        assert torch.allclose(m.embed(idx), m.tok_emb(idx) * factor)
    with pytest.raises(ValueError, match="pos="):
        encdec(pos="alibi")


def test_encdec_decoder_is_causal_and_reads_the_source():
    m, inp = encdec(), batch("pair")
    logits, loss = m(**inp)
    assert logits.shape == (*inp["idx"].shape, 30) and loss.item() > 0
    changed = dict(inp, idx=inp["idx"].clone())
    changed["idx"][:, 3] = 7
    assert torch.allclose(m(**changed)[0][:, :3], logits[:, :3], atol=1e-6)  # the future does not leak back
    assert not torch.allclose(m(**changed)[0][:, 3:], logits[:, 3:])
    other = dict(inp, src=inp["src"].roll(1, 0), src_mask=inp["src_mask"].roll(1, 0))
    assert (m(**other)[0] - logits).abs().max() > 1e-3  # cross-attention carries the source


def test_encdec_source_padding_is_masked():
    m, inp = encdec(), batch("pair", n=1)
    longer = dict(inp, src=torch.cat((inp["src"], torch.zeros(1, 5, dtype=torch.long)), 1),
                  src_mask=torch.cat((inp["src_mask"], torch.zeros(1, 5, dtype=torch.bool)), 1))
    assert torch.allclose(m(**longer)[0], m(**inp)[0], atol=1e-5)


@pytest.mark.parametrize("pos", ["sinusoidal", "rope", "none"])
def test_encdec_sdpa_equals_manual(pos):
    inp = batch("pair")
    fast, slow = encdec(pos=pos, attn_impl="sdpa"), encdec(pos=pos, attn_impl="manual")
    slow.load_state_dict(fast.state_dict())
    (lf, loss_f), (ls, loss_s) = fast(**inp), slow(**inp)
    assert torch.allclose(lf, ls, atol=1e-5)
    loss_f.backward(), loss_s.backward()
    for (name, a), b in zip(fast.named_parameters(), slow.parameters()):
        assert torch.allclose(a.grad, b.grad, atol=1e-5), name


def test_encdec_attention_weights():
    m, inp = encdec(n_layer=2), batch("pair")
    with torch.no_grad():
        logits, _, w = m(**inp, need_weights=True)
    B, S, T = inp["src"].size(0), inp["src"].size(1), inp["idx"].size(1)
    assert [x.shape for x in w["encoder"]] == [(B, 2, S, S)] * 2
    assert [x.shape for x in w["cross"]] == [(B, 2, T, S)] * 2 and [x.shape for x in w["decoder"]] == [(B, 2, T, T)] * 2
    assert torch.allclose(w["cross"][0].sum(-1), torch.ones(B, 2, T), atol=1e-5)
    assert float(w["cross"][0][0, :, :, 5:].abs().max()) < 1e-6  # row 0: a word of 4 and [EOS], then padding
    assert float(w["decoder"][0].triu(1).abs().max()) == 0.0
    assert torch.allclose(logits, m(**inp)[0], atol=1e-5)


def test_flops_of_the_encoder_decoder():
    from torch.utils.flop_counter import FlopCounterMode

    m = encdec(n_layer=2, attn_impl="manual")
    src, idx = torch.randint(3, 30, (1, 7)), torch.randint(3, 30, (1, 7))
    with FlopCounterMode(display=False) as counter:
        m(src, idx)
    assert flops.forward_flops(m, 7) == counter.get_total_flops()


@pytest.mark.parametrize("method", M.DISCRETIZATIONS)
def test_discretizations_match_their_matrix_formulas(method):
    """The elementwise forms equal the matrix formulas (Mamba eq. 4, S4 eq. 3) with a diagonal A."""
    torch.manual_seed(0)
    D, N = 3, 4
    delta = torch.rand(1, 1, D, dtype=torch.float64) * 3  # up to Delta A < -2: a negative bilinear A-bar
    A = -torch.rand(D, N, dtype=torch.float64) * 2 - 0.1
    Bm, x = torch.randn(1, 1, N, dtype=torch.float64), torch.randn(1, 1, D, dtype=torch.float64)
    a_bar, bx_bar = M.discretize(delta, A, Bm, x, method)
    eye = torch.eye(N, dtype=torch.float64)
    for d in range(D):
        dA, dB = torch.diag(delta[0, 0, d] * A[d]), delta[0, 0, d] * Bm[0, 0]
        if method == "bilinear":
            Ab = torch.linalg.solve(eye - dA / 2, eye + dA / 2)
            Bb = torch.linalg.solve(eye - dA / 2, dB)
        else:
            Ab = torch.linalg.matrix_exp(dA)
            Bb = dB if method == "zoh_approx" else torch.linalg.solve(dA, (Ab - eye) @ dB)
        assert torch.allclose(a_bar[0, 0, d], torch.diagonal(Ab))
        assert torch.allclose(bx_bar[0, 0, d], Bb * x[0, 0, d])
    if method == "bilinear":
        assert (a_bar < 0).any()  # the scans must handle signs


def test_mamba_is_causal_and_ignores_right_padding():
    m = mamba()
    idx = torch.randint(3, 30, (2, 9))
    logits, _ = m(idx)
    changed = idx.clone()
    changed[:, 5:] = 0
    assert torch.allclose(m(changed)[0][:, :5], logits[:, :5], atol=1e-6)


@pytest.mark.parametrize("method", M.DISCRETIZATIONS)
def test_mamba_scans_agree(method):
    """The three scans, the chunked one and the convolution as a matmul compute the same model: outputs and every
    gradient, on an odd length."""
    inp = batch("joined")
    ref = mamba(discretization=method, scan="sequential")
    ref(**inp)[1].backward()
    for scan, chunk, conv in (("parallel", 0, "torch"), ("logspace", 0, "torch"), ("sequential", 4, "torch"),
                              ("sequential", 4, "matmul")):  # 4: the chunked scan, ragged
        m = mamba(discretization=method, scan=scan, scan_chunk=chunk, conv_impl=conv)
        m.load_state_dict(ref.state_dict())
        logits, loss = m(**inp)
        assert torch.allclose(logits, ref(**inp)[0], atol=1e-4), (scan, conv)
        loss.backward()
        for (name, a), b in zip(m.named_parameters(), ref.parameters()):
            assert torch.allclose(a.grad, b.grad, atol=1e-4, rtol=1e-3), (scan, conv, name)


@pytest.mark.parametrize("T, K", [(9, 4), (7, 16), (1, 3)], ids=["T>K", "K>T", "T=1"])
def test_causal_conv_matmul_is_the_convolution(T, K):
    """M.causal_conv_matmul, the causal depthwise convolution as a Toeplitz matrix per channel, equals MambaMixer's
    nn.Conv1d (its first T outputs) in value and in the gradients of x, weight and bias: float64, odd sizes, and a
    kernel longer than the sequence (its lags past T cut off)."""
    torch.manual_seed(0)
    conv = torch.nn.Conv1d(5, 5, K, groups=5, padding=K - 1).double()
    x = torch.randn(3, T, 5, dtype=torch.float64, requires_grad=True)
    ref = conv(x.transpose(1, 2))[..., :T].transpose(1, 2)
    y = M.causal_conv_matmul(x, conv.weight, conv.bias)
    gy = torch.randn_like(ref)
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)
    for name, g, w in zip(["x", "weight", "bias"], torch.autograd.grad(y, (x, conv.weight, conv.bias), gy),
                          torch.autograd.grad(ref, (x, conv.weight, conv.bias), gy)):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12, msg=name)


def test_mamba_trains_the_same_on_the_fast_paths(monkeypatch):
    """Five AdamW steps of a tiny Mamba on the plain paths (the scan's loop over every state, nn.Conv1d) and on the
    fast ones (the chunked scan, compiled, with its hand-written backward; the convolution as a matmul) give the
    same losses to float32 rounding: nothing about training changes but the speed."""
    monkeypatch.setattr(M.kernels, "CHUNK_COMPILE_BACKEND", "eager")  # (inductor: a minute)
    inp, losses = batch("joined"), {}
    for name, fast in (("plain", {}), ("fast", dict(scan_chunk=4, scan_compile=True, conv_impl="matmul"))):
        m = mamba(discretization="bilinear", dt_div_sqrt=True, **fast).train()
        opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
        losses[name] = []
        for _ in range(5):
            loss = m(**inp)[1]
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses[name].append(loss.item())
    assert losses["plain"][-1] < losses["plain"][0]  # it learned something, so the steps were not empty
    np.testing.assert_allclose(losses["fast"], losses["plain"], rtol=1e-5)


def test_mamba_init_and_decay():
    m = mamba()
    mixer = m.layers[0].mamba
    dt = torch.nn.functional.softplus(mixer.dt_proj.bias)
    assert dt.min() >= 0.001 - 1e-6 and dt.max() <= 0.1 + 1e-6  # Delta starts in [dt_min, dt_max]
    assert torch.allclose(-torch.exp(mixer.A_log[0]), -torch.arange(1, 5, dtype=torch.float32))  # S4D-real
    assert "layers.0.mamba.A_log" in m.no_weight_decay() and "layers.0.mamba.in_proj.weight" not in m.no_weight_decay()
    with pytest.raises(ValueError, match="discretization"):
        mamba(discretization="euler")
    with pytest.raises(ValueError, match="scan"):
        mamba(scan="fast")


@pytest.mark.parametrize("make, layout", [(encdec, "pair"), (mamba, "joined")])
def test_greedy_translation_is_the_argmax_of_its_own_teacher_forcing(make, layout):
    m = make()
    src = torch.tensor([[5, 9, 12, 2], [7, 3, 20, 2]])
    out = m.translate(src, 6, data.SOS, data.EOS)
    assert out.shape[0] == 2 and out.shape[1] <= 6
    pairs = [(s[:-1].numpy(), o.numpy()) for s, o in zip(src, out)]
    inp = data.seq2seq_collate(pairs, layout, "cpu")
    logits, _ = m(**{k: v for k, v in inp.items() if k != "targets"})
    scored = inp["targets"] != -100
    predicted = logits.argmax(-1)[scored].view(2, -1)[:, :out.size(1)]  # drop the [EOS] position
    assert torch.equal(predicted, out)


@pytest.mark.parametrize("pos", ["sinusoidal", "rope"])
def test_the_decoder_cache_translates_as_the_full_recompute(pos):
    """The encoder-decoder's decoder fed one token a step through its cache gives the logits of the whole
    target at once, position by position; its cached greedy translation gives the tokens of running the
    whole target each step."""
    m = encdec(pos=pos, n_layer=2)
    src = torch.tensor([[5, 9, 12, 2, 0], [7, 3, 20, 11, 2]])
    mask = src != 0
    memory, target = m.encode(src, mask), torch.randint(3, 30, (2, 7))
    cache = m.new_cache(2, 7, m.cfg.n_dec_layer)
    steps = [m.decode(target[:, t:t + 1], memory, mask, cache=cache, start=t) for t in range(7)]
    torch.testing.assert_close(torch.cat(steps, 1), m.decode(target, memory, mask), atol=1e-5, rtol=1e-5)
    cached = m.translate(src, 12, data.SOS, data.EOS, mask)
    assert torch.equal(cached, m.translate(src, 12, data.SOS, data.EOS, mask, use_cache=False))


def test_delta_over_sqrt_width():
    """dt_div_sqrt: every step size Delta divided by sqrt(n_embd), the rest of the model unchanged."""
    plain, scaled = mamba(), mamba(dt_div_sqrt=True)
    assert scaled.param_counts() == plain.param_counts()
    scaled.load_state_dict(plain.state_dict())
    dt = torch.randn(2, 5, plain.cfg.dt_rank)
    torch.testing.assert_close(scaled.layers[0].mamba.step_size(dt), plain.layers[0].mamba.step_size(dt) / 4.0)
    assert not torch.allclose(scaled(batch("joined")["idx"])[0], plain(batch("joined")["idx"])[0])


@pytest.mark.parametrize("method, scaled", [*((m, False) for m in M.DISCRETIZATIONS), ("bilinear", True)])
def test_mamba_decodes_through_its_recurrent_state(method, scaled):
    """Mamba fed a token at a time through its state (the convolution's last inputs, the SSM's h) gives the
    logits of the whole sequence at once, position by position; its cached greedy translation gives the
    tokens of running the whole sequence each step."""
    m = mamba(discretization=method, d_conv=3, dt_div_sqrt=scaled)
    idx = torch.randint(3, 30, (2, 11))
    state = m.new_cache(2)
    steps = [m(idx[:, :4], cache=state)[0]] + [m(idx[:, t:t + 1], cache=state)[0] for t in range(4, 11)]
    torch.testing.assert_close(torch.cat(steps, 1), m(idx)[0], atol=1e-5, rtol=1e-4)
    src = torch.tensor([[5, 9, 12, 2], [7, 3, 20, 2]])
    cached = m.translate(src, 10, data.SOS, data.EOS)
    assert torch.equal(cached, m.translate(src, 10, data.SOS, data.EOS, use_cache=False))


def test_piglatin_bench_times_and_measures_each_model(monkeypatch, capsys):
    """python -m bench.speed --cases piglatin, small: every model's training step and saved memory, the
    chunked scan saving less than every state, and translation with and without the decoder cache."""
    import argparse

    import kernels
    from bench import speed
    monkeypatch.setattr(kernels, "CHUNK_COMPILE_BACKEND", "eager")  # (inductor: half a minute)
    step, translation = speed.piglatin_bench(argparse.Namespace(rounds=1), "cpu", lengths=(20,), batch=4)
    table = step["training"]
    assert set(table) == {"Mamba, every state", "Mamba, chunked 16", "Mamba, chunked 16, compiled",
                          "encoder-decoder (transformer_small)"}
    assert all(r["step_ms"] > 0 and r["saved_mib"] > 0 for r in table.values())
    assert table["Mamba, chunked 16"]["saved_mib"] < table["Mamba, every state"]["saved_mib"] / 2
    assert len(translation["translation_words_per_s"]) == 4 and min(translation["translation_words_per_s"].values()) > 0
    assert "decoder cache" in capsys.readouterr().out


# -----------------------------------------------------------------------------
# training and evaluation through train.py and evaluate.py


def pig_cfg(pig_data, tmp_path, family, **kw):
    size = dict(n_layer=1, n_embd=16, n_head=2, ffn_hidden=16) if family == "encdec" else \
        dict(n_layer=1, n_embd=16, d_state=4)
    cfg = train.make_config([f"--model={family}"])
    cfg.update(dataset="piglatin", data_dir=pig_data, out_dir=str(tmp_path / family), device="cpu", dtype="float32",
               batch_size=16, max_epochs=2, log_interval=100, eval_interval=0, scheduler="constant",
               learning_rate=3e-3, early_stop_patience=0, seed=1, **size)
    cfg.update(kw)
    return cfg


@pytest.mark.parametrize("family", ["encdec", "mamba"])
def test_train_and_evaluate_seq2seq(pig_data, tmp_path, family, capsys):
    cfg = pig_cfg(pig_data, tmp_path, family)
    summary = train.train(cfg)
    assert summary["task"] == "seq2seq" and summary["metrics"]["test_word_accuracy"]["better"] == "higher"
    ds = data.Dataset(pig_data)
    best, _ = checkpoints.load_checkpoint(os.path.join(cfg["out_dir"], "ckpt.pt"))
    # the word accuracy, recomputed one word at a time
    test = ds.splits["test"]
    right = 0
    for i in range(len(test)):
        src, tgt = test[i]
        out = best.translate(torch.tensor([[*src, data.EOS]]), 40, data.SOS, data.EOS)[0].tolist()
        right += (out[:out.index(data.EOS)] if data.EOS in out else out) == tgt.tolist()
    assert summary["test_word_accuracy"] == pytest.approx(right / len(test))
    out_json = str(tmp_path / "report.json")
    evaluate.main(["--ckpt", os.path.join(cfg["out_dir"], "ckpt.pt"), "--no_timing", "--json", out_json])
    report = json.load(open(out_json))
    assert report["word_accuracy"] == pytest.approx(summary["test_word_accuracy"])
    for grouping in ("by_rule", "by_length"):
        assert sum(g["n"] for g in report[grouping].values()) == len(test)
    errors = report["splits"]["test"]["errors"]
    assert len(errors) == round((1 - report["word_accuracy"]) * len(test))
    for e in errors:
        assert e["truth"] == piglatin.pig_latin(e["word"]) and e["predicted"] != e["truth"]
    assert "wrong translations" in capsys.readouterr().out
    evaluate.main(["--ckpt", os.path.join(cfg["out_dir"], "ckpt.pt"), "--text", "Brown is"])
    printed = capsys.readouterr().out
    assert printed.startswith(os.path.join(cfg["out_dir"], "ckpt.pt") + ": ")
    assert "(the rules: ownbray isway)" in printed
    with pytest.raises(SystemExit, match="'x1'"):
        evaluate.main(["--ckpt", os.path.join(cfg["out_dir"], "ckpt.pt"), "--text", "x1"])


def test_hyphen_compounds_are_made_of_training_words_and_teach_no_held_out_word():
    words = ["brown", "is", "quite", "mr", "yellow", "self", "conceit", "ill-bred"]
    codec = tokenizer.CharCodec(piglatin.PIG_LATIN_VOCAB)
    train_split = piglatin.PairList([(codec.encode(w), codec.encode(piglatin.pig_latin(w))) for w in words],
                                piglatin.PIG_LATIN_VOCAB)
    made = piglatin.hyphen_compounds(train_split, 2.0, seed=3, block_size=30, exclude=["self-conceit", "is-mr"])
    pairs = [(codec.decode(s), codec.decode(t)) for s, t in (made[i] for i in range(len(made)))]
    assert pairs[:len(words)] == [(w, piglatin.pig_latin(w)) for w in words]  # the training words first, unchanged
    compounds = pairs[len(words):]
    assert len(compounds) == 16 and len({w for w, _ in compounds}) == 16  # 2.0 x 8, all distinct
    plain = {w: t for w, t in pairs[:len(words)] if "-" not in w}
    for word, translation in compounds:
        parts = word.split("-")
        assert 2 <= len(parts) <= 3 and all(p in plain for p in parts)  # plain training words only
        assert translation == "-".join(plain[p] for p in parts) == piglatin.pig_latin(word)
        assert not piglatin.word_pieces(word) & {"self-conceit", "is-mr"} and len(word) + len(translation) + 2 <= 30
    assert list(made.lengths) == [len(w) for w, _ in pairs]
    again = piglatin.hyphen_compounds(train_split, 2.0, seed=3, block_size=30, exclude=["self-conceit", "is-mr"])
    assert [again[i][0].tolist() for i in range(len(again))] == [made[i][0].tolist() for i in range(len(made))]
    other = piglatin.hyphen_compounds(train_split, 2.0, seed=4, block_size=30)
    assert [other[i][0].tolist() for i in range(len(other))] != [made[i][0].tolist() for i in range(len(made))]
    with pytest.raises(data.DataError, match="fit block_size 12"):
        piglatin.hyphen_compounds(train_split, 2.0, seed=3, block_size=12)


def test_the_run_keeps_held_out_words_out_of_its_compounds():
    """data.training_stream's seq2seq stream hands every held-out split's words (val, test, unseen) to hyphen_compounds as
    words it may not make. Here the six training words can form many held-out words as compounds (every
    pair in alphabetical order is held out, in one split or another); left to itself, the generator makes
    some of each split's, so a run that forgot a split would teach them."""
    plain = ["brown", "is", "mr", "quite", "self", "yellow"]
    pairs = [f"{a}-{b}" for a in plain for b in plain if a < b]  # 15 compounds of training words
    held_out = {"val": pairs[0::3], "test": pairs[1::3], "unseen": pairs[2::3]}
    codec = tokenizer.CharCodec(piglatin.PIG_LATIN_VOCAB)
    split = lambda words: piglatin.PairList([(codec.encode(w), codec.encode(piglatin.pig_latin(w))) for w in words],  # noqa
                                        piglatin.PIG_LATIN_VOCAB)
    dataset = SimpleNamespace(task="seq2seq", splits={"train": split(plain), **{k: split(v) for k, v in held_out.items()}})
    cfg = {**train.make_config(["--model=encdec"]), "dataset": "fake", "hyphen_compounds": 3.0, "seed": 1,
           "batch_size": 4}
    model_cfg = M.EncDecConfig(vocab_size=30, block_size=43)

    def taught(stream_split):
        words = [codec.decode(stream_split[i][0]) for i in range(len(stream_split))]
        return words, piglatin.pieces_of(words)

    # the fixture can catch a leak: without the exclusions, the same compounds teach words of every held-out split
    unguarded = taught(piglatin.hyphen_compounds(dataset.splits["train"], 3.0, cfg["seed"], model_cfg.block_size))[1]
    assert all(set(words) & unguarded for words in held_out.values())
    words, inside = taught(data.training_stream(dataset, model_cfg, cfg).split)
    assert len(words) == len(plain) + 18 and words[:len(plain)] == plain
    for name, held in held_out.items():
        assert not set(held) & inside, f"{name} words taught: {sorted(set(held) & inside)}"


def test_training_with_compounds(pig_data, tmp_path, capsys):
    """hyphen_compounds in a run: the stream holds the training words and the compounds, no held-out word
    among them or inside them; the key is refused for a task that does not read it, and out of range."""
    cfg = pig_cfg(pig_data, tmp_path, "encdec", hyphen_compounds=0.5, max_epochs=1)
    ds = data.Dataset(pig_data)
    stream = data.training_stream(ds, M.EncDecConfig(vocab_size=30, block_size=43), cfg)
    n_train = len(ds.splits["train"])
    assert len(stream.split) == n_train + round(0.5 * n_train)
    codec = tokenizer.CharCodec(piglatin.PIG_LATIN_VOCAB)
    held_out = {codec.decode(s[i][0]) for k, s in ds.splits.items() if k != "train" for i in range(len(s))}
    taught = {codec.decode(stream.split[i][0]) for i in range(len(stream.split))}
    assert not piglatin.pieces_of(taught) & held_out and sum("-" in w for w in taught) >= round(0.5 * n_train)
    summary = train.train(cfg)
    assert "hyphen_compounds: " in capsys.readouterr().out
    assert summary["unseen_n"] == len(ds.splits["unseen"]) and "unseen_word_accuracy_hyphenated" in summary
    for bad in (-0.5, 11):  # refused before anything is written
        with pytest.raises(train.configurator.ConfigError, match=f"hyphen_compounds={bad}: a share"):
            train.train(pig_cfg(pig_data, tmp_path / str(bad), "encdec", hyphen_compounds=bad))
        assert not os.path.exists(tmp_path / str(bad))


def test_seq2seq_resume_is_exact(pig_data, tmp_path, stop_after):
    """Three epochs in one go == the same run stopped (as by Ctrl-C) at the end of its first epoch, resumed."""
    full = train.train(pig_cfg(pig_data, tmp_path, "encdec", max_epochs=3, dropout=0.1))
    cfg = pig_cfg(pig_data, tmp_path / "b", "encdec", max_epochs=3, dropout=0.1)
    epoch = full["iters"] // 3
    stop_after(epoch)
    stopped = train.train(cfg)
    assert stopped["stopped"] == "interrupted" and stopped["iters"] == epoch
    resumed = train.train({**cfg, "init_from": "resume"})
    assert resumed["final_val_loss"] == full["final_val_loss"]
    assert resumed["final_val_word_accuracy"] == full["final_val_word_accuracy"]


def test_wrong_family_for_the_task(pig_data, tmp_path):
    cfg = pig_cfg(pig_data, tmp_path, "encdec")
    cfg["model"] = "gpt"
    cfg.update({k: v for k, v in train.make_config(["--model=gpt"]).items() if k not in cfg})
    with pytest.raises(train.configurator.ConfigError, match="encdec"):
        train.train(cfg)


# -----------------------------------------------------------------------------
# the figures the report gives (word accuracy, its breakdown, the teacher-forced loss and character accuracy),
# against answers known in advance


def test_error_analysis_by_hand():
    """Ten words, five translated right; the groups counted by hand (length 12 is the first of '12+')."""
    table = [  # word, rule, length key, translated right?
        ("brown", "consonant", "05", True), ("quite", "consonant", "05", False),
        ("strengthening", "consonant", "12+", True), ("thoughtfulness", "consonant", "12+", False),
        ("my", "consonant", "02", False), ("is", "vowel", "02", True), ("equal", "vowel", "05", True),
        ("a-b", "hyphenated", "03", False), ("mr", "no vowel", "02", True), ("conditioning", "consonant", "12+", True),
        ("thoughtless", "consonant", "11", False),
    ]
    words = [w for w, *_ in table]
    truths = [piglatin.pig_latin(w) for w in words]
    predicted = [t if ok else t[::-1] for t, (*_, ok) in zip(truths, table)]
    got = evaluate.error_analysis(words, truths, predicted)
    assert got["by_rule"] == {"consonant": {"n": 7, "accuracy": 3 / 7}, "hyphenated": {"n": 1, "accuracy": 0.0},
                              "no vowel": {"n": 1, "accuracy": 1.0}, "vowel": {"n": 2, "accuracy": 1.0}}
    assert list(got["by_length"]) == ["02", "03", "05", "11", "12+"]
    assert got["by_length"] == {"02": {"n": 3, "accuracy": 2 / 3}, "03": {"n": 1, "accuracy": 0.0},
                                "05": {"n": 3, "accuracy": 2 / 3}, "11": {"n": 1, "accuracy": 0.0},
                                "12+": {"n": 3, "accuracy": 2 / 3}}
    assert got["errors"] == [{"word": w, "truth": piglatin.pig_latin(w), "predicted": piglatin.pig_latin(w)[::-1]}
                             for w in ("quite", "thoughtfulness", "my", "a-b", "thoughtless")]


class RuleModel(torch.nn.Module):
    """A stand-in seq2seq model whose answers are known in advance, run through evaluate.py's own code path
    (translate_split, evaluate_seq2seq, seq2seq_report). It translates by piglatin.pig_latin, except a
    hyphenated word, which it translates whole (a-b -> a-bway), and a word of more than 4 characters, whose
    translation loses its last letter. Teacher-forced, it gives its own answer and [EOS], position by
    position, a logit of CONFIDENCE (every other logit 0; past the end of its answer, all 0)."""

    CONFIDENCE = 3.0
    codec = tokenizer.CharCodec(piglatin.PIG_LATIN_VOCAB)

    def __init__(self):
        super().__init__()
        self.cfg, self.depth = SimpleNamespace(seq2seq_layout="pair", block_size=43), 1

    @staticmethod
    def answer(word):
        if "-" in word:
            return piglatin.pig_latin_part(word)
        return piglatin.pig_latin(word)[:-1] if len(word) > 4 else piglatin.pig_latin(word)

    def own(self, src_row):
        """Its answer and [EOS] as ids, for a source row (the word, [EOS], padding)."""
        ids = src_row.tolist()
        return [*self.codec.encode(self.answer(self.codec.decode(ids[:ids.index(data.EOS)]))), data.EOS]

    def forward(self, src, idx, src_mask=None):
        logits = torch.zeros(*idx.shape, len(self.codec.itos))
        for b in range(src.size(0)):
            for t, token in enumerate(self.own(src[b])[:idx.size(1)]):
                logits[b, t, token] = self.CONFIDENCE
        return logits, None

    def translate(self, src, max_new_tokens, sos_id, eos_id, src_mask=None):
        rows = [self.own(row)[:max_new_tokens] for row in src]
        width = max(map(len, rows))
        return torch.tensor([r + [eos_id] * (width - len(r)) for r in rows])  # an ended row repeats [EOS]

    def param_counts(self):
        return {"total": 0, "embedding": 0, "non_embedding": 0}


def rule_model_scores(words):
    """RuleModel's teacher-forced loss per character and character accuracy on these words, in closed
    form: at a position where its answer agrees with the truth, -log(e^c / (e^c + V - 1)); where it
    disagrees, log(e^c + V - 1); past the end of its answer, log V (uniform). Positions: truth + [EOS]."""
    c, V = RuleModel.CONFIDENCE, len(piglatin.PIG_LATIN_VOCAB)
    loss, right, n = 0.0, 0, 0
    for w in words:
        truth, own = piglatin.pig_latin(w) + "$", RuleModel.answer(w) + "$"  # '$' stands for [EOS]
        for t, want in enumerate(truth):
            n += 1
            if t >= len(own):
                loss += math.log(V)
            elif own[t] == want:
                right += 1
                loss += math.log(math.exp(c) + V - 1) - c
            else:
                loss += math.log(math.exp(c) + V - 1)
    return loss / n, right / n


def test_seq2seq_figures_of_a_model_that_gets_some_words_right():
    """evaluate_seq2seq on ten words, three of which RuleModel gets right, in batches of 3 (sources of
    several lengths: translate_split groups them by length and must put each answer back in its place)."""
    words = ["brown", "is", "a-b", "mr", "strengthening", "my", "equal", "quite", "pleasure-grounds", "yellow"]
    codec = RuleModel.codec
    split = piglatin.PairList([(codec.encode(w), codec.encode(piglatin.pig_latin(w))) for w in words],
                          piglatin.PIG_LATIN_VOCAB)
    got = evaluate.evaluate_seq2seq(RuleModel(), split, "cpu", nullcontext(), batch_size=3)
    assert got["word_accuracy"] == 3 / 10 and got["n"] == 10  # is, mr, my
    assert {k: v for k, v in got.items() if k.startswith("word_accuracy_")} == {  # by rule: my of 5, is of 2, mr
        "word_accuracy_consonant": 1 / 5, "word_accuracy_vowel": 1 / 2, "word_accuracy_no_vowel": 1.0,
        "word_accuracy_hyphenated": 0.0}
    split.vocab = None  # not Pig Latin's characters: no rules
    assert not any(k.startswith("word_accuracy_") for k in evaluate.evaluate_seq2seq(RuleModel(), split, "cpu",
                                                                                      nullcontext()))
    assert [codec.decode(p) for p in got["predictions"]] == [RuleModel.answer(w) for w in words]
    loss, char_accuracy = rule_model_scores(words)
    assert got["n_chars"] == sum(len(piglatin.pig_latin(w)) + 1 for w in words)
    assert got["char_accuracy"] == pytest.approx(char_accuracy) and 0 < char_accuracy < 1
    assert got["loss"] == pytest.approx(loss, rel=1e-5)


class ShortFirstPartModel(RuleModel):
    """RuleModel, except that it translates a hyphenated word right when its first part has at most 2 letters."""

    @staticmethod
    def answer(word):
        return piglatin.pig_latin(word) if len(word.split("-")[0]) <= 2 else RuleModel.answer(word)


def test_hyphenated_words_grouped_by_whether_their_parts_were_taught():
    """A held-out split's compounds apart by whether every part occurs in training (a training word, or a part
    of a hyphenated one: bred from ill-bred), each group's word accuracy counted by hand."""
    taught = piglatin.pieces_of(["brown", "is", "mr", "self", "ill-bred"])
    words = ["is-mr", "self-bred", "ex-boss", "xylo-phone", "up-to-brown", "brown", "mr"]
    assert [piglatin.hyphen_parts(w, taught) for w in words] == [
        "known parts", "known parts", "new parts", "new parts", "new parts", None, None]
    codec = RuleModel.codec
    split = piglatin.PairList([(codec.encode(w), codec.encode(piglatin.pig_latin(w))) for w in words],
                          piglatin.PIG_LATIN_VOCAB)
    groups = lambda got: {k: v for k, v in got.items() if k.startswith("word_accuracy_hyphenated_")}  # noqa: E731
    assert groups(evaluate.evaluate_seq2seq(ShortFirstPartModel(), split, "cpu", nullcontext())) == {}  # untold
    split.taught = taught
    got = evaluate.evaluate_seq2seq(ShortFirstPartModel(), split, "cpu", nullcontext(), batch_size=3)
    # right: is-mr (known), ex-boss and up-to-brown (new), brown and mr; wrong: self-bred, xylo-phone
    assert groups(got) == {"word_accuracy_hyphenated_known_parts": 1 / 2, "word_accuracy_hyphenated_new_parts": 2 / 3}
    assert got["word_accuracy_hyphenated"] == 3 / 5 and got["word_accuracy"] == 4 / 7


def test_prepared_held_out_splits_know_what_was_taught(pig_data):
    """Dataset gives each held-out split the pieces of the training words; meta.json counts each held-out
    split's compounds of known and of new parts as the evaluator groups them."""
    ds = data.Dataset(pig_data)
    codec = tokenizer.CharCodec(piglatin.PIG_LATIN_VOCAB)
    train_words = [codec.decode(ds.splits["train"][i][0]) for i in range(len(ds.splits["train"]))]
    assert not hasattr(ds.splits["train"], "taught")
    for name in ("val", "test", "unseen"):
        assert ds.splits[name].taught == piglatin.pieces_of(train_words)
        groups = piglatin.hyphen_part_groups(ds.splits[name])
        assert ds.meta["counts"][name]["hyphenated_parts"] == {g: groups.count(g) for g in ("known parts", "new parts")}
    unseen = ds.meta["counts"]["unseen"]["hyphenated_parts"]
    assert unseen == {"known parts": 1, "new parts": 4}  # good-good; well-made, over-the-top, yellow-green, sci-fi


def test_seq2seq_report_of_a_model_that_gets_some_words_right(pig_data, tmp_path, monkeypatch, capsys):
    """The whole report (evaluate.main on a checkpoint that loads as RuleModel) on the prepared test split:
    every figure against a count made here from RuleModel's rule, which gets some words right and some wrong."""
    ds = data.Dataset(pig_data)
    path = tmp_path / "rules" / "ckpt.pt"
    path.parent.mkdir()
    path.write_bytes(b"stands for RuleModel")
    ckpt = {"data": ds.info(), "config": {"dataset": "piglatin", "data_dir": pig_data}}
    monkeypatch.setattr(evaluate, "load", lambda p, device: (RuleModel(), ckpt))
    monkeypatch.setattr(evaluate, "forward_flops", lambda model, seq_len: 0)  # a rule has no FLOPs to count
    out = tmp_path / "report.json"
    evaluate.main(["--ckpt", str(path), "--no_timing", "--json", str(out), "--max_errors", "1000"])
    report = json.loads(out.read_text())
    test = ds.splits["test"]
    words = [RuleModel.codec.decode(test[i][0]) for i in range(len(test))]
    right = [len(w) <= 4 and "-" not in w for w in words]  # RuleModel's rule
    assert 0 < sum(right) < len(words)
    assert report["n"] == len(words) and report["word_accuracy"] == sum(right) / len(words)
    test_words = report["splits"]["test"]  # the per-word lists once, under their split (not at the top)
    assert test_words["predictions"] == [RuleModel.answer(w) for w in words] and test_words["words"] == words
    assert not set(evaluate.PER_WORD) & set(report)
    loss, char_accuracy = rule_model_scores(words)
    assert report["char_accuracy"] == pytest.approx(char_accuracy) and report["loss"] == pytest.approx(loss, rel=1e-5)
    length = lambda w: "12+" if len(w) >= 12 else f"{len(w):02d}"  # noqa: E731
    for grouping, key in (("by_rule", piglatin.pig_latin_rule), ("by_length", length)):
        groups = {}
        for w, ok in zip(words, right):
            groups.setdefault(key(w), []).append(ok)
        assert report[grouping] == {k: {"n": len(v), "accuracy": sum(v) / len(v)} for k, v in groups.items()}
    assert [e["word"] for e in test_words["errors"]] == [w for w, ok in zip(words, right) if not ok]
    unseen = ds.splits["unseen"]  # beside test, the words from outside the novel, counted the same way
    new = [RuleModel.codec.decode(unseen[i][0]) for i in range(len(unseen))]
    ok = [len(w) <= 4 and "-" not in w for w in new]
    assert list(report["splits"]) == ["test", "unseen"]
    assert report["unseen_word_accuracy"] == report["splits"]["unseen"]["word_accuracy"] == sum(ok) / len(new)
    hyphenated = [o for w, o in zip(new, ok) if "-" in w]
    assert report["splits"]["unseen"]["by_rule"]["hyphenated"] == {"n": len(hyphenated), "accuracy": 0.0}
    printed = capsys.readouterr().out
    assert f"wrong translations of rules on test ({len(words) - sum(right)}; word: truth / predicted):" in printed
    assert f"wrong translations of rules on unseen ({len(new) - sum(ok)}; word: truth / predicted):" in printed
    assert any(line.split() == ["word", "accuracy", f"{sum(right) / len(words):.4f}"] for line in printed.splitlines())
    rows = {line.split()[0]: line.split()[1:] for line in printed.splitlines() if line.startswith("  ")}
    test_cell = report["by_rule"].get("hyphenated")  # a split without words of a rule shows '-'
    assert rows["hyphenated"] == ([f"{test_cell['accuracy']:.3f}", f"({test_cell['n']})"] if test_cell else ["-"]) + [
        "0.000", f"({len(hyphenated)})"]
    assert rows["all"] == [f"{report['word_accuracy']:.3f}", f"({len(words)})", f"{sum(ok) / len(new):.3f}",
                           f"({len(new)})"]

    # --file: any word list, one a line, optionally with its expected translation (else the rules')
    words_file = tmp_path / "words.txt"
    words_file.write_text("Brown\nis\tisyay\n\nmy\nself-made\nquirk\tirkquay\n")  # another dialect for 'is'
    out = tmp_path / "report_file.json"  # a new file: evaluate.py never replaces one
    evaluate.main(["--ckpt", str(path), "--no_timing", "--json", str(out), "--file", str(words_file)])
    report = json.loads(out.read_text())
    assert list(report["splits"]) == ["words.txt"]
    assert report["splits"]["words.txt"]["words"] == ["brown", "is", "my", "self-made", "quirk"]
    assert [(e["word"], e["truth"]) for e in report["splits"]["words.txt"]["errors"]] == [
        ("brown", "ownbray"), ("is", "isyay"), ("self-made", "elfsay-ademay"), ("quirk", "irkquay")]
    assert report["word_accuracy"] == 1 / 5 and report["by_rule"]["hyphenated"] == {"n": 1, "accuracy": 0.0}
    assert "unseen_word_accuracy" not in report
    for text, message in (("br0wn\n", "words.txt:1: 'br0wn' is not a word"), ("is\tisw@y\n", "words.txt:1: the "
                          "translation 'isw@y'"), ("a" * 30 + "\n", "does not fit the model's context"),
                          ("\n\n", "holds no words"), ("is\t\n", "empty translation")):
        words_file.write_text(text)
        with pytest.raises(SystemExit, match=message):
            evaluate.main(["--ckpt", str(path), "--no_timing", "--file", str(words_file)])
    capsys.readouterr()

    # --text translates its words by the rule --words follows too: upper case read as lower case
    evaluate.main(["--ckpt", str(path), "--text", "Is A-B"])
    assert capsys.readouterr().out == f"{path}: isway a-bway  (the rules: isway away-bay)\n"
    for text in ("   ", "brown x1"):
        with pytest.raises(SystemExit, match="^error: --text (is empty|'brown x1' has 'x1')"):
            evaluate.main(["--ckpt", str(path), "--text", text])


def test_plots(pig_data, tmp_path):
    pytest.importorskip("matplotlib")
    cfg = pig_cfg(pig_data, tmp_path, "encdec", max_epochs=1)
    train.train(cfg)
    out = str(tmp_path / "plots")
    evaluate.main(["--ckpt", os.path.join(cfg["out_dir"], "ckpt.pt"), "--no_timing", "--plots", out,
                   "--words", "Brown, is"])  # read as --text reads its words: lower case, spaces dropped
    names = sorted(os.listdir(out))
    assert names == ["attention_cross_brown.png", "attention_cross_is.png", "attention_encoder_brown.png",
                     "attention_encoder_is.png", "embeddings_pca.png"]
    with pytest.raises(SystemExit) as e:  # again into the same folder: refused, the pictures kept
        evaluate.main(["--ckpt", os.path.join(cfg["out_dir"], "ckpt.pt"), "--no_timing", "--plots", out])
    assert str(e.value) == f"error: --plots {out} is not empty: give a new or empty folder"
    assert sorted(os.listdir(out)) == names
    for n in names:
        assert open(os.path.join(out, n), "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_bidirectional_mamba_reads_the_source_both_ways_and_the_target_causally():
    """bidirectional=True: each layer's mixer, with its own weights (no new parameter), also reads every source
    backwards. A source position's output then changes with a later letter of its word; a target position's still
    changes with nothing after it, nor does any position with the right padding. The backward pass equals the
    mixer run on each word reversed alone (the batch's sources have different lengths), and bidirectional=False
    is the same model as before."""
    plain, bi = mamba().double(), mamba(bidirectional=True).double()  # float64: a read of 1e-7 at init is seen
    assert bi.param_counts() == plain.param_counts()
    bi.load_state_dict(plain.state_dict())
    inp = batch("joined")  # sources of 5, 7 and 6 tokens (word and [EOS]), padded on the right
    assert inp["src_len"].tolist() == [5, 7, 6]
    torch.testing.assert_close(plain(inp["idx"])[0], plain(**inp)[0])  # src_len changes nothing unless bidirectional
    logits = bi(**inp)[0]
    assert not torch.allclose(logits, plain(**inp)[0])
    for b, S in enumerate(inp["src_len"].tolist()):
        changed = inp["idx"].clone()
        changed[b, S - 2] = 3 if changed[b, S - 2] != 3 else 4  # the word's last letter
        moved = (bi(changed, src_len=inp["src_len"])[0][b] - logits[b]).abs().amax(-1) > 1e-12
        assert moved[:S - 2].all()  # the letters before it read it backwards
        assert not ((plain(changed)[0][b] - plain(inp["idx"])[0][b]).abs().amax(-1) > 1e-12)[:S - 2].any()
        tail = inp["idx"].clone()
        tail[b, S + 2:] = 0  # the target from its second letter on, and the padding
        torch.testing.assert_close(bi(tail, src_len=inp["src_len"])[0][b, :S + 2], logits[b, :S + 2])
    layer, h = bi.layers[0], torch.randn(3, inp["idx"].size(1), 16, dtype=torch.float64)
    back = bi.source_backwards(layer, h, *bi.reversed_sources(inp["src_len"]))
    for b, S in enumerate(inp["src_len"].tolist()):
        alone = layer.mamba(layer.norm1(h[b:b + 1, :S].flip(1)))[0].flip(1)
        torch.testing.assert_close(back[b, :S], alone[0], atol=1e-5, rtol=1e-4)
        assert (back[b, S:] == 0).all()
    with pytest.raises(ValueError, match="src_len"):
        bi(inp["idx"])


def test_bidirectional_mamba_decodes_and_counts_its_flops():
    """The bidirectional Mamba's cached translation (the source backwards once, then a token at a time through the
    state) is its full recompute's and the argmax of its own teacher forcing; its FLOPs add each layer's mixer over
    the source tokens, which bookkeeping/flops.py's step_flops counts from the batch."""
    m = mamba(bidirectional=True, d_conv=3)
    src = torch.tensor([[5, 9, 12, 2], [7, 3, 20, 2]])
    cached = m.translate(src, 10, data.SOS, data.EOS)
    assert torch.equal(cached, m.translate(src, 10, data.SOS, data.EOS, use_cache=False))
    pairs = [(s[:-1].numpy(), o.numpy()) for s, o in zip(src, cached)]
    inp = data.seq2seq_collate(pairs, "joined", "cpu")
    logits, _ = m(**{k: v for k, v in inp.items() if k != "targets"})
    scored = inp["targets"] != -100
    assert torch.equal(logits.argmax(-1)[scored].view(2, -1)[:, :cached.size(1)], cached)
    micro = [(inp, 2, 0)]
    T = inp["idx"].size(1)
    one_way = mamba(d_conv=3)
    assert flops.step_flops(m, micro, "seq2seq") == 3 * (flops.forward_flops(one_way, T, 2) + 2 * flops.mamba_flops(m.cfg, 8))
    assert flops.step_flops(mamba(), micro, "seq2seq") == 3 * flops.forward_flops(mamba(), T, 2)
