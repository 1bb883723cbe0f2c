"""
Train a model. One file, read top to bottom:

    python train.py config/sst2_recurrent.py
    python train.py config/sst2_baseline.py --device=cpu --max_epochs=2
    python train.py config/sst2_recurrent.py --init_from=resume     # continue a stopped run
    python train.py config/shakespeare_char_baseline.py             # the char-level GPT
    torchrun --nproc_per_node=2 train.py config/sst2_recurrent.py --grad_accum=2   # DDP

Two settings pick what is trained: `dataset` (data.py's registry: its task says how the batches are
cut, and evaluate.py how the model is scored) and `model` (the family, in model.py's registry, whose
config fields become settings too). Every task shares one loop, `train`: AMP, clipping, the
schedules, evaluation, the kept checkpoint, early stopping.

Read in order: the settings, the model and optimizer, the learning rate, one step, then `train`,
from the first batch to the summary. Two appendices follow: resuming a stopped run, and training
data-parallel under torchrun (DDP), the same model as one process trains. One process enters
neither. What a reader may take by its name lives beside: the settings reader (configurator.py),
the run's files, refusals, FLOPs and checkpoints (bookkeeping/), the device (hardware/).
"""

import math
import os
import sys
from contextlib import ExitStack, contextmanager, nullcontext, redirect_stdout
from dataclasses import asdict, dataclass, fields

import torch

import configurator
import data
import evaluate
from bookkeeping import records, timing
from bookkeeping.checkpoints import CKPT_VERSION, CheckpointError, load_checkpoint
from bookkeeping.checks import check_settings, check_task, check_world, say_budget
from bookkeeping.flops import step_flops
from cli.help import reader_may_stop, train_bare_line, train_help
from export import load_pretrained
from hardware.devices import compiled, precision, resolve_device, set_cpu_threads
from model import FAMILIES, build_model, family_settings, from_pretrained

# -----------------------------------------------------------------------------
# default config values (every one may be overridden; the key names are part of the interface).
# `--help` prints them from this source: a comment at the end of a setting's line and the comment
# lines right below it are its help, and a comment after a blank line heads the settings below it.

# I/O
out_dir = "out/sst2"  # ckpt.pt (the best validation figure, select_on), last.pt (the latest
# state, for resume), log.jsonl, summary.json
init_from = "scratch"  # 'scratch', 'resume' (from out_dir/last.pt), or a checkpoint to fine-tune:
# a file, ours (ckpt.pt) or llama2.c's (.bin, .pt), or a name in data.PRETRAINED ('stories260K');
# its architecture and weights
overwrite = False  # a new run into an out_dir that holds a run (ckpt.pt, last.pt or summary.json)
# is refused unless this is True: then that run's files are deleted first
log_interval = 50  # iterations between progress lines
eval_interval = 0  # iterations between evaluations; 0 = once per epoch (the last iteration is
# always evaluated)

# data
dataset = "sst2"  # a name in data.DATASETS: 'sst2', 'imdb', 'yelp_polarity', 'multidomain',
# 'multidomain_uci', 'sst5', 'cfimdb' (classification), 'shakespeare_char', 'imdb_lm' (language
# modelling), 'piglatin' (seq2seq), 'sst2_mlm' (masked-language-model pretraining of the encoder)
protocol = "glue_heldout"  # 'glue_heldout' (validation = 872 whole sentences held out of GLUE
# train; test = GLUE dev), 'glue' (validation = 5 % of GLUE train's phrases, pieces of training
# sentences: it measures phrase recall, not new sentences; test = GLUE dev) or 'standard' (the
# source paper's 80/10/10 split of GLUE train + dev pooled)
vocab = "compact"  # 'compact' (ids seen in training) or 'full' (all 50,257 GPT-2 ids)
tokenizer = ""  # sst5, cfimdb, imdb_lm: the Llama tokenizer, 'llama2' (32,000 pieces; the default
# for sst5 and cfimdb) or 'tok512' (stories260K's; the default for imdb_lm)
max_len = 256  # tokens per sequence incl. [CLS], the study's truncation
subset = ""  # sst2, imdb, yelp_polarity, multidomain(_uci): '' = all, 'frac50'/'frac10' (of
# train, nested), 'short30'/'long30' (the shortest / longest 30 % of every split by word count),
# 'sample2000' (per split)
data_dir = ""  # '' = data/<dataset>_<protocol>_<vocab> (or data/<dataset>), prepared
# automatically if missing
bucket = True  # classification: batch sentences of similar length together (less padding);
# batches stay shuffled
hyphen_compounds = 0.0  # seq2seq (Pig Latin): add this share of the training set as hyphenated
# compounds of its own words (corpora.piglatin.hyphen_compounds: seeded, fixed for the run;
# held-out words never made); 0 = off
eval_windows = 0  # language modelling: validation windows per evaluation; 0 = the whole split
# (fixed, the same for every run; see data.lm_eval_starts)

