"""
Train a model. One file, read top to bottom:

    python train.py config/sst2_recurrent.py
    python train.py config/sst2_baseline.py --device=cpu --max_epochs=2
    python train.py config/sst2_recurrent.py --init_from=resume     # continue an interrupted run
    python train.py config/shakespeare_char_baseline.py             # the char-level GPT (a language model)

The task follows from the dataset: a classification set trains the encoder classifier on shuffled
epochs; a language-modelling corpus (shakespeare_char) trains the causal GPT on random windows for
max_iters steps. Both share the loop below: AMP, clipping, schedules, evaluation, checkpoints,
early stopping, resume.

The defaults below are the settings; a config file and --key=value arguments override them through
configurator.py. Everything is an importable function, and the run itself sits behind
`if __name__ == "__main__"`, so tests can drive `train(config)` on tiny data.
"""

import json
import math
import os
import signal
import sys
import time
from contextlib import nullcontext

import numpy as np
import torch

import configurator
import data
from model import (GPT, CheckpointError, EncoderClassifier, EncoderConfig, GPTConfig, load_checkpoint, raw_model,
                   save_checkpoint)

# -----------------------------------------------------------------------------
# default config values (every one may be overridden; the key names are part of the interface)
# I/O
out_dir = "out/sst2"  # ckpt.pt (best validation loss), last.pt (latest state, for resume), log.jsonl
init_from = "scratch"  # 'scratch' or 'resume' (from out_dir/last.pt)
log_interval = 50  # iterations between progress lines
eval_interval = 0  # iterations between evaluations; 0 = once per epoch
# data
dataset = "sst2"  # a classification set ('sst2') or a language-modelling corpus ('shakespeare_char')
protocol = "glue"  # 'glue' (test = GLUE dev) or 'standard' (the seed's 80/10/10 split)
vocab = "compact"  # 'compact' (ids seen in training) or 'full' (all 50,257 GPT-2 ids)
max_len = 256  # tokens per sequence incl. [CLS], the study's truncation
data_dir = ""  # '' = data/<dataset>_<protocol>_<vocab>, prepared automatically if missing
bucket = True  # batch sentences of similar length together (less padding); batches stay shuffled
block_size = 128  # language modelling: context length of the GPT, the length of every training window
eval_windows = 0  # language modelling: validation windows per evaluation; 0 = the whole split (fixed, the
# same for every run; see lm_eval_starts)
# model (see model.EncoderConfig for what each means)
n_layer = 3
n_loops = 2
loop_alpha = 0.5
n_embd = 256
n_head = 4
n_kv_head = 0
ffn_hidden = 0
ffn = "swiglu"
norm = "rms"
pos = "rope"
emb_norm = "none"
dropout = 0.1
bias = False
pooling = "cls"
attn_impl = "sdpa"
tie_embeddings = True  # GPT only: output head = token embedding
# optimization
batch_size = 64
grad_accum = 1  # micro-batches per optimizer step
learning_rate = 1e-3
weight_decay = 0.01  # not applied to norms, biases and embeddings
beta1 = 0.9
beta2 = 0.98
grad_clip = 1.0  # max global grad norm; 0 = off
max_epochs = 10
max_iters = 0  # optimizer steps; 0 = no limit beyond max_epochs (a language model needs max_iters > 0)
scheduler = "plateau"  # 'plateau' (the seed's), 'cosine' (with warm-up) or 'constant'
warmup_iters = 0
min_lr = 0.0  # floor of the cosine schedule
plateau_factor = 0.5
plateau_patience = 2  # evaluations without improvement before the lr is multiplied by plateau_factor
early_stop_patience = 3  # evaluations without an improvement of early_stop_min_delta; 0 = off
early_stop_min_delta = 1e-3
# system
device = "auto"  # 'auto' picks cuda, then mps, then cpu
dtype = "auto"  # 'float32', 'bfloat16', 'float16'; 'auto' = bfloat16 on a GPU that has it, else float32
compile = False  # torch.compile the model
seed = 1337
# -----------------------------------------------------------------------------
DEFAULTS = {k: v for k, v in globals().items()
            if not k.startswith("_") and isinstance(v, (bool, int, float, str)) and k != "__name__"}
