"""
The reading paths, in docs/reading.md, are the whole truth.

The main command's path is measured, not listed by hand: a real run of `python train.py
config/sst2_recurrent.py` (main(), 4 steps and 2 evaluations on a tiny dataset, one process) under
sys.setprofile. Every project function it executes is on the path or taken by its name (TAKE_BY_NAME, each
with its reason: FLOPs, settings checks, run bookkeeping, the settings reader, data preparation, the device);
docs/reading.md lists exactly the path's functions, and the README and docs/reading.md state its length (the
lines of those functions in train.py, model.py, data.py and evaluate.py) with the settings block beside it.
Its lines stay within 100 columns (MAX_LONG_LINES may run past), its functions within MAX_FUNCTION lines
but train() itself, the loop read in one piece.

The other systems' paths are listed in docs/reading.md: a listed definition's calls into the core files,
model.py and train.py (a function of its file or of a module it imports, a class, a method through self),
must be listed too, unless SKIPPED says why a reader of that path need not open it; the other files' helpers
a reader may take by their names. A class listed by its name is read whole; 'Class.method' is that method
alone; a class called is covered by its name or its '__init__'. The count is the listed definitions' lines
(a class once, however many of its methods are listed too), stated beside the system's name.
"""

import ast
import os
import re
import sys

import pytest

from conftest import REPO_ROOT
from test_docs import READING, reading_paths

CORE = ("model.py", "train.py")  # the files whose every definition a path calls it must list
MAX_FUNCTION = 40  # lines of any function or method on the main command's path, train() excepted
MAIN = "The recurrent encoder"  # the main command's system in docs/reading.md

# (file, definition): why a reader of every path may leave it unopened (a class: with its methods)
SKIPPED = {
    ("train.py", "train_ddp"): "the DDP appendix: one process never enters it",
    ("train.py", "resumed"): "init_from='resume': continuing a stopped run, not its first start",
    ("train.py", "restore"): "init_from='resume': continuing a stopped run, not its first start",
    ("train.py", "AdamW"): "adamw_impl='manual', the written-out reference a test holds to torch's fused AdamW, "
                           "which the runs take",
    ("model.py", "Attention.kernel"): "kernels.py's paths (attn_impl='triton', a compiled decode step): the "
                                      "default attn_impl='sdpa' takes neither",
    ("model.py", "MambaMixer"): "Block's other mixer (cfg.mixer='mamba')",
    ("model.py", "from_pretrained"): "init_from a trained checkpoint; the paths train from scratch",
}
# and what one path's reader may leave unopened
SKIPPED_FOR = {
    "Mamba": {
        ("model.py", "Attention"): "Block's other mixer: Mamba's Blocks mix with MambaMixer",
        ("model.py", "FeedForward"): "Mamba's Blocks have none (ffn='none')",
        ("model.py", "LayerNorm"): "make_norm's other norm: Mamba's is RMSNorm",
    },
    "The bag of words": {  # a logistic regression: none of the transformers' pieces
        ("model.py", "LayerNorm"): "not in the bag of words",
    },
}


class Index:
    """A project file's definitions ({'f': node, 'C': node, 'C.m': node}), its classes' bases, and the project
    names it imports ({local name: (file, definition or None for a module)})."""

    def __init__(self, rel):
        self.rel = rel
        tree = ast.parse(open(os.path.join(REPO_ROOT, rel)).read())
        self.defs, self.bases, self.imports = {}, {}, {}
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                self.defs[node.name] = node
            if isinstance(node, ast.ClassDef):
                self.bases[node.name] = [b.id for b in node.bases if isinstance(b, ast.Name)]
                self.defs |= {f"{node.name}.{f.name}": f for f in node.body if isinstance(f, ast.FunctionDef)}
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if project_file(a.name):
                        self.imports[a.asname or a.name] = (project_file(a.name), None)
            elif isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    sub = project_file(f"{node.module}.{a.name}")
                    if sub:  # from bookkeeping import records
                        self.imports[a.asname or a.name] = (sub, None)
                    elif project_file(node.module):  # from model import build_model
                        self.imports[a.asname or a.name] = (project_file(node.module), a.name)

    def method(self, cls, name):
        """'C.name' for the class that defines it, looking through the bases in this file."""
        while cls:
            if f"{cls}.{name}" in self.defs:
                return f"{cls}.{name}"
            cls = next((b for b in self.bases.get(cls, []) if b in self.bases), None)
        return None


def project_file(module):
    """The project file of a dotted module name, or None (torch, numpy ...)."""
    rel = module.replace(".", "/") + ".py"
    return rel if os.path.isfile(os.path.join(REPO_ROOT, rel)) else None


