"""
The README and the pages in docs/ cannot rot silently: every relative link names a file that exists (and, for
a `#anchor`, a heading of that page), every `config/*.py` that a command names is a config file that exists,
and docs/reading.md's reading paths name definitions that exist, in their files' order. Reads text only; well under
a second. (The encoder page's results table is held to RESULTS.md by
tests/test_claims.py, with every claim and figure of the pages.)
"""

import ast
import glob
import itertools
import os
import re

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = [os.path.join(REPO_ROOT, "README.md")] + sorted(glob.glob(os.path.join(REPO_ROOT, "docs", "*.md")))

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CONFIG = re.compile(r"config/[\w{},.-]*?\.py")


def slug(heading):
    """GitHub's anchor for a heading: its text as rendered (links and code marks dropped), lower case, every
    character but letters, digits, '_', '-' and spaces removed, spaces made hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path):
    """Every heading's anchor in a page, a repeated one numbered as GitHub numbers it (-1, -2, ...)."""
    seen, out = {}, set()
    for line in FENCE.sub("", open(path).read()).splitlines():
        if line.startswith("#"):
            s = slug(line.lstrip("#"))
            out.add(f"{s}-{seen[s]}" if s in seen else s)
            seen[s] = seen.get(s, 0) + 1
    return out


def expand(braces):
    """Shell brace expansion of one word: 'a_{b,c}.py' -> ['a_b.py', 'a_c.py']."""
    parts = re.split(r"\{([^{}]*)\}", braces)
    options = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(choice) for choice in itertools.product(*options)]


def commands(text):
    """The command lines of a page: every line of a fenced block, and inline code that starts a command."""
    lines = [line for block in FENCE.findall(text) for line in block.splitlines()]
    spans = [s.strip("`") for s in CODE_SPAN.findall(FENCE.sub("", text))]
    return lines + [s for s in spans if s.startswith(("python ", "torchrun "))]


def test_pages_exist():
    names = {os.path.relpath(p, REPO_ROOT) for p in PAGES}
    assert {"README.md", "docs/encoders.md", "docs/char_gpt.md", "docs/llama.md", "docs/piglatin_mamba.md",
            "docs/speed.md", "docs/design.md", "docs/reading.md"} <= names, names


def test_every_relative_link_and_config_exists():
    broken = []
    for page in PAGES:
        text = open(page).read()
        where = os.path.relpath(page, REPO_ROOT)
        for target in LINK.findall(CODE_SPAN.sub("", FENCE.sub("", text))):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not os.path.exists(full):
                broken.append(f"{where}: link {target}: no such file")
            elif anchor and full.endswith(".md") and anchor not in anchors(full):
                broken.append(f"{where}: link {target}: no such heading")
        for command in commands(text):
            for word in CONFIG.findall(command):
                broken += [f"{where}: {name} in `{command.strip()}`: no such config"
                           for name in expand(word) if not os.path.exists(os.path.join(REPO_ROOT, name))]
    assert not broken, "\n".join(broken)


READING = os.path.join(REPO_ROOT, "docs", "reading.md")  # each system's path through the code


def reading_paths():
    """docs/reading.md's paths: [(system, file, [names])], one entry per `- `file`: `a`, `b`` item (its
    continuation lines indented), under the bold name of its system."""
    section = re.sub(r"\n  +", " ", open(READING).read())  # a list item's continuation lines joined to it
    out, system = [], None
    for line in section.splitlines():
        if m := re.match(r"\*\*(.+?)\*\*", line):
            system = m.group(1)
        elif m := re.match(r"- `([\w/]+\.py)`: (.*)", line):
            out.append((system, m.group(1), re.findall(r"`([\w.]+)`", m.group(2))))
    return out


def definitions(path):
    """{name: line} of a file's top-level functions, classes and assigned names, and 'Class.method' for the
    methods of its classes."""
    lines = {}
    for node in ast.parse(open(path).read()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            lines[node.name] = node.lineno
            if isinstance(node, ast.ClassDef):
                lines |= {f"{node.name}.{f.name}": f.lineno for f in node.body if isinstance(f, ast.FunctionDef)}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for name in (t.elts if isinstance(t, ast.Tuple) else [t]):
                    if isinstance(name, ast.Name):
                        lines.setdefault(name.id, node.lineno)
    return lines


def test_reading_paths_name_definitions_in_file_order():
    """Each system's path through the code (docs/reading.md): every named definition is in the named file,
    and the names of a file come in the order they appear in it."""
    paths = reading_paths()
    systems = {system for system, _, _ in paths}
    assert {"The recurrent encoder", "The char GPT", "Llama with LoRA and decoding", "The Pig Latin encoder-decoder",
            "Mamba", "The bag of words"} <= systems, systems
    wrong = []
    for system, file, names in paths:
        assert names, (system, file)
        found = definitions(os.path.join(REPO_ROOT, file))
        missing = [n for n in names if n not in found]
        wrong += [f"{system}: {file} defines no {n}" for n in missing]
        lines = [found[n] for n in names if n in found]
        if lines != sorted(lines) or len(set(lines)) != len(lines):
            wrong.append(f"{system}: {file}: {', '.join(names)} are not in the file's order "
                         f"(lines {', '.join(map(str, lines))})")
    assert not wrong, "\n".join(wrong)
