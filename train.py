"""
Train a model. One file, read top to bottom:

    python train.py config/sst2_recurrent.py
    python train.py config/sst2_baseline.py --device=cpu --max_epochs=2
    python train.py config/sst2_recurrent.py --init_from=resume     # continue an interrupted run
    python train.py config/shakespeare_char_baseline.py             # the char-level GPT (a language model)
    torchrun --nproc_per_node=2 train.py config/sst2_recurrent.py --grad_accum=2   # DDP: 2 processes (GPUs or CPU)

Two settings pick what is trained: `dataset` (whose task, in data.py's registry, says how batches
are cut and how the model is scored: TASKS below) and `model` (the family, in model.py's
registry, whose config fields become settings too). Every task shares the one loop: AMP, clipping,
schedules, evaluation, checkpoints, early stopping, resume.

Read it in order, for one process: the defaults (the settings), the tasks, the model and optimizer, one
step (train_step), validation and the held-out splits, then the run: `train` checks the settings and
takes the out_dir, `setup` builds the run's pieces (a `Run`), `run_steps` trains step by step, calling
`evaluation` (which keeps ckpt.pt through `save`, the one place a checkpoint is built), and `finish`
writes the summary; then `main`. Data-parallel training over several processes under torchrun (DDP)
trains the same model as one process would (a step's batch is batch_size x grad_accum examples however
many processes share it); it is the appendix at the end (`Processes`, `processes`), where one process
passes straight through.

The defaults below are the settings; a config file and --key=value arguments override them through
configurator.py. Everything is an importable function, and the run itself sits behind
`if __name__ == "__main__"`, so tests can drive `train(config)` on tiny data. The run's bookkeeping (its files,
the out_dir lock, which configs are the same run, what its log records) is bookkeeping/records.py's, and the checks
of a run's settings (refusals, warnings) bookkeeping/checks.py's; what the command says of itself (--help) is
configurator.py's, built from the settings below.
"""

import math
import os
import sys
from contextlib import ExitStack, contextmanager, nullcontext, redirect_stdout
from dataclasses import asdict, dataclass, fields
from typing import Callable

import torch

import configurator
import data
import evaluate
from bookkeeping import records, timing
from bookkeeping.checkpoints import CKPT_VERSION, CheckpointError, load_checkpoint
from bookkeeping.checks import check_settings, check_world, run_warnings
from cli.help import reader_may_stop, train_bare_line, train_help
from export import load_pretrained
from hardware import devices
from model import FAMILIES, build_model, family_settings, from_pretrained

# -----------------------------------------------------------------------------
# default config values (every one may be overridden; the key names are part of the interface). `--help` prints
# them from this source: a comment at the end of a setting's line and the comment lines right below it are its help,
# and a comment after a blank line heads the settings below it.

# I/O
out_dir = "out/sst2"  # ckpt.pt (the best validation figure, select_on), last.pt (the latest state, for resume),
# log.jsonl, summary.json
init_from = "scratch"  # 'scratch', 'resume' (from out_dir/last.pt), or a checkpoint to fine-tune: a file, ours
# (ckpt.pt) or llama2.c's (.bin, .pt), or a name in data.PRETRAINED ('stories260K'); its architecture and weights
overwrite = False  # a new run into an out_dir that holds a run (ckpt.pt, last.pt or summary.json) is refused
# unless this is True: then that run's files are deleted first
log_interval = 50  # iterations between progress lines
eval_interval = 0  # iterations between evaluations; 0 = once per epoch (the last iteration is always evaluated)

# data
dataset = "sst2"  # a name in data.DATASETS: 'sst2', 'imdb', 'yelp_polarity', 'multidomain', 'multidomain_uci',
# 'sst5', 'cfimdb' (classification), 'shakespeare_char',
# 'imdb_lm' (language modelling), 'piglatin' (seq2seq), 'sst2_mlm' (masked-language-model pretraining of the encoder)
protocol = "glue_heldout"  # 'glue_heldout' (validation = 872 whole sentences held out of GLUE train; test = GLUE
# dev), 'glue' (validation = 5 % of GLUE train's phrases, pieces of training sentences: it measures phrase recall,
# not new sentences; test = GLUE dev) or 'standard' (the source paper's 80/10/10 split of GLUE train + dev pooled)
vocab = "compact"  # 'compact' (ids seen in training) or 'full' (all 50,257 GPT-2 ids)
tokenizer = ""  # sst5, cfimdb, imdb_lm: the Llama tokenizer, 'llama2' (32,000 pieces; the default for sst5 and
# cfimdb) or 'tok512' (stories260K's; the default for imdb_lm)
max_len = 256  # tokens per sequence incl. [CLS], the study's truncation
subset = ""  # sst2, imdb, yelp_polarity, multidomain(_uci): '' = all, 'frac50'/'frac10' (of train, nested),
# 'short30'/'long30' (the shortest / longest 30 % of every split by word count), 'sample2000' (per split)
data_dir = ""  # '' = data/<dataset>_<protocol>_<vocab> (or data/<dataset>), prepared automatically if missing
bucket = True  # classification: batch sentences of similar length together (less padding); batches stay shuffled
hyphen_compounds = 0.0  # seq2seq (Pig Latin): add this share of the training set as hyphenated compounds of its
# own words (data.hyphen_compounds: seeded, fixed for the run; held-out words never made); 0 = off
eval_windows = 0  # language modelling: validation windows per evaluation; 0 = the whole split (fixed, the
# same for every run; see data.lm_eval_starts)

# model: the family; its own settings (n_layer, n_embd, ...) are its config dataclass's fields, with
# that family's defaults (model.EncoderConfig, model.GPTConfig)
model = "encoder"  # 'encoder' (the classifier of the recurrent-vs-baseline study) | 'gpt' (the char LM) | 'llama'
# (the mini Llama-2: a language model, or a classifier on a labelled dataset) | 'encdec' (encoder-decoder
# transformer) | 'mamba' (selective state-space model; seq2seq or language modelling) | 'bow' (bag of words,
# logistic regression: the encoders' baseline)

