"""
evaluate.py's options, apart from what it computes with them: the options themselves, each with its help and
default, and each option that needs more than argparse's type and choices, checked, resolved or read. Read in
order: the options (parser, what --help prints); the config files that set them (config_defaults); every option
checked as soon as it is read, before any data is prepared or model loaded (check_args; a run's folder given as
--ckpt read as its ckpt.pt: run_checkpoint), then against each checkpoint as it loads (check_fits); the decode
step --decode auto picks (decode_mode); then what the options name: a seq2seq model's words (seq2seq_words,
--text and --words), a labelled file (read_tsv, into a ListSplit) or a word list (read_word_list) for --file, an
--untrained run's architecture (untrained), a Llama's tokenizer (llama_tokenizer_for, --tokenizer) and the
--zero_shot prompts (zero_shot_inputs).
"""

import argparse
import importlib.util
import os

import numpy as np
import torch

import configurator
import data
from cli.help import HelpFormatter
from corpora import piglatin
from corpora.llama2c import load_llama_tokenizer
from evaluation.ranges import AT_LEAST_0, AT_LEAST_1, Ranged, check_new_file, check_ranges
from model import DECODE_MODES, LlamaConfig, build_model, raw_model

# -----------------------------------------------------------------------------
# the options, each with its help and default (what `python evaluate.py --help` prints)