INDEXES = {}


def index(rel):
    if rel not in INDEXES:
        INDEXES[rel] = Index(rel)
    return INDEXES[rel]


def calls(rel, name):
    """{(file, definition)} a definition calls in the project's files."""
    ix = index(rel)
    node, cls = ix.defs[name], name.split(".")[0] if "." in name or name in ix.bases else None
    out = set()
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        f = call.func
        if isinstance(f, ast.Name):
            if f.id in ix.defs:
                out.add((rel, f.id))
            elif f.id in ix.imports and ix.imports[f.id][1]:
                out.add(ix.imports[f.id])
        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            if f.value.id in ix.imports and ix.imports[f.value.id][1] is None:
                other = ix.imports[f.value.id][0]
                if f.attr in index(other).defs:
                    out.add((other, f.attr))
            elif f.value.id in ("self", "cls") and cls and ix.method(cls, f.attr):
                out.add((rel, ix.method(cls, f.attr)))
    # a name imported from another project file may be a re-export: resolve it where it is defined
    return {(r, n) for r, n in out if n in index(r).defs}


def covered(listed, rel, name):
    cls = name.split(".")[0]
    return (rel, name) in listed or (rel, cls) in listed and "." in name or (rel, f"{name}.__init__") in listed


def path_definitions():
    """{system: {(file, definition)}} from the README's reading paths."""
    systems = {}
    for system, rel, names in reading_paths():
        systems.setdefault(system, set()).update((rel, n) for n in names)
    return systems


def lines_of(listed):
    """The lines of the listed definitions: a class once, with the methods listed beside it."""
    total = 0
    for rel, name in listed:
        if "." in name and (rel, name.split(".")[0]) in listed:
            continue
        node = index(rel).defs[name]
        total += node.end_lineno - min([node.lineno, *[d.lineno for d in node.decorator_list]]) + 1
    return total


def stated_counts():
    """{system: the line count docs/reading.md gives beside its bold name}."""
    return {m.group(1): int(m.group(2).replace(",", "")) for m in
            re.finditer(r"\*\*(.+?)\*\*[^\n]*?([\d,]+) lines", open(READING).read())}


def skipped(system, rel, name):
    skip = {**SKIPPED, **SKIPPED_FOR.get(system, {})}
    return (rel, name) in skip or (rel, name.split(".")[0]) in skip or name.endswith("Error")


def test_each_path_lists_what_its_definitions_call():
    """Every call of a listed definition into the core files (CORE) is listed too, or skipped with a reason.
    (The main command's path is measured instead: test_the_main_command_runs_its_path_and_what_it_takes_by_name.)"""
    missing = []
    for system, listed in path_definitions().items():
        for rel, name in sorted(listed) if system != MAIN else ():
            if name not in index(rel).defs:
                continue  # an assigned name (DEFAULTS, FAMILIES): nothing to call; test_docs checks it exists
            for target in sorted(calls(rel, name)):
                if target[0] in CORE and not covered(listed, *target) and not skipped(system, *target):
                    missing.append(f"{system}: {rel} {name} calls {target[1]} ({target[0]}), which the path does "
                                   f"not list")
    assert not missing, "\n".join(missing)


def test_each_path_says_its_length():
    stated, wrong = stated_counts(), []
    for system, listed in path_definitions().items():
        n = lines_of({d for d in listed if d[1] in index(d[0]).defs})
        if stated.get(system) != n:
            wrong.append(f"{system}: docs/reading.md says {stated.get(system)} lines, the listed definitions hold {n}")
    assert not wrong, "\n".join(wrong)


def test_the_checker_finds_calls_and_counts_lines():
    """calls() resolves a function of the file, a module's function, an imported name and a method through
    self (in a base class too), and ignores what is not the project's."""
    got = calls("model.py", "EncoderClassifier.forward")
    assert ("model.py", "EncoderClassifier.encode") in got and ("model.py", "TokenModel.cross_entropy") in got
    assert ("model.py", "EncoderClassifier.last_queries") in got  # through self
    assert all(rel.endswith(".py") for rel, _ in got)
    node = index("model.py").defs["RMSNorm"]
    assert lines_of({("model.py", "RMSNorm"), ("model.py", "RMSNorm.forward")}) == node.end_lineno - node.lineno + 1


# -----------------------------------------------------------------------------
# the main command's path, measured: every project function a real run executes is on it or taken by name

