"""
evaluate.py's command line: every option checked as it is parsed (before any data or checkpoint is read),
the options that suit some checkpoints only checked against the one loaded (before it is evaluated), the
devices checked in hardware.devices.resolve_device (train.py's too, under torchrun as well), and bad input told
apart from bugs: a UserError ends in one line `error: ...`, anything else keeps its traceback.
"""

import os

import pytest
import torch

import configurator
import data
import evaluate
from bookkeeping.checkpoints import save_checkpoint
from cli import help as commands_help
from evaluation.options import seq2seq_words
from hardware import devices
from model import GPT, EncoderClassifier, EncoderConfig, GPTConfig, Llama, LlamaConfig


def refusal(argv):
    """The text of the SystemExit that evaluate.main(argv) ends in."""
    with pytest.raises(SystemExit) as e:
        evaluate.main(argv)
    return str(e.value)


# -----------------------------------------------------------------------------
# every option, checked where it is parsed


@pytest.mark.parametrize("option, message", [
    (["--temperature", "-0.5"], "--temperature -0.5: a number >= 0"),
    (["--temperature", "nan"], "--temperature nan: a number >= 0"),
    (["--top_k", "-3"], "--top_k -3: an integer >= 1"),
    (["--top_k", "0"], "--top_k 0: an integer >= 1"),
    (["--top_p", "1.5"], "--top_p 1.5: a number with 0 < p <= 1"),
    (["--top_p", "0"], "--top_p 0.0: a number with 0 < p <= 1"),
    (["--epsilon", "2"], "--epsilon 2.0: a number with 0 <= epsilon < 1"),
    (["--epsilon", "-0.1"], "--epsilon -0.1: a number with 0 <= epsilon < 1"),
    (["--max_new_tokens", "-5"], "--max_new_tokens -5: an integer >= 1"),
    (["--gen_batch", "0"], "--gen_batch 0: an integer >= 1"),
    (["--batch_size", "0"], "--batch_size 0: an integer >= 1"),
    (["--repeats", "0"], "--repeats 0: an integer >= 1"),
    (["--max_errors", "-1"], "--max_errors -1: an integer >= 0"),
    (["--loops", "2", "0"], "--loops 2 0: one or more integers >= 1"),
    (["--text", "  \t "], "--text is empty"),
    (["--words", " , "], "--words is empty"),
    (["--words", "brown,,is"], "--words 'brown,,is' has an empty word"),
    (["--words", "brown,don't"], "--words \"brown,don't\" has \"don't\", which is not a word the model translates"),
    (["--zero_shot", "shakespeare_char"], "--zero_shot 'shakespeare_char': expected a labelled dataset, one of"),
    (["--file", "no_such.tsv"], "--file no_such.tsv: no such file"),
    (["--zero_shot", "sst5", "--split", "unseen"], "--split unseen is Pig Latin's; --zero_shot scores train, val or"),
    (["--json", "no_such_folder/r.json"], "--json no_such_folder/r.json: there is no folder"),
    (["--device", "gpu"], "device='gpu': expected 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'; the devices here: cpu"),
])
def test_each_option_is_checked_before_anything_is_loaded(option, message, tmp_path, monkeypatch):
    """The checkpoint does not exist: had the option not been checked first, the error would name it."""
    monkeypatch.chdir(tmp_path)
    text = refusal(["--ckpt", "missing.pt", *option])
    assert text == f"error: {message}" or text.startswith(f"error: {message}"), text
    assert "\n" not in text and "missing.pt" not in text


