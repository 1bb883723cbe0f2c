"""
train.py's checks of a run's settings, in one place: what train() refuses before any work (check_settings), what
it refuses once the dataset says its task (check_task: the task's own settings, the figure to select on, a model
family that does the task), under torchrun once the processes that share a step are known (check_world), and
what it warns of once the run's length is known from the data (run_warnings). A refusal is a ConfigError, one
line; a warning is one line too, and the run goes on as its settings make it.
"""

import math
import os

from bookkeeping import records
from configurator import ConfigError

# The settings that may be 0 and no less, with what their 0 means: a negative one would not fail, it would run
# something else (max_iters=-5 took 0 steps and wrote no figures; a negative grad_clip turned clipping off).
NON_NEGATIVE = {"max_iters": "0 = no limit beyond max_epochs", "eval_interval": "0 = once per epoch",
                "warmup_iters": "0 = no warm-up", "eval_windows": "0 = the whole validation split",
                "early_stop_patience": "0 = off", "early_stop_min_delta": "the smallest gain that counts",
                "plateau_patience": "0 = lower the rate at the first evaluation without improvement",
                "learning_rate": "the peak rate", "min_lr": "the cosine schedule's floor", "weight_decay": "0 = none",
                "grad_clip": "0 = off"}


def check_settings(cfg, pretrained):
    """The settings train() refuses before any work (a ConfigError each): a scheduler or AdamW of
    another name, an init_from that names nothing (`pretrained`: the checkpoints it may name,
    llama2c.PRETRAINED), sizes below 1, counts and rates below 0 (NON_NEGATIVE), AdamW's betas and the
    plateau's factor, a share or a peak out of range, and an out_dir that is empty, no folder or holds
    another run (bookkeeping/records.py's check_out_dir)."""
    if not cfg["out_dir"]:
        raise ConfigError("out_dir is empty: a run writes its checkpoints and log into a folder: give one")
    for key, allowed in (("scheduler", ("plateau", "cosine", "constant")),
                         ("adamw_impl", ("fused", "manual"))):
        if cfg[key] not in allowed:
            raise ConfigError(f"{key}={cfg[key]!r}: expected one of {allowed}")
    if cfg["init_from"] not in ("scratch", "resume", *pretrained) and not os.path.isfile(cfg["init_from"]):
        what = "a folder, not a file" if os.path.isdir(cfg["init_from"]) else "no such file"
        raise ConfigError(f"init_from={cfg['init_from']!r}: expected 'scratch', 'resume', a checkpoint "
                          f"file to start from ({what}), or one of {sorted(pretrained)}")
    for key in ("batch_size", "grad_accum", "log_interval", "max_epochs"):
        if cfg[key] < 1:
            raise ConfigError(f"{key}={cfg[key]} must be at least 1")
    for key, zero in NON_NEGATIVE.items():
        if cfg[key] < 0:
            raise ConfigError(f"{key}={cfg[key]} must be at least 0 ({zero})")
    for key in ("beta1", "beta2"):
        if not 0 <= cfg[key] < 1:
            raise ConfigError(f"{key}={cfg[key]} must be in [0, 1) (a decay rate of AdamW's running means)")
    if not 0 < cfg["plateau_factor"] < 1:
        raise ConfigError(f"plateau_factor={cfg['plateau_factor']} must be in (0, 1) (what the plateau schedule "
                          f"multiplies the learning rate by)")
    if not 0 <= cfg["hyphen_compounds"] <= 10:
        raise ConfigError(f"hyphen_compounds={cfg['hyphen_compounds']}: a share of the training set in "
                          f"[0, 10] (0 = off)")
    if cfg["peak_tflops"] < 0:
        raise ConfigError(f"peak_tflops={cfg['peak_tflops']}: expected a device's peak TFLOP/s, or 0 to "
                          f"look it up")
    records.check_out_dir(cfg)


# the settings only one task reads: set for a dataset of another task, they are an error
TASK_SETTINGS = {"seq2seq": ("hyphen_compounds",)}


def check_task(cfg, task, metrics, families, defaults):
    """What a run of a dataset of `task` refuses: another task's own settings (TASK_SETTINGS) changed from their
    `defaults`, a select_on figure the task has no better side of (`metrics`: evaluate.METRICS), a model family
    (`families`: model.FAMILIES) that does not do the task, and a language model without max_iters (it trains
    on random windows, which have no epochs)."""
    for name, keys in TASK_SETTINGS.items():
        stray = [k for k in keys if name != task and cfg[k] != defaults[k]]
        if stray:
            raise ConfigError(f"{', '.join(stray)} applies to {name} datasets; {cfg['dataset']} is a {task} dataset")
    choices = [k for k, m in metrics[task].items() if m.better in ("higher", "lower")]
    if cfg["select_on"] not in choices:
        raise ConfigError(f"select_on={cfg['select_on']!r}: a {task} run is scored by {', '.join(choices)}")
    if task not in families[cfg["model"]][1].tasks:
        fit = [name for name, (_, cls) in families.items() if task in cls.tasks]
        raise ConfigError(f"model={cfg['model']!r} does not do the {task} task of dataset {cfg['dataset']!r}; set "
                          f"model to one of {fit}")
    if task == "lm" and cfg["max_iters"] < 1:
        raise ConfigError("a language model trains on random windows for max_iters steps: set max_iters")