def parser():
    p = argparse.ArgumentParser(
        prog="python evaluate.py", usage="%(prog)s [CONFIG_FILE ...] --ckpt CKPT [CKPT ...] [options]",
        formatter_class=HelpFormatter,
        description="Evaluate checkpoints, classify text, sample from a language model or prompt one as a classifier. "
        "What each asks for: --ckpt alone, a checkpoint's whole report (its split's metrics, size, FLOPs, latency and "
        "throughput; --no_timing leaves out the timing); --text, the label or translation alone; --file, the metrics "
        "on the file (--timing adds the timing); --prompt, the sample (after the model's size; nothing scored "
        "or timed: --metrics adds a language model's validation scores, --timing its speed). Config files "
        "(config/llama_generate.py, config/llama_*_prompt.py) may come first to set these. (Studies: study.py.)")
    p.add_argument("--ckpt", nargs="+", help="one or more ckpt.pt files (side by side); a llama2.c .bin/.pt or "
                   "a pretrained name (stories260K)")
    p.add_argument("--zero_shot", default=None, help="a labelled dataset (sst5, cfimdb): classify its --split "
                   "with a Llama language model by prompting, no training")
    p.add_argument("--split", default="test", choices=["train", "val", "test", "unseen"],
                   help="the split to score (unseen: Pig Latin's words from outside the novel; a seq2seq model's "
                   "test is scored with its unseen words beside it)")
    p.add_argument("--json", help="write the figures to this new file (classifiers: with per-example predictions; "
                   "a file already there is refused, never replaced)")
    p.add_argument("--text", action="append", help="classify this sentence and print the label probabilities "
                   "(seq2seq: translate its words, upper case read as lower case, as --words); given again, each "
                   "sentence in turn")
    p.add_argument("--truncate", action="store_true", help="with --text: cut an over-long sentence instead of refusing")
    p.add_argument("--file", help="evaluate on a file: a classifier's labelled sentences (sentence<TAB>label per line, "
                   "header allowed), a seq2seq model's words (one a line, optionally <TAB>its expected translation; "
                   "else the rules' answer)")
    p.add_argument("--prompt", default=None, help="language models: the text a sample starts from (default: a "
                   "newline for a character model, BOS alone for a Llama)")
    p.add_argument("--max_new_tokens", type=AT_LEAST_1, default=300, help="language models: tokens to generate")
    p.add_argument("--temperature", type=Ranged(float, lambda v: v >= 0, "a number >= 0 (0 is greedy)"), default=0.8,
                   help="0 = greedy (deterministic)")
    p.add_argument("--top_k", type=Ranged(int, lambda v: v >= 1, "an integer >= 1 (sample from the k most likely "
                   "tokens)"), default=None, help="sample from the k most likely tokens only")
    p.add_argument("--top_p", type=Ranged(float, lambda v: 0 < v <= 1, "a number with 0 < p <= 1 (the probability mass "
                   "kept)"), default=None, help="Llama: sample from the nucleus of mass p only")
    p.add_argument("--epsilon", type=Ranged(float, lambda v: 0 <= v < 1, "a number with 0 <= epsilon < 1 (tokens below "
                   "it are dropped)"), default=None, help="Llama: drop tokens of probability below epsilon")
    p.add_argument("--tokenizer", default=None, help="Llama: 'tok512', 'llama2' or a tokenizer.bin (default: by "
                   "vocabulary size, 512 or 32,000)")
    p.add_argument("--gen_batch", type=AT_LEAST_1, default=1, help="Llama generation: also time this many prompts at "
                   "once")
    p.add_argument("--no_cache", action="store_true", help="language models' generation: also time it without the "
                   "KV cache (every token runs the whole context again)")
    p.add_argument("--decode", default="auto", choices=["auto", *DECODE_MODES],
                   help="Llama generation: the one-token step with the KV cache run eagerly, or compiled once "
                   "(torch.compile: C++ on a CPU, CUDA graphs on a GPU; its compile time is reported apart); "
                   "auto: compiled when the command generates enough tokens to repay compiling (COMPILE_REPAYS), "
                   "and the compiled step can be built; else eager")
    p.add_argument("--seed", type=Ranged(int, lambda v: True, "an integer"), default=1337, help="seed of the sample")
    p.add_argument("--device", default="auto", help="'auto' (cuda, then mps, then cpu), 'cpu', 'cuda', 'cuda:N' or "
                   "'mps'")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                   help="the precision of the evaluation (bfloat16, float16: autocast)")
    p.add_argument("--batch_size", type=AT_LEAST_1, default=256, help="batch size for metrics and throughput")
    p.add_argument("--repeats", type=AT_LEAST_1, default=3, help="timed repeats (the median is reported)")
    p.add_argument("--no_timing", action="store_true", help="a checkpoint's whole report (--ckpt alone): skip its "
                   "latency and throughput")
    p.add_argument("--timing", action="store_true", help="a sample (--prompt) or a --file: time the model too "
                   "(latency, throughput, tokens/s), which they skip by default; --no_cache, --gen_batch N and "
                   "--compile imply it")
    p.add_argument("--metrics", action="store_true", help="a language model's sample (--prompt): also score its "
                   "validation windows (loss, perplexity, accuracy), which a sample skips by default")
    p.add_argument("--interleave", action="store_true", help="classifiers: time all the --ckpt models in turns, "
                   "round after round, so that a slow spell of the machine falls on all of them alike")
    p.add_argument("--untrained", nargs="+", default=[], metavar="CONFIG", help="with --interleave: also time "
                   "these runs' architectures (a run's full settings, as study.py records them in config.py) with "
                   "fresh weights, for runs whose checkpoint is gone: a forward's time does not depend on the weights")
    p.add_argument("--loops", type=Ranged(int, lambda v: v >= 1, "one or more integers >= 1 (a model applies its "
                   "layers at least once)"), nargs="+", default=None, help="classifiers: also score a looped encoder "
                   "with each of these numbers of loops (test-time depth, no retraining), e.g. --loops 1 2 3 4")
    p.add_argument("--max_errors", type=AT_LEAST_0, default=50,
                   help="seq2seq: wrong translations to print (all go to --json)")
    p.add_argument("--plots", default=None, help="seq2seq: write the attention maps and the embedding projection "
                   "(PNG) to this new or empty folder")
    p.add_argument("--compile", action="store_true", help="classifiers: time latency and throughput compiled (CUDA "
                   "graphs on a GPU)")
    p.add_argument("--words", default="brown,conditioning,is", help="seq2seq --plots: the words whose attention "
                   "maps are drawn (comma-separated; upper case read as lower case, as --text)")
    return p


# -----------------------------------------------------------------------------
# the options checked, and --decode auto resolved


def config_defaults(p, paths):
    """{option: value} from config files (config/llama_*_prompt.py ...): their top-level assignments,
    each the name of one of evaluate.py's options."""
    options = {a.dest: a for a in p._actions if a.dest != "help"}
    out = {}
    for key, value, source in configurator.read_settings(paths):
        if key not in options:
            near = configurator.closest(key, list(options))
            raise configurator.ConfigError(f"unknown option {key!r} in {source}{near} (a config file for evaluate.py "
                                           f"sets its options)")
        out[key] = [value] if key in ("ckpt", "text") and isinstance(value, str) else value
    return out