# model: the family; its own settings (n_layer, n_embd, ...) are its config dataclass's fields,
# with that family's defaults (model.EncoderConfig, model.GPTConfig)
model = "encoder"  # 'encoder' (the classifier of the recurrent-vs-baseline study) | 'gpt' (the
# char LM) | 'llama' (the mini Llama-2: a language model, or a classifier on a labelled dataset) |
# 'encdec' (encoder-decoder transformer) | 'mamba' (selective state-space model; seq2seq or
# language modelling) | 'bow' (bag of words, logistic regression: the encoders' baseline)

# optimization
batch_size = 64  # examples per micro-batch (a step takes grad_accum of them)
grad_accum = 1  # micro-batches per optimizer step
learning_rate = 1e-3  # the peak rate, reached after warmup_iters
weight_decay = 0.01  # not applied to what the model names in no_weight_decay() (norms, biases,
# embeddings)
adamw_impl = "fused"  # 'fused' (torch.optim.AdamW, one kernel for all parameters) | 'manual'
# (written out below)
beta1 = 0.9  # AdamW's decay rate of the gradient's running mean
beta2 = 0.98  # and of its running square
grad_clip = 1.0  # max global grad norm; 0 = off
max_epochs = 10  # passes over the training set at most (early stopping may end a run sooner)
max_iters = 0  # optimizer steps; 0 = no limit beyond max_epochs (a language model needs
# max_iters > 0)
scheduler = "plateau"  # 'plateau' (the source paper's), 'cosine' (with warm-up) or 'constant'
warmup_iters = 0  # iterations of linear warm-up from 0 to learning_rate, under every scheduler
min_lr = 0.0  # floor of the cosine schedule
plateau_factor = 0.5  # the plateau schedule multiplies the lr by this
plateau_patience = 2  # evaluations without improvement before the lr is multiplied by
# plateau_factor
early_stop_patience = 3  # evaluations without an improvement of early_stop_min_delta; 0 = off
early_stop_min_delta = 1e-3  # a smaller gain in the select_on figure is no improvement
select_on = "loss"  # the validation figure that picks the kept checkpoint (ckpt.pt) and that
# early stopping and the plateau schedule watch: 'loss', or a figure of the task's with a better
# side ('accuracy' for a classifier: the figure its verdicts read; the SST-2 configs set it)

# system
device = "auto"  # 'auto' picks cuda, then mps, then cpu
dtype = "auto"  # 'float32', 'bfloat16', 'float16'; 'auto' = bfloat16 on a GPU that has it, else
# float32
compile = False  # torch.compile the model
peak_tflops = 0.0  # one device's peak TFLOP/s, the denominator of the MFU in the progress lines;
# 0 = look the GPU up (bookkeeping/timing.py's peak_flops); a CPU or an unknown GPU has none, and
# then no MFU is shown
seed = 1337  # the same in every process of a DDP run, so that they all start from the same weights
# -----------------------------------------------------------------------------
DEFAULTS = {k: v for k, v in globals().items()  # the lower-case names above (not imported ones)
            if k.islower() and not k.startswith("_") and isinstance(v, (bool, int, float, str))}
MODEL_SETTINGS = {"model": {name: family_settings(name) for name in FAMILIES}}  # per family


def make_config(argv):
    """The run config: DEFAULTS, the chosen family's settings, then config files and --key=value."""
    return configurator.apply_overrides(DEFAULTS, argv, MODEL_SETTINGS)


# -----------------------------------------------------------------------------
# model and optimizer


