"""
Masked-language-model pretraining of the encoder: BERT's masking (rates, what is never masked,
determinism per position), the tied MLM head's loss against a hand computation, the classifier's path
left as it was, a tiny pretraining run fine-tuned through init_from, and the corpus preparer on fixture
text (no SST-2 val or test sentence in it, the classifier's vocabulary).
"""

import contextlib
import io
import os
import tarfile

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

import data
import evaluate
import model
import tokenizer
import train
from bookkeeping import checkpoints, flops
from conftest import need_tokenizer
from corpora import imdb, sources
from corpora.sst2 import parse_sst2_tsv, split_sst2
from model import EncoderClassifier, EncoderConfig


def tiny_encoder(**kw):
    base = dict(vocab_size=50, n_classes=2, block_size=24, n_layer=1, n_loops=2, n_embd=16, n_head=2, ffn_hidden=32,
                dropout=0.0)
    torch.manual_seed(0)
    return EncoderClassifier(EncoderConfig(**{**base, **kw})).eval()


def synthetic_batch(rng, B, T, vocab_size, unk_rate=0.05):
    """(B, T) ids as collate makes them: [CLS], words (a few [UNK]), then [PAD]; lengths 1 .. T."""
    idx = np.full((B, T), data.PAD, dtype=np.int64)
    for b in range(B):
        n = rng.integers(1, T + 1)
        idx[b, 0] = data.CLS
        idx[b, 1:n] = np.where(rng.random(n - 1) < unk_rate, data.UNK, rng.integers(data.N_SPECIAL, vocab_size, n - 1))
    return idx


# -----------------------------------------------------------------------------
# masking


def test_mlm_mask_rates_and_invariants():
    V = 200
    idx = synthetic_batch(np.random.default_rng(0), 3000, 40, V)
    inputs, targets = data.mlm_mask(idx, V, np.random.default_rng(1))
    words = idx >= data.N_SPECIAL
    chosen = targets != -100
    n = words.sum(1)
    assert (chosen.sum(1) == np.minimum(n, np.maximum(1, np.rint(0.15 * n)))).all()  # 15 %, at least one
    assert (chosen.sum(1) >= 1)[n > 0].all() and not chosen[n == 0].any()
    assert not (chosen & ~words).any()  # never [PAD], [CLS] or [UNK]
    assert (targets[chosen] == idx[chosen]).all()
    assert (inputs[~chosen] == idx[~chosen]).all()  # only chosen positions change
    share = chosen.sum() / words.sum()
    assert 0.14 < share < 0.16
    masked = inputs[chosen] == data.MASK
    kept = inputs[chosen] == idx[chosen]
    swapped = ~masked & ~kept
    assert abs(masked.mean() - 0.8) < 0.02 and abs(kept.mean() - 0.1) < 0.015 and abs(swapped.mean() - 0.1) < 0.015
    assert inputs[chosen][swapped].min() >= data.N_SPECIAL and inputs[chosen][swapped].max() < V
    assert data.MASK == data.UNK  # the compact vocabulary's free row (see corpora/mlm.py)


def mlm_folder(path, splits, vocab_size, max_len, vocab=None):
    """A prepared MLM dataset folder: {split: [id lists]} written as ClassificationSplits, labels 0."""
    os.makedirs(path, exist_ok=True)
    for k, seqs in splits.items():
        data.write_split(path, k, [np.asarray(s) for s in seqs], np.zeros(len(seqs), np.int64), np.uint16)
    data.write_meta(path, {"dataset": "sst2_mlm", "task": "mlm", "max_len": max_len, "vocab_size": vocab_size,
                           "vocab": vocab or list(range(vocab_size - data.N_SPECIAL)), "tokenizer": "tiktoken:gpt2"})
    return str(path)