def check_world(cfg, world):
    """A step's grad_accum micro-batches must split evenly over the processes."""
    if cfg["grad_accum"] % world:
        batch = cfg["batch_size"] * cfg["grad_accum"]
        fit = next((m for m in range(world, batch + 1, world) if batch % m == 0), None)
        keep = f" (grad_accum={fit} with batch_size={batch // fit} keeps the step's {batch} examples)" if fit else ""
        raise ConfigError(
            f"grad_accum={cfg['grad_accum']} does not split over {world} processes, which take grad_accum / {world} "
            f"micro-batches of each step each: set grad_accum to a multiple of {world}{keep}")


def run_warnings(cfg, total_iters, epoch_steps, eval_every, defaults):
    """What this run's settings ask for and cannot get, now that its length is known (total_iters, from the
    data): one line each, printed as `warning: ...` before the first step. Not errors: the run is still what
    the settings make it, just not what they seem to say. `defaults`: train.py's DEFAULTS (a setting that
    another scheduler reads is worth a warning only when it was changed)."""
    out, lr, sched = [], cfg["learning_rate"], cfg["scheduler"]
    n_evals = total_iters // eval_every + (total_iters % eval_every > 0) if eval_every < math.inf else 1
    evals = f"the run is evaluated {n_evals:g} time{'s' * (n_evals != 1)}"
    if cfg["max_iters"] and epoch_steps < math.inf and cfg["max_iters"] > total_iters:
        out.append(f"max_iters={cfg['max_iters']} is more than max_epochs={cfg['max_epochs']} allow "
                   f"({cfg['max_epochs']} x {epoch_steps} steps an epoch): the run stops at iteration {total_iters}")
    if cfg["warmup_iters"] >= total_iters:
        out.append(f"warmup_iters={cfg['warmup_iters']} is not shorter than the run's {total_iters} iterations: the "
                   f"learning rate never reaches learning_rate={lr:g}" + (", and the cosine never starts"
                                                                       if sched == "cosine" else ""))
    if cfg["eval_interval"] > total_iters:
        out.append(f"eval_interval={cfg['eval_interval']} is longer than the run's {total_iters} iterations: it is "
                   f"evaluated once, at its last iteration")
    if cfg["log_interval"] > total_iters:
        out.append(f"log_interval={cfg['log_interval']} is longer than the run's {total_iters} iterations: only the "
                   f"first step's progress line is printed")
    if cfg["early_stop_patience"] and n_evals <= cfg["early_stop_patience"]:
        out.append(f"early_stop_patience={cfg['early_stop_patience']} can never stop this run: stopping takes "
                   f"{cfg['early_stop_patience']} evaluations without improvement after the first, and {evals}")
    if sched == "plateau" and n_evals < cfg["plateau_patience"] + 2:
        out.append(f"the plateau schedule can never lower the learning rate: it takes {cfg['plateau_patience'] + 1} "
                   f"evaluations without improvement after the first (plateau_patience={cfg['plateau_patience']}), "
                   f"and {evals}")
    if sched == "cosine" and cfg["min_lr"] >= lr:
        out.append(f"min_lr={cfg['min_lr']:g} is not below learning_rate={lr:g}: the cosine schedule does not decay")
    if sched != "cosine" and cfg["min_lr"] != defaults["min_lr"]:
        out.append(f"min_lr={cfg['min_lr']:g} is the cosine schedule's floor; scheduler={sched!r} does not read it")
    unread = [k for k in ("plateau_factor", "plateau_patience") if cfg[k] != defaults[k]]
    if sched != "plateau" and unread:
        out.append(f"{' and '.join(f'{k}={cfg[k]:g}' for k in unread)}: the plateau schedule's; scheduler={sched!r} "
                   f"does not read {'them' if len(unread) > 1 else 'it'}")
    return out


def say_budget(cfg, total_iters, epoch_steps, eval_every, defaults):
    """Print where the run writes and its budget (records.budget_line), then what its settings ask for
    and cannot get (run_warnings), a `warning: ...` line each."""
    print(records.budget_line(cfg, total_iters, epoch_steps, eval_every))
    for line in run_warnings(cfg, total_iters, epoch_steps, eval_every, defaults):
        print(f"warning: {line}")