def new_model(cfg, dataset):
    """A model of the configured family, sized by the dataset (vocabulary, classes, length): fresh,
    or (init_from a checkpoint) starting from that checkpoint's architecture and weights."""
    family, start = cfg["model"], cfg["init_from"]
    try:
        if start == "scratch":
            return build_model(family, cfg, dataset.facts())
        path = data.pretrained_file(start) if start in data.PRETRAINED else start
        model, fresh = from_pretrained(load_pretrained(path), family, cfg, dataset.facts())
    except configurator.ConfigError as e:
        where = "" if start == "scratch" else f"init_from {start}: "
        raise configurator.ConfigError(f"{where}{e}") from None
    print(f"starting from {start}" + (f"; new: {', '.join(fresh)}" if fresh else ""))
    return model


def make_optimizer(model, cfg, device_type):
    """AdamW over the trainable parameters (a frozen one is left out), with weight decay on all of
    them but those the model names in no_weight_decay() (norms, biases, embedding tables)."""
    skip = model.no_weight_decay()
    trainable = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    decay, wd = [p for n, p in trainable if n not in skip], cfg["weight_decay"]
    groups = [{"params": decay, "weight_decay": wd},
              {"params": [p for n, p in trainable if n in skip], "weight_decay": 0.0}]
    args = dict(lr=cfg["learning_rate"], betas=(cfg["beta1"], cfg["beta2"]))
    if cfg["adamw_impl"] == "manual":
        return AdamW(groups, **args)
    # fused: one kernel updates every parameter (CPU and CUDA; elsewhere torch's loop): on a CPU,
    # the baseline encoder's AdamW step takes 11 ms instead of 39
    fused = {"fused": True} if device_type in ("cuda", "cpu") else {}
    return torch.optim.AdamW(groups, **args, **fused)


class AdamW(torch.optim.Optimizer):
    """AdamW written out (Loshchilov & Hutter 2019, Algorithm 2), torch.optim.AdamW's update:
        theta <- theta - lr * wd * theta                   decoupled weight decay, first
        m <- b1 m + (1 - b1) g,   v <- b2 v + (1 - b2) g^2  moment estimates
        m_hat = m / (1 - b1^t),   v_hat = v / (1 - b2^t)    bias correction (t: the step)
        theta <- theta - lr * m_hat / (sqrt(v_hat) + eps)
    (The paper scales decay and step by a schedule multiplier eta_t; here the schedule sets lr.)"""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in (p for p in group["params"] if p.grad is not None):
                state = self.state[p]
                if not state:
                    state.update(step=0, exp_avg=torch.zeros_like(p),
                                 exp_avg_sq=torch.zeros_like(p))
                state["step"] += 1
                m, v, t = state["exp_avg"], state["exp_avg_sq"], state["step"]
                p.mul_(1 - lr * wd)
                m.mul_(b1).add_(p.grad, alpha=1 - b1)
                v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
                p.addcdiv_(m_hat, v_hat.sqrt().add_(eps), value=-lr)


# -----------------------------------------------------------------------------
# the learning rate


def scheduled_lr(cfg, it, total_iters):
    """The rate at iteration `it` under the 'cosine' and 'constant' schedules, after a linear
    warm-up. The 'plateau' schedule only warms up here; ReduceLROnPlateau lowers it later."""
    lr = cfg["learning_rate"]
    if it < cfg["warmup_iters"]:
        return lr * (it + 1) / cfg["warmup_iters"]
    if cfg["scheduler"] == "cosine":
        progress = min(1.0, (it - cfg["warmup_iters"]) / max(1, total_iters - cfg["warmup_iters"]))
        return cfg["min_lr"] + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - cfg["min_lr"])
    return lr


def set_lr(optimizer, cfg, it, total_iters):
    """Apply this iteration's rate (after warm-up the plateau schedule owns it); return the rate."""
    if cfg["scheduler"] != "plateau" or it < cfg["warmup_iters"]:
        lr = scheduled_lr(cfg, it, total_iters)
        for g in optimizer.param_groups:
            g["lr"] = lr
    return optimizer.param_groups[0]["lr"]


# -----------------------------------------------------------------------------
# one step