def test_mlm_stream_is_a_pure_function_of_the_position(tmp_path):
    rng = np.random.default_rng(0)
    seqs = [row[row != data.PAD] for row in synthetic_batch(rng, 40, 12, 30)]
    split = data.Dataset(mlm_folder(tmp_path / "mlm", {"train": seqs, "val": seqs[:4]}, 30, 12)).splits["train"]

    def stream():
        return data.MLMStream(split, 30, batch_size=4, grad_accum=2, seed=7)

    a, b = stream(), stream()
    b.step(1, 3, "cpu")  # another position first: nothing carries over
    first, again = a.step(0, 2, "cpu"), b.step(0, 2, "cpu")
    assert len(first) == 2
    for (x, n, t), (y, m, u) in zip(first, again):
        # a batch with no padding comes without a key mask (data.mask_if_padded)
        assert x.keys() == y.keys() and x.keys() - {"key_mask"} == {"idx", "mlm_targets"} and (n, t) == (m, u)
        assert all(torch.equal(x[k], y[k]) for k in x)
        read = int(x["key_mask"].sum()) if "key_mask" in x else x["idx"].numel()
        assert n == int((x["mlm_targets"] != -100).sum()) and t == read  # masked, read
        assert ((x["mlm_targets"] != -100).sum(1) >= 1).all()
    # the same texts at another place (epoch, step, micro-batch) are masked afresh
    items = [split[j] for j in range(8)]
    here = a.micro_batch(items, "cpu", (0, 2, 0))[0]["mlm_targets"]
    assert torch.equal(here, b.micro_batch(items, "cpu", (0, 2, 0))[0]["mlm_targets"])
    for where in ((1, 2, 0), (0, 3, 0), (0, 2, 1)):
        assert not torch.equal(here, a.micro_batch(items, "cpu", where)[0]["mlm_targets"]), where


# -----------------------------------------------------------------------------
# the model


def test_mlm_loss_is_cross_entropy_over_the_masked_positions_with_the_tied_table():
    m = tiny_encoder()
    idx = torch.from_numpy(synthetic_batch(np.random.default_rng(0), 5, 9, 50))
    inputs, targets = map(torch.from_numpy, data.mlm_mask(idx.numpy(), 50, np.random.default_rng(0)))
    states = {}
    m.norm_f.register_forward_hook(lambda mod, args, out: states.update(h=out))
    logits, loss = m(inputs, inputs != data.PAD, mlm_targets=targets)
    masked = list(zip(*torch.nonzero(targets != -100, as_tuple=True)))
    assert logits.shape == (len(masked), 50) and len(masked) >= 3  # the masked positions' alone, row-major
    expected = 0.0
    for row, (b, t) in enumerate(masked):
        z = states["h"][b, t] @ m.tok_emb.weight.T  # the state's score against every token's embedding
        torch.testing.assert_close(logits[row], z)
        expected += (torch.logsumexp(z, 0) - z[targets[b, t]]).item()
    assert loss.item() == pytest.approx(expected / len(masked), rel=1e-5)
    loss.backward()
    assert m.head.weight.grad is None and m.head.bias.grad is None  # pretraining never touches the classifier
    assert not [n for n, p in m.named_parameters() if n.startswith("mlm")]  # no new weights
    with pytest.raises(ValueError, match="not both"):
        m(inputs, targets=torch.zeros(5, dtype=torch.long), mlm_targets=targets)


