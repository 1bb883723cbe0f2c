"""
Shared test setup.

The repository root is put on sys.path so tests import model, data, configurator and train exactly as
train.py does. The data come from DATA_MIRROR, and tiktoken's files from TIKTOKEN_CACHE_DIR, else from the
mirror's tiktoken_cache/ (data_locations): a clone anywhere needs DATA_MIRROR alone. Where DATA_MIRROR is not
set, the shared data folder beside the repository (X/main and X/shared/data, this project's layout) stands in
for it. Both are set here at import time, before anything loads tiktoken. Tests that need them skip cleanly
when they are absent.

Fixtures:
    real_mirror      the real SST-2 mirror folder (skips if absent)
    fixture_mirror   a tiny fake SST-2 mirror (60 train / 20 dev lines) written to a temporary folder
    fixture_digests  a context manager that points sources.SOURCES at the fake files' sha256
    tiny_dataset     the fake mirror prepared by data.prepare("sst2") ('standard': 64 / 8 / 8 examples)
    tiny_cfg         a factory for a complete train.py config dict with a tiny model on tiny_dataset
    char_mirror      a mirror with a small fake tinyshakespeare (about 6,000 characters)
    char_digest      points sources.SOURCES at the fake corpus's sha256 for one test
    stop_after       stop_after(k): the next train.train() stops as at a Ctrl-C, after k steps (to resume it)
    runs_in_process  a study's train.py and evaluate.py runs in this process, not in subprocesses
"""

import contextlib
import hashlib
import os
import random
import signal
import sys

import pytest

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(TESTS_DIR)
SHARED_DATA = os.path.join(os.path.dirname(REPO_ROOT), "shared", "data")

# One thread for numpy's BLAS and torch, here and in the subprocesses the tests start, read before numpy is first
# imported: the models and arrays are tiny, and with the suite in two processes on two cores, a second thread
# each only waits (a small float matmul took 12 ms with two BLAS threads, 0.5 ms with one)
os.environ.setdefault("OMP_NUM_THREADS", "1")


def data_locations(environ, shared_data=SHARED_DATA):
    """(DATA_MIRROR, TIKTOKEN_CACHE_DIR) for the suite, as tokenizer.get_tokenizer finds them: each as set in
    `environ`; else the mirror is the shared folder beside the repository, and tiktoken's cache the mirror's
    tiktoken_cache/ (a mirror set explicitly is never passed over for ../shared's cache)."""
    mirror = environ.get("DATA_MIRROR") or shared_data
    return mirror, environ.get("TIKTOKEN_CACHE_DIR") or os.path.join(mirror, "tiktoken_cache")


MIRROR, TIKTOKEN_CACHE = data_locations(os.environ)  # for tests that unset them (no network) and need the real files
os.environ["DATA_MIRROR"], os.environ["TIKTOKEN_CACHE_DIR"] = MIRROR, TIKTOKEN_CACHE
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

import torch  # noqa: E402

# Without CUDA, kernels.py's Triton kernels run in Triton's interpreter (tests/test_triton_kernels.py). Triton
# reads TRITON_INTERPRET once, when it is first imported, and anything may import it (torch.compile does), so
# the variable is set here, before the imports below.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import data  # noqa: E402
from corpora import sources  # noqa: E402

# The models here are tiny (width <= 64): one thread is faster than several fighting over the cores,
# and it keeps the suite polite on a shared machine.
torch.set_num_threads(1)


def need_tokenizer():
    """Skip unless the offline GPT-2 BPE files are present (the suite never touches the network)."""
    cache = os.environ["TIKTOKEN_CACHE_DIR"]
    if not os.path.isdir(cache) or len(os.listdir(cache)) < 2:
        pytest.skip(f"no tiktoken cache at {cache} (set DATA_MIRROR to a copy of shared/data, or TIKTOKEN_CACHE_DIR)")


def fake_downloads(monkeypatch, payload):
    """Replace sources.download by one that writes `payload` and records each URL asked for; returns the
    list of URLs (so a test can check what was downloaded, and that it was downloaded once)."""
    calls = []

    def download(url, dest, timeout=60):
        calls.append(url)
        with open(dest, "wb") as f:
            f.write(payload)

    monkeypatch.setattr(sources, "download", download)
    return calls

