"""
Config overrides, nanoGPT style but strict; then the check of a folder a command will write into, and what
the commands print for --help (at the end). What a command runs on (device, threads, precision) is
hardware/devices.py's:

    python train.py config/sst2_recurrent.py --batch_size=32 --learning_rate=1e-3

A config file is plain Python whose top-level assignments override the defaults; `--key=value`
arguments come after it and win. Every key must already exist among the defaults (a typo is an
error that names the closest valid key), and every value must have the default's type, except that
an int is accepted where a float is expected. A default of None accepts any value.

Some keys exist only under one value of another setting: each model family has its own settings,
present when `model` names that family. `apply_overrides` takes them as `depends`,
{setting: {value: {key: default}}}; a key of another family is an error that says whose it is.
"""

import argparse
import ast
import difflib
import inspect
import io
import os
import re
import sys
import textwrap
import tokenize
from contextlib import contextmanager


class UserError(Exception):
    """Bad input: a setting, an argument, a data file or a checkpoint that cannot be used, with what to do about
    it. Every command prints one as a single line, `error: ...`, and exits with status 1. Its family: ConfigError
    here, data.DataError and bookkeeping.checkpoints.CheckpointError. Any other exception is a bug, and keeps its traceback."""


class ConfigError(UserError, ValueError):
    """An unknown key, an ill-typed or out-of-range value, or an unreadable config file."""


def closest(key, valid):
    near = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    return f" (did you mean {near[0]!r}?)" if near else ""


def _check(key, value, defaults, source, elsewhere=None):
    """Return value coerced to the type of defaults[key], or raise ConfigError. `elsewhere` maps keys
    that are valid only under another choice to the words that say which."""
    if key not in defaults:
        if elsewhere and key in elsewhere:
            raise ConfigError(f"config key {key!r} in {source} is a setting of {elsewhere[key]}")
        raise ConfigError(f"unknown config key {key!r} in {source}{closest(key, list(defaults))}")
    default = defaults[key]
    if isinstance(default, float) and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)  # an int is accepted where a float is expected
    if default is None or isinstance(value, type(default)) and isinstance(value, bool) == isinstance(default, bool):
        return value  # a default of None takes anything; bool is a subclass of int, but True is no int, 1 no bool
    raise ConfigError(f"{key} must be of type {type(default).__name__} (the default is {default!r}), "
                      f"got {value!r} of type {type(value).__name__} from {source}")


