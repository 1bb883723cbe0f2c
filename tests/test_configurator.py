"""
configurator.py against train.py's real DEFAULTS: files and --key=value override, types are kept
(int -> float is the one coercion), unknown keys are errors that name the closest valid key.
"""

import pytest

import train
from configurator import ConfigError, apply_overrides, parse_value

D = train.DEFAULTS


def write(tmp_path, text, name="cfg.py"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_defaults_pass_through_unchanged():
    cfg = apply_overrides(D, [])
    assert cfg == D and cfg is not D


def test_config_file_then_command_line(tmp_path):
    path = write(tmp_path, "# a comment\nbatch_size = 16  # why\nlearning_rate = 3e-5\nout_dir = 'out/x'\n")
    cfg = apply_overrides(D, [path, "--batch_size=32"])
    assert cfg["batch_size"] == 32  # the command line comes after the file and wins
    assert cfg["learning_rate"] == 3e-5 and cfg["out_dir"] == "out/x"
    assert cfg["n_layer"] == D["n_layer"]  # untouched keys keep their defaults
    assert D["batch_size"] == 64  # the defaults themselves are not modified


def test_config_file_helpers_are_not_settings(tmp_path):
    path = write(tmp_path, "import math\n_width = 2 ** 5\ndef helper():\n    return 1\nn_embd = _width * 4\n"
                           "learning_rate = math.sqrt(1e-6)\n")
    cfg = apply_overrides(D, [path])
    assert cfg["n_embd"] == 128 and cfg["learning_rate"] == pytest.approx(1e-3)
    assert "math" not in cfg and "_width" not in cfg and "helper" not in cfg


def test_key_value_types():
    cfg = apply_overrides(D, ["--learning_rate=1", "--n_layer=4", "--compile=True", "--bias=False",
                              "--ffn=gelu", "--dropout=0"])
    assert cfg["learning_rate"] == 1.0 and type(cfg["learning_rate"]) is float  # int accepted for a float
    assert type(cfg["dropout"]) is float
    assert cfg["n_layer"] == 4 and type(cfg["n_layer"]) is int
    assert cfg["compile"] is True and cfg["bias"] is False
    assert cfg["ffn"] == "gelu"


def test_int_to_float_from_a_file(tmp_path):
    cfg = apply_overrides(D, [write(tmp_path, "weight_decay = 0\n")])
    assert cfg["weight_decay"] == 0.0 and type(cfg["weight_decay"]) is float


def test_split_on_first_equals_only():
    assert apply_overrides(D, ["--out_dir=a=b"])["out_dir"] == "a=b"
    assert apply_overrides(D, ["--out_dir=out/run=3"])["out_dir"] == "out/run=3"
    assert apply_overrides(D, ["--data_dir="])["data_dir"] == ""


def test_parse_value():
    assert parse_value("3e-4") == 3e-4 and parse_value("32") == 32 and parse_value("True") is True
    assert parse_value("None") is None and parse_value("gelu") == "gelu" and parse_value("'x'") == "x"


def test_unknown_key_on_command_line_names_the_closest():
    with pytest.raises(ConfigError, match=r"unknown config key 'learning_rat'.*did you mean 'learning_rate'"):
        apply_overrides(D, ["--learning_rat=1e-3"])


def test_unknown_key_in_file_names_the_closest_and_the_file(tmp_path):
    path = write(tmp_path, "batch_size = 16\nlearning_rat = 1e-3\n")
    with pytest.raises(ConfigError, match=r"learning_rat.*did you mean 'learning_rate'") as info:
        apply_overrides(D, [path])
    assert path in str(info.value)


def test_unknown_key_far_from_everything():
    with pytest.raises(ConfigError, match="unknown config key 'zzzzzz'"):
        apply_overrides(D, ["--zzzzzz=1"])


@pytest.mark.parametrize("arg", ["--batch_size=abc", "--batch_size=1.5", "--batch_size=True", "--compile=1",
                                 "--learning_rate=fast", "--out_dir=3", "--bias=false"])
def test_type_mismatch(arg):
    key = arg[2:].split("=")[0]
    with pytest.raises(ConfigError, match=f"{key} must be of type"):
        apply_overrides(D, [arg])


def test_type_mismatch_in_file(tmp_path):
    with pytest.raises(ConfigError, match="n_layer must be of type int"):
        apply_overrides(D, [write(tmp_path, "n_layer = 2.5\n")])


def test_none_is_not_a_valid_int():
    with pytest.raises(ConfigError):
        apply_overrides(D, ["--batch_size=None"])


def test_none_default_accepts_anything():
    defaults = {"maybe": None, "n": 1}
    assert apply_overrides(defaults, ["--maybe=3"])["maybe"] == 3
    assert apply_overrides(defaults, ["--maybe=abc"])["maybe"] == "abc"


def test_bad_arguments(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        apply_overrides(D, [str(tmp_path / "missing.py")])
    with pytest.raises(ConfigError, match="--key=value"):
        apply_overrides(D, ["--batch_size"])
    with pytest.raises(ConfigError, match="could not run config file"):
        apply_overrides(D, [write(tmp_path, "batch_size = (\n")])
    with pytest.raises(ConfigError, match="ZeroDivisionError"):
        apply_overrides(D, [write(tmp_path, "batch_size = 1 // 0\n", "div.py")])


@pytest.mark.parametrize("name", ["sst2_baseline", "sst2_baseline_paper", "sst2_recurrent", "sst2_recurrent_paper"])
def test_shipped_config_files_load(name):
    import os

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cfg = apply_overrides(D, [os.path.join(repo, "config", f"{name}.py")])
    assert cfg["out_dir"] == f"out/{name}"
    assert set(cfg) == set(D)