@pytest.fixture(scope="session")
def real_mirror():
    mirror = os.environ["DATA_MIRROR"]
    if not all(os.path.isfile(os.path.join(mirror, rel)) for rel in sources.SOURCES["sst2"]["files"]):
        pytest.skip(f"no SST-2 mirror at {mirror} (set DATA_MIRROR to a copy of shared/data)")
    need_tokenizer()
    return mirror


# -----------------------------------------------------------------------------
# a tiny fake SST-2 in GLUE's format: "sentence\tlabel" header, one example per line

_POS = ["wonderful", "moving", "funny", "sharp", "warm", "brilliant", "charming", "smart"]
_NEG = ["dull", "tedious", "flat", "lifeless", "boring", "clumsy", "stale", "weak"]
_FILL = ["the", "film", "is", "a", "story", "with", "and", "cast", "plot", "acting", "its", "director"]


def _fake_tsv(n, rng):
    lines = ["sentence\tlabel"]
    for _ in range(n):
        label = rng.randint(0, 1)
        words = [rng.choice(_FILL) for _ in range(rng.randint(1, 12))]  # varied lengths, for bucketing
        words.insert(rng.randint(0, len(words)), rng.choice(_POS if label else _NEG))
        lines.append(" ".join(words) + f" \t{label}")  # SST-2 lines end in a space before the tab
    return ("\n".join(lines) + "\n").encode()


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.fixture(scope="session")
def fixture_mirror(tmp_path_factory):
    """A mirror folder holding SST-2/train.tsv (60 examples) and SST-2/dev.tsv (20 examples)."""
    root = tmp_path_factory.mktemp("fake_mirror")
    os.makedirs(root / "SST-2")
    rng = random.Random(0)
    (root / "SST-2" / "train.tsv").write_bytes(_fake_tsv(60, rng))
    (root / "SST-2" / "dev.tsv").write_bytes(_fake_tsv(20, rng))
    return str(root)


@pytest.fixture(scope="session")
def fixture_digests(fixture_mirror):
    """`with fixture_digests():` makes sources.fetch accept the fake files (it checks sha256 against
    sources.SOURCES); the real digests are restored on exit."""

    @contextlib.contextmanager
    def patched():
        with pytest.MonkeyPatch.context() as mp:
            for rel in sources.SOURCES["sst2"]["files"]:
                mp.setitem(sources.SOURCES["sst2"]["files"], rel, sha256_file(os.path.join(fixture_mirror, rel)))
            yield

    return patched


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory, fixture_mirror, fixture_digests):
    """The fake mirror prepared with the 'standard' protocol: 80 pooled examples -> 64 / 8 / 8."""
    need_tokenizer()
    out = str(tmp_path_factory.mktemp("tiny_sst2"))
    with fixture_digests():
        data.prepare("sst2", protocol="standard", mirror=fixture_mirror, out_dir=out, verbose=False)
    return out


@pytest.fixture
def tiny_cfg(request, tmp_path):
    """A factory: tiny_cfg(**overrides) -> a full train.py config (DEFAULTS + a tiny model on the tiny
    dataset, writing into this test's tmp_path). The tiny dataset is only built (and the tokenizer only
    needed) when the overrides do not name another data_dir."""
    import train

    def make(**overrides):
        cfg = train.make_config([])  # DEFAULTS and the default family's (the encoder's) settings
        data_dir = overrides.get("data_dir") or request.getfixturevalue("tiny_dataset")
        cfg.update(data_dir=data_dir, out_dir=str(tmp_path / "out"), device="cpu", dtype="float32",
                   n_layer=1, n_loops=2, n_embd=16, n_head=2, ffn_hidden=32, dropout=0.0,
                   batch_size=8, max_epochs=2, log_interval=2, eval_interval=0, scheduler="constant",
                   learning_rate=3e-3, warmup_iters=0, compile=False, seed=1337)
        unknown = set(overrides) - set(cfg)
        assert not unknown, f"tiny_cfg got unknown keys {unknown}"
        cfg.update(overrides)
        return cfg

    return make


# -----------------------------------------------------------------------------
# a tiny fake tinyshakespeare