def parse_value(text):
    """'3e-4' -> 0.0003, 'True' -> True, '32' -> 32, 'None' -> None; anything else stays a string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def read_settings(argv):
    """The assignments in argv, in order, unchecked: [(key, value, source)] from each config file's
    top-level names and each --key=value."""
    settings = []
    for arg in argv:
        if not arg.startswith("--"):
            if not os.path.isfile(arg):
                raise ConfigError(f"config file {arg} not found (arguments are config files or --key=value)")
            namespace = {}
            try:
                with open(arg) as f:  # __file__ lets a config file run a sibling first (see config/)
                    exec(compile(f.read(), arg, "exec"), {"__file__": os.path.abspath(arg)}, namespace)
            except Exception as e:
                raise ConfigError(f"could not run config file {arg}: {type(e).__name__}: {e}") from None
            # helpers and imports inside a config file are not settings
            settings += [(key, value, arg) for key, value in namespace.items()
                         if not (key.startswith("_") or callable(value) or type(value).__name__ == "module")]
        else:
            key, sep, text = arg[2:].partition("=")  # split on the first '=' only
            if not sep:
                raise ConfigError(f"argument {arg!r} must be --key=value")
            settings.append((key, parse_value(text), f"--{key}"))
    return settings


def apply_overrides(defaults, argv, depends=None):
    """Return a new config dict: defaults updated from the config files and --key=value items in argv.
    depends = {setting: {value: {key: default}}} adds the keys of the value each such setting ends
    up with (its last assignment, else its default)."""
    settings = read_settings(argv)
    full, elsewhere = dict(defaults), {}
    for name, choices in (depends or {}).items():
        chosen = _check(name, defaults[name], defaults, "the defaults")
        for key, value, source in settings:
            if key == name:
                chosen = _check(key, value, defaults, source)
        if chosen not in choices:
            raise ConfigError(f"{name}={chosen!r}: expected one of {sorted(choices)}")
        full.update(choices[chosen])
        for other, keys in choices.items():
            for key in set(keys) - set(choices[chosen]):
                elsewhere.setdefault(key, f"{name}={other!r}, not of {name}={chosen!r}")
    config = dict(full)
    for key, value, source in settings:
        config[key] = _check(key, value, full, source, elsewhere)
    return config


def not_a_folder(folder):
    """Why `folder` cannot be made and written into, or '': it is a file, or the nearest path above it that exists
    is one (os.makedirs would end in FileExistsError or NotADirectoryError). Commands check the folders they will
    write into with it before any work (train.py's out_dir, data.py's)."""
    path = os.path.normpath(folder)
    while not os.path.exists(path) and os.path.dirname(path) not in ("", path):
        path = os.path.dirname(path)
    if not os.path.exists(path) or os.path.isdir(path):
        return ""
    return "a file, not a folder" if path == os.path.normpath(folder) else f"{path} is a file, not a folder"


# -----------------------------------------------------------------------------
# What the commands print for --help, built from the code so that it cannot drift from it. In order:
# commented_settings and describe_settings read a block of settings from its source (train.py's defaults, a model
# family's config dataclass) with each setting's comment; HelpFormatter is argparse's help with each option's default
# after its help, for the other commands; config_files lists the config files with their first comment line;
# train_help puts train.py's --help together from these; train_bare_line is what a bare `python train.py` says
# it is about to do; and reader_may_stop lets a command's output go to a reader that stops early
# (`python train.py --help | head`).


def commented_settings(source, names):
    """[(heading, name, comment)] for the assignments to `names` in `source` (a module's defaults block or a
    class body), in source order. A setting's comment is the one at the end of its line and the comment lines
    right below it, unless another kind of statement follows them directly (then they introduce it); comment
    lines after a blank line head the settings below them."""
    source = textwrap.dedent(source)
    comments = {}  # line number -> (text, whether the comment is the whole line)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = (tok.string.lstrip("#").strip(), not tok.line[:tok.start[1]].strip())
    tree = ast.parse(source)
    body = tree.body[0].body if len(tree.body) == 1 and isinstance(tree.body[0], ast.ClassDef) else tree.body
    starts = {node.lineno: node for node in body}
    lines, out, heading = source.splitlines(), [], ""

    def target(node):
        t = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
            getattr(node, "target", None)
        return t.id if isinstance(t, ast.Name) and t.id in names else None

    for node in body:
        above, n = [], node.lineno - 1  # a heading: whole-line comments after a blank line, right above
        while n in comments and comments[n][1]:
            above.insert(0, comments[n][0])
            n -= 1
        if above and (n < 1 or not lines[n - 1].strip()):
            heading = " ".join(t for t in above if t.strip("-"))
        name = target(node)
        if name is None:
            continue
        text = [comments[n][0] for n in range(node.lineno, node.end_lineno + 1) if n in comments]
        n, more = node.end_lineno + 1, []
        while n in comments and comments[n][1]:
            more.append(comments[n][0])
            n += 1
        if more and (n not in starts or target(starts[n]) is not None):  # not above another kind of statement
            text += more
        out.append((heading, name, " ".join(text)))
    return out


def describe_settings(settings, values, width=110):
    """The help lines of commented_settings' output: each heading once, then `name = default  comment`."""
    lines, heading = [], None
    for head, name, comment in settings:
        if head != heading and head:
            lines.append(textwrap.fill(head, width, initial_indent="  ", subsequent_indent="  "))
        heading = head
        lines.append(textwrap.fill(f"{name} = {values[name]!r}" + (f"  {comment}" if comment else ""), width,
                                   initial_indent="    ", subsequent_indent="        "))
    return lines


