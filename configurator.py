"""
Config overrides, nanoGPT style but strict, and the check of a folder a command will write into. What a
command runs on (device, threads, precision) is hardware/devices.py's; what it says of itself (--help) is
cli/help.py's, whose train.py --help quotes this docstring's third paragraph:

    python train.py config/sst2_recurrent.py --batch_size=32 --learning_rate=1e-3

A config file is plain Python whose top-level assignments override the defaults; `--key=value`
arguments come after it and win. Every key must already exist among the defaults (a typo is an
error that names the closest valid key), and every value must have the default's type, except that
an int is accepted where a float is expected. A default of None accepts any value.

Some keys exist only under one value of another setting: each model family has its own settings,
present when `model` names that family. `apply_overrides` takes them as `depends`,
{setting: {value: {key: default}}}; a key of another family is an error that says whose it is.
"""

import ast
import difflib
import os


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