# optimization
batch_size = 64  # examples per micro-batch (a step takes grad_accum of them)
grad_accum = 1  # micro-batches per optimizer step
learning_rate = 1e-3  # the peak rate, reached after warmup_iters
weight_decay = 0.01  # not applied to what the model names in no_weight_decay() (norms, biases, embeddings)
adamw_impl = "fused"  # 'fused' (torch.optim.AdamW, one kernel for all parameters) | 'manual' (written out below)
beta1 = 0.9  # AdamW's decay rate of the gradient's running mean
beta2 = 0.98  # and of its running square
grad_clip = 1.0  # max global grad norm; 0 = off
max_epochs = 10  # passes over the training set at most (early stopping may end a run sooner)
max_iters = 0  # optimizer steps; 0 = no limit beyond max_epochs (a language model needs max_iters > 0)
scheduler = "plateau"  # 'plateau' (the source paper's), 'cosine' (with warm-up) or 'constant'
warmup_iters = 0  # iterations of linear warm-up from 0 to learning_rate, under every scheduler
min_lr = 0.0  # floor of the cosine schedule
plateau_factor = 0.5  # the plateau schedule multiplies the lr by this
plateau_patience = 2  # evaluations without improvement before the lr is multiplied by plateau_factor
early_stop_patience = 3  # evaluations without an improvement of early_stop_min_delta; 0 = off
early_stop_min_delta = 1e-3  # a smaller gain in the select_on figure is no improvement
select_on = "loss"  # the validation figure that picks the kept checkpoint (ckpt.pt) and that early stopping and the
# plateau schedule watch: 'loss', or a figure of the task's with a better side ('accuracy' for a classifier: the
# figure its verdicts read; the SST-2 configs set it)

# system
device = "auto"  # 'auto' picks cuda, then mps, then cpu
dtype = "auto"  # 'float32', 'bfloat16', 'float16'; 'auto' = bfloat16 on a GPU that has it, else float32
compile = False  # torch.compile the model
peak_tflops = 0.0  # one device's peak TFLOP/s, the denominator of the MFU in the progress lines; 0 = look the GPU
# up (bookkeeping/timing.py's peak_flops); a CPU or an unknown GPU has none, and then no MFU is shown
seed = 1337  # the same in every process of a DDP run, so that they all start from the same weights
# -----------------------------------------------------------------------------
DEFAULTS = {k: v for k, v in globals().items()  # the lower-case names above (not imported CONSTANTS)
            if k.islower() and not k.startswith("_") and isinstance(v, (bool, int, float, str))}
MODEL_SETTINGS = {"model": {name: family_settings(name) for name in FAMILIES}}  # keys that exist per family


def make_config(argv):
    """The run config: DEFAULTS, the chosen family's settings, then config files and --key=value."""
    return configurator.apply_overrides(DEFAULTS, argv, MODEL_SETTINGS)


# -----------------------------------------------------------------------------
# tasks: how a task's training batches are cut, and how its model is scored


@dataclass(frozen=True)
class Task:
    metrics: dict  # name -> evaluate.Metric, the figures `evaluate` returns ('loss' first)
    stream: Callable  # (train split, model config, run config) -> a batch stream (data.py)
    evaluate: Callable  # (model, split, run config, device, autocast context) -> figures
    fixed_shape: bool = False  # every training batch has one shape (a language model's windows of block_size);
    # the others are padded to their bucket's longest sequence, so their length changes from batch to batch
    flops_options: Callable = lambda inputs, count: {}  # (micro-batch, its count) -> how model.flops_per_forward
    # counts its forward pass (the masked LM's head scores the batch's masked positions only)
    settings: tuple = ()  # the config keys only this task reads: set for another task, they are an error

def classification_stream(dataset, model_cfg, cfg):
    return data.ClassificationStream(dataset.splits["train"], cfg["batch_size"], cfg["grad_accum"], cfg["seed"],
                                     cfg["bucket"])

def lm_stream(dataset, model_cfg, cfg):
    if cfg["max_iters"] < 1:
        raise configurator.ConfigError("a language model trains on random windows for max_iters steps: set max_iters")
    return data.LMStream(dataset.splits["train"], model_cfg.block_size, cfg["batch_size"], cfg["grad_accum"],
                         cfg["seed"])

def seq2seq_stream(dataset, model_cfg, cfg):
    train = dataset.splits["train"]
    if cfg["hyphen_compounds"]:  # no held-out word may be made and taught: every other split's words are excluded
        if getattr(train, "vocab", None) is None:
            raise configurator.ConfigError(f"hyphen_compounds joins words: {cfg['dataset']}'s pairs have no character "
                                           f"vocabulary")
        codec = data.CharCodec(train.vocab)
        held_out = [codec.decode(split[i][0]) for name, split in dataset.splits.items() if name != "train"
                    for i in range(len(split))]
        train = data.hyphen_compounds(train, cfg["hyphen_compounds"], cfg["seed"], model_cfg.block_size, held_out)
        print(f"hyphen_compounds: {len(train) - len(dataset.splits['train']):,} compounds of training words added to "
              f"its {len(dataset.splits['train']):,} words")
    # the family says how it takes a (source, target) pair: model.py's seq2seq section
    return data.Seq2SeqStream(train, model_cfg.seq2seq_layout, cfg["batch_size"], cfg["grad_accum"], cfg["seed"],
                              cfg["bucket"])

def mlm_stream(dataset, model_cfg, cfg):
    # the masks draw random word ids, so the stream needs the vocabulary's size
    return data.MLMStream(dataset.splits["train"], model_cfg.vocab_size, cfg["batch_size"], cfg["grad_accum"],
                          cfg["seed"], cfg["bucket"])

def score_classifier(model, split, cfg, device, ctx):
    return evaluate.evaluate_classification(model, split, device, ctx)

def score_lm(model, split, cfg, device, ctx):
    return evaluate.evaluate_lm(model, split, device, ctx, cfg["eval_windows"])

def score_seq2seq(model, split, cfg, device, ctx):
    return evaluate.evaluate_seq2seq(model, split, device, ctx)

def score_mlm(model, split, cfg, device, ctx):
    return evaluate.evaluate_mlm(model, split, device, ctx)