MODEL_KEYS = ["n_layer", "n_loops", "loop_alpha", "n_embd", "n_head", "n_kv_head", "ffn_hidden", "ffn", "norm",
              "pos", "emb_norm", "dropout", "bias", "pooling", "attn_impl"]  # the encoder classifier's
GPT_KEYS = ["block_size", "n_layer", "n_embd", "n_head", "n_kv_head", "ffn_hidden", "ffn", "norm", "pos", "emb_norm",
            "dropout", "bias", "attn_impl", "tie_embeddings"]
LM_EVAL_BATCH = 64  # validation windows per forward pass


def resolve_device(name):
    if name != "auto":
        return name
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def resolve_dtype(name, device_type):
    if name != "auto":
        if name not in ("float32", "bfloat16", "float16"):
            raise configurator.ConfigError(f"dtype={name!r}: expected 'auto', 'float32', 'bfloat16' or 'float16'")
        return name
    return "bfloat16" if device_type == "cuda" and torch.cuda.is_bf16_supported() else "float32"


def autocast_context(device_type, dtype_name):
    """Mixed precision: matmuls in bf16/fp16, the rest (norm statistics, softmax, loss) in fp32."""
    if dtype_name == "float32":
        return nullcontext()
    return torch.autocast(device_type=device_type, dtype=getattr(torch, dtype_name))


# -----------------------------------------------------------------------------
# data


def load_dataset(cfg):
    """Return (folder, meta, {split: data}), preparing the dataset first if it is missing. Splits are
    ClassificationSplits (train/val/test) or, for a language-modelling corpus, TokenSplits (train/val).
    Preparation reads the source files from $DATA_MIRROR when set, else downloads them."""
    folder = cfg["data_dir"] or data.dataset_dir(cfg["dataset"], cfg["protocol"], cfg["vocab"])
    if not os.path.isfile(os.path.join(folder, "meta.json")):
        if cfg["dataset"] not in data.PREPARERS:
            raise data.DataError(f"no prepared data in {folder} and no preparer for dataset {cfg['dataset']!r}")
        print(f"{folder} not found: preparing {cfg['dataset']}")
        data.PREPARERS[cfg["dataset"]](protocol=cfg["protocol"], vocab=cfg["vocab"], max_len=cfg["max_len"],
                                       mirror=os.environ.get("DATA_MIRROR"), out_dir=folder)
    meta = data.load_meta(folder)
    if is_lm(meta):
        splits = {s: data.TokenSplit(folder, s) for s in ("train", "val")}
    else:
        splits = {s: data.ClassificationSplit(folder, s) for s in ("train", "val", "test")}
    return folder, meta, splits


def is_lm(meta):
    return meta.get("task") == "lm"


def collate(items, device):
    """[(ids, label), ...] -> idx (B, T) padded with [PAD] to the longest sequence in the batch,
    key_mask (B, T) True on real tokens, labels (B,)."""
    T = max(len(ids) for ids, _ in items)
    idx = np.full((len(items), T), data.PAD, dtype=np.int64)
    for i, (ids, _) in enumerate(items):
        idx[i, :len(ids)] = ids
    idx = torch.from_numpy(idx)
    mask = idx != data.PAD
    labels = torch.tensor([lab for _, lab in items], dtype=torch.long)
    return idx.to(device), mask.to(device), labels.to(device)


def epoch_batches(split, batch_size, seed, epoch, bucket=True):
    """The list of index batches for one epoch, a pure function of (seed, epoch), so a resumed run
    sees exactly the batches it would have seen. With bucket=True, each window of 50 batches is
    sorted by length before cutting, so a batch holds similar lengths, then the batches are shuffled."""
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(split))
    if bucket:
        window = 50 * batch_size
        order = np.concatenate([w[np.argsort(split.lengths[w], kind="stable")]
                                for w in np.array_split(order, max(1, math.ceil(len(order) / window)))])
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))] if bucket else batches


