"""
The README's test command works from any clone: with DATA_MIRROR alone (a clone that is not beside this
project's shared/ folder), and with neither set beside ../shared/data, as CI runs it. conftest.py's
data_locations decides where the suite's data and tiktoken's files come from; one test runs the suite's
conftest in a copy of the code that has no ../shared beside it.
"""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import MIRROR, REPO_ROOT, TIKTOKEN_CACHE, data_locations


def test_a_mirror_set_serves_tiktoken_too():
    """DATA_MIRROR set: its tiktoken_cache/, never ../shared's; TIKTOKEN_CACHE_DIR set: that."""
    assert data_locations({"DATA_MIRROR": "/m"}, "/x/shared/data") == ("/m", "/m/tiktoken_cache")
    assert data_locations({"DATA_MIRROR": "/m", "TIKTOKEN_CACHE_DIR": "/t"}, "/x/shared/data") == ("/m", "/t")


def test_without_a_mirror_the_shared_folder_beside_the_clone_serves():
    assert data_locations({}, "/x/shared/data") == ("/x/shared/data", "/x/shared/data/tiktoken_cache")
    assert data_locations({"DATA_MIRROR": ""}, "/x/shared/data")[0] == "/x/shared/data"  # empty is unset


def test_a_clone_away_from_shared_runs_tests_with_data_mirror_alone(tmp_path):
    """A copy of the code in a temporary folder (no ../shared beside it), DATA_MIRROR set and TIKTOKEN_CACHE_DIR
    not: a test that needs tiktoken's files runs and passes (before conftest read the mirror's cache, it
    skipped or failed). One pytest process on one test: a few seconds, most of them torch's import."""
    if not os.path.isdir(TIKTOKEN_CACHE) or not os.path.isdir(os.path.join(MIRROR, "tiktoken_cache")):
        pytest.skip(f"no tiktoken_cache/ in the mirror {MIRROR}")
    clone = tmp_path / "elsewhere" / "lab"
    shutil.copytree(REPO_ROOT, clone, ignore=shutil.ignore_patterns(
        ".git", "results", "docs", "out", "data", ".venv", "__pycache__", ".pytest_cache", ".device"))
    assert not os.path.exists(clone.parent / "shared")
    env = {k: v for k, v in os.environ.items() if k != "TIKTOKEN_CACHE_DIR"}
    env["DATA_MIRROR"] = os.path.abspath(MIRROR)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
                          "tests/test_data.py", "-k", "test_text_encoder_truncates_with_cls_first", "-rs"],
                         cwd=clone, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "1 passed" in run.stdout and "skipped" not in run.stdout, run.stdout + run.stderr