TASKS = {
    "classification": Task(evaluate.CLASSIFICATION_METRICS, classification_stream, score_classifier),
    "lm": Task(evaluate.LM_METRICS, lm_stream, score_lm, fixed_shape=True),
    "seq2seq": Task(evaluate.SEQ2SEQ_METRICS, seq2seq_stream, score_seq2seq, settings=("hyphen_compounds",),
                    flops_options=lambda x, count: {"src_tokens": int(x["src_len"].sum())} if "src_len" in x else {}),
    "mlm": Task(evaluate.MLM_METRICS, mlm_stream, score_mlm,  # a micro-batch's count is its masked tokens
                flops_options=lambda inputs, count: {"masked": count / inputs["idx"].size(0)}),
}

def task_of(dataset, cfg):
    """The dataset's Task, once the config sets none of the other tasks' own keys (Task.settings)."""
    for name, other in TASKS.items():
        stray = [k for k in other.settings if name != dataset.task and cfg[k] != DEFAULTS[k]]
        if stray:
            raise configurator.ConfigError(f"{', '.join(stray)} applies to {name} datasets; {cfg['dataset']} is a "
                                           f"{dataset.task} dataset")
    task = TASKS[dataset.task]
    choices = [k for k, m in task.metrics.items() if m.better in ("higher", "lower")]
    if cfg["select_on"] not in choices:
        raise configurator.ConfigError(f"select_on={cfg['select_on']!r}: a {dataset.task} run is scored by "
                                       f"{', '.join(choices)}")
    return task


# -----------------------------------------------------------------------------
# model and optimizer


def new_model(cfg, dataset):
    """A model of the configured family, sized by the dataset (vocabulary, classes, length): fresh, or
    (init_from a checkpoint file) starting from that checkpoint's architecture and weights."""
    family = cfg["model"]
    if dataset.task not in FAMILIES[family][1].tasks:
        fit = [name for name, (_, cls) in FAMILIES.items() if dataset.task in cls.tasks]
        raise configurator.ConfigError(f"model={family!r} does not do the {dataset.task} task of dataset "
                                       f"{cfg['dataset']!r}; set model to one of {fit}")
    try:
        if cfg["init_from"] == "scratch":
            return build_model(family, cfg, dataset.facts())
        path = data.pretrained_file(cfg["init_from"]) if cfg["init_from"] in data.PRETRAINED else cfg["init_from"]
        model, fresh = from_pretrained(load_pretrained(path), family, cfg, dataset.facts())
    except configurator.ConfigError as e:
        where = "" if cfg["init_from"] == "scratch" else f"init_from {cfg['init_from']}: "
        raise configurator.ConfigError(f"{where}{e}") from None
    print(f"starting from {cfg['init_from']}" + (f"; new: {', '.join(fresh)}" if fresh else ""))
    return model

def make_optimizer(model, cfg, device_type):
    """AdamW over the trainable parameters only (a frozen one, requires_grad=False, is left out), with
    weight decay on all of them but those the model names in no_weight_decay()."""
    skip = model.no_weight_decay()
    trainable = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    groups = [{"params": [p for name, p in trainable if name not in skip], "weight_decay": cfg["weight_decay"]},
              {"params": [p for name, p in trainable if name in skip], "weight_decay": 0.0}]
    args = dict(lr=cfg["learning_rate"], betas=(cfg["beta1"], cfg["beta2"]))
    if cfg["adamw_impl"] == "manual":
        return AdamW(groups, **args)
    # fused: one kernel updates every parameter (CPU and CUDA since torch 2.4; elsewhere, as on MPS, torch's loop
    # over parameters). On a CPU it takes the baseline encoder's AdamW step from 39 to 11 ms, 5 % of a training step
    fused = device_type in ("cuda", "cpu")
    return torch.optim.AdamW(groups, **args, **({"fused": True} if fused else {}))

class AdamW(torch.optim.Optimizer):
    """AdamW written out (Loshchilov & Hutter 2019, Algorithm 2), the same update torch.optim.AdamW
    makes, for reading and for checking it:
        theta <- theta - lr * wd * theta                  decoupled weight decay, before the Adam step
        m <- b1 m + (1 - b1) g,   v <- b2 v + (1 - b2) g^2   moment estimates
        m_hat = m / (1 - b1^t),   v_hat = v / (1 - b2^t)     bias correction (t = this parameter's step)
        theta <- theta - lr * m_hat / (sqrt(v_hat) + eps)
    (The paper scales decay and step by a schedule multiplier eta_t; here the schedule sets lr itself.)"""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state.update(step=0, exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
                state["step"] += 1
                m, v, t = state["exp_avg"], state["exp_avg_sq"], state["step"]
                p.mul_(1 - lr * wd)
                m.mul_(b1).add_(p.grad, alpha=1 - b1)
                v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
                p.addcdiv_(m_hat, v_hat.sqrt().add_(eps), value=-lr)

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

def set_lr(optimizer, cfg, it, total_iters):
    """Apply this iteration's scheduled rate (the plateau schedule owns it after warm-up); return the rate."""
    if cfg["scheduler"] != "plateau" or it < cfg["warmup_iters"]:
        lr = scheduled_lr(cfg, it, total_iters)
        for g in optimizer.param_groups:
            g["lr"] = lr
    return optimizer.param_groups[0]["lr"]


FLOAT32_MATMULS = "high"  # on CUDA: TF32 (setup); gpu_check's float32 reference sets 'highest', true float32
COMPILE_BACKEND = "inductor"  # compile=True's; tests and `gpu_check.py --cpu` take dynamo's 'eager': the same graph
# capture and guards, no code generated (inductor takes minutes on a CPU)


def compiled(model, cfg, task):
    """torch.compile(model) when compile=True, else the model. Most tasks' batches are padded to their
    bucket's longest sequence, so their length changes from batch to batch (and so does the batch size, at
    the end of an epoch or a split): dynamic=True traces one graph with symbolic sizes from the start,
    where the default would specialize on the first length, recompile on the second, and count each
    against dynamo's recompile limit (past it, a shape runs uncompiled). A task of one fixed shape (a
    language model's windows of block_size) keeps the default, a graph specialized to that shape."""
    if not cfg["compile"]:
        return model
    return torch.compile(model, dynamic=None if task.fixed_shape else True, backend=COMPILE_BACKEND)


def device_peak(cfg, dev, dtype_name):
    """(one device's peak FLOP/s, its source) for the MFU, or None: the peak_tflops setting, or the GPU's
    datasheet figure (bookkeeping/timing.py's peak_flops)."""
    if cfg["peak_tflops"] > 0:
        return cfg["peak_tflops"] * 1e12, "the peak_tflops setting"
    return timing.peak_flops(dev, dtype_name)


# -----------------------------------------------------------------------------
# one step


@dataclass(frozen=True)
class StepTotals:
    """One optimizer step over all the processes: whether to stop before it, and its size."""
    stop: bool
    examples: int
    tokens: int
    flops: float


def step_flops(model, micro_batches, task):
    """Training FLOPs of one step: 3x the analytic forward FLOPs (the backward pass costs about twice the
    forward) of each micro-batch of token ids `idx` (B, T) at its padded length, counted as the task says;
    other inputs count 0, and so does a micro-batch of 0 examples (a DDP process's stand-in, see
    `Processes.step`)."""
    return float(sum(3 * model.flops_per_forward(x["idx"].size(1), x["idx"].size(0), **task.flops_options(x, n))
                     for x, n, _ in micro_batches if "idx" in x and n))


def train_step(model, micro_batches, optimizer, scaler, ctx, grad_clip, n_examples=None, world=1):
    """One optimizer step over the micro-batches [(inputs, examples, tokens), ...]. Each micro-batch's
    loss is weighted by its share of the step's examples, so the gradient is the mean over all of them.
    Under DDP, `micro_batches` are this process's, `n_examples` counts the examples of all `world`
    processes' (default: these micro-batches'), and DDP's all-reduce averages the processes' gradients:
    each share is multiplied by `world`, so that the average is the sum over all the step's micro-batches.
    Only the last backward all-reduces; the others accumulate locally (no_sync).
    Returns ([(loss, examples) for each micro-batch], total gradient L2 norm before clipping), the losses
    and the norm as device tensors: reading them waits for the device, so the loop reads them only when
    it logs or evaluates (mean_loss, .item())."""
    if n_examples is None:
        n_examples = sum(n for _, n, _ in micro_batches)
    no_sync = getattr(model, "no_sync", nullcontext)  # DistributedDataParallel's (through a compile wrapper too)
    losses = []
    for k, (inputs, n, _) in enumerate(micro_batches):
        with no_sync() if k < len(micro_batches) - 1 else nullcontext():
            with ctx:
                _, loss = model(**inputs)
            scaler.scale(loss * (n * world / n_examples)).backward()
        losses.append((loss.detach(), n))
    scaler.unscale_(optimizer)
    # the total gradient L2 norm before clipping (max_norm=inf measures without clipping); frozen
    # parameters have no gradient and do not count
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip if grad_clip > 0 else float("inf"))
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return losses, grad_norm