@torch.no_grad()
def predict(model, split, batch_size, device, ctx):
    """Logits for every example of a split, in order (batched by length for speed)."""
    model.eval()
    order = np.argsort(split.lengths, kind="stable")
    out = torch.empty(len(split), raw_model(model).cfg.n_classes)
    for i in range(0, len(order), batch_size):
        chunk = order[i:i + batch_size]
        idx, mask, _ = collate([split[j] for j in chunk], device)
        with ctx:
            logits, _ = model(idx, mask)
        out[torch.from_numpy(chunk)] = logits.float().cpu()
    return out


def evaluate_loss_acc(model, split, batch_size, device, ctx):
    logits = predict(model, split, batch_size, device, ctx)
    labels = torch.from_numpy(np.asarray(split.labels, dtype=np.int64))
    loss = torch.nn.functional.cross_entropy(logits, labels).item()
    acc = (logits.argmax(-1) == labels).float().mean().item()
    return loss, acc


def lm_batch(tokens, block_size, batch_size, seed, step, device):
    """A batch of random windows for language modelling: x = tokens[i : i+T], y = tokens[i+1 : i+T+1]
    (the next character at every position) for batch_size uniformly drawn starts i. The starts are a
    pure function of (seed, step), so a resumed run draws exactly the batches it would have drawn."""
    if len(tokens) < block_size + 2:
        raise data.DataError(f"a split of {len(tokens)} tokens is too short for windows of {block_size}")
    rng = np.random.default_rng([seed, *np.atleast_1d(step)])
    starts = rng.integers(0, len(tokens) - block_size, size=batch_size)  # last start: len - T - 1
    return lm_windows(tokens, starts, block_size, device)


def lm_windows(tokens, starts, block_size, device):
    """Inputs x (B, T) = tokens[s : s+T] and targets y (B, T) = tokens[s+1 : s+T+1] for each start s,
    copied out of the memory-mapped split as int64."""
    x = np.stack([tokens[s:s + block_size] for s in starts]).astype(np.int64)
    y = np.stack([tokens[s + 1:s + 1 + block_size] for s in starts]).astype(np.int64)
    return torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)


def lm_eval_starts(n_tokens, block_size, max_windows=0):
    """Start offsets of the validation windows: consecutive, non-overlapping windows of block_size
    targets covering the split (111,540 characters -> 871 windows of 128), so every variant and
    every seed is scored on exactly the same characters. max_windows > 0 keeps that many, evenly spaced."""
    starts = np.arange(0, n_tokens - block_size, block_size)  # window s predicts tokens s+1 .. s+T
    if 0 < max_windows < len(starts):
        starts = starts[np.linspace(0, len(starts) - 1, max_windows).round().astype(np.int64)]
    return starts


@torch.no_grad()
def lm_evaluate(model, tokens, block_size, device, ctx, max_windows=0, batch_size=LM_EVAL_BATCH):
    """Mean next-token cross-entropy, perplexity exp(loss), next-token accuracy (argmax = target) and
    the mean L2 norm of the first block's input X (over all positions) on the fixed validation windows."""
    model.eval()
    starts = lm_eval_starts(len(tokens), block_size, max_windows)
    loss_sum, correct, norm_sum, n = 0.0, 0, 0.0, 0
    for i in range(0, len(starts), batch_size):
        x, y = lm_windows(tokens, starts[i:i + batch_size], block_size, device)
        with ctx:
            logits, _ = model(x)
            emb = raw_model(model).embed(x)  # (B, T, C): what the first block reads
        logits = logits.float()
        loss_sum += torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1),
                                                      reduction="sum").item()
        correct += (logits.argmax(-1) == y).sum().item()
        norm_sum += emb.float().norm(dim=-1).sum().item()
        n += y.numel()
    loss = loss_sum / n
    return {"loss": loss, "ppl": math.exp(loss), "acc": correct / n, "emb_norm": norm_sum / n, "tokens": n}