def test_a_json_file_already_there_is_refused_and_kept(tmp_path, monkeypatch):
    """evaluate.py --json (and the benchmarks') never replaces a file (study.py's --remeasure replaces its own
    record's, by a new file moved in)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.json").write_text('{"mine": 1}')
    assert refusal(["--ckpt", "missing.pt", "--json", "r.json"]) == \
        "error: --json r.json exists: give another file, or move it away first"
    assert (tmp_path / "r.json").read_text() == '{"mine": 1}'
    from bench import kernel_speed, speed
    with pytest.raises(SystemExit) as e:
        speed.main(["--json", "r.json", "--cases", "nothing"])
    assert str(e.value) == "error: --json r.json exists: give another file, or move it away first"
    with pytest.raises(SystemExit):
        kernel_speed.main(["scan", "--json", "r.json"])
    assert (tmp_path / "r.json").read_text() == '{"mine": 1}'


@pytest.mark.parametrize("option, message", [
    (["--rounds", "0"], "--rounds 0: an integer >= 1"),
    (["--bench_steps", "-1"], "--bench_steps -1: an integer >= 1"),
    (["--bench_batch", "-2"], "--bench_batch -2: an integer >= 0"),
])
def test_the_benchmark_s_options_are_checked_the_same_way(option, message):
    """bench/speed.py's options (they were evaluate.py --bench's), checked by evaluation/ranges.py's check_ranges
    before any model is built."""
    from bench import speed
    with pytest.raises(SystemExit) as e:
        speed.main(option)
    assert str(e.value) == f"error: {message}" or str(e.value).startswith(f"error: {message}"), str(e.value)
    assert "\n" not in str(e.value)


def test_the_edges_of_each_range_are_accepted():
    args = evaluate.parse_args(["--ckpt", "x.pt", "--temperature", "0", "--top_k", "1", "--top_p", "1", "--epsilon",
                                "0", "--max_new_tokens", "1", "--gen_batch", "1", "--loops", "1", "--max_errors", "0",
                                "--words", "Brown, pleasure-grounds"])
    assert (args.temperature, args.top_k, args.top_p, args.epsilon) == (0.0, 1, 1.0, 0.0)
    assert seq2seq_words(args.words, "--words", ",") == ["brown", "pleasure-grounds"]


def test_config_file_values_are_checked_too(tmp_path):
    """argparse never sees a config file's values: their types and choices are checked all the same."""
    for line, message in [("top_p = 2", "--top_p 2: a number with 0 < p <= 1"),
                          ("max_new_tokens = 2.5", "--max_new_tokens 2.5: an integer >= 1"),
                          ("dtype = 'fp8'", "--dtype 'fp8': expected one of ['float32', 'bfloat16', 'float16']"),
                          ("loops = 3", "--loops 3: one or more integers >= 1")]:
        (tmp_path / "c.py").write_text(f"ckpt = 'missing.pt'\n{line}\n")
        assert refusal([str(tmp_path / "c.py")]).startswith(f"error: {message}")


def test_missing_ckpt_is_one_line():
    assert refusal([]) == "error: give --ckpt (or a config file that sets ckpt)"


# -----------------------------------------------------------------------------
# --text and --words for a seq2seq model: one rule


@pytest.mark.parametrize("text, sep, words", [("Brown IS", None, ["brown", "is"]), ("Brown,IS", ",", ["brown", "is"]),
                                              (" pleasure-Grounds ", None, ["pleasure-grounds"])])
def test_seq2seq_words_lower_case_both_options(text, sep, words):
    assert seq2seq_words(text, "--x", sep) == words


@pytest.mark.parametrize("text, message", [("", "is empty"), ("   ", "is empty"), ("x1", "'x1', which is not a word"),
                                           ("tête", "'tête', which is not a word"), ("a--b", "'a--b', which is not")])
def test_seq2seq_words_refuse_the_same_way_for_both_options(text, message):
    for option, sep in (("--text", None), ("--words", ",")):
        with pytest.raises(configurator.ConfigError, match=f"^{option} .*{message}"):
            seq2seq_words(text, option, sep)


# -----------------------------------------------------------------------------
# options that suit some checkpoints only: refused as the checkpoint loads, before its data is read