def mean_loss(losses, n_examples, procs):
    """A step's loss, the mean over its n_examples (all processes'), from train_step's per-micro-batch
    losses: one copy from the device, then the same sum in float64 that one process makes."""
    values = torch.stack([loss for loss, _ in losses]).tolist()
    total = sum(v * n for v, (_, n) in zip(values, losses))
    return procs.sum([total])[0] / n_examples


# -----------------------------------------------------------------------------
# validation, and the held-out splits


@dataclass
class RunState:
    """How far the run has come: with the weights, the optimizer, the schedulers and the RNG, what a
    resume restores. Every checkpoint holds these fields at its top level."""
    iter_num: int = 0  # optimizer steps taken
    epoch: int = 0  # epochs completed
    step_in_epoch: int = 0  # optimizer steps taken in the current epoch
    best_val_loss: float = math.inf  # the lowest validation loss so far
    best_val: float | None = None  # the best select_on figure so far: the kept checkpoint's (ckpt.pt)
    bad_evals: int = 0  # evaluations in a row without an improvement of early_stop_min_delta
    grad_norm: float | None = None  # of the last step, before clipping
    last_eval: dict | None = None  # the last validation figures, with the iteration they were taken at
    stopped: str = ""  # why the run ended: 'max_epochs', 'max_iters', 'early stopping (...)' or 'interrupted'
    train_flops: float = 0.0  # training FLOPs so far (step_flops; resumed from a checkpoint without it: since then)
    train_seconds: float = 0.0  # wall time so far, evaluations included (likewise): a resumed run's minutes are all

    @classmethod
    def from_checkpoint(cls, ckpt):
        state = cls(**{f.name: ckpt.get(f.name, f.default) for f in fields(cls)})
        if "best_val" not in ckpt and math.isfinite(state.best_val_loss):  # saved before select_on: by the loss
            state.best_val = state.best_val_loss
        return state


def validate(model, task, dataset, cfg, device, ctx, procs):
    """The task's figures of the model on the validation split. Under DDP every process scores the whole
    split, the same way (it is small next to training, and what the figures decide must be decided everywhere
    alike); all then take rank 0's loss and select_on figure, so that a difference in the last bit between two
    GPUs cannot make them decide differently."""
    figures = task.evaluate(model, dataset.splits["val"], cfg, device, ctx)
    for k in dict.fromkeys(("loss", cfg["select_on"])):
        figures[k] = procs.from_main(figures[k])
    return figures


def judge(state, figures, task, cfg):
    """Record an evaluation in the run's state: its figures, the lowest loss, the best select_on figure (the
    kept checkpoint's), the evaluations in a row without a gain of early_stop_min_delta in it, and early stopping
    after early_stop_patience of them. Returns whether this is the best select_on figure so far."""
    key = cfg["select_on"]
    state.last_eval = {"iter": state.iter_num, "n": figures["n"],
                       **{k: figures[k] for k in task.metrics if k in figures}}
    state.best_val_loss = min(state.best_val_loss, figures["loss"])
    sign = 1 if task.metrics[key].better == "higher" else -1  # a gain is sign * (new - old) > 0
    value, best = figures[key], state.best_val
    state.bad_evals = 0 if best is None or sign * (value - best) > cfg["early_stop_min_delta"] else state.bad_evals + 1
    is_best = best is None or sign * (value - best) > 0
    if is_best:
        state.best_val = value
    if cfg["early_stop_patience"] and state.bad_evals >= cfg["early_stop_patience"]:
        state.stopped = f"early stopping ({state.bad_evals} evaluations without improvement)"
    return is_best