def check_args(p, args):
    """Every option's value, checked as soon as the command line and config files are read, before any data
    is prepared or model loaded: a ConfigError (a DataError for a --file that is not there) that names the
    option and the values it takes (check_ranges, then the rules of a few options). What depends on the
    checkpoint is check_fits's."""
    check_ranges(p, args)
    if args.text is not None and not all(str(t).strip() for t in args.text):
        raise configurator.ConfigError("--text is empty: give a sentence to classify (or words to translate)")
    seq2seq_words(args.words, "--words", sep=",")
    if args.untrained and not args.interleave:
        raise configurator.ConfigError("--untrained times architectures beside checkpoints: give --interleave too")
    for path in args.untrained:
        if not os.path.isfile(path):
            raise configurator.ConfigError(f"--untrained {path}: no such file")
    if not args.ckpt and not args.untrained:
        raise configurator.ConfigError("give --ckpt (or a config file that sets ckpt)")
    args.ckpt = [run_checkpoint(path) for path in args.ckpt or []]
    if args.zero_shot is not None:
        if args.split == "unseen":
            raise configurator.ConfigError("--split unseen is Pig Latin's; --zero_shot scores train, val or test")
        labelled = sorted(k for k, v in data.DATASETS.items() if v.task == "classification")
        if args.zero_shot not in labelled:
            raise configurator.ConfigError(f"--zero_shot {args.zero_shot!r}: expected a labelled dataset, one of "
                                           f"{labelled}")
    if args.file is not None and not os.path.isfile(args.file):
        raise data.DataError(f"--file {args.file}: no such file")
    if args.json is not None:
        check_new_file(args.json, "--json")
    if args.plots is not None:
        if configurator.not_a_folder(args.plots):  # it, or a path above it, is a file
            raise configurator.ConfigError(f"--plots {args.plots}: {configurator.not_a_folder(args.plots)}")
        if os.path.isdir(args.plots) and os.listdir(args.plots):  # its pictures would replace what is there
            raise configurator.ConfigError(f"--plots {args.plots} is not empty: give a new or empty folder")
        if importlib.util.find_spec("matplotlib") is None:
            raise configurator.ConfigError("--plots needs matplotlib (pip install matplotlib)")


def run_checkpoint(path):
    """A --ckpt that is a run's folder stands for the run's best checkpoint, its ckpt.pt (said so); a folder without
    one is an error that says what it holds instead (an interrupted run's last.pt), not 'no checkpoint'."""
    if not os.path.isdir(path):
        return path
    best, last = os.path.join(path, "ckpt.pt"), os.path.join(path, "last.pt")
    if os.path.isfile(best):
        print(f"--ckpt {path} is a folder: reading its best checkpoint, {best}")
        return best
    held = f"; it holds {last}, the latest state of a run, which --ckpt {last} reads" if os.path.isfile(last) else ""
    raise configurator.ConfigError(f"--ckpt {path} is a folder with no ckpt.pt (a run's best checkpoint){held}: give "
                                   f"a checkpoint file")


TASK_NAMES = {"classification": "classifier", "lm": "language model", "generate": "language model (llama2.c's)",
              "seq2seq": "seq2seq model", "mlm": "masked-language model"}


def check_fits(args, model, ckpt, path):
    """The options that suit some checkpoints only, against the one just loaded (before any evaluation):
    a ConfigError that says what the option needs and what this checkpoint is."""
    task, cfg = ckpt["data"]["task"], raw_model(model).cfg
    this = f"{path} is a {TASK_NAMES[task]}"
    if args.text is not None:
        if task in ("lm", "generate"):
            raise configurator.ConfigError(f"{this}: give it a --prompt to continue, not --text")
        if task not in ("classification", "seq2seq"):
            raise configurator.ConfigError(f"--text takes a classifier or a seq2seq model; {this}")
        return  # --text ignores the rest
    if args.zero_shot is not None:
        if not isinstance(cfg, LlamaConfig) or cfg.n_classes:
            raise configurator.ConfigError(f"{path} is not a Llama language model; --zero_shot scores one (a "
                                           f"llama2.c file, or a Llama pretrained here)")
        return  # the others concern a checkpoint's own data
    if args.file is not None and task not in ("classification", "seq2seq"):
        raise configurator.ConfigError(f"--file takes labelled sentences for a classifier or words for a seq2seq "
                                       f"model; {this}")
    if args.split == "unseen" and task != "seq2seq":
        raise configurator.ConfigError(f"--split unseen is Pig Latin's words from outside the novel; {this}")
    if args.loops is not None and (task != "classification" or not hasattr(cfg, "n_loops")):
        kind = f"a {type(cfg).__name__.removesuffix('Config')} {TASK_NAMES[task]}"
        raise configurator.ConfigError(f"--loops re-scores a looped encoder (a classifier whose layer stack is "
                                       f"applied n_loops times) at other numbers of loops; {path} is {kind}, "
                                       f"with no loops to vary")
    if args.plots is not None and task != "seq2seq":
        raise configurator.ConfigError(f"--plots draws a seq2seq model's attention and embeddings; {this}")
    if args.prompt is not None and task not in ("lm", "generate"):
        raise configurator.ConfigError(f"--prompt starts a language model's sample; {this}")