@pytest.fixture(scope="module")
def kinds(tmp_path_factory):
    """Checkpoints of three kinds whose data folder does not exist (so any evaluation would fail on it):
    a looped encoder classifier, a Llama classifier (no loops), a character GPT language model."""
    folder = tmp_path_factory.mktemp("kinds")
    nodata = {"dir": str(folder / "nodata"), "dataset": "sst2", "max_len": 16}
    cls = {**nodata, "task": "classification", "label_names": ["negative", "positive"]}
    made = {"encoder": (EncoderClassifier(EncoderConfig(vocab_size=50, block_size=16, n_layer=1, n_embd=16,
                                                        n_head=2)), cls),
            "llama": (Llama(LlamaConfig(vocab_size=50, block_size=16, n_layer=1, n_embd=16, n_head=2,
                                        multiple_of=8, n_classes=2)), cls),
            "gpt": (GPT(GPTConfig(vocab_size=12, block_size=16, n_layer=1, n_embd=16, n_head=2)),
                    {**nodata, "task": "lm", "vocab": list("abcdefghij \n")})}
    paths = {}
    for name, (m, record) in made.items():
        paths[name] = str(folder / f"{name}.pt")
        save_checkpoint(paths[name], m, config={"dataset": "sst2", "data_dir": str(folder / "nodata")}, data=record,
                        iter_num=1, epoch=0, best_val_loss=1.0)
    (folder / "l.tsv").write_text("good\t1\n")
    return paths, str(folder / "l.tsv")


def test_options_that_do_not_suit_the_checkpoint(kinds, tmp_path):
    paths, tsv = kinds
    llama, gpt, encoder = paths["llama"], paths["gpt"], paths["encoder"]
    cases = [
        ("llama", ["--loops", "1", "2"], "--loops re-scores a looped encoder (a classifier whose layer stack is "
         f"applied n_loops times) at other numbers of loops; {llama} is a Llama classifier, with no loops to vary"),
        ("gpt", ["--loops", "2"], f"{gpt} is a GPT language model, with no loops to vary"),
        ("gpt", ["--file", tsv], f"--file takes labelled sentences for a classifier or words for a seq2seq model; "
         f"{gpt} is a language model"),
        ("encoder", ["--split", "unseen"], f"--split unseen is Pig Latin's words from outside the novel; {encoder} is "
         f"a classifier"),
        ("gpt", ["--zero_shot", "cfimdb"], f"{gpt} is not a Llama language model"),
        ("gpt", ["--text", "hello"], f"{gpt} is a language model: give it a --prompt to continue, not --text"),
        ("encoder", ["--plots", str(tmp_path / "p")], f"--plots draws a seq2seq model's attention and embeddings; "
         f"{encoder} is a classifier"),
        ("encoder", ["--prompt", "once"], f"--prompt starts a language model's sample; {encoder} is a classifier"),
    ]
    for kind, option, message in cases:
        text = refusal(["--ckpt", paths[kind], "--device", "cpu", *option])
        assert text.startswith("error: ") and message in text and "\n" not in text, text
    assert not os.path.exists(tmp_path / "p")


def test_a_char_prompt_the_model_cannot_read(kinds):
    paths, _ = kinds
    assert refusal(["--ckpt", paths["gpt"], "--prompt", "ROMEO", "--no_timing"]) == \
        "error: --prompt 'ROMEO': characters 'EMOR' are not in this model's vocabulary of 12 characters"
    assert refusal(["--ckpt", paths["gpt"], "--prompt", "", "--no_timing"]).startswith("error: --prompt '' is empty")


# -----------------------------------------------------------------------------
# devices


def absent_gpu():
    """A CUDA device this machine lacks."""
    return "cuda" if not torch.cuda.is_available() else f"cuda:{torch.cuda.device_count()}"


def test_devices_this_machine_lacks(monkeypatch):
    assert devices.resolve_device("cpu") == "cpu"
    assert devices.resolve_device("auto") in ("cpu", "cuda", "mps")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    for name in ("cuda", "cuda:0"):
        with pytest.raises(configurator.ConfigError, match=f"^device='{name}': torch sees no CUDA GPU on this machine "
                           r"\(torch .*\); the devices here: cpu$"):
            devices.resolve_device(name)
    with pytest.raises(configurator.ConfigError, match="^device='mps': this machine has no Apple GPU .*here: cpu$"):
        devices.resolve_device("mps")
    assert devices.resolve_device("auto") == "cpu"
    # a machine with two GPUs (as torch.cuda reports them)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert [devices.resolve_device(d) for d in ("auto", "cuda", "cuda:1")] == ["cuda", "cuda", "cuda:1"]
    with pytest.raises(configurator.ConfigError, match=r"^device='cuda:2': this machine has 2 CUDA GPU\(s\); the "
                       "devices here: cpu, cuda:0, cuda:1$"):
        devices.resolve_device("cuda:2")