def score_test(run, summary):
    """Add the best checkpoint's figures on each held-out split (test, and Pig Latin's unseen words) to the
    summary as <split>_<figure>, with their labels in its `metrics`, and the per-example answers for paired
    tests across runs (McNemar's, study.py); nothing without a test split."""
    best_path, splits = run.files.paths["best"], run.dataset.splits
    if "test" not in splits or not os.path.isfile(best_path):
        return
    best, _ = load_checkpoint(best_path, run.procs.device)
    for name in [s for s in splits if s not in ("train", "val")]:
        figures = run.task.evaluate(best, splits[name], run.cfg, run.procs.device, run.ctx)
        summary.update({f"{name}_{k}": figures[k] for k in run.task.metrics if k in figures},
                       **{f"{name}_n": figures["n"]})
        if "predictions" in figures:
            summary[f"{name}_predictions"] = figures["predictions"]
        summary["metrics"].update({f"{name}_{k}": {"label": f"{name} {m.label} (best checkpoint)", "better": m.better}
                                   for k, m in run.task.metrics.items() if k in figures})
        print(f"best checkpoint: val {run.cfg['select_on']} {run.state.best_val:.4f}; {name} "
              f"{records.describe(figures, run.task.metrics)}")


# -----------------------------------------------------------------------------
# the run: set up, trained step by step, evaluated, saved, finished


def setup_line(model, procs, dtype_name, peak):
    """The line that opens a run: the model's size, the device and precision, the processes, the MFU's peak."""
    counts = model.param_counts()
    frozen = f", {counts['trainable']:,} trainable" if counts["trainable"] < counts["total"] else ""
    return (f"model: {counts['total']:,} parameters ({counts['non_embedding']:,} non-embedding{frozen}); "
            f"device {procs.device}" + (f" ({devices.threads_note()})" if procs.device == "cpu" else "")
            + f", dtype {dtype_name}" + (", TF32 matmuls" if procs.device.startswith("cuda") else "")
            + (f"; {procs.world} processes (DDP, {torch.distributed.get_backend()})" if procs.world > 1 else "")
            + (f"; MFU of a peak {peak[0] / 1e12:,.1f} TFLOP/s per device ({peak[1]})" if peak else
               "; no MFU (no peak FLOP/s known for this device; peak_tflops sets one)"))


def report_progress(state, total_iters, epoch, epochs, loss, lr, speed):
    """Print a progress line; return its log record. `epoch`: the 1-based epoch of this step, printed if
    the stream has `epochs` (a stream of random windows has none); `speed`: the Meter's reading."""
    mfu = f" MFU {100 * speed['mfu']:.1f}%" if "mfu" in speed else ""
    print(f"iter {state.iter_num}/{total_iters}{f' (epoch {epoch})' if epochs else ''} loss {loss:.4f} grad norm "
          f"{state.grad_norm:.3f} lr {lr:.2e} {speed['tok_per_s']:,.0f} tok/s{mfu} ETA {speed['eta_min']:.1f} min",
          flush=True)
    return {"type": "train", "iter": state.iter_num, "epoch": epoch, "loss": loss, "grad_norm": state.grad_norm,
            "lr": lr, "tok_per_s": speed["tok_per_s"], **({"mfu": speed["mfu"]} if "mfu" in speed else {})}


def start(cfg, dataset, dev, files):
    """A new model and state, or (init_from='resume') both from last.pt (resumed); the run's start goes into its
    log. Returns (model, state, the checkpoint resumed from or None, the run's config)."""
    if cfg["init_from"] == "resume":
        return resumed(cfg, dataset, dev, files)
    for path in files.paths.values():  # check_out_dir let this through: an empty out_dir, or overwrite=True
        if files.writer and os.path.exists(path):
            os.remove(path)
            print(f"deleted {path} (of the run this one replaces)")
    files.log({"type": "start", "iter": 0, "config": cfg})
    return new_model(cfg, dataset).to(dev), RunState(), None, cfg


def resumed(cfg, dataset, dev, files):
    """The run in last.pt: its model and state, and the checkpoint itself, which also holds the optimizer,
    schedules and random state to restore (`optimizers`). A resume must be the same run (same_run): only
    IMPLEMENTATION_KEYS (printed and logged) and BOOKKEEPING_KEYS may change. The config it returns is the run's
    it continues, which says how that one started (from scratch, stories260K, a checkpoint), so study.py knows
    it for the run it planned."""
    paths = files.paths
    model, ckpt = load_checkpoint(paths["last"], dev)
    if ckpt["version"] != CKPT_VERSION:
        raise CheckpointError(f"{paths['last']} is checkpoint version {ckpt['version']}; resuming needs version "
                              f"{CKPT_VERSION} (the run state changed). Evaluate it with evaluate.py, or start again")
    dataset.check_matches(ckpt["data"], f"the run in {paths['last']}")
    old = ckpt["config"]
    implementation, other = records.run_differences(old, cfg, DEFAULTS)
    if other:
        raise configurator.ConfigError(
            f"{paths['last']} is a run with other settings ({records.changes(old, cfg, other)}): a resume continues "
            f"the same run, so resume with its settings (only {', '.join(records.IMPLEMENTATION_KEYS)} may change), "
            f"or start a new run in another out_dir")
    if implementation:
        print(f"resuming under other implementation settings: {records.changes(old, cfg, implementation)}")
    if old.get("init_from", "resume") != "resume":
        cfg = {**cfg, "init_from": old["init_from"]}
    state = RunState.from_checkpoint(ckpt)
    if state.stopped in ("", "interrupted"):  # saved at an evaluation (a run killed after it), or on a stop asked for
        state.stopped = ""  # it goes on
    else:  # the last evaluation stopped it early, and the run was killed before its summary: it ends as it would have
        print(f"{paths['last']}: the run had stopped ({state.stopped}); scoring its best checkpoint, no more training")
    print(f"resuming from {paths['last']} at iteration {state.iter_num}, epoch {state.epoch}")
    files.log({"type": "start", "iter": state.iter_num, "config": cfg,
               **({"implementation_changed": {k: [old.get(k), cfg[k]] for k in implementation}}
                  if implementation else {})})
    return model, state, ckpt, cfg