MAIN_CONFIG = "config/sst2_recurrent.py"
LESSON = ("train.py", "model.py", "data.py", "evaluate.py")  # the files whose functions the path counts
MAX_PATH_LINES = 800  # issue 63's target for the four files together (today's count: the README's)
MAX_LONG_LINES = 0.05  # the share of the path's lines that may run past 100 columns
# What a reader of the main command may take by its name: (file, definition) or a whole file, each with its reason.
# None of them changes the training maths (the batch, forward, loss, backward, clipping, the optimizer step, the
# schedule, evaluation, the kept checkpoint, early stopping), which all stay on the path.
TAKE_BY_NAME = {
    "configurator.py": "the settings reader: config files and --key=value over DEFAULTS, unknown keys refused",
    "hardware/devices.py": "which device, how many CPU threads, which dtype and its autocast context",
    "bookkeeping/checks.py": "the refusals and warnings of a run's settings, one line each",
    "bookkeeping/records.py": "run bookkeeping: the out_dir lock, the run's files and log lines, its summary, a stop "
                              "asked for by Ctrl-C",
    "bookkeeping/timing.py": "the MFU's peak, and the progress line's speed and time left",
    "bookkeeping/flops.py": "FLOPs and MFU: each family's analytic FLOPs, a step's for the meter",
    "bookkeeping/checkpoints.py": "the checkpoint file: written atomically, read back with a clear error",
    "corpora/sources.py": "data preparation: where a source file comes from, checked by its sha256",
    ("model.py", "require"): "settings checks: a model config's refusals",
    ("model.py", "at_least_one"): "settings checks",
    ("model.py", "choice_checks"): "settings checks",
    ("model.py", "check_block_fields"): "settings checks",
    ("model.py", "EncoderConfig.__post_init__"): "settings checks (and a corpus without labels gets a 2-class head)",
    ("model.py", "TokenModel.param_counts"): "run bookkeeping: the sizes the setup line and the summary report",
    ("model.py", "family_of"): "the checkpoint file: the family name it stores",
    ("model.py", "raw_model"): "the checkpoint file: the weights under a torch.compile wrapper",
    ("data.py", "read_bin"): "the .bin format: an array and its checked header (the format is data.py's docstring)",
    ("data.py", "read_seqs"): "the .bin format",
    ("data.py", "load_meta"): "the .bin format: a prepared folder's meta.json",
    ("data.py", "dataset_dir"): "data preparation: the folder a dataset is prepared in",
    ("data.py", "resolve_tokenizer"): "data preparation",
    ("data.py", "check_subset"): "data preparation",
}


def enclosing_defs(rel):
    """[(first line, last line, name)] of every function and method in a file (decorators included), and of
    the module's own code as '<module>'."""
    out = []

    def walk(node, prefix):
        for n in ast.iter_child_nodes(node):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + n.name
                if not isinstance(n, ast.ClassDef):
                    out.append((min([n.lineno] + [d.lineno for d in n.decorator_list]), n.end_lineno, name))
                walk(n, name + ".")

    walk(ast.parse(open(os.path.join(REPO_ROOT, rel)).read()), "")
    return out


def executed_functions(run):
    """{(file, definition)} of the project's functions (tests left out) that run() executes, each taken at its
    outermost definition that ran (a comprehension or a nested function counts in the function around it)."""
    firsts = set()

    def profile(frame, event, arg):
        if event == "call":
            firsts.add((frame.f_code.co_filename, frame.f_code.co_firstlineno))

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    ran = {}
    for path, first in firsts:
        rel = os.path.relpath(path, REPO_ROOT)
        if rel.startswith(("..", "tests")) or not rel.endswith(".py") or not os.path.isfile(path):
            continue
        inside = [d for d in enclosing_defs(rel) if d[0] <= first <= d[1]]
        if inside:  # module-level code (the settings block, class bodies) is counted apart
            ran.setdefault(rel, set()).add(max(inside, key=lambda d: d[0]))
    return {(rel, name): (s, e) for rel, defs in ran.items() for s, e, name in defs
            if not any(o != (s, e, name) and o[0] <= s and e <= o[1] for o in defs)}


def taken_by_name(rel, name):
    keys = (rel, (rel, name), (rel, name.split(".")[0]))
    return next((TAKE_BY_NAME[k] for k in keys if k in TAKE_BY_NAME), None)


def settings_block():
    """The lines of train.py's settings: from its header to the end of DEFAULTS."""
    lines = open(os.path.join(REPO_ROOT, "train.py")).read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# default config values"))
    node = next(n for n in ast.parse("\n".join(lines)).body if isinstance(n, ast.Assign)
                and getattr(n.targets[0], "id", "") == "DEFAULTS")
    return node.end_lineno - start


