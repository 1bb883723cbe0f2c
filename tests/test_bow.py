"""
model.BagOfWords, the logistic-regression baseline: its features against a hand computation and a plain
Python reference, padding and [CLS] ignored, the accounting (FLOPs, parameters, weight decay), the
checkpoint round trip, and train.py and evaluate.py driving it end to end on the tiny SST-2 fixture.
"""

import json
import math
import os
from collections import Counter

import pytest
import torch

import configurator
import data
import evaluate
import model
import train
from bookkeeping import checkpoints, flops
from model import NGRAM_HASH_PRIME, BagOfWords, BagOfWordsConfig

ATOL = 1e-6


def tiny_bow(seed=0, **kw):
    """A BagOfWords of 37 ids and 64 n-gram buckets with random weights (a trained one is not all zero)."""
    m = BagOfWords(BagOfWordsConfig(**{"vocab_size": 37, "n_buckets": 64, **kw}))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        m.weight.weight.copy_(torch.randn(m.weight.weight.shape, generator=g))
        m.bias.copy_(torch.randn(m.bias.shape, generator=g))
    return m


def padded_batch(lengths, T, vocab_size=37, seed=0):
    """Random ids (B, T) with [CLS]=2 first and [PAD]=0 after each length, drawn from few ids so that
    words and n-grams repeat; the key mask."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(3, min(vocab_size, 9), (len(lengths), T), generator=g)
    idx[:, 0] = 2
    mask = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]  # (B, T)
    return idx.masked_fill(~mask, 0), mask


def reference_logits(m, ids):
    """The plain reference for one document (a list of ids, [CLS] first, no padding): its features counted
    with a Counter, n-grams hashed one by one, weighted and normalized, times the table, plus the bias."""
    cfg = m.cfg
    words = ids[1:]
    counts = Counter(words)
    for n in range(2, cfg.ngrams + 1):
        for i in range(len(words) - n + 1):
            h = n
            for t in words[i:i + n]:
                h = (h * NGRAM_HASH_PRIME + t) % cfg.n_buckets
            counts[cfg.vocab_size + h] += 1
    value = {f: {"binary": 1.0, "count": float(c), "log": 1.0 + math.log(c)}[cfg.tf] for f, c in counts.items()}
    norm = {"l2": math.sqrt(sum(v * v for v in value.values())), "l1": sum(value.values()), "none": 1.0}[cfg.doc_norm]
    x = torch.zeros(cfg.n_features)
    for f, v in value.items():
        x[f] = v / norm
    return x @ m.weight.weight + m.bias  # (n_classes,)


# -----------------------------------------------------------------------------
# the features


def test_forward_is_the_hand_computed_features_times_the_weights():
    """[CLS] 5 6 5 with vocab 10, bigrams in 8 buckets. NGRAM_HASH_PRIME = 1,000,003 = 3 mod 8, so the
    bigram (a, b) falls in bucket ((2 * 3 + a) mod 8 * 3 + b) mod 8: (5, 6) in 7 (feature 17), (6, 5) in 1
    (feature 11). Binary: four features of value 1, L2 norm 2, each weighs 1/2. Counts: 5 occurs twice,
    the norm is sqrt(4 + 1 + 1 + 1)."""
    m = tiny_bow(vocab_size=10, n_buckets=8, n_classes=3)
    W, b = m.weight.weight, m.bias
    idx = torch.tensor([[2, 5, 6, 5]])
    torch.testing.assert_close(m(idx)[0][0], (W[5] + W[6] + W[17] + W[11]) / 2 + b, atol=ATOL, rtol=0)
    m.cfg.tf = "count"
    torch.testing.assert_close(m(idx)[0][0], (2 * W[5] + W[6] + W[17] + W[11]) / math.sqrt(7) + b, atol=ATOL, rtol=0)
    m.cfg.tf, m.cfg.doc_norm = "log", "l1"
    v5 = 1 + math.log(2)
    torch.testing.assert_close(m(idx)[0][0], (v5 * W[5] + W[6] + W[17] + W[11]) / (v5 + 3) + b, atol=ATOL, rtol=0)
    m.cfg.ngrams = 1
    m.cfg.tf, m.cfg.doc_norm = "binary", "none"
    torch.testing.assert_close(m(idx)[0][0], W[5] + W[6] + b, atol=ATOL, rtol=0)


@pytest.mark.parametrize("tf", ["binary", "count", "log"])
@pytest.mark.parametrize("doc_norm", ["l2", "l1", "none"])
@pytest.mark.parametrize("ngrams", [1, 2, 3])
def test_forward_equals_the_plain_reference(tf, doc_norm, ngrams):
    """A padded batch of odd lengths (one of [CLS] alone, one shorter than a trigram) against the reference,
    document by document: the batched hashing, counting and normalization are the reference's."""
    m = tiny_bow(tf=tf, doc_norm=doc_norm, ngrams=ngrams, n_classes=3)
    lengths = [9, 1, 2, 13, 5]
    idx, mask = padded_batch(lengths, 13)
    logits, _ = m(idx, mask)
    for row, n in enumerate(lengths):
        torch.testing.assert_close(logits[row], reference_logits(m, idx[row, :n].tolist()), atol=ATOL, rtol=ATOL)