def train_step(model, micro_batches, optimizer, scaler, ctx, grad_clip, n_examples=None, world=1):
    """One optimizer step over the micro-batches [(inputs, examples, tokens), ...]: each one's loss
    weighs its share of the step's examples, so the gradient is the mean over all of them. Returns
    ([(loss, examples)], the gradient's L2 norm before clipping), as device tensors: reading them
    waits for the device, so the loop reads them only when it logs or evaluates. Under DDP (the
    appendix) n_examples counts every process's examples and DDP averages the gradients over the
    `world` processes (hence the factor), in the last backward only."""
    if n_examples is None:
        n_examples = sum(n for _, n, _ in micro_batches)
    no_sync = getattr(model, "no_sync", nullcontext)  # DistributedDataParallel's
    losses = []
    for k, (inputs, n, _) in enumerate(micro_batches):
        with no_sync() if k < len(micro_batches) - 1 else nullcontext():
            with ctx:
                _, loss = model(**inputs)
            scaler.scale(loss * (n * world / n_examples)).backward()
        losses.append((loss.detach(), n))
    scaler.unscale_(optimizer)
    # the norm before clipping (max_norm=inf measures it without clipping); a frozen parameter
    # has no gradient and does not count
    clip = grad_clip if grad_clip > 0 else float("inf")
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return losses, grad_norm


def mean_loss(losses, n_examples):
    """A step's loss, the mean over its examples: one copy from the device, a float64 sum."""
    values = torch.stack([loss for loss, _ in losses]).tolist()
    return sum(v * n for v, (_, n) in zip(values, losses)) / n_examples


# -----------------------------------------------------------------------------
# the run


@dataclass
class RunState:
    """How far the run has come: with the weights, the optimizer, the schedules and the RNG, what a
    resume restores. Every checkpoint holds these fields at its top level."""
    iter_num: int = 0  # optimizer steps taken
    epoch: int = 0  # epochs completed
    step_in_epoch: int = 0  # optimizer steps taken in the current epoch
    best_val_loss: float = math.inf  # the lowest validation loss so far
    best_val: float | None = None  # the best select_on figure so far: the kept checkpoint's
    bad_evals: int = 0  # evaluations in a row without an improvement of early_stop_min_delta
    grad_norm: float | None = None  # of the last step, before clipping
    last_eval: dict | None = None  # the last validation figures, with their iteration
    stopped: str = ""  # 'max_epochs', 'max_iters', 'early stopping (...)' or 'interrupted'
    train_flops: float = 0.0  # training FLOPs so far (a resume of a checkpoint without it: since)
    train_seconds: float = 0.0  # wall time so far, evaluations and every resumed segment included


def run_length(cfg, stream):
    """(steps an epoch, steps in all, steps between evaluations). A stream of random windows (a
    language model's) has no epochs: max_iters is its length."""
    epoch_steps = stream.steps_per_epoch or math.inf
    total_iters = min(cfg["max_epochs"] * epoch_steps, cfg["max_iters"] or math.inf)
    return epoch_steps, total_iters, cfg["eval_interval"] or epoch_steps


def save(which, files, model, cfg, dataset, state, meter, optimizer=None, plateau=None,
         scaler=None):
    """The one place a checkpoint is built: 'best' (ckpt.pt: the weights, the model's and the run's
    configs, the data it trained on, the run's state) or 'last' (last.pt: with the optimizer, the
    schedules and the random state too, all a resume needs)."""
    state.train_seconds = meter.seconds()
    extra = {}
    if which == "last":
        extra = dict(optimizer=optimizer.state_dict(), plateau=plateau.state_dict(),
                     scaler=scaler.state_dict(), rng_cpu=torch.get_rng_state())
    files.save(which, model, config=cfg, data=dataset.info(), **asdict(state), **extra)


