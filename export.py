"""
Models in and out of this lab's files: llama2.c's formats both ways, as llama2.c has its export.py, and the
loading of a trained model to start a run from. model.py holds the models and our own checkpoints; this file
holds what translates between them and Karpathy's llama2.c (its train.py's .pt, its export.py's .bin, which
its run.c reads).

Read in order: the formats (LLAMA2C_MAGIC, LLAMA2C_NAMES, llama2c_bin_order), read_llama2c, write_llama2c,
load_pretrained (ours or llama2.c's, for train.py's init_from), then the command line:

    python export.py --ckpt CKPT --export PATH [--export_version auto|0|1|pt]

writes CKPT (a Llama language model: ours, LoRA adapters folded in, or llama2.c's own; or a name from
corpora/llama2c.py's PRETRAINED, such as stories260K) in llama2.c's format, reads it back, and checks it
gives the same logits.
"""

import argparse
import math
import os
import struct
import sys

import numpy as np
import torch

from bookkeeping.checkpoints import CKPT_FORMAT, CheckpointError, load_checkpoint
from cli.help import HelpFormatter, reader_may_stop
from configurator import ConfigError, UserError
from corpora import llama2c
from model import Llama, LlamaConfig, merge_lora, raw_model, rope_cache

# -----------------------------------------------------------------------------
# llama2.c's formats, both ways: a Llama from Karpathy's llama2.c checkpoints (.pt from its train.py,
# .bin from its export.py, which its run.c reads) and ours back to them.
#
# .pt : torch.save({"model": state dict in llama2.c's names, "model_args": {dim, n_layers, n_heads,
#       n_kv_heads, vocab_size, hidden_dim, multiple_of, norm_eps, max_seq_len, dropout}, ...})
# .bin version 0 (legacy; what run.c reads): 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
#       vocab_size, max_seq_len; a negative vocab_size means the output head is not shared), then
#       float32 arrays: token table, attention norms, wq, wk, wv, wo, FFN norms, w1, w2, w3, final
#       norm, the RoPE cos and sin tables (seq_len x head_size/2 each), the output head if not shared.
# .bin version 1: a 256-byte header (uint32 magic "ak42", int32 version 1, the 7 int32 with a positive
#       vocab_size, uint8 shared-head flag, zeros), then the arrays in another order: attention norms,
#       FFN norms, final norm, token table, wq, wk, wv, wo, w1, w2, w3, the head if not shared.

LLAMA2C_MAGIC = 0x616B3432
LLAMA2C_NAMES = {  # our parameter name -> llama2.c's ({i}: the layer)
    "tok_emb.weight": "tok_embeddings.weight", "norm_f.weight": "norm.weight", "head.weight": "output.weight",
    "layers.{i}.norm1.weight": "layers.{i}.attention_norm.weight",
    "layers.{i}.norm2.weight": "layers.{i}.ffn_norm.weight",
    **{f"layers.{{i}}.attn.{w}.weight": f"layers.{{i}}.attention.{w}.weight" for w in ("wq", "wk", "wv", "wo")},
    **{f"layers.{{i}}.ffn.{w}.weight": f"layers.{{i}}.feed_forward.{w}.weight" for w in ("w1", "w2", "w3")},
}


def llama2c_bin_order(n_layer, version):
    """Our parameter names in the order a .bin of `version` stores them ('rope' marks the RoPE tables
    of version 0; the output head, when not shared, comes last in both)."""
    per = lambda name: [name.format(i=i) for i in range(n_layer)]  # noqa: E731
    linear = [w for name in ("attn.wq", "attn.wk", "attn.wv", "attn.wo") for w in per(f"layers.{{i}}.{name}.weight")]
    ffn = [w for name in ("w1", "w2", "w3") for w in per(f"layers.{{i}}.ffn.{name}.weight")]
    if version == 0:
        return ["tok_emb.weight", *per("layers.{i}.norm1.weight"), *linear, *per("layers.{i}.norm2.weight"), *ffn,
                "norm_f.weight", "rope"]
    return [*per("layers.{i}.norm1.weight"), *per("layers.{i}.norm2.weight"), "norm_f.weight", "tok_emb.weight",
            *linear, *ffn]