@pytest.fixture(scope="session")
def char_mirror(tmp_path_factory):
    """A mirror with a small fake tinyshakespeare (about 6,000 characters of play-like lines)."""
    root = tmp_path_factory.mktemp("char_mirror")
    os.makedirs(root / "tinyshakespeare")
    rng = random.Random(0)
    names, words = ["ROMEO", "JULIET", "NURSE"], ["thou", "art", "my", "love", "and", "the", "night", "is", "fair"]
    lines = []
    while sum(len(x) for x in lines) < 6000:
        lines.append(f"{rng.choice(names)}:\n" + " ".join(rng.choice(words) for _ in range(rng.randint(3, 9))) + ".\n\n")
    (root / "tinyshakespeare" / "input.txt").write_text("".join(lines))
    return str(root)


@pytest.fixture
def char_digest(char_mirror, monkeypatch):
    rel = "tinyshakespeare/input.txt"
    with open(os.path.join(char_mirror, rel), "rb") as f:
        monkeypatch.setitem(sources.SOURCES["shakespeare_char"]["files"], rel, sources.sha256(f.read()))


# -----------------------------------------------------------------------------
# stopping a run part-way, as a Ctrl-C does, so that a test can resume it (a resume must be the same run:
# the same settings, max_iters included, so a shorter run cannot stand in for a stopped one)


@pytest.fixture
def stop_after(monkeypatch):
    """stop_after(k): during the k-th optimizer step from now, train.py's Ctrl-C handler is called; the
    loop finishes that step, saves last.pt and returns stopped 'interrupted' (iteration k)."""
    import train

    def arm(k):
        real, taken = train.train_step, []

        def step(*args, **kwargs):
            taken.append(1)
            if len(taken) == k:
                signal.getsignal(signal.SIGINT)(signal.SIGINT, None)  # the handler train() installed
            return real(*args, **kwargs)

        monkeypatch.setattr(train, "train_step", step)

    return arm


# -----------------------------------------------------------------------------
# a study's runs trained in this process


class RunInProcess:
    """study.start_run's subprocess, stood in for: `python train.py ARGV` as train.main(ARGV) in this process,
    run to its end when made, its output into the run's train.out, its exit status 0 or 1 (as `error: ...`
    exits). A run costs its training alone, not a fresh interpreter's import of torch (about 6 s of a core
    here, seconds of which are torch.optim's import of dynamo)."""

    def __init__(self, argv, log, cores, threads):
        import train

        pinned, had_threads = os.sched_getaffinity(0), torch.get_num_threads()
        if cores:  # the subprocess's cores for the run's length (its log records them)
            os.sched_setaffinity(0, cores)
        # its threads, but no more than the suite's one: two threads on tiny models spend their time waiting for
        # each other, 10x slower on a 2-core machine that runs the other test process
        torch.set_num_threads(min(threads, had_threads))
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            try:
                train.main(argv)
                self.returncode = 0
            except SystemExit as e:
                print(e.code, flush=True)
                self.returncode = 0 if e.code in (None, 0) else 1
            finally:
                os.sched_setaffinity(0, pinned)
                torch.set_num_threads(had_threads)

    def poll(self):
        return self.returncode

    def wait(self, timeout=None):
        return self.returncode

    def terminate(self):
        pass


def evaluate_in_process(argv, json_path):
    """study.evaluate_script in this process: evaluate.main(ARGV --json JSON_PATH), the JSON or None if it failed."""
    import io
    import json

    import evaluate

    try:
        with contextlib.redirect_stdout(io.StringIO()):
            evaluate.main([*argv, "--json", json_path])
    except SystemExit as e:
        if e.code not in (None, 0):
            print(f"  evaluate.py {' '.join(argv[:3])} ... failed: {e.code}")
            return None
    with open(json_path) as f:
        out = json.load(f)
    return out if isinstance(out, list) else [out]


@pytest.fixture
def runs_in_process(monkeypatch):
    """A study's train.py and evaluate.py runs in this process instead of subprocesses (RunInProcess,
    evaluate_in_process): the same arguments, records and reports, seconds sooner. The subprocesses
    themselves (pinning, SIGTERM, resume, another process's lock) are tested in tests/test_study.py."""
    import study

    monkeypatch.setattr(study, "start_run", RunInProcess)
    monkeypatch.setattr(study, "evaluate_script", evaluate_in_process)