@dataclass
class Run:
    """One training job's pieces, built by `setup`: what its steps, evaluations and checkpoints share."""
    cfg: dict  # the run's config: for a resume, with the init_from of the run it continues (`resumed`)
    procs: "Processes"  # this process, and its place among those training together (one process: rank 0 of 1)
    ctx: object  # the autocast context (a nullcontext in float32)
    dataset: data.Dataset
    task: Task
    files: records.RunFiles  # the run's files in out_dir, written by rank 0
    model: torch.nn.Module  # the plain module, whose weights the checkpoints keep
    train_model: torch.nn.Module  # the module that trains: the model, compiled when compile=True (DDP: wrapped)
    eval_model: torch.nn.Module  # the module that evaluates
    state: RunState
    optimizer: torch.optim.Optimizer
    plateau: torch.optim.lr_scheduler.ReduceLROnPlateau
    scaler: torch.amp.GradScaler  # float16's loss scaling; a no-op otherwise
    stream: object  # the task's training batches (data.py's streams)
    meter: timing.Meter  # tokens per second, MFU, time so far and left
    epoch_steps: float  # optimizer steps an epoch (inf: a stream of random windows has no epochs)
    total_iters: float  # optimizer steps at most (max_epochs, max_iters)
    eval_every: float  # optimizer steps between evaluations


def setup(cfg, procs):
    """The run's pieces, in the order they are built: the precision, the data and its task, the model and
    its state (fresh, or resumed: `start`), the optimizer and schedules, the batches, the run's length (with
    the warnings it gives) and the modules that train and evaluate."""
    device_type = procs.device.split(":")[0]
    dtype_name = devices.resolve_dtype(cfg["dtype"], device_type)
    ctx = devices.autocast_context(device_type, dtype_name)
    if device_type == "cuda":
        # TF32 tensor cores for float32 matmuls (a 10-bit mantissa, several times float32's rate from the A100
        # on): the float32 runs, and what bf16 autocast leaves in float32. This setting is the process's.
        torch.set_float32_matmul_precision(FLOAT32_MATMULS)
    torch.manual_seed(cfg["seed"])
    with procs.main_first():  # rank 0 prepares a missing dataset; then the others read it
        dataset = data.load_dataset(cfg)
    task = task_of(dataset, cfg)
    files = records.RunFiles(cfg["out_dir"], writer=procs.main)
    model, state, resume, run_cfg = start(cfg, dataset, procs.device, files)
    peak = device_peak(run_cfg, procs.device, dtype_name)  # (FLOP/s, source) or None
    print(setup_line(model, procs, dtype_name, peak))
    files.log({"type": "conditions", "iter": state.iter_num,
               **records.run_conditions(procs.device, dtype_name, procs.world)})
    optimizer, plateau, scaler = optimizers(model, run_cfg, task, device_type, dtype_name, resume)
    stream = task.stream(dataset, model.cfg, run_cfg)
    epoch_steps = stream.steps_per_epoch or math.inf  # a stream of random draws has no epochs
    total_iters = min(run_cfg["max_epochs"] * epoch_steps, run_cfg["max_iters"] or math.inf)
    eval_every = run_cfg["eval_interval"] or epoch_steps
    for line in run_warnings(run_cfg, total_iters, epoch_steps, eval_every, DEFAULTS):
        print(f"warning: {line}")
    if not procs.ddp:  # one module trains and evaluates: the model itself, or compiled (compile=True)
        train_model = eval_model = compiled(model, run_cfg, task)
    else:  # under torchrun, even with one process: the appendix
        train_model, eval_model = procs.models(model, run_cfg, task, stream, state, ctx)
    meter = timing.Meter(peak, procs.world, state.iter_num, total_iters, state.train_seconds)
    return Run(run_cfg, procs, ctx, dataset, task, files, model, train_model, eval_model, state, optimizer, plateau,
               scaler, stream, meter, epoch_steps, total_iters, eval_every)


def optimizers(model, cfg, task, device_type, dtype_name, resume):
    """AdamW (make_optimizer), the plateau schedule (on the select_on figure, in its direction: 'max' for an
    accuracy) and float16's loss scaler; for a resume, each as last.pt left it, with the random state."""
    optimizer = make_optimizer(model, cfg, device_type)
    mode = "max" if task.metrics[cfg["select_on"]].better == "higher" else "min"
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode=mode, factor=cfg["plateau_factor"],
                                                         patience=cfg["plateau_patience"])
    scaler = torch.amp.GradScaler(device_type, enabled=(dtype_name == "float16"))
    if resume is not None:
        optimizer.load_state_dict(resume["optimizer"])
        plateau.load_state_dict(resume["plateau"])
        scaler.load_state_dict(resume["scaler"])
        torch.set_rng_state(resume["rng_cpu"].cpu())  # load_checkpoint moved it to the device with the rest
    return optimizer, plateau, scaler


def save(run, which):
    """The one place a checkpoint is built: 'best' (ckpt.pt: the weights, the model's and the run's configs,
    the data it trained on, the run's state) or 'last' (last.pt: also the optimizer, the schedules and the
    random state, all a resume needs)."""
    run.state.train_seconds = run.meter.seconds()
    extra = dict(optimizer=run.optimizer.state_dict(), plateau=run.plateau.state_dict(),
                 scaler=run.scaler.state_dict(), rng_cpu=torch.get_rng_state()) if which == "last" else {}
    run.files.save(which, run.model, config=run.cfg, data=run.dataset.info(), **asdict(run.state), **extra)


def evaluation(run, epoch):
    """Validate and judge; step the plateau schedule on the select_on figure (after warm-up); keep ckpt.pt if
    this is the best so far; print and log the figures; save last.pt. The meter leaves the time out."""
    state, cfg = run.state, run.cfg
    figures = validate(run.eval_model, run.task, run.dataset, cfg, run.procs.device, run.ctx, run.procs)
    is_best = judge(state, figures, run.task, cfg)
    if state.iter_num >= cfg["warmup_iters"] and cfg["scheduler"] == "plateau":
        run.plateau.step(figures[cfg["select_on"]])
    if is_best:
        save(run, "best")
    print(f"eval at iter {state.iter_num}: val {records.describe(figures, run.task.metrics)}"
          f"{' (best, saved ckpt.pt)' if is_best else ''}", flush=True)
    run.files.log({"type": "eval", "epoch": epoch, "lr": run.optimizer.param_groups[0]["lr"], "best": is_best,
                   "grad_norm": state.grad_norm, "iter": state.iter_num,
                   **{f"val_{k}": v for k, v in state.last_eval.items() if k != "iter"}})
    save(run, "last")
    run.meter.restart()  # evaluation is not training


