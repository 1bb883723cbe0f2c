"""
The checkpoint format, one for train.py, evaluate.py, export.py and sampling: a dict written by torch.save with the
model's family, its config and weights, and whatever run state the caller adds (train.py: optimizer, schedulers,
RNG). It is a run's bookkeeping, kept beside model.py rather than in it: the model families are the lesson, the file
format and its versions are not. In order:

    CKPT_FORMAT, CKPT_VERSION, OLD_KINDS    what a checkpoint of ours says it is, and the versions this code reads
    CheckpointError                         a file that is missing, unreadable, or not one of ours
    RETIRED_FIELDS, without_retired         model config fields since removed, read from old files
    save_checkpoint, load_checkpoint        write one atomically; read one back as a model, with a clear error

It imports model.py (the family registry) and configurator.py, nothing above them.
"""

import errno
import os
from dataclasses import asdict

import torch

from configurator import UserError
from model import FAMILIES, family_of, raw_model

CKPT_FORMAT = "transformer-lab-checkpoint"
CKPT_VERSION = 2  # 2: `kind` is the family name ('encoder' | 'gpt'); run state as written by train.py's RunState
OLD_KINDS = {1: {"encoder_classifier": "encoder", "gpt": "gpt"}}  # version -> its kind names -> today's


class CheckpointError(UserError, RuntimeError):
    """A file that is missing, unreadable, or not a checkpoint written by this project."""


# Model config fields since removed from model.py, with the one value every run of ours gave them: a checkpoint
# (or a run record, bookkeeping/records.py) holding one at that value reads as if it had none. n_segments: the
# encoder's segment embedding, which no dataset or config used (removed 2026-11-29).
RETIRED_FIELDS = {"n_segments": 0}


def without_retired(args, where):
    """A stored model config without its RETIRED_FIELDS; one at another value names a model this code cannot build."""
    other = {k: v for k, v in args.items() if k in RETIRED_FIELDS and v != RETIRED_FIELDS[k]}
    if other:
        raise CheckpointError(f"{where} uses {', '.join(f'{k}={v!r}' for k, v in other.items())}, which this code no "
                              f"longer has")
    return {k: v for k, v in args.items() if k not in RETIRED_FIELDS}


def save_checkpoint(path, model, **extra):
    """Write {format, version, kind, model_args, model, **extra} atomically: to a temporary file in
    the same folder, then os.replace, so an interrupted write never leaves a half-written checkpoint."""
    m = raw_model(model)
    state = {"format": CKPT_FORMAT, "version": CKPT_VERSION, "kind": family_of(m),
             "model_args": asdict(m.cfg), "model": m.state_dict(), **extra}
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)
    except (OSError, RuntimeError) as e:  # torch.save says a full disk as a RuntimeError ('unexpected pos')
        if os.path.exists(tmp):
            os.remove(tmp)
        if not disk_full(e):
            raise
        raise UserError(f"the disk is full at {os.path.dirname(os.path.abspath(path))}: {path} was not written "
                        f"(a {os.path.basename(path)} written before is as it was); free some space and run it "
                        f"again (--init_from=resume continues from a last.pt already there)") from None


def disk_full(error):
    """Whether an error writing a file is the disk's being full: ENOSPC (or EDQUOT, a quota), or torch.save's own
    way of saying it, a RuntimeError from its zip writer."""
    if isinstance(error, OSError):
        return error.errno in (errno.ENOSPC, errno.EDQUOT)
    return any(words in str(error) for words in ("unexpected pos", "No space left", "file write failed"))


def load_checkpoint(path, device="cpu"):
    """Load a checkpoint of ours with weights_only=True. Returns (model, checkpoint dict); the model is
    in eval mode on `device`. Version 1 checkpoints (before model families were a config key) load
    too, their kind renamed. Anything else raises CheckpointError with what to do about it."""
    if not os.path.isfile(path):
        raise CheckpointError(f"no checkpoint at {path}: train one first (python train.py config/...)")
    try:
        ckpt = torch.load(path, map_location=device, weights_only=True)
    except Exception as e:  # pickle errors, truncated zips, random bytes, foreign pickled objects
        # (torch's own message suggests weights_only=False, which would run arbitrary pickled code)
        raise CheckpointError(f"{path} is not a checkpoint of this project: torch.load(weights_only=True) "
                              f"cannot read it ({type(e).__name__})") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != CKPT_FORMAT:
        raise CheckpointError(f"{path} is a PyTorch file but not a checkpoint written by this project's train.py")
    version = ckpt.get("version")
    if not isinstance(version, int) or (version != CKPT_VERSION and version not in OLD_KINDS):
        raise CheckpointError(f"{path} has checkpoint version {version}; this code reads versions "
                              f"{sorted([*OLD_KINDS, CKPT_VERSION])}")
    kind = ckpt.get("kind") if version == CKPT_VERSION else OLD_KINDS[version].get(ckpt.get("kind"))
    if kind not in FAMILIES:
        raise CheckpointError(f"{path} holds a model of kind {ckpt.get('kind')!r}, unknown to this code "
                              f"(checkpoint version {version}; known families: {sorted(FAMILIES)})")
    ckpt["kind"] = kind
    cfg_cls, model_cls = FAMILIES[kind]
    model = model_cls(cfg_cls(**without_retired(ckpt["model_args"], path)))
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError as e:
        raise CheckpointError(f"{path}: weights do not match the stored model config ({e})") from None
    return model.to(device).eval(), ckpt