# A compiled decode step took 71 s to build on this project's 2-core CPU VM from an empty inductor cache (21 s from
# a warm one) and saved 2 to 4 ms a token at batch 1 (stories260K, one thread, float32: 202-323 -> about 1,130
# tokens/s), so it repays itself past about 17,600 generated tokens from a cold cache (9,400 warm): `--decode auto`
# compiles from this many on. (Measured with torch 2.13.0+cpu on a machine shared with other jobs; see docs/llama.md.)
COMPILE_REPAYS = 20_000


def decode_mode(args, tokens):
    """The decode step a command uses: --decode, or for 'auto' the compiled step when it generates at least
    COMPILE_REPAYS tokens in all, the eager one below that (said on one line either way)."""
    if args.decode != "auto":
        return args.decode
    mode = "compiled" if tokens >= COMPILE_REPAYS else "eager"
    print(f"decode step: {mode} (--decode auto: {tokens:,} tokens to generate, "
          f"{'enough' if mode == 'compiled' else 'too few'} to repay compiling it, which pays from "
          f"{COMPILE_REPAYS:,}; --decode eager|compiled chooses)")
    return mode


# -----------------------------------------------------------------------------
# what the options name: words, files, an architecture, a tokenizer, the zero-shot prompts


def seq2seq_words(text, option, sep=None):
    """The words of --text (split at white space) or --words (at commas) for a seq2seq model, by one rule
    for both: upper case is read as lower case, as the training words were (piglatin.novel_words lower-cases
    the novel), and each word must be one the study translates (letters a-z, single inner hyphens:
    piglatin.pig_latin's domain). Empty input, an empty word or any other word is a ConfigError naming it."""
    words = [w.strip() for w in str(text).lower().split(sep)]
    if not any(words):
        raise configurator.ConfigError(f"{option} is empty: give {'comma-separated words' if sep else 'words'} "
                                       f"to translate")
    for w in words:
        if not piglatin._PIG_WORD.fullmatch(w):
            what = "an empty word" if not w else f"{w!r}, which is not a word the model translates"
            raise configurator.ConfigError(f"{option} {text!r} has {what} (letters a-z with single inner hyphens; "
                                           f"upper case is read as lower case)")
    return words


class ListSplit:
    """An in-memory labelled split with the interface of data.ClassificationSplit."""

    def __init__(self, items):
        self.items = items
        self.lengths = np.array([len(ids) for ids, _ in items])
        self.labels = np.array([lab for _, lab in items], dtype=np.int64)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def read_tsv(path, encoder):
    """A labelled file: one `sentence<TAB>label` per line, an optional header line. Sentences are
    cleaned, tokenized and truncated exactly as in training. A file that cannot be read, is not UTF-8,
    or has a line of another form (an empty sentence included) is a DataError naming the file and line."""
    items, truncated = [], 0
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, start=1):
                line = line.rstrip("\n")
                if not line.strip():
                    continue
                text, sep, label = line.rpartition("\t")
                if not sep or not label.strip().lstrip("-").isdigit():
                    if n == 1:
                        continue  # a header
                    raise data.DataError(f"{path}:{n}: expected `sentence<TAB>integer label`, got {line[:80]!r}")
                try:
                    ids = encoder(text, truncate=True)
                except configurator.ConfigError as e:  # the encoder's word on bad text (an empty sentence)
                    raise data.DataError(f"{path}:{n}: {e}") from None
                truncated += encoder.was_truncated
                items.append((ids, int(label)))
    except UnicodeDecodeError as e:
        raise data.DataError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise data.DataError(f"{path}: cannot be read ({e.strerror or e})") from None
    if not items:
        raise data.DataError(f"{path} holds no labelled lines")
    return ListSplit(items), truncated