def reference_classifier_forward(m, idx, key_mask, targets):
    """EncoderClassifier.forward as it was before the MLM head, written out."""
    h = m.drop(m.embed(idx))
    for _ in range(m.cfg.n_loops):
        h_in = h
        for layer in m.layers:
            h, _ = layer(h, key_mask, m.rope(), False)
        if m.cfg.n_loops > 1:
            h = h + m.cfg.loop_alpha * h_in
    h = m.norm_f(h)
    if m.cfg.pooling == "cls":
        pooled = h[:, 0]
    else:
        w = key_mask.to(h.dtype)
        pooled = (h * w[..., None]).sum(1) / w.sum(1, keepdim=True).clamp(min=1.0)
    logits = m.head(m.drop(pooled))
    return logits, F.cross_entropy(logits.float(), targets)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_classification_forward_is_unchanged(pooling):
    m = tiny_encoder(pooling=pooling)
    idx = torch.from_numpy(synthetic_batch(np.random.default_rng(1), 6, 10, 50))
    labels = torch.tensor([0, 1, 1, 0, 1, 0])
    logits, loss = m(idx, idx != data.PAD, labels)
    ref_logits, ref_loss = reference_classifier_forward(m, idx, idx != data.PAD, labels)
    assert logits.shape == (6, 2) and torch.equal(logits, ref_logits) and torch.equal(loss, ref_loss)


def test_a_dataset_without_labels_builds_the_binary_head_and_flops_count_the_mlm_head():
    m = model.build_model("encoder", model.family_settings("encoder") | {"n_embd": 16, "n_head": 2, "n_layer": 1},
                          {"vocab_size": 40, "n_classes": 0, "block_size": 12})
    assert m.cfg.n_classes == 2 and m.head.weight.shape == (2, 16)
    assert "mlm" in EncoderClassifier.tasks and "classification" in EncoderClassifier.tasks
    m = tiny_encoder(attn_impl="manual")  # FlopCounterMode counts the manual attention's matmuls
    B, T = 3, 11
    idx = torch.from_numpy(synthetic_batch(np.random.default_rng(2), B, T, 50))
    _, targets = data.mlm_mask(idx.numpy(), 50, np.random.default_rng(0))
    n = int((targets != -100).sum())
    with FlopCounterMode(display=False) as fc:
        m(idx, idx != data.PAD, mlm_targets=torch.from_numpy(targets))
    assert fc.get_total_flops() == flops.forward_flops(m, T, batch_size=B, masked=n / B)
    # the vocabulary head at each masked position instead of 2 classes, and a last Block computing every
    # position instead of [CLS] alone
    last_block = flops.block_flops(m.cfg, T) - flops.block_flops(m.cfg, T, queries=1)
    assert flops.forward_flops(m, T, masked=3) - flops.forward_flops(m, T) == 2 * 3 * 16 * 50 - 2 * 16 * 2 + last_block


# -----------------------------------------------------------------------------
# pretraining, then fine-tuning from its checkpoint


def test_a_training_step_counts_the_head_at_the_masked_positions_alone(tmp_path):
    """flops.step_flops for the mlm task: what a FLOP counter sees in the step's forward passes (the head
    scores each micro-batch's masked tokens, not its every position)."""
    rng = np.random.default_rng(3)
    seqs = [row[row != data.PAD] for row in synthetic_batch(rng, 24, 10, 50)]
    split = data.Dataset(mlm_folder(tmp_path / "mlm", {"train": seqs, "val": seqs[:4]}, 50, 10)).splits["train"]
    micro = data.MLMStream(split, 50, batch_size=6, grad_accum=2, seed=1).step(0, 1, "cpu")
    m = tiny_encoder(attn_impl="manual")  # FlopCounterMode counts the manual attention's matmuls
    with FlopCounterMode(display=False) as fc:
        for x, _, _ in micro:
            m(**x)
    assert flops.step_flops(m, micro, "mlm") == 3 * fc.get_total_flops()