def train(cfg, ddp=None):
    """Train the run `cfg` (make_config's) describes; return its summary, also out_dir/summary.json.
    Under torchrun `ddp` is this process's place among those that train together (the appendix)."""
    if ddp is None:
        check_settings(cfg, data.PRETRAINED)  # before any work: a bad setting costs nothing
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torchrun started this process:
            return train_ddp(cfg)  # the appendix joins the processes, and each trains here
    rank, world = (ddp.rank, ddp.world) if ddp else (0, 1)
    device = ddp.device if ddp else resolve_device(cfg["device"])
    device_type = device.split(":")[0]
    dtype, ctx = precision(cfg["dtype"], device_type)  # ctx, AMP: bf16 or fp16 matmuls, or nothing
    with records.out_dir_lock(cfg, writer=rank == 0):
        torch.manual_seed(cfg["seed"])
        with ddp.main_first() if ddp else nullcontext():  # rank 0 prepares a missing dataset first
            dataset = data.load_dataset(cfg)
        check_task(cfg, dataset.task, evaluate.METRICS, FAMILIES, DEFAULTS)
        metrics = evaluate.METRICS[dataset.task]
        files = records.RunFiles(cfg["out_dir"], writer=rank == 0)
        if cfg["init_from"] == "resume":  # the appendix: the run in last.pt, as it was saved
            model, state, ckpt, cfg = resumed(cfg, dataset, device, files)
        else:  # a new run (the files of one it replaces go first)
            files.start({"type": "start", "iter": 0, "config": cfg})
            model, state, ckpt = new_model(cfg, dataset).to(device), RunState(), None
        peak = timing.device_peak(cfg["peak_tflops"], device, dtype)  # None on a CPU: no MFU
        records.say_setup(files, model, device, dtype, world, peak, state.iter_num)
        optimizer = make_optimizer(model, cfg, device_type)
        sign = 1 if metrics[cfg["select_on"]].better == "higher" else -1  # gain: sign * (new - old)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(  # on the select_on figure
            optimizer, mode="max" if sign > 0 else "min", factor=cfg["plateau_factor"],
            patience=cfg["plateau_patience"])
        scaler = torch.amp.GradScaler(device_type, enabled=(dtype == "float16"))  # loss scaling
        if ckpt is not None:  # the appendix: the optimizer, schedules and RNG as last.pt left them
            restore(ckpt, optimizer, plateau, scaler)
        stream = data.training_stream(dataset, model.cfg, cfg)
        epoch_steps, total_iters, eval_every = run_length(cfg, stream)
        say_budget(cfg, total_iters, epoch_steps, eval_every, DEFAULTS)  # and its warnings
        train_model = eval_model = compiled(model, cfg["compile"], stream.fixed_shape)
        if ddp:  # the training module wrapped in DistributedDataParallel
            train_model, eval_model = ddp.models(model, cfg, stream, state, ctx)
        meter = timing.Meter(peak, world, state, total_iters, eval_every)  # speed, time left
        grad_norm = None  # the last step's, a device tensor until read (state.grad_norm: its float)
        end = "max_iters" if total_iters == cfg["max_iters"] else "max_epochs"  # at its length
        with records.StopRequest(repeat_window=5.0 if ddp else 0).installed() as stop:
            while not state.stopped:
                if state.iter_num >= total_iters or state.epoch >= cfg["max_epochs"]:
                    state.stopped = end
                    break
                # the step's batch: [(inputs, examples, tokens)], a function of seed and position
                batch = stream.step(state.epoch, state.step_in_epoch, device, rank, world)
                examples, tokens = sum(n for _, n, _ in batch), sum(t for _, _, t in batch)
                flops, asked = step_flops(model, batch, dataset.task), stop.requested
                if ddp:  # summed over the processes: they stop together, every example weighs alike
                    batch, asked, examples, tokens, flops = ddp.share(
                        batch, asked, examples, tokens, flops, stream, state)
                if asked:  # Ctrl-C or SIGTERM before this step: the run stops (last.pt saved below)
                    state.stopped = "interrupted"
                    break
                lr = set_lr(optimizer, cfg, state.iter_num, total_iters)
                train_model.train()
                losses, grad_norm = train_step(train_model, batch, optimizer, scaler, ctx,
                                               cfg["grad_clip"], examples, world)
                state.iter_num, state.step_in_epoch = state.iter_num + 1, state.step_in_epoch + 1
                state.train_flops += flops
                meter.add(tokens, flops)
                epoch = state.epoch + 1  # 1-based: the epoch this step belongs to
                first = state.iter_num == meter.iters_at_start + 1  # says at once it is under way
                if state.iter_num % cfg["log_interval"] == 0 or first:
                    loss = ddp.mean_loss(losses, examples) if ddp else mean_loss(losses, examples)
                    state.grad_norm = grad_norm.item()
                    files.log(records.progress(state, total_iters, epoch, stream.steps_per_epoch,
                                               loss, lr, meter.read(state.iter_num)))
                if state.step_in_epoch == epoch_steps:  # the end of an epoch
                    state.epoch, state.step_in_epoch = state.epoch + 1, 0
                if state.iter_num % eval_every and state.iter_num != total_iters:
                    continue
                # evaluation: the validation figures, the best checkpoint kept, the plateau schedule
                # and early stopping, all on the select_on figure
                state.grad_norm = grad_norm.item()
                val = evaluate.score_split(eval_model, dataset.splits["val"], dataset.task, device,
                                           ctx, cfg["eval_windows"])
                if ddp:  # every process decides on rank 0's figures
                    ddp.agree(val, cfg["select_on"])
                figures = {k: val[k] for k in metrics if k in val}
                state.last_eval = {"iter": state.iter_num, "n": val["n"], **figures}
                state.best_val_loss = min(state.best_val_loss, val["loss"])
                value, best = val[cfg["select_on"]], state.best_val
                gain = math.inf if best is None else sign * (value - best)  # > 0: the best so far
                state.bad_evals = 0 if gain > cfg["early_stop_min_delta"] else state.bad_evals + 1
                if cfg["early_stop_patience"] and state.bad_evals >= cfg["early_stop_patience"]:
                    state.stopped = f"early stopping ({state.bad_evals} evaluations without a gain)"
                if state.iter_num >= cfg["warmup_iters"] and cfg["scheduler"] == "plateau":
                    plateau.step(value)
                if gain > 0:
                    state.best_val = value
                    save("best", files, model, cfg, dataset, state, meter)
                print(f"eval at iter {state.iter_num}: val {records.describe(val, metrics)}"
                      f"{' (best, saved ckpt.pt)' if gain > 0 else ''}", flush=True)
                files.log(records.eval_record(state, epoch, optimizer, gain > 0))
                save("last", files, model, cfg, dataset, state, meter, optimizer, plateau, scaler)
                meter.evaluated()  # evaluation is not training: speed and time left count it apart
        state.grad_norm = state.grad_norm if grad_norm is None else grad_norm.item()
        if state.stopped == "interrupted":  # to continue from, with --init_from=resume
            save("last", files, model, cfg, dataset, state, meter, optimizer, plateau, scaler)
        summary = records.summarize(state, metrics, dataset, model.param_counts(), meter.minutes())
        if files.writer and state.stopped != "interrupted":  # the kept checkpoint, on test
            evaluate.score_held_out(files.paths["best"], dataset, cfg, device, ctx, summary,
                                    state.best_val)
        files.log({"type": "summary", **summary})
        files.write_summary({**summary, "config": cfg})
        return summary