def read_word_list(path, codec, block_size):
    """--file for a seq2seq model: one word per line, optionally followed by a tab and its expected
    translation (else the rules' answer, piglatin.pig_latin). Words follow --text's rule (upper case read as
    lower case; letters a-z with single inner hyphens); a translation must be in the model's characters,
    and word and translation must fit its context as the training words did (word, [EOS], [SOS] and
    translation in block_size). Blank lines are skipped. Anything else is a DataError naming the line."""
    pairs = []
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                word, sep, truth = line.rstrip("\n").partition("\t")
                word = word.strip().lower()
                if not piglatin._PIG_WORD.fullmatch(word):
                    raise data.DataError(f"{path}:{n}: {word!r} is not a word the model translates (letters a-z "
                                         f"with single inner hyphens, then optionally a tab and its translation)")
                truth = truth.strip() if sep else piglatin.pig_latin(word)
                try:
                    ids = codec.encode(word), codec.encode(truth)
                except ValueError as e:
                    raise data.DataError(f"{path}:{n}: the translation {truth!r}: {e}") from None
                if not truth or len(word) + len(truth) + 2 > block_size:
                    raise data.DataError(f"{path}:{n}: {word!r} -> {truth!r} " + (
                        "has an empty translation" if not truth else f"does not fit the model's context: word, "
                        f"translation and 2 markers must be at most {block_size} characters"))
                pairs.append(ids)
    except UnicodeDecodeError as e:
        raise data.DataError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise data.DataError(f"{path}: cannot be read ({e.strerror or e})") from None
    if not pairs:
        raise data.DataError(f"{path} holds no words")
    return piglatin.PairList(pairs, codec.itos)


def untrained(path, split, device):
    """(a model with fresh weights, its run's split `split`) from a run's full settings (the config.py that
    study.py records beside a run: every key train.py resolved), for timing an architecture whose trained
    checkpoint is gone. Raises ConfigError if the file does not hold a classifier's settings."""
    cfg = {key: value for key, value, _ in configurator.read_settings([path])}
    missing = [k for k in ("model", "dataset") if k not in cfg]
    if missing:
        raise configurator.ConfigError(f"--untrained {path}: not a run's full settings (no {', '.join(missing)}); "
                                       f"give the config.py of a run record")
    dataset = data.load_dataset(cfg)
    if dataset.task != "classification":
        raise configurator.ConfigError(f"--untrained {path}: a {dataset.task} run; --interleave times classifiers")
    torch.manual_seed(0)
    model = build_model(cfg["model"], cfg, dataset.facts()).to(device).eval()
    return model, dataset.splits[split]


TOKENIZER_OF_VOCAB = {512: "tok512", 32000: "llama2"}  # llama2.c's files do not name their tokenizer


def llama_tokenizer_for(model, path, name=None):
    """The Llama tokenizer that goes with a model: the one its training data named, `name`, or by
    vocabulary size (llama2.c's files do not name theirs), checked against the model's vocabulary."""
    name = name or TOKENIZER_OF_VOCAB.get(model.cfg.vocab_size)
    if name is None:
        raise configurator.ConfigError(f"{path} has a vocabulary of {model.cfg.vocab_size}: name its tokenizer "
                                       f"with --tokenizer")
    tok = load_llama_tokenizer(name)
    if tok.vocab_size != model.cfg.vocab_size:
        raise configurator.ConfigError(f"tokenizer {name} has {tok.vocab_size} pieces, the model "
                                       f"{model.cfg.vocab_size}: give --tokenizer the model's own")
    return name, tok


ZERO_SHOT_TEMPLATE = "{text} Is this movie {labels}? This movie is"  # the course's prompt; labels: "a, b, or c"


def label_list(names):
    """['bad', 'good'] -> 'bad or good'; ['awful', 'bad', 'average'] -> 'awful, bad, or average'."""
    return ", ".join(names[:-1]) + ", or " + names[-1] if len(names) > 2 else " or ".join(names)


def zero_shot_inputs(tok, split, names, block_size):
    """The prompts of a labelled split (prepared with the Llama tokenizer `tok`) as token ids: BOS, the
    text, then the question of ZERO_SHOT_TEMPLATE; each label word's ids (' good', its dummy-prefix
    space included); the labels; and how many texts were cut so that prompt and label fit block_size."""
    before, after = ZERO_SHOT_TEMPLATE.split("{text}")
    head = tok.encode(before.strip(), bos=True)  # [BOS] alone when the template starts with the text
    tail = tok.encode(after.format(labels=label_list(names)).strip(), bos=False)
    label_ids = [tok.encode(n, bos=False) for n in names]
    room = block_size - len(head) - len(tail) - max(map(len, label_ids))
    if room < 1:
        raise configurator.ConfigError(f"a context of {block_size} tokens cannot hold the zero-shot prompt's "
                                       f"{len(head) + len(tail)} tokens, a label and some text")
    prompts, y_true, cut = [], [], 0
    for i in range(len(split)):
        ids, y = split[i]
        text = [int(t) for t in ids[1:]]  # the prepared ids start with BOS
        cut += len(text) > room
        prompts.append(head + text[:room] + tail)
        y_true.append(int(y))
    return prompts, label_ids, y_true, cut