# -----------------------------------------------------------------------------
# model and optimizer


def build_model(cfg, meta):
    """The model the data calls for, from the run config's model keys: a GPT for a language-modelling
    corpus, else the encoder classifier. Vocabulary (and classes, length) come from the data."""
    try:
        if is_lm(meta):
            if cfg["n_loops"] != 1:
                raise ValueError(f"n_loops={cfg['n_loops']}: the GPT is not looped; set n_loops=1")
            return GPT(GPTConfig(**{k: cfg[k] for k in GPT_KEYS}, vocab_size=meta["vocab_size"]))
        args = {k: cfg[k] for k in MODEL_KEYS}
        args.update(vocab_size=meta["vocab_size"], n_classes=len(meta["label_names"]), block_size=meta["max_len"])
        return EncoderClassifier(EncoderConfig(**args))
    except ValueError as e:
        raise configurator.ConfigError(str(e)) from None


def make_optimizer(model, cfg, device_type):
    """AdamW with weight decay on weight matrices only: norms, biases and embedding tables get none
    (decaying an embedding row pulls rare tokens to zero; decaying a norm gain fights the norm)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        is_matrix = p.dim() >= 2 and "emb" not in name
        (decay if is_matrix else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}]
    extra = {"fused": True} if device_type == "cuda" else {}
    return torch.optim.AdamW(groups, lr=cfg["learning_rate"], betas=(cfg["beta1"], cfg["beta2"]), **extra)


def scheduled_lr(cfg, it, total_iters):
    """Learning rate at iteration `it` for the 'cosine' and 'constant' schedules (linear warm-up first).
    The 'plateau' schedule only warms up here; ReduceLROnPlateau lowers it after evaluations."""
    lr = cfg["learning_rate"]
    if it < cfg["warmup_iters"]:
        return lr * (it + 1) / cfg["warmup_iters"]
    if cfg["scheduler"] == "cosine":
        progress = min(1.0, (it - cfg["warmup_iters"]) / max(1, total_iters - cfg["warmup_iters"]))
        return cfg["min_lr"] + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - cfg["min_lr"])
    return lr


# -----------------------------------------------------------------------------
# the run


class StopRequest:
    """First Ctrl-C asks the loop to stop after the current step and save; a second one aborts."""

    def __init__(self):
        self.requested = False

    def __call__(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print("\ninterrupt: finishing this step and saving last.pt (Ctrl-C again to abort)", flush=True)


def log_jsonl(path, record):
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def evaluate_split(model, split, cfg, meta, device, ctx):
    """Validation figures as a dict with at least 'loss' and 'acc' (plus 'ppl' and 'emb_norm' for a
    language model)."""
    if is_lm(meta):
        return lm_evaluate(model, split.tokens, cfg["block_size"], device, ctx, cfg["eval_windows"])
    loss, acc = evaluate_loss_acc(model, split, 256, device, ctx)
    return {"loss": loss, "acc": acc}


def train(cfg):
    """Run one training job described by the config dict `cfg` (DEFAULTS with overrides).
    Returns a summary dict (best and final validation figures, test figures of the best checkpoint for
    a classifier, the last gradient norm, ...), also written to out_dir/summary.json."""
    for key, allowed in (("scheduler", ("plateau", "cosine", "constant")), ("init_from", ("scratch", "resume"))):
        if cfg[key] not in allowed:
            raise configurator.ConfigError(f"{key}={cfg[key]!r}: expected one of {allowed}")
    for key in ("batch_size", "grad_accum", "log_interval", "max_epochs", "block_size"):
        if cfg[key] < 1:
            raise configurator.ConfigError(f"{key}={cfg[key]} must be at least 1")
    dev = resolve_device(cfg["device"])
    device_type = dev.split(":")[0]
    dtype_name = resolve_dtype(cfg["dtype"], device_type)
    ctx = autocast_context(device_type, dtype_name)
    torch.manual_seed(cfg["seed"])

    folder, meta, splits = load_dataset(cfg)
    lm = is_lm(meta)
    if lm and cfg["max_iters"] < 1:
        raise configurator.ConfigError("a language model trains on random windows for max_iters steps: set max_iters")
    train_split, val_split = splits["train"], splits["val"]
    os.makedirs(cfg["out_dir"], exist_ok=True)
    last_path, best_path = os.path.join(cfg["out_dir"], "last.pt"), os.path.join(cfg["out_dir"], "ckpt.pt")
    log_path, summary_path = os.path.join(cfg["out_dir"], "log.jsonl"), os.path.join(cfg["out_dir"], "summary.json")

    # state that a resume restores
    iter_num, epoch, batch_in_epoch = 0, 0, 0
    best_val_loss, bad_evals, grad_norm, last_eval = float("inf"), 0, None, None
    resume = None
    if cfg["init_from"] == "resume":
        model, resume = load_checkpoint(last_path, dev)
        if resume.get("data", {}).get("vocab") != meta["vocab"]:
            raise data.DataError(f"{last_path} was trained on another vocabulary than {folder}")
        iter_num, epoch, batch_in_epoch = resume["iter_num"], resume["epoch"], resume["batch_in_epoch"]
        best_val_loss, bad_evals = resume["best_val_loss"], resume["bad_evals"]
        grad_norm, last_eval = resume.get("grad_norm"), resume.get("last_eval")
        print(f"resuming from {last_path} at iteration {iter_num}, epoch {epoch}")
    else:
        model = build_model(cfg, meta).to(dev)
        for path in (log_path, summary_path):
            if os.path.exists(path):
                os.remove(path)  # a new run starts a new log (its checkpoints replace the old ones too)
    model.train()
    counts = model.param_counts()
    print(f"model: {counts['total']:,} parameters ({counts['non_embedding']:,} non-embedding); "
          f"device {dev}, dtype {dtype_name}")

    optimizer = make_optimizer(model, cfg, device_type)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=cfg["plateau_factor"],
                                                         patience=cfg["plateau_patience"])
    scaler = torch.amp.GradScaler(device_type, enabled=(dtype_name == "float16"))
    if resume is not None:
        optimizer.load_state_dict(resume["optimizer"])
        plateau.load_state_dict(resume["plateau"])
        scaler.load_state_dict(resume["scaler"])
        torch.set_rng_state(resume["rng_cpu"].cpu())  # load_checkpoint moved it to `dev` with the rest
    fwd_model = torch.compile(model) if cfg["compile"] else model

    if lm:  # random windows: the whole run is one "epoch" of max_iters steps
        total_iters = iters_per_epoch = cfg["max_iters"]
    else:
        iters_per_epoch = math.ceil(len(train_split) / (cfg["batch_size"] * cfg["grad_accum"]))
        total_iters = cfg["max_epochs"] * iters_per_epoch
        if cfg["max_iters"] > 0:
            total_iters = min(total_iters, cfg["max_iters"])
    eval_every = cfg["eval_interval"] or iters_per_epoch

    data_info = {"dir": folder, "dataset": meta["dataset"], "task": "lm" if lm else "classification",
                 "vocab": meta["vocab"], "tokenizer": meta["tokenizer"]}
    if lm:
        data_info["block_size"] = cfg["block_size"]
    else:
        data_info.update({k: meta[k] for k in ("protocol", "max_len", "label_names", "preprocessing")})

    def state(kind):
        """Everything a checkpoint holds beyond the model: last.pt adds what resuming needs."""
        s = {"config": cfg, "data": data_info, "iter_num": iter_num, "epoch": epoch,
             "best_val_loss": best_val_loss}
        if kind == "last":
            s.update(batch_in_epoch=batch_in_epoch, bad_evals=bad_evals, optimizer=optimizer.state_dict(),
                     plateau=plateau.state_dict(), scaler=scaler.state_dict(), rng_cpu=torch.get_rng_state(),
                     grad_norm=grad_norm, last_eval=last_eval)
        return s

    def micro_batches(steps):
        """The micro-batches of the current optimizer step, each as (model inputs, examples, tokens)."""
        if lm:
            out = []
            for m in range(cfg["grad_accum"]):
                x, y = lm_batch(train_split.tokens, cfg["block_size"], cfg["batch_size"], cfg["seed"],
                                (iter_num, m), dev)
                out.append(({"idx": x, "targets": y}, x.size(0), x.numel()))
            return out
        out = []
        for b in steps[batch_in_epoch]:
            idx, mask, labels = collate([train_split[j] for j in b], dev)
            out.append(({"idx": idx, "key_mask": mask, "targets": labels}, len(b), int(mask.sum())))
        return out

    stop = StopRequest()
    old_handler = signal.signal(signal.SIGINT, stop) if hasattr(signal, "SIGINT") else None
    finished_reason = "max_iters" if lm else "max_epochs"
    t_log, tokens_since_log, t_start, iters_at_start = time.time(), 0, time.time(), iter_num
    try:
        while iter_num < total_iters:
            steps = None
            if lm:
                n_steps = total_iters
            else:
                if epoch >= cfg["max_epochs"]:
                    break
                batches = epoch_batches(train_split, cfg["batch_size"], cfg["seed"], epoch, cfg["bucket"])
                steps = [batches[i:i + cfg["grad_accum"]] for i in range(0, len(batches), cfg["grad_accum"])]
                n_steps = len(steps)
            while batch_in_epoch < n_steps and iter_num < total_iters and not stop.requested:
                lr = scheduled_lr(cfg, iter_num, total_iters)
                if cfg["scheduler"] != "plateau" or iter_num < cfg["warmup_iters"]:
                    for g in optimizer.param_groups:
                        g["lr"] = lr
                lr = optimizer.param_groups[0]["lr"]

                model.train()
                micro = micro_batches(steps)
                n_examples = sum(n for _, n, _ in micro)
                loss_sum = 0.0
                for inputs, n, n_tokens in micro:
                    with ctx:
                        _, loss = fwd_model(**inputs)
                    # weight each micro-batch by its size, so the step's gradient is the mean over examples
                    scaler.scale(loss * (n / n_examples)).backward()
                    loss_sum += loss.item() * n
                    tokens_since_log += n_tokens
                scaler.unscale_(optimizer)
                # the total gradient L2 norm before clipping (max_norm=inf measures without clipping)
                grad_norm = torch.nn.utils.clip_grad_norm_(
                    model.parameters(), cfg["grad_clip"] if cfg["grad_clip"] > 0 else float("inf")).item()
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
                iter_num += 1
                batch_in_epoch += 1

                if iter_num % cfg["log_interval"] == 0:
                    dt = time.time() - t_log
                    rate = (iter_num - iters_at_start) / (time.time() - t_start)
                    eta = (total_iters - iter_num) / max(rate, 1e-9)
                    where = "" if lm else f" (epoch {epoch + 1})"
                    print(f"iter {iter_num}/{total_iters}{where} loss {loss_sum / n_examples:.4f} "
                          f"grad norm {grad_norm:.3f} lr {lr:.2e} {tokens_since_log / dt:,.0f} tok/s "
                          f"ETA {eta / 60:.1f} min", flush=True)
                    log_jsonl(log_path, {"type": "train", "iter": iter_num, "epoch": epoch + 1,
                                         "loss": loss_sum / n_examples, "grad_norm": grad_norm, "lr": lr,
                                         "tok_per_s": tokens_since_log / dt})
                    t_log, tokens_since_log = time.time(), 0

                end_of_epoch = batch_in_epoch == n_steps
                if iter_num % eval_every == 0 or end_of_epoch or iter_num == total_iters:
                    last_eval = {"iter": iter_num, **evaluate_split(fwd_model, val_split, cfg, meta, dev, ctx)}
                    val_loss = last_eval["loss"]
                    improved = val_loss < best_val_loss - cfg["early_stop_min_delta"]
                    bad_evals = 0 if improved else bad_evals + 1
                    if iter_num >= cfg["warmup_iters"] and cfg["scheduler"] == "plateau":
                        plateau.step(val_loss)
                    is_best = val_loss < best_val_loss
                    if is_best:
                        best_val_loss = val_loss
                        save_checkpoint(best_path, model, **state("best"), val_acc=last_eval["acc"])
                    extra = f" ppl {last_eval['ppl']:.3f} emb norm {last_eval['emb_norm']:.3f}" if lm else ""
                    print(f"eval at iter {iter_num}: val loss {val_loss:.4f} acc {last_eval['acc']:.4f}{extra}"
                          f"{' (best, saved ckpt.pt)' if is_best else ''}", flush=True)
                    log_jsonl(log_path, {"type": "eval", "epoch": epoch + 1, "lr": optimizer.param_groups[0]["lr"],
                                         "best": is_best, "grad_norm": grad_norm,
                                         **{("iter" if k == "iter" else f"val_{k}"): v for k, v in last_eval.items()}})
                    if end_of_epoch:
                        epoch, batch_in_epoch = epoch + 1, 0
                    save_checkpoint(last_path, model, **state("last"))
                    if cfg["early_stop_patience"] and bad_evals >= cfg["early_stop_patience"]:
                        finished_reason = f"early stopping ({bad_evals} evaluations without improvement)"
                        stop.requested = True
                    t_log, tokens_since_log = time.time(), 0  # evaluation time is not training throughput
                if end_of_epoch:
                    break  # the next epoch draws its own shuffled batches
            if stop.requested:
                break
        if stop.requested and not finished_reason.startswith("early"):
            finished_reason = "interrupted"
            save_checkpoint(last_path, model, **state("last"))
            print(f"saved {last_path}; continue with --init_from=resume")
        elif not stop.requested and cfg["max_iters"] > 0 and iter_num == cfg["max_iters"]:
            finished_reason = "max_iters"
    finally:
        if old_handler is not None:
            signal.signal(signal.SIGINT, old_handler)

    summary = {"stopped": finished_reason, "iters": iter_num, "epochs": epoch, "best_val_loss": best_val_loss,
               "train_minutes": (time.time() - t_start) / 60, "params": counts["total"], "final_grad_norm": grad_norm}
    if last_eval is not None:  # the model as training left it (the study's figures), not the best checkpoint
        summary.update({f"final_val_{k}" if k != "iter" else "final_eval_iter": v for k, v in last_eval.items()})
    if lm and last_eval is not None:
        print(f"final: val loss {last_eval['loss']:.4f} ppl {last_eval['ppl']:.3f} acc {last_eval['acc']:.4f} "
              f"emb norm {last_eval['emb_norm']:.3f} grad norm {grad_norm:.3f}  "
              f"({finished_reason}, {summary['train_minutes']:.1f} min)")
    elif os.path.isfile(best_path) and finished_reason != "interrupted":
        best, _ = load_checkpoint(best_path, dev)
        summary["test_loss"], summary["test_acc"] = evaluate_loss_acc(best, splits["test"], 256, dev, ctx)
        print(f"best checkpoint: val loss {best_val_loss:.4f}; test loss {summary['test_loss']:.4f} "
              f"acc {summary['test_acc']:.4f}  ({finished_reason}, {summary['train_minutes']:.1f} min)")
    log_jsonl(log_path, {"type": "summary", **summary})
    if finished_reason != "interrupted":
        data.write_json(summary_path, {**summary, "config": cfg}, indent=1)
    return summary


def main(argv):
    try:
        cfg = configurator.apply_overrides(DEFAULTS, argv)
        train(cfg)
    except (configurator.ConfigError, data.DataError, CheckpointError) as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main(sys.argv[1:])