def main(argv):
    if "-h" in argv or "--help" in argv:
        print(train_help(__file__, __doc__, DEFAULTS, MODEL_SETTINGS["model"], FAMILIES))
        return
    if not argv:  # what is about to happen, before the data is prepared and the model built
        print(train_bare_line(DEFAULTS, MODEL_SETTINGS["model"]), flush=True)
    try:
        cfg, defaults = make_config(argv), make_config([])
        if argv and all(cfg[k] == defaults[k] for k in cfg if k not in records.BOOKKEEPING_KEYS):
            print(f"{' '.join(argv)} changes no setting: this run trains the defaults "
                  f"(`python train.py --help` lists them)", flush=True)
        set_cpu_threads(resolve_device(cfg["device"]))  # one thread, unless OMP_NUM_THREADS says
        summary = train(cfg)
    except configurator.UserError as e:  # bad input: one line; a bug keeps its traceback
        sys.exit(f"error: {e}")
    except KeyboardInterrupt:  # Ctrl-C before the first step (preparing the data, say)
        print("interrupted before the first step: nothing of this run was saved", file=sys.stderr)
        sys.exit(130)  # 128 + SIGINT: what a shell reports of a command that Ctrl-C stopped
    if summary["stopped"] == "interrupted":
        print(f"interrupted: last.pt saved; continue with: python train.py {' '.join(argv)} "
              f"--init_from=resume", file=sys.stderr)
        sys.exit(130)


# -----------------------------------------------------------------------------
# Appendix 1: resume (--init_from=resume). A stopped run (Ctrl-C, SIGTERM, a killed machine)
# continues from its last.pt, the weights, the run's state, the optimizer, the schedules and the
# random state, as if it had never stopped.