def run_steps(run):
    """Train step by step until the run stops: its length reached (max_iters or max_epochs), early stopping
    at an evaluation, or a stop asked for (Ctrl-C, SIGTERM: last.pt saved, to continue with --init_from=resume)."""
    cfg, state, procs = run.cfg, run.state, run.procs
    grad_norm = None  # the last step's, a device tensor until read (state.grad_norm is the float)
    with records.StopRequest(repeat_window=5.0 if procs.world > 1 else 0.0).installed() as stop:
        while not state.stopped:
            if state.iter_num >= run.total_iters or state.epoch >= cfg["max_epochs"]:
                state.stopped = "max_iters" if state.iter_num == cfg["max_iters"] else "max_epochs"
                break
            batch = run.stream.step(state.epoch, state.step_in_epoch, procs.device, procs.rank, procs.world)
            batch, step = procs.share(batch, run, stop.requested)  # its StepTotals (DDP: over all processes)
            if step.stop:  # asked of any process: all stop after the same step
                interrupted(run, grad_norm)
                break
            lr = set_lr(run.optimizer, cfg, state.iter_num, run.total_iters)
            procs.seed_dropout(cfg["seed"], state.iter_num)
            run.train_model.train()
            losses, grad_norm = train_step(run.train_model, batch, run.optimizer, run.scaler, run.ctx, cfg["grad_clip"],
                                           step.examples, procs.world)
            state.iter_num, state.step_in_epoch = state.iter_num + 1, state.step_in_epoch + 1
            state.train_flops += step.flops
            run.meter.add(step.tokens, step.flops)
            epoch = state.epoch + 1  # 1-based: the epoch this step belongs to
            # every log_interval steps, and this process's first (a run says it is under way within seconds); in
            # every process: the loss is summed over them
            if state.iter_num % cfg["log_interval"] == 0 or state.iter_num == run.meter.iters_at_start + 1:
                loss, state.grad_norm = mean_loss(losses, step.examples, procs), grad_norm.item()
                run.files.log(report_progress(state, run.total_iters, epoch, bool(run.stream.steps_per_epoch), loss,
                                              lr, run.meter.read(state.iter_num)))
            if state.step_in_epoch == run.epoch_steps:  # the end of an epoch
                state.epoch, state.step_in_epoch = state.epoch + 1, 0
            if state.iter_num % run.eval_every == 0 or state.iter_num == run.total_iters:
                state.grad_norm = grad_norm.item()
                evaluation(run, epoch)
    if grad_norm is not None:
        state.grad_norm = grad_norm.item()


def interrupted(run, grad_norm):
    """A stop asked for (Ctrl-C, SIGTERM) before a step: last.pt saved, to continue with --init_from=resume."""
    run.state.stopped = "interrupted"
    run.state.grad_norm = run.state.grad_norm if grad_norm is None else grad_norm.item()
    save(run, "last")
    print(f"saved {run.files.paths['last']}; continue with --init_from=resume")


def finish(run):
    """The run's summary: why it stopped, the final validation figures and (score_test) the best checkpoint's
    test figures, logged, and written to summary.json with the config, unless the run was interrupted (not
    finished: it writes none)."""
    state, procs = run.state, run.procs
    summary = records.summarize(state, run.task, run.dataset, run.model.param_counts(), run.meter.minutes())
    if procs.main and state.stopped != "interrupted":  # the others wait for it at the end of `processes`
        score_test(run, summary)
    run.files.log({"type": "summary", **summary})
    if procs.main and state.stopped != "interrupted":
        data.write_json(run.files.paths["summary"], {**summary, "config": run.cfg}, indent=1)
    return summary


def train(cfg):
    """Run one training job described by the config dict `cfg` (make_config's output): check its settings,
    take its out_dir, set it up, train it step by step, finish it. Returns the summary (why it stopped, the
    final validation figures, the best checkpoint's test figures when the dataset has a test split, and
    `metrics`: each figure's label and better direction), also written to out_dir/summary.json with the
    config. Under torchrun this is one of its processes (the appendix: `processes`): they train together, and
    rank 0 prints, writes the files and scores the test split."""
    check_settings(cfg, data.PRETRAINED)
    env = torchrun_env()  # under torchrun, rank 0 alone writes the run's files and holds its out_dir's lock
    with records.out_dir_lock(cfg, writer=env is None or env[0] == 0), processes(cfg) as procs:
        run = setup(cfg, procs)
        run_steps(run)
        return finish(run)


def main(argv):
    if "-h" in argv or "--help" in argv:
        print(train_help(__file__, __doc__, DEFAULTS, MODEL_SETTINGS["model"], FAMILIES))
        return
    if not argv:  # say what is about to happen before the data is prepared and the model built
        print(train_bare_line(DEFAULTS, MODEL_SETTINGS["model"]), flush=True)
    try:
        cfg = make_config(argv)
        devices.set_cpu_threads(devices.resolve_device(cfg["device"]))  # one, unless OMP_NUM_THREADS says
        train(cfg)
    except configurator.UserError as e:  # bad input: one line; a bug keeps its traceback
        sys.exit(f"error: {e}")


# -----------------------------------------------------------------------------
# Appendix: processes. This one alone (every path above), or one of several that torchrun started (data
# parallel, DDP).
#
# Each of `world` processes holds the whole model and takes grad_accum / world of every step's
# micro-batches (data.py's streams: rank, rank + world, ...); DistributedDataParallel averages the
# gradients over the processes in the last backward of the step, and every process then takes the
# same optimizer step. A step's batch is batch_size x grad_accum examples for any `world`, so a config
# trains the same model on 1 or N processes (to rounding). Rank 0 alone prints and writes files.


