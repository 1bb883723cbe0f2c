"""
What a command says of itself, built from the code so that it cannot drift from it. In order:
commented_settings and describe_settings read a block of settings from its source (train.py's defaults, a model
family's config dataclass) with each setting's comment; HelpFormatter is argparse's help with each option's default
after its help, for the other commands; config_files lists the config files with their first comment line;
train_help puts train.py's --help together from these; train_bare_line is what a bare `python train.py` says
it is about to do; and reader_may_stop lets a command's output go to a reader that stops early
(`python train.py --help | head`).
"""

import argparse
import ast
import inspect
import io
import os
import re
import sys
import textwrap
import tokenize
from contextlib import contextmanager

import configurator


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
    (configurator.py's docstring, its third paragraph), the config files in config/ beside train.py with their
    first comment line, and every setting with its default and comment, read from the defaults block in
    train.py's source (`train_file`, `defaults`) and from each family's config dataclass in model.py
    (`family_settings`: {family: its settings}; `families`: model.FAMILIES, {family: (its config dataclass,
    its module)})."""
    own, how = doc.strip().split("\n\n"), configurator.__doc__.strip().split("\n\n")
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