def resumed(cfg, dataset, device, files):
    """(model, state, the checkpoint, config) of the run in last.pt, whose optimizer, schedules and
    RNG `restore` puts back. A resume is the same run (records.same_run): only IMPLEMENTATION_KEYS
    (said and logged) and BOOKKEEPING_KEYS may change. The config returned is the run's it
    continues, which says how that one started, so study.py knows it for the run it planned."""
    last = files.paths["last"]
    model, ckpt = load_checkpoint(last, device)
    if ckpt["version"] != CKPT_VERSION:
        raise CheckpointError(f"{last} is checkpoint version {ckpt['version']}; resuming needs "
                              f"version {CKPT_VERSION} (the run state changed): evaluate it, or "
                              f"start again")
    dataset.check_matches(ckpt["data"], f"the run in {last}")
    old = ckpt["config"]
    implementation, other = records.run_differences(old, cfg, DEFAULTS)
    if other:
        raise configurator.ConfigError(
            f"{last} is a run with other settings ({records.changes(old, cfg, other)}): a resume "
            f"continues the same run, so resume with its settings (only "
            f"{', '.join(records.IMPLEMENTATION_KEYS)} may change), or start a new run elsewhere")
    if implementation:
        changes = records.changes(old, cfg, implementation)
        print(f"resuming under other implementation settings: {changes}")
    if old.get("init_from", "resume") != "resume":
        cfg = {**cfg, "init_from": old["init_from"]}
    state = RunState(**{f.name: ckpt.get(f.name, f.default) for f in fields(RunState)})
    if "best_val" not in ckpt and math.isfinite(state.best_val_loss):  # saved before select_on
        state.best_val = state.best_val_loss
    if state.stopped in ("", "interrupted"):  # saved at an evaluation, or on a stop asked for
        state.stopped = ""  # it goes on
    else:  # early-stopped, and killed before its summary: it ends as it would have
        print(f"{last}: the run had stopped ({state.stopped}); scoring its best checkpoint")
    print(f"resuming from {last} at iteration {state.iter_num}, epoch {state.epoch}")
    changed = {k: [old.get(k), cfg[k]] for k in implementation}
    files.log({"type": "start", "iter": state.iter_num, "config": cfg,
               **({"implementation_changed": changed} if implementation else {})})
    return model, state, ckpt, cfg


def restore(ckpt, optimizer, plateau, scaler):
    """The optimizer, the plateau schedule, the loss scaler and the RNG as last.pt has them."""
    optimizer.load_state_dict(ckpt["optimizer"])
    plateau.load_state_dict(ckpt["plateau"])
    scaler.load_state_dict(ckpt["scaler"])
    torch.set_rng_state(ckpt["rng_cpu"].cpu())  # load_checkpoint moved it to the device


# -----------------------------------------------------------------------------
# Appendix 2: data-parallel training (DDP), when torchrun started this process as one of several.
#
# Each of `world` processes holds the whole model and takes grad_accum / world of every step's
# micro-batches (data.py's streams: rank, rank + world, ...); DistributedDataParallel averages the
# gradients in the last backward of the step, and every process takes the same optimizer step. A
# step's batch is batch_size x grad_accum examples for any `world`, so a config trains the same
# model on 1 or N processes (to rounding). Rank 0 alone prints and writes files.


def torchrun_env():
    """(rank, local rank, world size) from the environment torchrun sets, or None."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    env = os.environ
    return int(env["RANK"]), int(env.get("LOCAL_RANK", env["RANK"])), int(env["WORLD_SIZE"])


def train_ddp(cfg):
    """train(cfg) as one of torchrun's processes: they join one group, then each runs the loop."""
    with processes(cfg) as procs:
        return train(cfg, procs)