def test_padding_and_the_first_token_are_ignored():
    m = tiny_bow()
    idx, mask = padded_batch([7, 4], 7)
    logits, _ = m(idx, mask)
    # each document alone, with no padding and no mask, gives its row of the batch
    for row, n in enumerate([7, 4]):
        torch.testing.assert_close(m(idx[row:row + 1, :n])[0][0], logits[row], atol=ATOL, rtol=0)
    # whatever the padded positions hold, and whatever sits at position 0 ([CLS], Llama's BOS), nothing changes
    noisy = idx.clone()
    noisy[~mask] = 30
    noisy[:, 0] = 31
    torch.testing.assert_close(m(noisy, mask)[0], logits, atol=ATOL, rtol=0)
    # [CLS] alone has no feature: the logits are the bias
    torch.testing.assert_close(m(torch.tensor([[2]]))[0][0], m.bias, atol=0, rtol=0)


def test_word_order_counts_through_the_ngrams_only():
    m = tiny_bow()
    a, b = torch.tensor([[2, 5, 6, 7]]), torch.tensor([[2, 7, 6, 5]])
    assert not torch.allclose(m(a)[0], m(b)[0])  # the bigrams differ
    m.cfg.ngrams = 1
    torch.testing.assert_close(m(a)[0], m(b)[0], atol=ATOL, rtol=0)  # a bag of words


def test_the_loss_is_the_cross_entropy_and_reaches_every_feature_of_the_batch():
    m = tiny_bow()
    idx, mask = padded_batch([6, 3], 6)
    targets = torch.tensor([1, 0])
    logits, loss = m(idx, mask, targets)
    torch.testing.assert_close(loss, torch.nn.functional.cross_entropy(logits, targets))
    loss.backward()
    used = set(m.features(idx, mask)[0][m.features(idx, mask)[1] > 0].tolist())
    touched = set(m.weight.weight.grad.abs().sum(1).nonzero().flatten().tolist())
    assert touched == used  # a row gets a gradient exactly when a feature of the batch looks it up


# -----------------------------------------------------------------------------
# accounting, the optimizer, checkpoints and settings


def test_flops_count_one_multiply_add_per_class_and_feature_occurrence():
    m = tiny_bow(ngrams=3, n_classes=3)
    for T in (1, 2, 5, 12):
        idx, mask = padded_batch([T], T)
        occurrences = int((m.features(idx, mask)[1] > 0).sum())  # every counted occurrence weighs > 0
        assert flops.forward_flops(m, T) == 2 * 3 * occurrences == 2 * 3 * sum(max(0, T - n) for n in (1, 2, 3))
    assert flops.forward_flops(m, 12, batch_size=4) == 4 * flops.forward_flops(m, 12)


def test_param_counts_and_weight_decay():
    m = tiny_bow(n_classes=3)
    assert m.param_counts() == {"total": (37 + 64) * 3 + 3, "embedding": (37 + 64) * 3, "non_embedding": 3,
                                "trainable": (37 + 64) * 3 + 3}
    assert BagOfWords(BagOfWordsConfig(vocab_size=37, ngrams=1)).param_counts()["total"] == 37 * 2 + 2  # no buckets
    # AdamW's decay is the L2 penalty: it reaches the table (unlike a transformer's embeddings), not the bias
    cfg = {**train.DEFAULTS, "weight_decay": 0.5, "learning_rate": 1e-2}
    opt = train.make_optimizer(m, cfg, "cpu")
    assert opt.param_groups[0]["params"] == [m.weight.weight] and opt.param_groups[1]["params"] == [m.bias]
    before = m.weight.weight.detach().clone()
    for p in m.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    torch.testing.assert_close(m.weight.weight, before * (1 - 1e-2 * 0.5))