class HelpFormatter(argparse.HelpFormatter):
    """The other commands' --help (argparse's), with each option's default after
    its help, unless there is none to show (None, a flag's False) or the help says it already."""

    def _get_help_string(self, action):
        text, default = action.help or "", action.default
        if default is None or default is False or default in (argparse.SUPPRESS, []) or "default" in text \
                or not action.option_strings:
            return text
        shown = (" ".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)).replace("%", "%%")
        return f"{text} (default: {shown})" if text else f"default: {shown}"


def config_files(folder):
    """[(path, first comment line)] of the config files in `folder`, by name."""
    out = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if name.endswith(".py"):
            with open(os.path.join(folder, name)) as f:
                first = next((line.lstrip("#").strip() for line in f if line.startswith("#")), "")
            out.append((os.path.join(os.path.basename(folder), name), first))
    return out


def train_help(train_file, doc, defaults, family_settings, families):
    """`python train.py --help`: what train.py does (the opening of its docstring, `doc`), how settings are given
    (this file's docstring), the config files in config/ beside train.py with their first comment line, and
    every setting with its default and comment, read from the defaults block in train.py's source (`train_file`,
    `defaults`) and from each family's config dataclass in model.py (`family_settings`: {family: its settings};
    `families`: model.FAMILIES, {family: (its config dataclass, its module)})."""
    own, how = doc.strip().split("\n\n"), __doc__.strip().split("\n\n")
    lines = ["usage: python train.py [CONFIG_FILE ...] [--key=value ...]", "", "\n\n".join(own[:2]), "", how[2],
             "Each model family's settings (the last sections below) exist when `model` names that family.", ""]
    lines.append("config files (config/; a first comment line each):")
    folder = os.path.join(os.path.dirname(os.path.abspath(train_file)), "config")
    lines += [f"  {path:44s} {first}" for path, first in config_files(folder)]
    lines += ["", "settings (name = default  what it is), train.py's defaults:"]
    with open(train_file) as f:
        lines += describe_settings(commented_settings(f.read(), defaults), defaults)
    for family, settings in family_settings.items():
        cls = families[family][0]
        what = re.split(r"\.\s+(?=[A-Z])", " ".join(inspect.getdoc(cls).split()))[0]  # its docstring's first sentence
        lines += ["", f"settings of model={family!r} (model.{cls.__name__}: {what})"]
        lines += describe_settings(commented_settings(inspect.getsource(cls), settings), settings)
    return "\n".join(lines)


# What a bare `python train.py` costs, as measured: config/sst2_recurrent.py trains this model (the encoder's
# defaults) for 2 epochs in 12-20 min on one CPU core (README's table), so an epoch takes 6-10 min there.
DEFAULT_RUN_TIME = "6-10 min an epoch on one CPU core"


def train_bare_line(defaults, family_settings):
    """What a bare `python train.py` says before the data is prepared and the model built: what it trains
    (train.py's `defaults`, and the settings of the family they name, from `family_settings`) and about how long."""
    d, m = defaults, family_settings[defaults["model"]]
    return (f"python train.py with no arguments trains the defaults: dataset {d['dataset']} (protocol "
            f"{d['protocol']}), model {d['model']} ({m['n_layer']} layers x {m['n_loops']} loops, width "
            f"{m['n_embd']}), at most {d['max_epochs']} epochs (early stopping after {d['early_stop_patience']} "
            f"evaluations without improvement), into {d['out_dir']}; about {DEFAULT_RUN_TIME}. "
            f"`python train.py --help` lists the config files and settings.")


@contextmanager
def reader_may_stop():
    """Around a command's main(): when whatever reads its output stops early (`python train.py --help | head`
    closes the pipe after ten lines), the command ends quietly, as a command killed by SIGPIPE does (status
    128 + SIGPIPE), not with a BrokenPipeError traceback. Python ignores SIGPIPE, so the next write raises
    instead; stdout is pointed at os.devnull first, or the flush at exit would raise again (Python's own
    advice, in the signal module's documentation). What the command had running stops as at any exception
    (a training run's lock is let go; its last.pt is the last evaluation's)."""
    try:
        yield
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)  # 128 + SIGPIPE (13): what a shell reports of a command that SIGPIPE ended