@dataclass
class Processes:
    """The processes training together under torchrun, and this one's place among them."""
    rank: int
    world: int
    device: str  # this process's: cuda:LOCAL_RANK on GPUs
    cpu_group: object = None  # a gloo group for the sums of CPU numbers: they wait for no GPU
    # (nccl's collectives run on the GPU's queue); None = the default group
    seed: int = 0  # the run's: each process's dropout masks come from it, the step and the rank

    @property
    def main(self):
        """Rank 0: the process that prints and writes the log, the checkpoints and the summary."""
        return self.rank == 0

    def sum(self, values):
        """Each of a list of numbers summed over the processes (as floats); one: the list itself."""
        if self.world == 1:
            return values
        t = torch.tensor([float(v) for v in values], dtype=torch.float64)
        torch.distributed.all_reduce(t, group=self.cpu_group)
        return t.tolist()

    def barrier(self):
        if self.world > 1:
            torch.distributed.barrier(group=self.cpu_group)

    def share(self, micro, asked, examples, tokens, flops, stream, state):
        """This process's micro-batches of the step, and the step's figures over all the processes
        (one sum): whether any was asked to stop, so that all stop after the same step; its
        examples, so that each micro-batch weighs its share of all of them; its tokens and FLOPs.
        The last step of an epoch may leave a process no micro-batch; it still joins the gradient
        all-reduce, with rank 0's first micro-batch at 0 examples, a weight of 0. Then each process
        draws its own dropout masks, from (seed, step, rank): a resume draws the same."""
        if not micro:
            first = stream.step(state.epoch, state.step_in_epoch, self.device, 0, self.world)[0]
            inputs = first[0]
            micro = [(inputs, 0, 0)]
        asked, examples, tokens, flops = self.sum([asked, examples, tokens, flops])
        if self.world > 1:
            torch.manual_seed(hash((self.seed, state.iter_num, self.rank)) % 2**63)
        return micro, bool(asked), int(examples), int(tokens), flops

    def mean_loss(self, losses, n_examples):
        """The step's loss, the mean over all the processes' examples."""
        values = torch.stack([loss for loss, _ in losses]).tolist()
        return self.sum([sum(v * n for v, (_, n) in zip(values, losses))])[0] / n_examples

    def agree(self, figures, select_on):
        """Rank 0's validation loss and select_on figure, on every process: a difference in the last
        bit between two GPUs must not make them decide differently."""
        for k in dict.fromkeys(("loss", select_on)) if self.world > 1 else ():
            t = torch.tensor([figures[k]], dtype=torch.float64)
            torch.distributed.broadcast(t, src=0, group=self.cpu_group)
            figures[k] = t.item()

    def models(self, model, cfg, stream, state, ctx):
        """(the module that trains, the one that evaluates) over `model`, whose weights the
        checkpoints keep: DistributedDataParallel(model), compiled (dynamo then splits the graph
        at DDP's gradient buckets, so their all-reduces overlap the backward pass), and the plain
        model, compiled on its own. DDP waits for every parameter's gradient unless told which
        never come: a probe pass over the next micro-batch finds them (unused_parameters)."""
        probe = stream.step(state.epoch, state.step_in_epoch, self.device)[0]
        unused = unused_parameters(model, probe, ctx)
        if unused:
            print(f"DDP: no gradient reaches {', '.join(unused)} (find_unused_parameters=True)")
        gpu = [self.device] if self.device.startswith("cuda") else None
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=gpu,
                                                        find_unused_parameters=bool(unused))
        return (compiled(ddp, cfg["compile"], stream.fixed_shape),
                compiled(model, cfg["compile"], stream.fixed_shape))

    @contextmanager
    def main_first(self):
        """Rank 0 runs the block first (preparing a missing dataset, say), then the others do."""
        if not self.main:
            self.barrier()
        yield
        if self.main:
            self.barrier()


@contextmanager
def processes(cfg):
    """This process's Processes: joins the process group (nccl on CUDA, each process on
    cuda:LOCAL_RANK; gloo on the CPU; a UserError if the others have not all joined within
    DDP_JOIN_TIMEOUT seconds), silences the other ranks' prints, and at the end waits for all the
    processes (rank 0 may be scoring the test split) and leaves the group, also on an error."""
    dev = resolve_device(cfg["device"])
    rank, local_rank, world = torchrun_env()
    check_world(cfg, world)
    device_type = dev.split(":")[0]
    if device_type not in ("cuda", "cpu"):
        raise configurator.ConfigError(f"device={dev!r}: DDP runs on CUDA GPUs (nccl) or the "
                                       f"CPU (gloo)")
    if device_type == "cuda":
        dev = f"cuda:{local_rank}"
        torch.cuda.set_device(dev)
    records.join_processes(rank, world, "nccl" if device_type == "cuda" else "gloo")
    try:
        cpu_group = torch.distributed.new_group(backend="gloo") if device_type == "cuda" else None
        procs = Processes(rank, world, dev, cpu_group, cfg["seed"])
        with ExitStack() as stack:
            if not procs.main:
                stack.enter_context(redirect_stdout(stack.enter_context(open(os.devnull, "w"))))
            yield procs
        procs.barrier()  # not on an error: the others may never get here
    finally:
        torch.distributed.destroy_process_group()


def unused_parameters(model, micro_batch, ctx):
    """Names of the trainable parameters that get no gradient from a forward and backward pass of
    one micro-batch (the encoder's classification head while it pretrains as a masked LM). The
    random state is restored afterwards: the run draws the same dropout masks as without it."""
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
