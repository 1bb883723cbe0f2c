"""
The README and the pages in docs/ cannot rot silently: every relative link names a file that exists (and, for
a `#anchor`, a heading of that page), and every `config/*.py` that a command names is a config file that
exists. Reads text only; well under a second. (The encoder page's results table is held to RESULTS.md by
tests/test_study_plans.py.)
"""

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
            "docs/speed.md", "docs/design.md"} <= names, names


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