def read_llama2c(path):
    """A Llama (eval mode, float32, CPU) from a llama2.c checkpoint: .pt, or .bin of version 0 or 1.
    Anything else raises CheckpointError saying what was expected."""
    if not os.path.isfile(path):
        raise CheckpointError(f"no llama2.c checkpoint at {path}")
    if path.endswith(".pt"):
        return _read_llama2c_pt(path)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(256)
    if len(head) < 28:
        raise CheckpointError(f"{path} is too short ({size} bytes) to be a llama2.c .bin checkpoint")
    if struct.unpack("<I", head[:4])[0] == LLAMA2C_MAGIC:
        version = struct.unpack("<i", head[4:8])[0]
        if version != 1:
            raise CheckpointError(f"{path} is a llama2.c .bin of version {version}; this code reads versions 0 and 1 "
                                  f"(version 2 is llama2.c's int8-quantized format)")
        dims, shared, offset = struct.unpack("<7i", head[8:36]), bool(head[36]), 256
    else:
        version, dims, offset = 0, struct.unpack("<7i", head[:28]), 28
        shared = dims[5] > 0
    dim, hidden, n_layer, n_head, n_kv_head, vocab_size, seq_len = dims
    vocab_size = abs(vocab_size)
    sane = (min(dim, hidden, n_layer, n_head, n_kv_head, vocab_size, seq_len) > 0 and dim % n_head == 0
            and n_head % n_kv_head == 0 and (dim // n_head) % 2 == 0 and max(dims) < 2**24)
    if not sane:
        raise CheckpointError(f"{path} does not start with a llama2.c header (read {dims}); expected a .bin from "
                              f"llama2.c's export.py, version 0 or 1")
    cfg = LlamaConfig(vocab_size=vocab_size, block_size=seq_len, n_layer=n_layer, n_embd=dim, n_head=n_head,
                      n_kv_head=n_kv_head, ffn_hidden=hidden, tie_embeddings=shared)
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in Llama(cfg).state_dict().items()}
    shapes["rope"] = (2, seq_len, dim // n_head // 2)
    order = llama2c_bin_order(n_layer, version) + ([] if shared else ["head.weight"])
    counts = [math.prod(shapes[name]) for name in order]
    expected = offset + 4 * sum(counts)
    if size != expected:
        raise CheckpointError(f"{path} holds {size} bytes, but a llama2.c version-{version} file with this header "
                              f"(dim {dim}, {n_layer} layers, vocab {vocab_size}, context {seq_len}) holds "
                              f"{expected}: truncated, or not such a file")
    flat = np.fromfile(path, dtype="<f4", offset=offset)
    state, at = {}, 0
    for name, n in zip(order, counts):
        if name != "rope":
            state[name] = torch.from_numpy(flat[at:at + n].copy()).view(shapes[name])
        at += n
    if shared:
        state["head.weight"] = state["tok_emb.weight"]
    model = Llama(cfg)
    model.load_state_dict(state)
    return model.eval()


def _read_llama2c_pt(path):
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise CheckpointError(f"{path} cannot be read with torch.load(weights_only=True) "
                              f"({type(e).__name__})") from None
    if not isinstance(ckpt, dict) or not {"model", "model_args"} <= set(ckpt):
        raise CheckpointError(f"{path} is not a llama2.c .pt checkpoint: expected a dict with 'model' and 'model_args'")
    sd = {k.removeprefix("_orig_mod."): v for k, v in ckpt["model"].items()}
    a = ckpt["model_args"]
    try:
        n_layer, emb = a["n_layers"], sd["tok_embeddings.weight"]
        tied = torch.equal(emb, sd.get("output.weight", emb))  # llama2.c ties them by sharing one tensor
        cfg = LlamaConfig(vocab_size=a["vocab_size"], block_size=a["max_seq_len"], n_layer=n_layer, n_embd=a["dim"],
                          n_head=a["n_heads"], n_kv_head=a.get("n_kv_heads") or 0, norm_eps=a.get("norm_eps", 1e-5),
                          ffn_hidden=sd["layers.0.feed_forward.w1.weight"].shape[0], tie_embeddings=tied)
        names = {ours.format(i=i): theirs.format(i=i) for ours, theirs in LLAMA2C_NAMES.items() for i in range(n_layer)}
        state = {ours: sd[theirs] for ours, theirs in names.items() if not (ours == "head.weight" and tied)}
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: model_args or weights are not llama2.c's ({type(e).__name__}: {e})") from None
    if cfg.tie_embeddings:
        state["head.weight"] = state["tok_emb.weight"]
    model = Llama(cfg)
    try:
        model.load_state_dict({k: v.float() for k, v in state.items()})
    except RuntimeError as e:
        raise CheckpointError(f"{path}: weights do not match its model_args ({e})") from None
    return model.eval()


def write_llama2c(model, path, version=0):
    """Write a Llama language model in llama2.c's format: version 0 or 1 .bin (run.c reads version 0),
    or 'pt' (a .pt for llama2.c's Python code). Written atomically. run.c assumes RMSNorm and
    theta = 10000, so other models are refused."""
    m = raw_model(model)
    if isinstance(m, Llama) and m.cfg.lora_rank:
        m = merge_lora(m)  # llama2.c knows no adapters: fold them into the weights
    cfg = m.cfg
    if not isinstance(m, Llama) or cfg.n_classes or cfg.norm != "rms" or cfg.rope_theta != 10000.0:
        raise ConfigError("llama2.c's formats hold a Llama language model with RMSNorm and RoPE theta 10000")
    sd = {k: v.detach().float().cpu() for k, v in m.state_dict().items()}
    tmp = f"{path}.tmp{os.getpid()}"
    if version == "pt":
        names = {ours.format(i=i): theirs.format(i=i) for ours, theirs in LLAMA2C_NAMES.items()
                 for i in range(cfg.n_layer)}
        args = {"dim": cfg.n_embd, "n_layers": cfg.n_layer, "n_heads": cfg.n_head, "n_kv_heads": cfg.n_kv_head,
                "vocab_size": cfg.vocab_size, "hidden_dim": cfg.ffn_hidden, "multiple_of": cfg.multiple_of,
                "norm_eps": cfg.norm_eps, "max_seq_len": cfg.block_size, "dropout": cfg.dropout}
        torch.save({"model": {theirs: sd[ours] for ours, theirs in names.items()}, "model_args": args}, tmp)
    elif version in (0, 1):
        shared = cfg.tie_embeddings
        dims = (cfg.n_embd, cfg.ffn_hidden, cfg.n_layer, cfg.n_head, cfg.n_kv_head,
                cfg.vocab_size if (shared or version == 1) else -cfg.vocab_size, cfg.block_size)
        sd["rope"] = torch.stack(rope_cache(cfg.block_size, cfg.n_embd // cfg.n_head, cfg.rope_theta))
        order = llama2c_bin_order(cfg.n_layer, version) + ([] if shared else ["head.weight"])
        with open(tmp, "wb") as f:
            if version == 1:
                f.write(struct.pack("<Ii7iB", LLAMA2C_MAGIC, 1, *dims, int(shared)).ljust(256, b"\0"))
            else:
                f.write(struct.pack("<7i", *dims))
            for name in order:
                f.write(sd[name].numpy().astype("<f4").tobytes())
    else:
        raise ConfigError(f"version={version!r}: expected 0, 1 or 'pt'")
    os.replace(tmp, path)


# -----------------------------------------------------------------------------
# A trained model to start a run from (train.py's init_from): ours, or llama2.c's


def load_pretrained(path):
    """A trained model to start from: a checkpoint of ours (any family) or a llama2.c one (.bin, or a
    .pt holding model_args). Raises CheckpointError if it is neither."""
    if path.endswith(".bin"):
        return read_llama2c(path)
    try:
        head = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:
        head = None
    if isinstance(head, dict) and "model_args" in head and head.get("format") != CKPT_FORMAT:
        return read_llama2c(path)
    return load_checkpoint(path)[0]


# -----------------------------------------------------------------------------
# The command line: `python export.py --ckpt CKPT --export PATH`

# what a checkpoint's task makes it, in the refusal of anything but a Llama language model
TASK_NAMES = {"classification": "classifier", "seq2seq": "seq2seq model", "mlm": "masked-language model"}


def load_model(path):
    """(model, task) from a checkpoint written by train.py (it must hold the run's config and data record) or
    from llama2.c's (.bin, or .pt with model_args: task 'generate'), on the CPU, or a clear CheckpointError."""
    try:
        model, ckpt = load_checkpoint(path, "cpu")
    except CheckpointError as ours:
        try:
            model = read_llama2c(path)
        except CheckpointError as theirs:
            raise (theirs if path.endswith(".bin") else ours) from None
        return model, "generate"
    if "data" not in ckpt or "config" not in ckpt:
        raise CheckpointError(f"{path} has no data/config record; it was not written by train.py")
    return model, ckpt["data"]["task"]


def export_llama2c(ckpt, export, version="auto"):
    """The checkpoint `ckpt`'s Llama language model in llama2.c's format at `export` (write_llama2c: adapters
    folded into the weights, the file written atomically), read back and checked to give the same logits.
    version: 'auto' (pt for a .pt path, else 0), '0', '1' or 'pt'."""
    path = ckpt
    if path in llama2c.PRETRAINED and not os.path.exists(path):
        path = llama2c.pretrained_file(path)
    model, task = load_model(path)
    version = ("pt" if export.endswith(".pt") else 0) if version == "auto" else (
        "pt" if version == "pt" else int(version))
    if not isinstance(raw_model(model), Llama) or task not in ("lm", "generate"):
        raise ConfigError(f"--export writes Llama language models; {path} is a "
                          f"{TASK_NAMES.get(task, task)} ({type(raw_model(model)).__name__})")
    write_llama2c(model, export, version)
    back = read_llama2c(export).eval()
    idx = torch.randint(0, back.cfg.vocab_size, (1, min(16, back.cfg.block_size)),
                        generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        gap = (back(idx)[0] - raw_model(model).eval()(idx)[0]).abs().max().item()
    print(f"wrote {export}: llama2.c version {version}, {os.path.getsize(export):,} bytes, from {path}; "
          f"read back, its logits are the checkpoint's (largest difference {gap:.1e})")
    return {"ckpt": path, "export": export, "version": version, "max_logit_difference": gap}


def main(argv=None):
    """The command line. Bad input (a UserError: ConfigError, data.DataError, CheckpointError) ends in
    one line, `error: ...`, and exit status 1."""
    p = argparse.ArgumentParser(prog="python export.py", formatter_class=HelpFormatter,
                                description="Write a Llama language model in llama2.c's format.")
    p.add_argument("--ckpt", required=True, help="a checkpoint of ours (a Llama language model), a llama2.c "
                   "checkpoint, or a name in corpora/llama2c.py's PRETRAINED (stories260K)")
    p.add_argument("--export", required=True, metavar="PATH", help="write the --ckpt (a Llama language model: "
                   "ours, LoRA folded in, or llama2.c's) in llama2.c's format to PATH")
    p.add_argument("--export_version", default="auto", choices=["auto", "0", "1", "pt"], help="llama2.c's "
                   ".bin version 0 (what run.c reads) or 1, or its .pt (model_args + weights); auto: pt for a .pt "
                   "path, else 0")
    args = p.parse_args(argv)
    try:
        if os.path.exists(args.export):
            raise ConfigError(f"--export {args.export}: already there; it is not replaced: remove it or give "
                              f"another path")
        folder = os.path.dirname(os.path.abspath(args.export))
        if not os.path.isdir(folder):
            raise ConfigError(f"--export {args.export}: there is no folder {folder} to write it in")
        return export_llama2c(args.ckpt, args.export, args.export_version)
    except UserError as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    with reader_may_stop():  # `python export.py --help | head` ends quietly
        main()
