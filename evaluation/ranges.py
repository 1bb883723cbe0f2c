"""
Options that state their range, for evaluate.py's and bench/speed.py's command lines: the type (Ranged), then
the check that holds a value to it and to an option's choices (check_ranges: config files set values argparse
never sees); and the check of a file a command is to write (check_new_file).
"""

import math
import os

import configurator


class Ranged:
    """An option's type that states its range too, so that the parser says both: argparse converts the command
    line's text with it (and refuses '2.5' for an int in its own words), check_ranges holds the value to the range."""

    def __init__(self, kind, ok, rule):
        self.kind, self.ok, self.rule, self.__name__ = kind, ok, rule, kind.__name__  # argparse names the kind

    def __call__(self, text):
        return self.kind(text)

    def fits(self, value):
        """Of the kind (an int passes for a float, a bool for neither), finite, and in range."""
        typed = isinstance(value, int if self.kind is int else (int, float)) and not isinstance(value, bool)
        return typed and (self.kind is int or math.isfinite(value)) and self.ok(value)  # nan passes no comparison


AT_LEAST_0 = Ranged(int, lambda v: v >= 0, "an integer >= 0")
AT_LEAST_1 = Ranged(int, lambda v: v >= 1, "an integer >= 1")


def check_ranges(p, args):
    """Each option's value against its Ranged type and its choices, as soon as the command line and config files
    are read: a ConfigError that names the option and the values it takes. Config files set values argparse never
    sees, so their types, ranges and choices are checked here with the command line's (bench/speed.py's too)."""
    for action in p._actions:
        value = getattr(args, action.dest, None)
        if isinstance(action.type, Ranged) and not (value is None and action.default is None):  # None: not set
            if action.nargs == "+":  # one or more values
                ok = isinstance(value, (list, tuple)) and len(value) > 0 and all(map(action.type.fits, value))
                shown = " ".join(map(str, value)) if isinstance(value, (list, tuple)) else repr(value)
            else:
                ok, shown = action.type.fits(value), repr(value)
            if not ok:
                raise configurator.ConfigError(f"--{action.dest} {shown}: {action.type.rule}")
        if action.choices is not None and value not in action.choices:
            raise configurator.ConfigError(f"--{action.dest} {value!r}: expected one of {list(action.choices)}")


def check_new_file(path, flag):
    """The file an option names for a command's result (--json, --out), checked before any work: a file, in a
    folder that exists, and not there yet (a result a user made is never replaced). ConfigError otherwise."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise configurator.ConfigError(f"{flag} {path}: a folder, not a file")
    if not os.path.isdir(folder):
        raise configurator.ConfigError(f"{flag} {path}: there is no folder {folder} to write it in")
    if os.path.exists(path):
        raise configurator.ConfigError(f"{flag} {path} exists: give another file, or move it away first")