def test_pretrain_then_fine_tune_from_the_checkpoint(tiny_cfg, tiny_dataset, tmp_path, monkeypatch, capsys,
                                                    stop_after):
    """A tiny MLM run on the tiny SST-2's own sentences (its vocabulary, max_len 32), resumed halfway to
    the same weights as in one go; its checkpoint evaluates; a classifier started from it (block_size
    256) holds every pretrained weight before its first step, and trains."""
    sst2 = data.Dataset(tiny_dataset)
    seqs = [sst2.splits["train"][i][0] for i in range(len(sst2.splits["train"]))]
    folder = mlm_folder(tmp_path / "mlm", {"train": seqs[8:], "val": seqs[:8]}, sst2.meta["vocab_size"], 32,
                        sst2.meta["vocab"])
    pre = tiny_cfg(dataset="sst2_mlm", data_dir=folder, max_iters=6, eval_interval=3, out_dir=str(tmp_path / "pre"),
                   dropout=0.1, grad_accum=2, batch_size=4)
    summary = train.train(pre)
    assert summary["task"] == "mlm" and summary["iters"] == 6 and "test_loss" not in summary
    assert summary["metrics"]["final_val_accuracy"] == {"label": "final validation masked-token accuracy",
                                                        "better": "higher"}
    assert summary["final_val_n"] > 0 and np.isfinite(summary["final_val_loss"])
    one_go = torch.load(os.path.join(pre["out_dir"], "last.pt"), weights_only=True)["model"]
    halves = {**pre, "out_dir": str(tmp_path / "halves")}
    stop_after(3)
    assert train.train(halves)["stopped"] == "interrupted"
    train.train({**halves, "init_from": "resume"})
    resumed = torch.load(os.path.join(halves["out_dir"], "last.pt"), weights_only=True)["model"]
    assert all(torch.equal(one_go[k], resumed[k]) for k in one_go)  # the same masks at the same steps

    ckpt = os.path.join(pre["out_dir"], "ckpt.pt")
    evaluate.main(["--ckpt", ckpt, "--device", "cpu", "--no_timing"])
    out = capsys.readouterr().out
    assert "validation split, masked" in out and "perplexity" in out and "FLOPs/sample" in out
    pretrained, _ = checkpoints.load_checkpoint(ckpt)
    val = data.Dataset(folder).splits["val"]
    figures = evaluate.evaluate_mlm(pretrained, val, "cpu", contextlib.nullcontext())
    again = evaluate.evaluate_mlm(pretrained, val, "cpu", contextlib.nullcontext(), batch_size=3)
    assert again["n"] == figures["n"] and again["loss"] == pytest.approx(figures["loss"], rel=1e-6)  # fixed masks

    started = {}
    new_model = train.new_model

    def spy(cfg, dataset):
        m = new_model(cfg, dataset)
        started.update(cfg=m.cfg, state={k: v.clone() for k, v in m.state_dict().items()})
        return m

    monkeypatch.setattr(train, "new_model", spy)
    tuned = train.train(tiny_cfg(init_from=ckpt, max_iters=3, out_dir=str(tmp_path / "tuned")))
    assert started["cfg"].block_size == 256 and pretrained.cfg.block_size == 32  # RoPE: no table to resize
    assert started["state"].keys() == pretrained.state_dict().keys()
    assert all(torch.equal(started["state"][k], v) for k, v in pretrained.state_dict().items())
    assert tuned["task"] == "classification" and np.isfinite(tuned["test_accuracy"])


# -----------------------------------------------------------------------------
# the corpus


def write_tsv(path, rows):
    path.write_text("sentence\tlabel\n" + "".join(f"{s} \t{label}\n" for s, label in rows))
    return sources.sha256(path.read_bytes())