@dataclass
class Processes:
    """The processes training together, and this one's place among them; a plain run is rank 0 of 1."""
    rank: int = 0
    world: int = 1
    device: str = "cpu"  # this process's: cuda:LOCAL_RANK for DDP on GPUs
    cpu_group: object = None  # a gloo group for the small sums of CPU numbers below: summing them there waits
    # for no GPU (with nccl, the default group's collectives run on the GPU's queue); None = the default group
    ddp: bool = False  # started by torchrun, in a process group: the model trains in DistributedDataParallel, also
    # with one process (nothing to average then, but every piece of DDP runs: what `torchrun --nproc_per_node=1` is for)

    @property
    def main(self):
        """Rank 0: the process that prints and writes the log, the checkpoints and the summary."""
        return self.rank == 0

    def sum(self, values):
        """Each of a list of numbers summed over the processes (as floats); one process: the list itself."""
        if self.world == 1:
            return values
        t = torch.tensor([float(v) for v in values], dtype=torch.float64)
        torch.distributed.all_reduce(t, group=self.cpu_group)
        return t.tolist()

    def from_main(self, value):
        """Rank 0's value of a float, on every process."""
        if self.world == 1:
            return value
        t = torch.tensor([value], dtype=torch.float64)
        torch.distributed.broadcast(t, src=0, group=self.cpu_group)
        return t.item()

    def barrier(self):
        if self.world > 1:
            torch.distributed.barrier(group=self.cpu_group)

    def share(self, micro, run, stop_requested):
        """This process's micro-batches of the run's next step [(inputs, examples, tokens), ...], and the step's
        StepTotals over all the processes (one sum, of CPU numbers): whether any was asked to stop, so that all
        stop after the same step; the step's examples, so that each micro-batch weighs its share of all of them;
        its tokens and FLOPs, for the meter. One process: its own, the sum of one. The last step of an epoch can
        hold fewer micro-batches than there are processes; a process left without one still has to join the
        step's gradient all-reduce, so it takes rank 0's first micro-batch (the step's first) with 0 examples,
        a weight of 0."""
        if not micro:
            inputs, _, _ = run.stream.step(run.state.epoch, run.state.step_in_epoch, self.device, 0, self.world)[0]
            micro = [(inputs, 0, 0)]
        counts = [stop_requested, sum(n for _, n, _ in micro), sum(t for _, _, t in micro),
                  step_flops(run.model, micro, run.task)]
        asked, examples, tokens, flops = self.sum(counts)
        return micro, StepTotals(bool(asked), int(examples), int(tokens), flops)

    def seed_dropout(self, seed, iter_num):
        """Under DDP, each process its own dropout masks (one seed everywhere would give all the same ones),
        drawn from (seed, step, rank) so that a resumed run draws what it would have drawn. One process
        keeps the one random stream it started with."""
        if self.world > 1:
            torch.manual_seed(hash((seed, iter_num, self.rank)) % 2**63)

    def models(self, model, cfg, task, stream, state, ctx):
        """Under DDP, (the module that trains, the module that evaluates) over `model`, the plain module whose
        weights the checkpoints keep: the training module is DistributedDataParallel(model), compiled (dynamo
        then splits the graph at DDP's gradient buckets, so their all-reduces overlap the backward pass);
        evaluation runs the plain model, compiled on its own, in every process alike. DDP waits for every
        parameter's gradient unless told which never come: a probe pass over the next micro-batch finds them
        (unused_parameters)."""
        probe = stream.step(state.epoch, state.step_in_epoch, self.device)[0]
        unused = unused_parameters(model, probe, ctx)
        if unused:
            print(f"DDP: no gradient reaches {', '.join(unused)} (find_unused_parameters=True)")
        ddp = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[self.device] if self.device.startswith("cuda") else None,
            find_unused_parameters=bool(unused))
        return compiled(ddp, cfg, task), compiled(model, cfg, task)

    @contextmanager
    def main_first(self):
        """Rank 0 runs the block first (preparing a missing dataset, say), then the others do."""
        if not self.main:
            self.barrier()
        yield
        if self.main:
            self.barrier()


def torchrun_env():
    """(rank, local rank, world size) from the environment torchrun sets for each process it starts, or
    None for a plain run."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    return int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", os.environ["RANK"])), int(os.environ["WORLD_SIZE"])


@contextmanager
def processes(cfg):
    """The run's Processes. Under torchrun: joins the process group (nccl when the device is CUDA, each
    process on cuda:LOCAL_RANK; gloo on the CPU; a UserError if the others have not all joined within
    DDP_JOIN_TIMEOUT seconds), silences the other ranks' prints, and at the end waits for all the processes
    (rank 0 may still be scoring the test split) and leaves the group, which it also leaves on an error.
    A plain run: just the device."""
    dev = devices.resolve_device(cfg["device"])
    env = torchrun_env()
    if env is None:
        yield Processes(device=dev)
        return
    rank, local_rank, world = env
    check_world(cfg, world)
    device_type = dev.split(":")[0]
    if device_type not in ("cuda", "cpu"):
        raise configurator.ConfigError(f"device={dev!r}: DDP runs on CUDA GPUs (nccl) or the CPU (gloo)")
    if device_type == "cuda":
        dev = f"cuda:{local_rank}"
        torch.cuda.set_device(dev)
    records.join_processes(rank, world, "nccl" if device_type == "cuda" else "gloo")
    try:
        cpu_group = torch.distributed.new_group(backend="gloo") if device_type == "cuda" else None
        procs = Processes(rank, world, dev, cpu_group, ddp=True)
        with ExitStack() as stack:
            if not procs.main:
                stack.enter_context(redirect_stdout(stack.enter_context(open(os.devnull, "w"))))
            yield procs
        procs.barrier()  # not on an error: the others may never get here
    finally:
        torch.distributed.destroy_process_group()


def unused_parameters(model, micro_batch, ctx):
    """Names of the trainable parameters that get no gradient from a forward and backward pass of one
    micro-batch (the encoder's classification head while it pretrains as a masked LM). DDP waits for every
    parameter's gradient unless told which never come. The random state is restored afterwards, so that
    the run draws the same dropout masks as without this pass."""
    inputs, _, _ = micro_batch
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        model.train()
        with ctx:
            _, loss = model(**inputs)
        loss.backward()
    names = [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None]
    model.zero_grad(set_to_none=True)
    return names


if __name__ == "__main__":
    with reader_may_stop():  # `python train.py --help | head` ends quietly
        main(sys.argv[1:])