def test_train_under_torchrun_stops_at_the_device(tmp_path, monkeypatch):
    """train.py's processes() resolves the device before it touches torch.cuda or joins a process group:
    an absent GPU under torchrun's environment is one line, not torch's AttributeError."""
    import train

    for key, value in dict(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                           MASTER_PORT="29581").items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SystemExit) as e:
        train.main([f"--device={absent_gpu()}", f"--out_dir={tmp_path / 'run'}"])
    assert str(e.value).startswith(f"error: device='{absent_gpu()}': ") and "the devices here: cpu" in str(e.value)
    assert not torch.distributed.is_initialized() and not os.path.exists(tmp_path / "run")


# -----------------------------------------------------------------------------
# bad input against bugs


def test_a_bug_keeps_its_traceback_and_bad_input_is_one_line(kinds, monkeypatch):
    """A KeyError or RuntimeError from inside the evaluation is not reported as the user's mistake."""
    paths, tsv = kinds
    argv = ["--ckpt", paths["encoder"], "--file", tsv, "--no_timing", "--device", "cpu"]
    monkeypatch.setattr(evaluate, "text_encoder", lambda ckpt: None)
    for error in (KeyError("vocab"), RuntimeError("shape mismatch in a refactor"), ValueError("bad cast"),
                  data.DataError("l.tsv:3: bad line")):
        def read_tsv(path, encoder, error=error):
            raise error

        monkeypatch.setattr(evaluate.options, "read_tsv", read_tsv)
        if isinstance(error, configurator.UserError):
            assert refusal(argv) == "error: l.tsv:3: bad line"
        else:
            with pytest.raises(type(error)) as e:
                evaluate.main(argv)
            assert e.value is error


# -----------------------------------------------------------------------------
# --help: every command says what it does, how it is run, and each option with its default


def test_train_help_lists_every_setting_config_file_and_family(capsys):
    """`python train.py --help` (and -h, anywhere among the arguments): read from train.py's defaults block and
    model.py's config dataclasses, so every setting is there with its default and its comment."""
    import train
    from model import FAMILIES, family_settings

    for argv in (["--help"], ["-h"], ["config/sst2_recurrent.py", "--help"]):
        train.main(argv)  # returns: nothing is trained
        out = capsys.readouterr().out
        assert out.startswith("usage: python train.py [CONFIG_FILE ...] [--key=value ...]\n"), out[:200]
    flat = " ".join(out.split())
    assert "--key=value" in flat and "config file" in flat
    for name in os.listdir(os.path.join(os.path.dirname(train.__file__), "config")):
        assert f"config/{name}" in out
    for key, value in train.DEFAULTS.items():
        assert f"\n    {key} = {value!r}" in out, key
    for family in FAMILIES:
        section = out.split(f"settings of model={family!r}")[1].split("\nsettings of model=")[0]
        for key, value in family_settings(family).items():
            assert f"\n    {key} = {value!r}" in section, (family, key)
    # a comment's continuation lines belong to their setting; a comment after a blank line heads the next ones
    assert "refused unless this is True: then that run's files are deleted first" in flat
    assert "evaluated)\n  data\n    dataset = 'sst2'" in out
    assert "from config files" not in flat  # EncoderConfig's comment above data_fields is not causal's help


def test_commented_settings_tells_continuations_from_headings():
    source = ("import os\n\n# I/O\na = 1  # first\n# its second line\nb = 'x'\n# a heading? no: before c, a setting\n"
              "c = 2.0  # c's\n# more of c's, the last of its part\n\n# next part\nd = True\n"
              "# about e, which is not a setting\ne = 3\n")
    assert commands_help.commented_settings(source, {"a", "b", "c", "d"}) == [
        ("I/O", "a", "first its second line"), ("I/O", "b", "a heading? no: before c, a setting"),
        ("I/O", "c", "c's more of c's, the last of its part"), ("next part", "d", "")]