def test_checkpoint_round_trip(tmp_path):
    m = tiny_bow(ngrams=3, tf="log", doc_norm="l1")
    path = str(tmp_path / "ckpt.pt")
    checkpoints.save_checkpoint(path, m, iter_num=7)
    loaded, ckpt = checkpoints.load_checkpoint(path)
    assert ckpt["kind"] == "bow" and ckpt["iter_num"] == 7 and isinstance(loaded, BagOfWords)
    assert loaded.cfg == m.cfg
    idx, mask = padded_batch([8, 5], 8)
    assert torch.equal(loaded(idx, mask)[0], m(idx, mask)[0])


def test_settings_are_checked_and_come_from_the_run():
    for bad, match in ((dict(tf="idf"), "tf='idf'"), (dict(doc_norm="max"), "doc_norm"), (dict(ngrams=0), "ngrams"),
                       (dict(n_buckets=0), "n_buckets"), (dict(n_classes=0), "n_classes")):
        with pytest.raises(configurator.ConfigError, match=match):
            BagOfWordsConfig(vocab_size=37, **bad)
    BagOfWordsConfig(vocab_size=37, ngrams=1, n_buckets=0)  # unigrams need no buckets
    assert set(model.family_settings("bow")) == {"ngrams", "n_buckets", "tf", "doc_norm"}
    cfg = train.make_config(["--model=bow", "--ngrams=3"])
    m = model.build_model("bow", cfg, {"vocab_size": 40, "n_classes": 3, "block_size": 12})
    assert (m.cfg.vocab_size, m.cfg.n_classes, m.cfg.ngrams) == (40, 3, 3)
    with pytest.raises(configurator.ConfigError, match="n_layer.*is a setting of model='encoder'"):
        train.make_config(["--model=bow", "--n_layer=2"])


def test_the_shipped_config_file():
    cfg = train.make_config([os.path.join(os.path.dirname(train.__file__), "config", "sst2_bow.py")])
    assert cfg["model"] == "bow" and cfg["out_dir"] == "out/sst2_bow" and cfg["protocol"] == "glue_heldout"
    assert cfg["select_on"] == "accuracy"  # the figure its verdicts read
    assert set(cfg) == set(train.DEFAULTS) | set(model.family_settings("bow"))


# -----------------------------------------------------------------------------
# train.py and evaluate.py drive it as any classifier


def test_train_and_evaluate_end_to_end(tiny_dataset, tmp_path, capsys):
    """The tiny SST-2 (one sentiment word decides each label) is learnt: the loss falls, the training split
    is fitted, the test split is scored from the best checkpoint, and evaluate.py reports it with FLOPs and
    timings."""
    cfg = train.make_config(["--model=bow"])
    cfg.update(data_dir=tiny_dataset, out_dir=str(tmp_path / "out"), device="cpu", dtype="float32", n_buckets=256,
               batch_size=8, max_epochs=15, learning_rate=0.1, weight_decay=0.0, scheduler="constant",
               early_stop_patience=0, log_interval=8, seed=1)
    summary = train.train(cfg)
    vocab_size = data.load_meta(tiny_dataset)["vocab_size"]
    assert summary["iters"] == 15 * 8 and summary["params"] == (vocab_size + 256) * 2 + 2
    with open(os.path.join(cfg["out_dir"], "log.jsonl")) as f:
        losses = [r["loss"] for r in map(json.loads, f) if r["type"] == "train"]
    assert losses[-1] < 0.5 * losses[0]
    assert summary["test_accuracy"] >= 0.75 and summary["train_flops"] > 0  # 8 test examples, 7 of them negative
    ckpt = os.path.join(cfg["out_dir"], "ckpt.pt")
    [report] = evaluate.main(["--ckpt", ckpt, "--repeats", "1", "--device", "cpu"])
    assert report["accuracy"] == summary["test_accuracy"] and report["effective_depth"] == 0
    assert report["flops_per_sample"] > 0 and report["latency_ms"] > 0 and report["params_non_embedding"] == 2
    assert "accuracy" in capsys.readouterr().out
    [fit] = evaluate.main(["--ckpt", ckpt, "--split", "train", "--no_timing", "--device", "cpu"])
    assert fit["accuracy"] == 1.0  # the sentiment words separate the training sentences: a linear model fits them