@pytest.fixture
def corpus_mirror(tmp_path, monkeypatch):
    """A mirror with a tiny SST-2 (40 train sentences, 8 dev; three dev sentences are also in train) and a
    tiny IMDB archive (6 reviews a half, each naming its half), its digests in sources.SOURCES; the working
    directory is a fresh folder."""
    need_tokenizer()
    root = tmp_path / "mirror"
    (root / "SST-2").mkdir(parents=True)
    words = ["good", "bad", "film", "story", "plot", "actors", "funny", "dull", "long", "sharp"]
    train_rows = [(" ".join(words[(i + j) % 10] for j in range(1 + i % 7)) + f" number{i}", i % 2) for i in range(40)]
    dev_rows = [(f"a dev sentence {i} , {words[i]}", i % 2) for i in range(5)]
    dev_rows += [(train_rows[i][0], 1) for i in (5, 6, 7)]  # GLUE's files repeat sentences too
    files = sources.SOURCES["sst2"]["files"]
    monkeypatch.setitem(files, "SST-2/train.tsv", write_tsv(root / "SST-2" / "train.tsv", train_rows))
    monkeypatch.setitem(files, "SST-2/dev.tsv", write_tsv(root / "SST-2" / "dev.tsv", dev_rows))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for half in ("train", "test"):
            for i in range(6):
                text = f"Review {i}<br />of the {half} half: a good film{'!' * i}".encode()
                info = tarfile.TarInfo(f"aclImdb/{half}/{'pos' if i % 2 else 'neg'}/{i}_{9 if i % 2 else 2}.txt")
                info.size = len(text)
                tar.addfile(info, io.BytesIO(text))
    (root / "aclImdb_labelled.tar.gz").write_bytes(buf.getvalue())
    monkeypatch.setitem(sources.SOURCES["imdb"], "mirror_sha256", sources.sha256(buf.getvalue()))
    monkeypatch.chdir(tmp_path)
    return str(root), [s for s, _ in train_rows], [s for s, _ in dev_rows]


def test_corpus_is_sst2_train_and_imdb_train_in_the_classifiers_vocabulary(corpus_mirror):
    mirror, _, _ = corpus_mirror
    meta = data.prepare("sst2_mlm", protocol="glue", vocab="compact", max_len=64, mirror=mirror, n_val=5, verbose=False)
    sst2 = data.load_meta(os.path.join("data", "sst2_glue_compact"))  # prepared first, as it was missing
    assert meta["vocab_size"] == sst2["vocab_size"] and meta["vocab"] == sst2["vocab"] and meta["task"] == "mlm"
    corpus = data.Dataset(os.path.join("data", "sst2_mlm_glue_compact"))
    assert corpus.facts() == {"vocab_size": sst2["vocab_size"], "n_classes": 0, "block_size": 64}
    assert sorted(corpus.splits) == ["train", "val"] and len(corpus.splits["val"]) == 5

    # exactly the SST-2 train sentences that are not val or test sentences, and IMDB's train half
    splits = split_sst2(*(parse_sst2_tsv(open(os.path.join(mirror, f"SST-2/{f}.tsv"), "rb").read())
                          for f in ("train", "dev")), "glue", 1337)
    held_out = set(splits["val"][0]) | set(splits["test"][0])
    reviews = [t for t, _, _ in imdb.read_imdb(os.path.join(mirror, "aclImdb_labelled.tar.gz"), "train")]
    encode = tokenizer.TextEncoder({**sst2, "max_len": 64})
    expected = sorted(encode(s).tolist() for s in splits["train"][0] + reviews if s not in held_out)
    got = sorted(split[i][0].tolist() for split in corpus.splits.values() for i in range(len(split)))
    assert got == expected
    assert not {tuple(encode(s)) for s in held_out} & {tuple(x) for x in got}
    repeated = [s for s in splits["train"][0] if s in held_out]  # dev sentences repeated in train
    assert meta["left_out"]["sst2_val_or_test_sentence"] == len(repeated) >= 1
    counts = meta["counts"]
    assert sum(c["by_source"]["imdb"]["texts"] for c in counts.values()) == 6
    assert sum(c["texts"] for c in counts.values()) == len(expected)
    assert all((split.labels == 0).all() for split in corpus.splits.values())

    with pytest.raises(data.DataError, match="seed 1337; this corpus asks for 'glue', 7"):
        data.prepare("sst2_mlm", protocol="glue", mirror=mirror, out_dir="other", seed=7, n_val=5, verbose=False)