@pytest.fixture(scope="module")
def main_path(tiny_dataset, tmp_path_factory):
    """{(file, definition): (first line, last line)} of the main command's path: a run of `python train.py
    config/sst2_recurrent.py` as main() makes it (4 steps, 2 evaluations, the test split scored), on the tiny
    dataset, in this process."""
    import train
    out = tmp_path_factory.mktemp("main_path") / "run"
    argv = [MAIN_CONFIG, f"--data_dir={tiny_dataset}", f"--out_dir={out}", "--device=cpu", "--max_iters=4",
            "--eval_interval=2", "--log_interval=1", "--warmup_iters=2", "--batch_size=16"]
    ran = executed_functions(lambda: train.main(argv))
    assert (out / "summary.json").exists()
    return ran


def path_counts(path):
    """{file: lines} of the path's functions in the lesson's files."""
    counts = {rel: 0 for rel in LESSON}
    for (rel, name), (s, e) in path.items():
        counts[rel] += e - s + 1
    return counts


def main_path_only(ran):
    """The path: what ran in the lesson's files and is not taken by name."""
    return {(rel, name): span for (rel, name), span in ran.items() if rel in LESSON and not taken_by_name(rel, name)}


def test_the_main_command_runs_its_path_and_what_it_takes_by_name(main_path):
    """Every project function the run executes outside the lesson's files is taken by its name, with a reason;
    the path goes through the four files (one training step: data.py's batch, model.py's forward, train.py's
    loss, backward, clipping and step)."""
    outside = sorted(f"{rel} {name}" for rel, name in main_path if rel not in LESSON and not taken_by_name(rel, name))
    assert not outside, "run by the main command, neither on its path nor taken by name: " + ", ".join(outside)
    path = main_path_only(main_path)
    for must in [("data.py", "ClassificationStream.step"), ("model.py", "EncoderClassifier.forward"),
                 ("model.py", "Block.forward"), ("train.py", "train_step"), ("train.py", "train"),
                 ("evaluate.py", "score_split")]:
        assert must in path, must
    assert all(reason for reason in TAKE_BY_NAME.values())


def test_docs_reading_lists_the_main_path(main_path):
    """docs/reading.md's main path lists exactly the functions the run executes on its path, file by file."""
    path = main_path_only(main_path)
    listed = path_definitions()[MAIN]
    assert listed == set(path), (f"listed, not run: {sorted(listed - set(path))}; run, not listed: "
                                 f"{sorted(set(path) - listed)}")


def test_the_readme_and_docs_reading_state_the_main_path_s_length(main_path):
    """The path's length, file by file, and the settings block beside it, as the README and docs/reading.md
    say them; at most MAX_PATH_LINES."""
    counts = path_counts(main_path_only(main_path))
    total = sum(counts.values())
    assert total <= MAX_PATH_LINES, counts
    said = (f"{total:,} lines of functions (train.py {counts['train.py']}, model.py {counts['model.py']}, "
            f"data.py {counts['data.py']}, evaluate.py {counts['evaluate.py']}), beside the "
            f"{settings_block()}-line settings block")
    for page in ("README.md", "docs/reading.md"):
        text = re.sub(r"\s+", " ", open(os.path.join(REPO_ROOT, page)).read())
        assert said in text, f"{page} does not say: {said}"
    assert stated_counts()[MAIN] == total


def test_the_main_path_reads_in_one_sitting(main_path):
    """At most MAX_LONG_LINES of the path's lines run past 100 columns, and no function on it but train() is
    longer than MAX_FUNCTION lines."""
    lines, long, too_long = 0, 0, []
    for (rel, name), (s, e) in main_path_only(main_path).items():
        text = open(os.path.join(REPO_ROOT, rel)).read().splitlines()[s - 1:e]
        lines, long = lines + len(text), long + sum(len(t) > 100 for t in text)
        if len(text) > MAX_FUNCTION and (rel, name) != ("train.py", "train"):
            too_long.append(f"{rel} {name}: {len(text)} lines")
    assert long <= MAX_LONG_LINES * lines, f"{long} of {lines} lines past 100 columns"
    assert not too_long, too_long


def test_the_tracer_counts_the_outermost_function_that_ran():
    """executed_functions counts a comprehension or a nested function in the function around it, and leaves
    out what is not the project's (tests, the standard library)."""
    import evaluate
    ran = executed_functions(lambda: evaluate.classification_metrics([0, 1, 1], [0, 1, 0], 2))
    assert set(ran) == {("evaluate.py", "classification_metrics"), ("evaluate.py", "confusion_matrix")}
    s, e = ran[("evaluate.py", "classification_metrics")]
    assert e - s + 1 == len(open(os.path.join(REPO_ROOT, "evaluate.py")).read().splitlines()[s - 1:e])