def test_a_bare_train_py_says_what_it_trains_first(monkeypatch, capsys):
    import train

    ran = []
    monkeypatch.setattr(train, "train", lambda cfg: ran.append(cfg) or print("training") or {"stopped": "max_epochs"})
    train.main([])
    first = capsys.readouterr().out.splitlines()[0]
    d = train.DEFAULTS
    for part in (f"dataset {d['dataset']}", f"model {d['model']}", f"{d['max_epochs']} epochs", d["out_dir"],
                 commands_help.DEFAULT_RUN_TIME, "--help"):
        assert part in first, (part, first)
    assert ran and ran[0]["dataset"] == d["dataset"]


HELPED = [  # (module, sub-command or none, the usage line's start)
    ("evaluate", [], "usage: python evaluate.py"), ("data", [], "usage: python data.py"),
    ("study", [], "usage: python study.py"), ("export", [], "usage: python export.py"),
    ("bench.speed", [], "usage: python -m bench.speed"), ("bench.gpu_check", [], "usage: python3 -m bench.gpu_check"),
    ("bench.kernel_speed", [], "usage: python -m bench.kernel_speed"),
    *[("bench.kernel_speed", [c], f"usage: python -m bench.kernel_speed {c}")
      for c in ("scan", "precision", "triton", "compile")],
    ("bench.same_training", [], "usage: python -m bench.same_training"),
    *[("bench.same_training", [c], f"usage: python -m bench.same_training {c}") for c in ("record", "compare")],
    ("bench.step_before_after", [], "usage: python -m bench.step_before_after"),
]


def command_parser(module, monkeypatch):
    """The argparse parser a command's main() builds, caught as it parses."""
    import argparse

    caught = []

    def catch(self, *args, **kwargs):
        caught.append(self)
        raise LookupError("caught")

    with monkeypatch.context() as m:
        m.setattr(argparse.ArgumentParser, "parse_args", catch)
        with pytest.raises(LookupError):
            module.main([])
    return caught[0]


@pytest.mark.parametrize("name, sub, usage", HELPED)
def test_every_command_answers_help_with_each_option(name, sub, usage, capsys, monkeypatch):
    """--help exits 0 with the command as it is run in its usage line, and every option of the (sub)command has
    a help text and appears with it; where an option has a default to show, the help shows it."""
    import argparse
    import importlib

    module = importlib.import_module(name)
    with pytest.raises(SystemExit) as e:
        module.main([*sub, "--help"])
    assert e.value.code in (0, None)
    out = capsys.readouterr().out
    assert out.startswith(usage), out[:200]
    parser = command_parser(module, monkeypatch)
    for c in sub:
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[c]
    flat = " ".join(out.split())
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue  # (SUPPRESS: a command's own plumbing, such as gpu_check's options for its section processes)
        assert action.help, f"{name} {sub}: {action.dest} has no help"
        assert all(o in out for o in action.option_strings), action.option_strings
        if isinstance(action, argparse._SubParsersAction):
            assert all(c in out for c in action.choices)
            continue
        default = action.default
        if action.option_strings and default not in (None, False, []) and "default" not in action.help:
            shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
            assert f"(default: {shown})" in flat, (name, sub, action.dest)


def test_evaluate_help_says_how_to_ask_for_metrics_and_timing(capsys):
    with pytest.raises(SystemExit):
        evaluate.main(["--help"])
    flat = " ".join(capsys.readouterr().out.split())
    for words in ("--prompt, the sample (after the model's size; nothing scored or timed: --metrics adds",
                  "--timing its speed", "--no_timing leaves out"):
        assert words in flat


# -----------------------------------------------------------------------------
# no network, no file: one line `error: ...` and a non-zero exit, never a traceback


