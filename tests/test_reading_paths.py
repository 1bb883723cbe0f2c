"""
The README's reading paths ("Where to read the code") are the whole truth: each system's path lists every
definition a reader must open to follow it, and says how many lines that is.

A listed definition's calls into the core files, model.py and train.py (a function of its file or of a module
it imports, a class, a method through self), must be listed too, unless SKIPPED says why a reader of that path
need not open it; the other files' helpers a reader may take by their names (the listed ones are counted). A class listed by its name is read whole (its methods' calls are checked, its lines counted); 'Class.method'
is that method alone; a class called is covered by its name or its '__init__'. The count is the listed
definitions' lines (a class once, however many of its methods are listed too), and the README says it beside
the system's name. The recurrent encoder's path, the study's, also keeps each function to MAX_FUNCTION lines
(issue 56).
"""

import ast
import os
import re

from conftest import REPO_ROOT
from test_docs import reading_paths

CORE = ("model.py", "train.py")  # the files whose every definition a path calls it must list
MAX_FUNCTION = 40  # lines of any function or method on the recurrent encoder's path

# (file, definition): why a reader of every path may leave it unopened (a class: with its methods)
SKIPPED = {
    ("train.py", "processes"): "the DDP appendix: one process gets its device and nothing else",
    ("train.py", "Processes"): "the DDP appendix: for one process, its methods pass the step through unchanged",
    ("train.py", "torchrun_env"): "the DDP appendix: None for one process",
    ("train.py", "resumed"): "init_from='resume': continuing a stopped run, not its first start",
    ("train.py", "AdamW"): "adamw_impl='manual', the written-out reference a test holds to torch's fused AdamW, "
                           "which the runs take",
    ("model.py", "Attention.kernel"): "kernels.py's paths (attn_impl='triton', a compiled decode step): the "
                                      "default attn_impl='sdpa' takes neither",
    ("model.py", "MambaMixer"): "Block's other mixer (cfg.mixer='mamba')",
    ("model.py", "mamba_flops"): "block_flops of a Mamba Block",
    ("model.py", "from_pretrained"): "init_from a trained checkpoint; the paths train from scratch",
}
# and what one path's reader may leave unopened
SKIPPED_FOR = {
    "The recurrent encoder": {
        ("model.py", "TokenModel.head_flops"): "EncoderClassifier's own head_flops is the one it runs",
        ("model.py", "TokenModel.last_queries"): "EncoderClassifier's own last_queries is the one it runs",
        ("model.py", "LayerNorm"): "make_norm's other norm: the encoder's is RMSNorm",
    },
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
    """{system: the line count the README gives beside its bold name}."""
    text = open(os.path.join(REPO_ROOT, "README.md")).read()
    section = text.split("## Where to read the code\n", 1)[1].split("\n## ", 1)[0]
    return {m.group(1): int(m.group(2).replace(",", "")) for m in
            re.finditer(r"\*\*(.+?)\*\*[^\n]*?([\d,]+) lines", section)}


def skipped(system, rel, name):
    skip = {**SKIPPED, **SKIPPED_FOR.get(system, {})}
    return (rel, name) in skip or (rel, name.split(".")[0]) in skip or name.endswith("Error")


def test_each_path_lists_what_its_definitions_call():
    """Every call of a listed definition into the core files (CORE) is listed too, or skipped with a reason."""
    missing = []
    for system, listed in path_definitions().items():
        for rel, name in sorted(listed):
            if name not in index(rel).defs:
                continue  # an assigned name (DEFAULTS, TASKS): nothing to call; test_docs checks it exists
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
            wrong.append(f"{system}: the README says {stated.get(system)} lines, the listed definitions hold {n}")
    assert not wrong, "\n".join(wrong)


def test_the_recurrent_encoder_path_keeps_its_functions_short():
    """No function or method on the recurrent encoder's path is longer than MAX_FUNCTION lines (a class listed
    whole: each of its methods)."""
    long = []
    for rel, name in path_definitions()["The recurrent encoder"]:
        node = index(rel).defs.get(name)
        if node is None:
            continue
        funcs = [node] if isinstance(node, ast.FunctionDef) else [f for f in node.body if isinstance(f, ast.FunctionDef)]
        long += [f"{rel} {name}: {f.name} is {f.end_lineno - f.lineno + 1} lines" for f in funcs
                 if f.end_lineno - f.lineno + 1 > MAX_FUNCTION]
    assert not long, "\n".join(long)


def test_the_checker_finds_calls_and_counts_lines():
    """calls() resolves a function of the file, a module's function, an imported name and a method through
    self (in a base class too), and ignores what is not the project's."""
    got = calls("model.py", "EncoderClassifier.forward")
    assert ("model.py", "EncoderClassifier.encode") in got and ("model.py", "TokenModel.cross_entropy") in got
    assert all(rel.endswith(".py") for rel, _ in got)
    node = index("model.py").defs["RMSNorm"]
    assert lines_of({("model.py", "RMSNorm"), ("model.py", "RMSNorm.forward")}) == node.end_lineno - node.lineno + 1
