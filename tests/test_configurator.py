"""
configurator.py against train.py's real DEFAULTS and model families: files and --key=value override,
types are kept (int -> float is the one coercion), unknown keys are errors that name the closest valid
key, and each model family's settings exist only when `model` names it.
"""

import pytest

import model
import train
from configurator import ConfigError, apply_overrides, parse_value

D = train.DEFAULTS


def make(argv):
    """train.py's own config: DEFAULTS, the chosen family's settings, then argv."""
    return train.make_config(argv)


def write(tmp_path, text, name="cfg.py"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_defaults_pass_through_unchanged():
    cfg = apply_overrides(D, [])
    assert cfg == D and cfg is not D
    assert make([]) == {**D, **model.family_settings("encoder")}  # the default family's settings join them


def test_config_file_then_command_line(tmp_path):
    path = write(tmp_path, "# a comment\nbatch_size = 16  # why\nlearning_rate = 3e-5\nout_dir = 'out/x'\n")
    cfg = make([path, "--batch_size=32"])
    assert cfg["batch_size"] == 32  # the command line comes after the file and wins
    assert cfg["learning_rate"] == 3e-5 and cfg["out_dir"] == "out/x"
    assert cfg["n_layer"] == model.EncoderConfig.n_layer  # untouched keys keep their defaults
    assert D["batch_size"] == 64  # the defaults themselves are not modified


def test_config_file_helpers_are_not_settings(tmp_path):
    path = write(tmp_path, "import math\n_width = 2 ** 5\ndef helper():\n    return 1\nn_embd = _width * 4\n"
                           "learning_rate = math.sqrt(1e-6)\n")
    cfg = make([path])
    assert cfg["n_embd"] == 128 and cfg["learning_rate"] == pytest.approx(1e-3)
    assert "math" not in cfg and "_width" not in cfg and "helper" not in cfg


def test_key_value_types():
    cfg = make(["--learning_rate=1", "--n_layer=4", "--compile=True", "--bias=False", "--ffn=gelu", "--dropout=0"])
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
        make([arg])


def test_type_mismatch_in_file(tmp_path):
    with pytest.raises(ConfigError, match="n_layer must be of type int"):
        make([write(tmp_path, "n_layer = 2.5\n")])


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


@pytest.mark.parametrize("name, family, expected", [
    ("sst2_baseline", "encoder", dict(n_layer=6, n_loops=1, n_embd=384, n_head=6, ffn_hidden=1536, max_epochs=1)),
    ("sst2_baseline_paper", "encoder", dict(n_layer=6, n_loops=1, learning_rate=3e-5, batch_size=16,
                                            protocol="standard")),
    ("sst2_recurrent", "encoder", dict(n_layer=3, n_loops=2, loop_alpha=0.5, n_embd=256, ffn_hidden=1024,
                                       max_epochs=2)),
    ("sst2_recurrent_paper", "encoder", dict(n_layer=3, n_loops=2, learning_rate=3e-5, batch_size=16,
                                             protocol="standard")),
    ("shakespeare_char_baseline", "gpt", dict(n_layer=8, n_embd=128, block_size=128, emb_norm="none", max_iters=300)),
    ("shakespeare_char", "gpt", dict(n_layer=6, n_embd=384, block_size=256, dropout=0.2, max_iters=5000)),
    ("llama_sst5_finetune", "llama", dict(dataset="sst5", tokenizer="tok512", init_from="stories260K", lora_rank=0,
                                          batch_size=80, max_epochs=5, learning_rate=1e-3, max_len=256)),
    ("llama_sst5_lora", "llama", dict(dataset="sst5", lora_rank=4, lora_alpha=1.0, lora_targets="wq,wv",
                                      learning_rate=1e-2, batch_size=80)),
    ("llama_cfimdb_finetune", "llama", dict(dataset="cfimdb", lora_rank=0, batch_size=10, max_len=256,
                                            learning_rate=1e-3)),
    ("llama_cfimdb_lora", "llama", dict(dataset="cfimdb", lora_rank=4, batch_size=10, learning_rate=1e-2)),
])
def test_shipped_config_files_load(name, family, expected):
    """Each shipped config file loads, picks its family, and sets what its comments say."""
    import os

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cfg = make([os.path.join(repo, "config", f"{name}.py")])
    assert cfg["out_dir"] == f"out/{name}" and cfg["model"] == family
    assert {k: cfg[k] for k in expected} == expected
    assert set(cfg) == set(D) | set(model.family_settings(family))  # exactly the family's keys, no other's


# -----------------------------------------------------------------------------
# keys that exist only under one model family


def test_family_keys_follow_the_model_setting(tmp_path):
    cfg = make(["--model=gpt", "--block_size=64"])
    assert cfg["model"] == "gpt" and cfg["block_size"] == 64 and cfg["dropout"] == 0.0  # the GPT's defaults
    assert "n_loops" not in cfg
    path = write(tmp_path, "model = 'gpt'\nemb_norm = 'rms'\n")
    assert make([path, "--n_layer=2"])["n_layer"] == 2  # model chosen in the file, its key on the command line
    assert make([path, "--model=encoder"])["n_loops"] == 2  # the last assignment of model wins


def test_key_of_another_family_says_whose_it_is(tmp_path):
    with pytest.raises(ConfigError, match=r"'n_loops' in --n_loops is a setting of model='encoder', not of model='gpt"):
        make(["--model=gpt", "--n_loops=1"])
    with pytest.raises(ConfigError, match=r"'block_size' in .*cfg.py is a setting of model='gpt'"):
        make([write(tmp_path, "block_size = 64\n")])


def test_unknown_model_family():
    with pytest.raises(ConfigError, match=r"model='rwkv': expected one of \['bow', 'encdec', 'encoder', 'gpt', "
                       r"'llama', 'mamba'\]"):
        make(["--model=rwkv"])
    with pytest.raises(ConfigError, match="model must be of type str"):
        make(["--model=3"])