@pytest.fixture
def no_network(monkeypatch, tmp_path):
    """No network (requests and urllib refuse every connection), an empty working folder (no data/, no
    downloads), no mirror, and tiktoken's encodings not yet loaded in this process."""
    import urllib.request

    import requests
    import tiktoken.registry

    def refuse(*args, **kwargs):
        raise requests.exceptions.ConnectionError("Max retries exceeded (no network in this test)")

    monkeypatch.setattr(requests, "get", refuse)
    monkeypatch.setattr(requests.Session, "request", refuse)
    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    monkeypatch.delenv("DATA_MIRROR", raising=False)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "no_tiktoken_files"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def one_error_line(main, argv):
    """The single line `error: ...` that main(argv) exits with (SystemExit's text: status 1)."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    text = str(e.value)
    assert text.startswith("error: ") and "\n" not in text and e.value.code not in (0, None), text
    return text


def test_offline_missing_source_file_in_the_mirror(no_network):
    import data

    os.makedirs("empty_mirror")
    text = one_error_line(data.main, ["sst2", "--mirror", "empty_mirror", "--out_dir", "d"])
    assert "mirror empty_mirror has no SST-2/train.tsv" in text


def test_offline_no_mirror_and_no_network(no_network):
    import train

    text = one_error_line(train.main, ["--max_iters=1"])  # the default dataset, prepared on first use
    assert "could not download" in text and "set the environment variable DATA_MIRROR=DIR" in text
    assert "(data.py also takes --mirror DIR)" in text  # an option of data.py's alone: train.py has none


def test_offline_no_tiktoken_files(no_network, fixture_mirror, fixture_digests):
    """The mirror has the data but no tiktoken_cache/, and tiktoken cannot download its files."""
    import data

    with fixture_digests():
        text = one_error_line(data.main, ["sst2", "--mirror", fixture_mirror, "--out_dir", "d"])
    assert "GPT-2's BPE files (tiktoken)" in text and "TIKTOKEN_CACHE_DIR" in text and "DATA_MIRROR" in text


def test_a_mirror_with_tiktoken_cache_serves_tiktoken(no_network, monkeypatch):
    """DATA_MIRROR alone is enough offline: tokenizer.get_tokenizer reads its tiktoken_cache/ when
    TIKTOKEN_CACHE_DIR is not set."""
    import tokenizer
    from conftest import TIKTOKEN_CACHE
    real = TIKTOKEN_CACHE  # the suite's, set before no_network unset it
    if not os.path.isdir(real):
        pytest.skip(f"no tiktoken cache at {real}")
    os.makedirs("mirror")
    os.symlink(os.path.abspath(real), "mirror/tiktoken_cache")
    monkeypatch.setenv("DATA_MIRROR", "mirror")
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR")
    assert tokenizer.get_tokenizer().encode(" film") == [2646]
    assert os.environ["TIKTOKEN_CACHE_DIR"] == os.path.join("mirror", "tiktoken_cache")


def test_offline_missing_llama2c_checkpoint(no_network):
    os.makedirs("empty_mirror")
    text = one_error_line(evaluate.main, ["--ckpt", "stories260K", "--prompt", "Once", "--max_new_tokens", "2"])
    assert "could not download" in text and "stories260K.bin" in text
    os.environ["DATA_MIRROR"] = "empty_mirror"  # (the fixture's monkeypatch restores the environment)
    text = one_error_line(evaluate.main, ["--ckpt", "stories260K", "--prompt", "Once", "--max_new_tokens", "2"])
    assert "mirror empty_mirror has no tinyllamas/stories260K/stories260K.bin" in text
    import train
    text = one_error_line(train.main, ["--init_from=missing/stories.bin", "--model=llama"])
    assert "init_from='missing/stories.bin'" in text and "no such file" in text


def test_offline_missing_llama_tokenizer(no_network, monkeypatch):
    """A llama2.c checkpoint at hand, its tokenizer (tok512.bin) neither in the mirror nor downloadable."""
    import shutil

    from conftest import MIRROR
    real = os.path.join(MIRROR, "tinyllamas", "stories260K", "stories260K.bin")  # the suite's mirror, before no_network
    if not os.path.isfile(real):
        pytest.skip(f"no stories260K in {MIRROR}")
    shutil.copy(real, "stories260K.bin")
    text = one_error_line(evaluate.main, ["--ckpt", "stories260K.bin", "--prompt", "Once", "--max_new_tokens", "2"])
    assert "could not download" in text and "tok512.bin" in text
    os.makedirs("empty_mirror")
    monkeypatch.setenv("DATA_MIRROR", "empty_mirror")
    text = one_error_line(evaluate.main, ["--ckpt", "stories260K.bin", "--prompt", "Once", "--max_new_tokens", "2"])
    assert "has no tinyllamas/stories260K/tok512.bin" in text


def test_offline_missing_data_folder(no_network):
    """A data_dir that is not there is prepared, which needs the sources: offline, one line."""
    import train

    text = one_error_line(train.main, ["--data_dir=nowhere/sst2", "--max_iters=1"])
    assert "could not download" in text


def test_missing_checkpoints(no_network, tiny_dataset):
    import train

    for argv in (["--ckpt", "out/run/ckpt.pt"], ["--ckpt", "out/run/model.bin"]):
        assert "out/run/" in one_error_line(evaluate.main, argv)
    text = one_error_line(train.main, ["--init_from=out/run/ckpt.pt"])
    assert "init_from='out/run/ckpt.pt'" in text and "no such file" in text
    text = one_error_line(train.main, [f"--data_dir={tiny_dataset}", "--init_from=resume", "--out_dir=out/run",
                                       "--device=cpu"])
    assert text == "error: no checkpoint at out/run/last.pt: train one first (python train.py config/...)"


# -----------------------------------------------------------------------------
# input that once ended in a traceback, or ran something else: one line each, nothing written or replaced


def test_an_out_dir_that_is_a_file_or_under_one(tmp_path, monkeypatch):
    """train.py's out_dir, data.py's --out_dir, a data_dir to prepare, evaluate.py's --plots: a file there, or above
    it, is one line (it was os.makedirs's FileExistsError or NotADirectoryError), and the file is left as it was."""
    import train

    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("mine")
    for main, argv, message in [
            (train.main, ["--out_dir=afile"], "out_dir='afile': a file, not a folder"),
            (train.main, ["--out_dir=afile/run"], "out_dir='afile/run': afile is a file, not a folder"),
            (train.main, ["--data_dir=afile/d", "--out_dir=o"], "data_dir afile/d: afile is a file, not a folder"),
            (data.main, ["sst2", "--out_dir", "afile"], "--out_dir afile: a file, not a folder"),
            (data.main, ["sst2", "--out_dir", "afile/d/e"], "--out_dir afile/d/e: afile is a file, not a folder"),
            (evaluate.main, ["--ckpt", "missing.pt", "--plots", "afile/p"], "--plots afile/p: afile is a file, not")]:
        assert message in one_error_line(main, argv)
    assert sorted(os.listdir(tmp_path)) == ["afile"] and (tmp_path / "afile").read_text() == "mine"


@pytest.mark.parametrize("setting, message", [
    ("--max_iters=-5", "max_iters=-5 must be at least 0 (0 = no limit beyond max_epochs)"),
    ("--max_epochs=0", "max_epochs=0 must be at least 1"),
    ("--max_epochs=-1", "max_epochs=-1 must be at least 1"),
    ("--eval_interval=-10", "eval_interval=-10 must be at least 0 (0 = once per epoch)"),
    ("--warmup_iters=-1", "warmup_iters=-1 must be at least 0"),
    ("--early_stop_patience=-2", "early_stop_patience=-2 must be at least 0 (0 = off)"),
    ("--eval_windows=-1", "eval_windows=-1 must be at least 0"),
    ("--grad_clip=-1", "grad_clip=-1.0 must be at least 0 (0 = off)"),
    ("--learning_rate=-1e-3", "learning_rate=-0.001 must be at least 0"),
    ("--beta2=1", "beta2=1.0 must be in [0, 1)"),
    ("--plateau_factor=1.5", "plateau_factor=1.5 must be in (0, 1)"),
])
def test_budgets_and_rates_out_of_range_are_refused_before_any_work(setting, message, tmp_path, monkeypatch):
    """max_iters=-5 once ran 0 steps, warned twice against itself and wrote Infinity into summary.json: now each
    is refused before any data is read or folder made."""
    import train

    monkeypatch.chdir(tmp_path)
    assert one_error_line(train.main, [setting, "--out_dir=o"]).startswith(f"error: {message}")
    assert os.listdir(tmp_path) == []


def test_max_iters_0_still_means_no_limit():
    import train
    from bookkeeping.checks import check_settings

    cfg = train.make_config(["--max_iters=0", "--out_dir=never_made"])
    check_settings(cfg, data.PRETRAINED)  # refuses nothing
    assert not os.path.exists("never_made")


def test_json_files_are_strict(tmp_path):
    """summary.json, meta.json, evaluate.py's --json: a float that is not finite is written null, never Python's
    Infinity or NaN, which other JSON readers refuse."""
    import json

    path = str(tmp_path / "s.json")
    data.write_json(path, {"best_val_loss": float("inf"), "x": [1.5, float("nan"), (float("-inf"),)], "n": 3})

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    assert json.loads(open(path).read(), parse_constant=refuse) == {"best_val_loss": None, "x": [1.5, None, [None]],
                                                                    "n": 3}


def test_a_run_folder_as_ckpt_reads_its_ckpt_pt(kinds, tmp_path, capsys):
    import shutil

    paths, _ = kinds
    run = tmp_path / "run"
    run.mkdir()
    text = refusal(["--ckpt", str(run), "--no_timing"])
    assert text == f"error: --ckpt {run} is a folder with no ckpt.pt (a run's best checkpoint): give a checkpoint file"
    shutil.copy(paths["gpt"], run / "last.pt")  # an interrupted run's
    assert f"it holds {run / 'last.pt'}, the latest state of a run" in refusal(["--ckpt", str(run), "--no_timing"])
    shutil.copy(paths["gpt"], run / "ckpt.pt")
    capsys.readouterr()
    text = refusal(["--ckpt", str(run), "--text", "hello"])  # loaded, then refused for what it is
    assert text.startswith(f"error: {run / 'ckpt.pt'} is a language model"), text
    assert f"--ckpt {run} is a folder: reading its best checkpoint, {run / 'ckpt.pt'}" in capsys.readouterr().out


def test_a_reader_that_stops_early_ends_the_command_quietly():
    """`python train.py --help | head`: the reader closes the pipe; the command ends as one that SIGPIPE ended
    (status 141) and says nothing, where it printed a BrokenPipeError traceback. The pipe is closed before the
    command writes (it is still importing torch), so that the test does not depend on a race. (The commands
    whose --help is argparse's were quiet already: argparse lets an OSError of its help's write pass; each
    main runs under the same cli.help.reader_may_stop for the rest of its output.)"""
    import subprocess
    import sys

    from conftest import REPO_ROOT

    p = subprocess.Popen([sys.executable, os.path.join(REPO_ROOT, "train.py"), "--help"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 141 and err == "", err


# -----------------------------------------------------------------------------
# threads: one on a CPU unless OMP_NUM_THREADS says


def test_a_command_on_the_cpu_takes_one_thread_unless_omp_num_threads_says(tmp_path, monkeypatch):
    """torch's default (a thread per core) made evaluate.py --ckpt 2-4x slower, a sample 3-6x, on a busy 2-core
    machine: train.py and evaluate.py take one thread on a CPU before any work, unless OMP_NUM_THREADS is set."""
    import train

    had = torch.get_num_threads()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(train, "train", lambda cfg: {"stopped": "max_epochs"})
    try:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        torch.set_num_threads(2)
        refusal(["--ckpt", "missing.pt", "--device", "cpu"])  # the threads are set, then the checkpoint is missing
        assert torch.get_num_threads() == 1
        torch.set_num_threads(2)
        train.main(["--device=cpu"])
        assert torch.get_num_threads() == 1 and devices.threads_note() == "1 thread, OMP_NUM_THREADS=N sets more"
        monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's number stays
        torch.set_num_threads(2)
        train.main(["--device=cpu"])
        refusal(["--ckpt", "missing.pt", "--device", "cpu"])
        assert torch.get_num_threads() == 2 and devices.threads_note() == "2 threads, from OMP_NUM_THREADS"
    finally:
        torch.set_num_threads(had)
