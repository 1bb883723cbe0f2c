"""
How the first lines of plan_history.jsonl were written: from the repository's history, once, when study.py began to
keep the file itself (before then, nothing recorded which rules and seed counts were in force when a cell's data
began). Run from the repository's root on a full clone; it prints the lines, it writes nothing:

    python lab/plan_history_from_git.py > results/runs/plan_history.jsonl

- The plan as it stood: config/encoders_study.py at each commit that changed it, read as study.py reads a plan,
  with lab.runs.plan_snapshot's fields (each cell's seeds; each verdict's terms, rule and margin). A line "plan changed"
  for each commit whose snapshot differs from the one before, dated by the commit.
- "first run" of a cell: the first commit that added a file under results/runs/<cell>/ (a record; records moved
  away since, as the first small-cell runs were to results/superseded/, count), with the plan of that commit.
- Before the plan's verdicts carried rules, each was a superiority claim, and a conclusion's `margin` made the one
  "keeps the baseline's accuracy" reading of the verdict it named: study.py read it as equivalence (within +-margin)
  until commit 3ac67f6 and as non-inferiority from then on. That reading is written as the verdict that carries it
  now, "recurrent keeps the baseline's accuracy: CELL".
"""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.getcwd())
from lab.runs import plan_snapshot  # noqa: E402

PLAN = "config/encoders_study.py"
NON_INFERIORITY_FROM = "3ac67f6"  # the commit whose study.py read a conclusion's margin as non-inferiority


def git(*args):
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout


def commits(*paths, added=False):
    """[(full hash, 'YYYY-MM-DD HH:MM')] of the commits that touch `paths`, oldest first."""
    out = git("log", "--reverse", "--format=%H %ad", "--date=format-local:%Y-%m-%d %H:%M",
              *(["--diff-filter=A"] if added else []), "--", *paths)
    return [(line[:40], line[41:]) for line in out.splitlines()]


def snapshot(commit):
    """plan_snapshot of the plan at `commit`, its conclusions' margins as the verdicts they were read as."""
    namespace = {"__file__": os.path.abspath(PLAN)}
    exec(compile(git("show", f"{commit}:{PLAN}"), PLAN, "exec"), namespace)
    plan = {"seeds": [1, 2, 3], **{k: v for k, v in namespace.items() if not k.startswith("_")}}
    verdicts = [dict(v) for v in plan.get("verdicts", [])]
    older = subprocess.run(["git", "merge-base", "--is-ancestor", NON_INFERIORITY_FROM, commit]).returncode != 0
    for conclusion in plan.get("conclusions", []):
        if "margin" in conclusion:
            judged = next(v for v in verdicts if v["claim"] == conclusion["verdict"])
            cell = judged["a"].partition("/")[0]
            verdicts.append(dict(claim=f"recurrent keeps the baseline's accuracy: {cell}", a=judged["a"],
                                 b=judged["b"], rule="equivalence" if older else "non-inferiority",
                                 margin=conclusion["margin"]))
    return plan_snapshot({**plan, "verdicts": verdicts})


def main():
    plans = [(c, date, snapshot(c)) for c, date in commits(PLAN)]
    cells = sorted({name for _, _, s in plans for name in s["seeds"]})
    firsts = {}
    for cell in cells:
        added = commits(f"results/runs/{cell}", added=True)
        if added:
            firsts[cell] = added[0]
    order = {c: i for i, c in enumerate(git("rev-list", "--reverse", "HEAD").split())}
    events = [(order[c], 0, c, date, "plan", None) for c, date, _ in plans]
    events += [(order[c], 1, c, date, "first run", cell) for cell, (c, date) in firsts.items()]
    last, lines = None, []
    for i, _, commit, date, kind, cell in sorted(events):
        current = next(s for c, _, s in reversed(plans) if order[c] <= i)  # the plan at that commit
        if kind == "plan":
            if last is not None and current != last:
                lines.append({"date": date, "commit": commit[:7], "event": "plan changed", "plan": current})
            last = current
        else:
            lines.append({"date": date, "commit": commit[:7], "event": "first run", "cell": cell, "plan": current})
    for line in lines:
        print(json.dumps(line))


if __name__ == "__main__":
    main()
