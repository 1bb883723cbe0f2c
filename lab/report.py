"""
What a study says: each verdict judged over the seeds both of its terms finished (judge: the paired t-interval
decides, under the verdict's rule; bootstraps over seeds, and over seeds and test sentences, beside it), the
conclusions in plain sentences, the tables of every cell (with how its runs stopped, the values a tuned cell
took, and its accuracy on the plan's subsets of the test sentences), and RESULTS.md with its plots, written
together or not at all (write_report). A report is written only over a report, and never replaced by one that
holds fewer finished runs. Also the table of study.py's configs mode (study_table).

That table: each metric's mean +- the 95 % t-interval over seeds; then, for every config after the
first, its difference from the first paired by seed, with its 95 % paired t-interval, the 95 %
percentile bootstrap interval beside it, and a verdict (better / worse, or higher / lower for a
metric with no better side, if the t-interval excludes 0; otherwise no significant difference).
The verdict does not rest on the bootstrap: with few seeds its interval is too narrow (with 3 it
excludes 0 whenever the three differences share a sign, which chance alone does one time in four).
"""

import math
import os
import re
import shutil
import tempfile

import numpy as np

from configurator import ConfigError
from lab.cells import cell_rows, finished_seeds
from lab.plan import TEST_METRICS, StudyError, cell_tunes, parse_term, run_config, tune_keys
from lab.plots import draw_plots
from lab.runs import (
    HISTORY,
    chosen_settings,
    is_reused,
    log_records,
    read_history,
    rule_history,
    rule_words,
    run_file,
    timing_conditions,
    tuned_value,
)
from lab.stats import (
    RULE_WORDS,
    claim_verdict,
    detectable_effect,
    mcnemar,
    mean_ci,
    paired_bootstrap,
    paired_t,
    seed_and_example_bootstrap,
    seeds_needed,
    verdict,
)

# -----------------------------------------------------------------------------
# the table


def shared_metrics(summaries, wanted=None):
    """{key: {"label", "better"}} of the metrics every run reports (in the first run's order), or of the
    `wanted` ones, each of which must be reported by every run."""
    runs = list(summaries.values())
    declared = runs[0].get("metrics", {})
    common = {k: v for k, v in declared.items()
              if all(k in s.get("metrics", {}) and s.get(k) is not None for s in runs)}
    if not wanted:
        return common
    unknown = [k for k in wanted if k not in common]
    if unknown:
        raise ConfigError(f"metrics {unknown} are not reported by every run; available: {list(common)}")
    return {k: common[k] for k in wanted}


def study_table(summaries, names, seeds, metrics, n_boot=10000):
    """The comparison as a dict (for --json) and as printable lines: mean +- 95 % CI of each metric per
    config, then each config's paired difference against the first (the baseline)."""
    base = names[0]
    result = {"configs": names, "seeds": list(seeds), "metrics": {}, "differences": {}}
    width = max(20, *(len(n) + 2 for n in names))
    label_width = max(30, *(len(m["label"]) + 2 for m in metrics.values()))
    header = f"metric (mean ± 95% CI, n={len(seeds)})"
    lines = [f"{header:{label_width}s}" + "".join(f"{n:>{width}s}" for n in names)]
    for key, m in metrics.items():
        cells = []
        for name in names:
            values = [summaries[(name, s)][key] for s in seeds]
            mean, half = mean_ci(values)
            result["metrics"].setdefault(key, {"label": m["label"], "better": m["better"]})[name] = {
                "mean": mean, "ci95": half, "values": values}
            cells.append(f"{mean:.4f} ± {half:.4f}")
        lines.append(f"{m['label']:{label_width}s}" + "".join(f"{c:>{width}s}" for c in cells))
    if len(names) > 1:
        lines += ["", f"paired by seed, difference = config - {base}: 95% t-interval (decides the verdict), "
                      f"95% bootstrap interval ({n_boot:,} resamples)"]
    for name in names[1:]:
        for key, m in metrics.items():
            pair = ([summaries[(base, s)][key] for s in seeds], [summaries[(name, s)][key] for s in seeds])
            d, lo, hi = paired_t(*pair)
            _, b_lo, b_hi = paired_bootstrap(*pair, n_boot)
            word = verdict(lo, hi, m["better"])
            result["differences"].setdefault(name, {})[key] = {"mean": d, "lo": lo, "hi": hi, "boot_lo": b_lo,
                                                               "boot_hi": b_hi, "verdict": word}
            lines.append(f"  {name:{width}s} {m['label']:{label_width}s} {d:+.4f}  t [{lo:+.4f}, {hi:+.4f}]  "
                         f"boot [{b_lo:+.4f}, {b_hi:+.4f}]  {word}")
    return result, lines


def subset_index(results, cell, subset):
    """The test indices of a plan subset in a cell (its data.json), or None if they were not recorded."""
    return results[cell][0]["data"].get("test_subsets", {}).get(subset, {}).get("index")


def correct(results, cell, name, seeds, index=None):
    """(seeds, examples) 0/1: which test examples each seed's run of cell/name got right (its test_predictions
    against the cell's test labels), on the examples `index` if given."""
    labels = np.asarray(results[cell][0]["data"]["test_labels"])
    right = np.array([np.asarray(results[cell][2][(name, s)]["test_predictions"]) == labels for s in seeds])
    return (right if index is None else right[:, index]).astype(np.int64)


def term_values(term, results, metric, subset=None):
    """Per-seed values {seed: value} of a term: 'cell/config', or 'cell/config - cell/config'. With a plan
    subset, a single term's accuracy on that subset's test examples (None if the cell did not record them)."""
    if subset is not None:
        (cell, name), = parse_term(term)
        index = subset_index(results, cell, subset)
        if index is None:
            return {}
        done = finished_seeds(results[cell][2], name)
        return dict(zip(done, correct(results, cell, name, done, index).mean(axis=1).tolist())) if done else {}
    values = []
    for cell, name in parse_term(term):
        if cell not in results:
            raise ConfigError(f"term {term!r}: no cell {cell!r} in the plan")
        summaries = results[cell][2]
        if not any(n == name for n, _ in summaries):
            raise ConfigError(f"term {term!r}: cell {cell} has no config {name!r}")
        done = {seed: s for (n, seed), s in summaries.items() if n == name and s is not None}
        if any(metric not in s for s in done.values()):
            raise ConfigError(f"term {cell}/{name}: its runs do not report {metric!r}")
        values.append({seed: s[metric] for seed, s in done.items()})
    if len(values) == 1:
        return values[0]
    return {seed: v - values[1][seed] for seed, v in values[0].items() if seed in values[1]}


def planned_seeds(term, results):
    """The seeds a term's runs are planned for (all of them, finished or not)."""
    return set.intersection(*({seed for n, seed in results[cell][2] if n == name} for cell, name in parse_term(term)))


def judge(claim, results, metrics, effect=0.01):
    """One verdict row: the claim that term a beats term b in `metric`, over the seeds both finished:
    mean difference, paired t-interval (decides), bootstrap interval, the smallest effect these seeds could
    detect (detectable_effect, from the spread of the per-seed differences) and the seeds a true difference
    of `effect` would need (seeds_needed), and for two single runs on the same test examples McNemar's
    exact p per seed."""
    metric = claim.get("metric", "test_accuracy")
    a, b = (term_values(claim[k], results, metric, claim.get("subset")) for k in ("a", "b"))
    seeds = sorted(set(a) & set(b))
    row = {**claim, "metric": metric, "seeds": seeds, "n": len(seeds),
           "planned": len(planned_seeds(claim["a"], results) & planned_seeds(claim["b"], results))}
    if len(seeds) < 2:
        return {**row, "verdict": "not run"}
    pair = ([b[s] for s in seeds], [a[s] for s in seeds])
    d, lo, hi = paired_t(*pair)
    _, b_lo, b_hi = paired_bootstrap(*pair)
    better = metrics.get(metric, {}).get("better", "higher")
    sd = float(np.std(np.subtract(pair[1], pair[0]), ddof=1))
    verdict_ = claim_verdict(lo, hi, better, claim.get("rule", "superiority"), claim.get("margin", 0.0))
    row.update(mean=d, lo=lo, hi=hi, boot_lo=b_lo, boot_hi=b_hi, verdict=verdict_, sd=sd,
               detectable=detectable_effect(sd, len(seeds)), seeds_needed=seeds_needed(sd, effect))
    if " - " not in claim["a"] + claim["b"]:
        (cell_a, _, name_a), (cell_b, _, name_b) = claim["a"].partition("/"), claim["b"].partition("/")
        same_test = results[cell_a][0].get("test_set") == results[cell_b][0].get("test_set")
        labels = results[cell_a][0]["data"].get("test_labels")
        if same_test and metric.startswith("test_") and labels and "subset" not in claim:
            row["mcnemar"] = [mcnemar(labels, results[cell_a][2][(name_a, s)]["test_predictions"],
                                      results[cell_b][2][(name_b, s)]["test_predictions"]) for s in seeds]
            # A and B right and wrong on the same sentences, seed by seed (the same runs, as where a search chose
            # the fixed budget itself): the spread is 0, so there is no smallest detectable difference to give
            row["alike"] = all(only_a == only_b == 0 for only_a, only_b, _ in row["mcnemar"])
        if same_test and metric == "test_accuracy" and labels:
            index = subset_index(results, cell_a, claim["subset"]) if "subset" in claim else None
            d_examples = correct(results, cell_a, name_a, seeds, index) - correct(results, cell_b, name_b, seeds, index)
            row["sent_lo"], row["sent_hi"] = seed_and_example_bootstrap(d_examples)
            row["sent_verdict"] = claim_verdict(row["sent_lo"], row["sent_hi"], better, claim.get("rule", "superiority"),
                                                claim.get("margin", 0.0))
    return row


# -----------------------------------------------------------------------------
# the report: RESULTS.md and its plots
#
# The report says how many runs it holds (`Finished runs: N of M.`), and a report is never replaced by one
# that holds fewer (a fresh clone has no out/: its study would report nothing) unless --allow_fewer. It is
# written with its plots in one go: made in a temporary folder, then moved into place.


def logged_conditions(path):
    """A run's conditions record (records.run_conditions': machine, device, dtype, ...), the first of its
    log.jsonl, or None for a run made before train.py wrote one."""
    return next(iter(log_records(path, "conditions")), None)


def run_device(results, cell, name, seed):
    """Where a run trained, in a few words: 'H200 TF32' (float32 on a GPU, whose matmuls train.py runs in TF32)
    or 'CPU float32'; None if its log does not say."""
    c = logged_conditions(run_file(*results[cell][1][(name, seed)][1:], "log.jsonl"))
    if c is None:
        return None
    if c["device"] == "cuda":
        return c["machine"].removeprefix("NVIDIA ") + (" TF32" if c["dtype"] == "float32" else f" {c['dtype']}")
    return f"{c['device'].upper()} {c['dtype']}"


def across_devices(row, results):
    """'H200 TF32 vs CPU float32' when a verdict's two sides (over the seeds it judged) trained on more than
    one kind of device, else None: across devices the random draws and the arithmetic differ, and a
    difference between the sides is partly the devices'."""
    sides = [{run_device(results, cell, name, s) for cell, name in parse_term(row[k]) for s in row["seeds"]} - {None}
             for k in ("a", "b")]
    if len(sides[0] | sides[1]) < 2:
        return None
    return " vs ".join(" + ".join(sorted(side)) or "not recorded" for side in sides)


def run_conditions(results):
    """Where the runs ran, from their own logs (records.run_conditions' record): one line per distinct set
    of conditions with its count of runs, most runs first; runs made before logs held it are counted. A run
    another cell reuses (reused.json) is counted once, in the cell that trained it."""
    groups, unknown = {}, 0
    for cell, runs, summaries in results.values():
        for key, summary in summaries.items():
            if summary is None or is_reused(runs[key][2]):
                continue
            c = logged_conditions(run_file(*runs[key][1:], "log.jsonl"))
            if c is None:
                unknown += 1
                continue
            processes = f", {c['processes']} processes" if c["processes"] > 1 else ""
            text = (f"{c['machine']}, {c['device']}, {c['dtype']}, {c['threads']} thread(s) on {c['cores']} "
                    f"core(s){processes}; torch {c['torch']}, Python {c['python']}; code at commit {c['commit']}")
            groups[text] = groups.get(text, 0) + 1
    lines = [f"{n} run{'s' * (n > 1)}: {text}" for text, n in sorted(groups.items(), key=lambda g: (-g[1], g[0]))]
    if unknown:
        lines.append(f"{unknown} run{'s' * (unknown > 1)} made before train.py logged its conditions: not recorded")
    return lines


def fmt_ci(pair, digits=4):
    mean, half = pair
    return f"{mean:.{digits}f}" if math.isnan(half) else f"{mean:.{digits}f} ± {half:.{digits}f}"


def latency(ms, first):
    """'6.10 ms (0.85×)': a latency with its ratio to the cell's first model's; '–' if not timed."""
    if ms is None:
        return "–"
    return f"{ms:.2f} ms" + (f" ({ms / first:.2f}×)" if first else "")


def fmt_num(x, spec):
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def finished_runs(results):
    """(finished runs, planned runs) of run_plan's results."""
    done = sum(s is not None for _, _, summaries in results.values() for s in summaries.values())
    return done, sum(len(summaries) for _, _, summaries in results.values())


def reported_runs(path):
    """How many finished runs the report at `path` holds, read back from its `Finished runs: N of M.` line
    (a report written before that line: the sum of its tables' `K of M` seeds); None if there is no file."""
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        text = f.read()
    line = re.search(r"^Finished runs: (\d+) of \d+\.$", text, re.M)
    if line:
        return int(line.group(1))
    return sum(int(k) for k in re.findall(r"^\| [^|\n]+ \| (\d+) of \d+ \|", text, re.M))


# how report_lines begins, and every RESULTS.md study.py has written: a title, a blank line, this line
REPORT_HEADER = b"Written by `python study.py --plan "


def check_report_path(path):
    """--report is written only over a report study.py wrote (or where there is nothing): a note or another
    tool's output there is never replaced, whatever the run counts. Checked before the study trains, so a
    long study does not end by refusing."""
    if not os.path.lexists(path):
        return
    if not os.path.isfile(path):
        raise ConfigError(f"--report {path}: that is not a file; give the path of the report to write")
    with open(path, "rb") as f:
        head = [f.readline() for _ in range(3)]
    if not (head[0].startswith(b"# ") and head[1].strip() == b"" and head[2].startswith(REPORT_HEADER)):
        raise ConfigError(f"--report {path}: that file is not a report study.py wrote (one begins with a title, "
                          f"then '{REPORT_HEADER.decode()}...'), so it is kept. Give another --report path, or "
                          f"move the file away and run again")


def check_report_keeps_runs(path, done, planned, out_root, allow_fewer=False):
    """A report is not replaced by one that holds fewer finished runs (run on a fresh clone, with no out/,
    a study would rewrite the committed RESULTS.md as 'not run' throughout) unless `allow_fewer`."""
    before = reported_runs(path)
    if before is not None and before > done and not allow_fewer:
        raise StudyError(f"{path} reports {before} finished runs, and a new report would hold {done} (of {planned} "
                         f"planned; read from {out_root}/): it is kept. Train or bring back the missing runs, or give "
                         f"--allow_fewer to replace it anyway")


def report_plots(path):
    """The PNGs the report at `path` shows that lie in its plot folder (results/ beside it): the ones a
    report made. Anything else there (results/runs/, a file of one's own) is not a report's."""
    if not os.path.isfile(path):
        return set()
    folder = os.path.dirname(os.path.abspath(path))
    with open(path) as f:
        links = re.findall(r"!\[[^\]]*\]\(([^)\s]+\.png)\)", f.read())
    plots = {os.path.normpath(os.path.join(folder, link)) for link in links}
    return {p for p in plots if os.path.dirname(p) == os.path.join(folder, "results")}


def write_report(plan, results, timing, depth, path):
    """RESULTS.md and its plots (results/ beside it), from the finished runs, written together: all of it
    is drawn and written into a temporary folder first, and moved into place only when all of it is
    there, so an error half-way leaves the old report and plots as they were. Plots an old report showed
    that this one does not are removed. Returns the report's lines."""
    folder = os.path.dirname(os.path.abspath(path))
    plot_dir = os.path.join(folder, "results")
    staging = tempfile.mkdtemp(prefix=".report-", dir=folder)
    try:
        label = lambda config: plan["labels"].get(config, config)  # noqa: E731
        staged = draw_plots(plan, results, timing, depth, os.path.join(staging, "results"), label)
        plots = [(title, os.path.join(plot_dir, os.path.basename(p))) for title, p in staged]
        lines = report_lines(plan, results, timing, depth, path, plots)
        with open(os.path.join(staging, "report.md"), "w") as f:
            f.write("\n".join(lines))
        stale = report_plots(path) - {p for _, p in plots}
        os.makedirs(plot_dir, exist_ok=True)
        # only renames from here on, within one folder's file system: nothing that draws or computes
        for (_, staged_path), (_, final) in zip(staged, plots):
            os.replace(staged_path, final)
        os.replace(os.path.join(staging, "report.md"), path)
        for p in sorted(stale):
            if os.path.isfile(p):
                os.remove(p)
                print(f"removed {os.path.relpath(p, folder)} (a plot the report no longer shows)")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return lines


def timing_note(plan):
    """How the latencies were measured, from the timing passes' records (study.py --time: the whole plan's in
    the records folder, a --cells pass's in each of its cells' folders), or that they were not."""
    def conditions(c):
        return (f"load average {c['load_before']:.2f} before, {c['load_after']:.2f} after; {c['machine']}, "
                f"{c['threads']} thread, float32, torch {c['torch']}, code at commit {c['commit']}")
    passes = {}  # the conditions of each --cells pass -> the cells it timed
    for cell in plan["cells"]:
        own_pass = timing_conditions(plan["records"], cell["name"])
        if own_pass is not None:
            passes.setdefault(conditions(own_pass), []).append(cell["name"])
    own = "".join(f" Timed in a pass of their own (study.py --time --cells), so their latencies compare only "
                  f"within it: {', '.join(names)} ({c})." for c, names in passes.items())
    c = timing_conditions(plan["records"])
    if c is None:
        return (f"Timing: not measured yet (`python study.py --plan {plan['path']} --time` on a machine where nothing "
                f"else runs, after the training); size and FLOPs are shown." + own)
    return ("Timing (latency, throughput): one pass after the training, on a quiet machine (load average "
            f"{c['load_before']:.2f} before, {c['load_after']:.2f} after): {c['machine']}, {c['threads']} thread, "
            f"float32, torch {c['torch']}, code at commit {c['commit']}; evaluate.py --interleave on each config's "
            "first seed's best checkpoint (or, where it is gone, trained in an earlier session, on its architecture "
            "with fresh weights: a forward's time does not depend on them), all of them in one process, timed in "
            "turns (3 rounds, each model once a round); latency = median ms per sentence at batch 1 over the "
            "first 200 test sentences × 3 passes (in brackets: the ratio to the cell's first model); throughput = "
            "sentences/s in length-sorted batches of 256 (first 1,024 test sentences)." + own)


def tokens_seen(term, results):
    """', about N tokens seen': the training tokens a term's runs saw, mean over seeds (steps x examples a
    step x the training split's tokens per text, from its data.json); '' if its data was not recorded."""
    cell, name = parse_term(term)[0]
    record, runs, summaries = results[cell]
    texts, tokens = record["data"].get("train_texts"), record["data"].get("train_tokens")
    done = [s for (n, _), s in summaries.items() if n == name and s is not None]
    if not texts or not tokens or not done:
        return ""
    seen = [s["iters"] * s["config"]["batch_size"] * s["config"].get("grad_accum", 1) * tokens / texts for s in done]
    return f", about {float(np.mean(seen)):.3g} tokens seen: {float(np.mean(seen)) / tokens:.2f} epochs of {tokens:,}"


def verdict_rows(plan, results, metrics):
    """{claim: judge's row} for every verdict of the plan, in its order, each with what the plan's history
    says of its rule and seeds (`fixed`, rule_history) and, where its rule changed after its data began,
    its verdict under the rule first planned (`first_rule`: (rule, verdict))."""
    history = read_history(os.path.join(plan["records"], HISTORY))
    rows = {}
    for claim in plan["verdicts"]:
        row = judge(claim, results, metrics, plan["effect"])
        row["fixed"], first = rule_history(history, claim["claim"])
        if row["verdict"] != "not run":
            row["across"] = across_devices(row, results)
        if first and rule_words(first) != rule_words(claim) and row["verdict"] != "not run":
            better = metrics.get(row["metric"], {}).get("better", "higher")
            row["first_rule"] = (rule_words(first), claim_verdict(row["lo"], row["hi"], better,
                                                                  first.get("rule", "superiority"),
                                                                  first.get("margin", 0.0)))
        rows[claim["claim"]] = row
    return rows


def conclusion_row(conclusion, rows):
    """The verdict row that judges a conclusion: its own verdict's, or, while that one has not run and the
    conclusion names a stand-in (`instead`: a task this machine can build in place of one it cannot), the
    stand-in's, marked as such."""
    row = rows[conclusion["verdict"]]
    if row["verdict"] == "not run" and conclusion.get("instead") and rows[conclusion["instead"]]["verdict"] != "not run":
        return {**rows[conclusion["instead"]], "stands_in": True}
    return row


def conclusion_line(conclusion, row, effect):
    """One plain sentence on a claim of the source write-ups: confirmed, refuted or not settled, from its
    verdict's row (judged under the verdict's rule: claim_verdict), with the smallest effect the study could
    have seen and what would settle it. A claim that is the negation of the one judged (`reverse`: B is
    ahead, say) is refuted where that one is confirmed and confirmed where it is refuted. Beside the status,
    in brackets: the status with the test sentences resampled where that one differs, and the devices where
    the two sides trained on different ones; after the figures, the verdict's rule history where its rule or
    seeds changed after its data began."""
    head = f"- **{conclusion['claim']}** ({conclusion['source']}): "
    note = f" {conclusion['note']}" if conclusion.get("note") else ""
    if row.get("stands_in"):  # the claim's own verdict has no runs here; the plan's stand-in judges it
        note = f" Judged by '{conclusion['instead']}' while '{conclusion['verdict']}' has not run.{note}"
    if row["verdict"] == "not run":
        return (f"{head}**not settled**: not run yet (paired seeds finished: {row['n']}; A = `{row['a']}`, "
                f"B = `{row['b']}`).{note}")

    def said(word):  # a verdict's word as the claim's status; the claim may be the negation of the one judged
        status = {"confirmed": "confirmed", "refuted": "refuted"}.get(word, "not settled")
        if conclusion.get("reverse"):
            status = {"confirmed": "refuted", "refuted": "confirmed"}.get(status, status)
        return status

    status = said(row["verdict"])
    m, rule = row.get("margin"), row.get("rule", "superiority")
    sentences = (f"; bootstrapped over seeds and test sentences, [{row['sent_lo']:+.4f}, {row['sent_hi']:+.4f}] "
                 f"against [{row['boot_lo']:+.4f}, {row['boot_hi']:+.4f}] over seeds alone" if "sent_lo" in row else "")
    figures = (f"A − B = {row['mean']:+.4f} in {row['metric']}, 95 % interval [{row['lo']:+.4f}, {row['hi']:+.4f}] "
               f"over {row['n']} seeds{sentences} (A = `{row['a']}`, B = `{row['b']}`" + RULE_WORDS[rule].format(m=m)
               + ")")
    qualifiers = []
    if "sent_verdict" in row and said(row["sent_verdict"]) != status:
        qualifiers.append(f"{said(row['sent_verdict'])} with the test sentences resampled")
    if row.get("across"):
        qualifiers.append(f"across devices: {row['across']}")
    words = f"**{status}**" + (f" ({'; '.join(qualifiers)})" if qualifiers else "")
    if row.get("fixed", "").startswith(("changed", "added")):  # the rule or the seeds were not all fixed in advance
        note = f" Its rule and seeds: {row['fixed']}.{note}"
    if "first_rule" in row:  # the rule changed after the data began: the one planned first judges it too
        note = (f" Under the rule first planned ({row['first_rule'][0]}): **{said(row['first_rule'][1])}**; the rule "
                f"now is {rule_words(row)}.{note}")
    if status != "not settled":
        interim = "" if row["n"] >= row.get("planned", row["n"]) else (
            f" Interim: {row['n']} of the {row['planned']} planned seeds; a verdict read before they are all in "
            f"can still change.")
        return f"{head}{words}: {figures}.{interim}{note}"
    if row.get("alike"):
        return (f"{head}{words}: {figures}. A and B are right and wrong on the same test sentences in every seed: "
                f"there is no difference to see.{note}")
    needed = row["seeds_needed"]
    settle = f"{needed} seeds would find a true difference of {effect:g}" if needed else \
        f"more than 1,000 seeds would be needed to find a difference of {effect:g}"
    return (f"{head}{words}: {figures}. The smallest difference these seeds could see is "
            f"{row['detectable']:.4f}; {settle}.{note}")


def power_cells(row):
    """A verdict row's 'detectable' and 'seeds for 0.01' cells: the smallest difference its seeds could see and the
    seeds a true difference of 0.01 would need, or, where A and B are right and wrong on the same sentences in every
    seed (row['alike']: the same runs), words saying so instead of the 0 and 2 that a spread of 0 gives."""
    if row.get("alike"):
        return "none: A and B alike on every sentence, seed by seed | –"
    return f"{row['detectable']:.4f} | {row['seeds_needed'] or '> 1,000'}"


def overrides(cell):
    """The settings a cell's runs train with, each key once at the value that wins (a later --set overrides an
    earlier one, as train.py reads them), in the order the plan gives them."""
    last = {}
    for setting in cell.get("set", []):
        key = setting.partition("=")[0]
        last.pop(key, None)
        last[key] = setting
    return list(last.values())


def report_lines(plan, results, timing, depth, path, plots):
    """The lines of the report at `path`: conditions, the count of finished runs, targets, verdicts, one
    table per cell (a cell not run yet says so), test-time depth, and the `plots` [(title, path)]."""
    label = lambda config: plan["labels"].get(config, config)  # noqa: E731
    metrics = {}
    for _, _, summaries in results.values():
        for s in summaries.values():
            if s is not None:
                metrics.update(s.get("metrics", {}))
    rel = lambda p: os.path.relpath(p, os.path.dirname(os.path.abspath(path)))  # noqa: E731
    done, planned = finished_runs(results)
    lines = ["# Results: recurrent vs standard encoders", "",
             # REPORT_HEADER: check_report_path replaces only a file that begins with these three lines
             f"Written by `python study.py --plan {plan['path']} --report {os.path.basename(path)}` from the "
             f"run records under `{plan['records']}/` (do not edit by hand: run the command again; "
             f"`--collect_only` writes it from the records alone).", "",
             # read back by reported_runs: a report is not replaced by one with fewer finished runs
             f"Finished runs: {done} of {planned}.", ""]
    rows = verdict_rows(plan, results, metrics)
    if plan["conclusions"]:
        lines += ["## Conclusions", "", "Each claim of the source write-ups, judged by the verdict below that tests "
                  "it (*confirmed* or *refuted* when its 95 % interval says so; otherwise *not settled*, with the "
                  "smallest difference the study could have seen). In brackets: the status with the test sentences "
                  "resampled too, where it differs, and the devices, where the two sides trained on different ones.",
                  "",
                  *[conclusion_line(c, conclusion_row(c, rows), plan["effect"]) for c in plan["conclusions"]], ""]
    lines += ["## Conditions", "",
              "- Training, as each run's log records it:", *[f"  - {line}" for line in run_conditions(results)],
              f"- Seeds: {plan['seeds']} per cell unless a cell says otherwise; mean ± 95 % t-interval over seeds.",
              f"- Budget: {plan.get('budget_note', 'as each cell sets')}",
              f"- {timing_note(plan)}",
              "- Verdicts: a claim that A beats B is *confirmed* if the 95 % paired t-interval of A − B over "
              "seeds lies on the better side, *refuted* if it lies on the worse side, *inconclusive* otherwise. "
              "The percentile bootstrap interval (10,000 resamples of the per-seed differences) is shown beside it "
              "but does not decide: with 3 seeds it excludes 0 whenever the three differences share a sign. "
              "McNemar's exact test compares the two models' per-example test predictions for each seed "
              "(p < 0.05: that seed's two runs disagree beyond what chance in the test examples explains).",
              *[f"- {n}" for n in plan["notes"]], ""]
    if plan["targets"]:
        lines += ["## Targets", "", "| target | measured | met |", "|---|---|---|"]
        for t in plan["targets"]:
            try:
                values = term_values(t["term"], results, t.get("metric", "test_accuracy"))
            except ConfigError:  # its runs do not report the metric (a pretraining run has no test split)
                values = {}
            if len(values) >= 1:
                mean = float(np.mean(list(values.values())))
                met = "yes" if (mean >= t["at_least"] if "at_least" in t else mean <= t["at_most"]) else "no"
                lines.append(f"| {t['what']} | {mean:.4f} (mean over seeds: {len(values)}; `{t['term']}`) | {met} |")
            else:
                lines.append(f"| {t['what']} | not run | – |")
        lines.append("")
    effect = plan["effect"]
    lines += ["## Verdicts", "", f"Rule: how the claim is judged on the 95 % t-interval over seeds (superiority: "
              f"A − B wholly above 0; non-inferiority: above −margin; equivalence: within ±margin). Bootstrap: the "
              f"95 % percentile interval of 10,000 resamples, of the seeds, and of the seeds and the test examples "
              f"together (accuracy on one test set): the two side by side show how much of the uncertainty is the "
              f"test set's size; the t-interval decides (where a verdict from the seeds + sentences interval would "
              f"differ, it is given in brackets). Detectable: "
              f"the smallest true difference these seeds find with 80 % power (from the spread of the per-seed "
              f"differences; none where A and B are right and wrong on the same sentences in every seed, as when "
              f"they are the same runs); seeds for {effect:g}: how many a true difference of {effect:g} would need. "
              f"Fixed: the "
              f"rule and seed count when the verdict's data began (the first run of the last of its cells), and any "
              f"change since (results/runs/plan_history.jsonl).", "",
              "| claim | rule | metric | seeds | A − B | 95 % t-interval | 95 % bootstrap, seeds | 95 % bootstrap, seeds + "
              "sentences | "
              f"McNemar per seed (A only / B only, p) | detectable | seeds for {effect:g} | verdict | fixed |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for claim, r in rows.items():
        if r["verdict"] == "not run":
            lines.append(f"| {r['claim']} | {rule_words(r)} | {r['metric']} | {r['n']} | – | – | – | – | – | – | – | "
                         f"not run | {r['fixed']} |")
            continue
        mc = "; ".join(f"{a}/{b}, p={p:.3g}" for a, b, p in r.get("mcnemar", [])) or "–"
        sent = f"[{r['sent_lo']:+.4f}, {r['sent_hi']:+.4f}]" if "sent_lo" in r else "–"
        word = f"**{r['verdict']}**" + (f" ({r['sent_verdict']} with sentences)" if r.get("sent_verdict", r["verdict"])
                                        != r["verdict"] else "")
        if r.get("across"):
            word += f" (across devices: {r['across']})"
        if "first_rule" in r:
            word += f"; under its first rule ({r['first_rule'][0]}): {r['first_rule'][1]}"
        lines.append(f"| {r['claim']} | {rule_words(r)} | {r['metric']} | {r['n']} | {r['mean']:+.4f} | "
                     f"[{r['lo']:+.4f}, {r['hi']:+.4f}] | [{r['boot_lo']:+.4f}, {r['boot_hi']:+.4f}] | {sent} | {mc} | "
                     f"{power_cells(r)} | {word} | {r['fixed']} |")
    for claim in plan["verdicts"]:
        if "cost" in claim:  # what A spent beyond B (a pretraining run), beside what it gained
            cost, fine = (term_values(t, results, "train_flops") for t in (claim["cost"], claim["a"]))
            minutes = term_values(claim["cost"], results, "train_minutes") if cost else {}
            if cost and fine:
                c, f = float(np.mean(list(cost.values()))), float(np.mean(list(fine.values())))
                lines += ["", f"Cost of \"{claim['claim']}\": `{claim['cost']}` spent {c:.3g} training FLOPs "
                              f"({float(np.mean(list(minutes.values()))):.1f} min{tokens_seen(claim['cost'], results)}), "
                              f"{c / f:.2f}× the {f:.3g} of each fine-tuning run."]
    lines += ["", "A and B of each claim, as `cell/config`:", ""]
    lines += [f"- {c['claim']}: A = `{c['a']}`, B = `{c['b']}`" +
              (f", on the test sentences of subset {c['subset']} ({', '.join(plan['subsets'][c['subset']])})"
               if "subset" in c else "") for c in plan["verdicts"]]
    lines += ["", "## Cells", ""]
    for name, (cell, runs, summaries) in results.items():
        rows = cell_rows(name, results, timing)
        lines += [f"### {name}: {cell.get('what', '')}", "",
                  f"Test set: {cell.get('test_set', '?')}. Overrides: `{' '.join(overrides(cell)) or 'none'}`.", ""]
        if not any(r["seeds"] for r in rows):
            why = f" It stopped: {cell['error']}" if cell.get("error") else ""
            lines += [f"Not run yet ({len(runs)} runs planned).{why}", ""]
            continue
        lines += ["| model | seeds | accuracy | F1 | precision | recall | MCC | params (non-emb.) | fp32 MB | "
                  "FLOPs/sample | latency bs=1 | throughput | train min | steps | train FLOPs |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        first = rows[0].get("latency_ms")
        for r in rows:
            if not r["seeds"]:
                lines.append(f"| {label(r['config'])} | 0 of {r['planned']} | not run |" + " |" * 12)
                continue
            acc = [fmt_ci(r[m]) if m in r else "–" for m in TEST_METRICS]
            params = f"{r['params'] / 1e6:.2f} M ({r['params_non_embedding'] / 1e6:.2f} M)"
            lines.append(f"| {label(r['config'])} | {len(r['seeds'])} of {r['planned']} | {' | '.join(acc)} | "
                         f"{params} | {fmt_num(r['size_mb'], '.1f')} | {fmt_num(r['flops_per_sample'], '.2e')} | "
                         f"{latency(r['latency_ms'], first)} | {fmt_num(r['throughput'], ',.0f')}{' /s' * bool(r['throughput'])} | "
                         f"{r['train_minutes']:.1f} | {', '.join(map(str, r['iters']))} | "
                         f"{fmt_num(r['train_flops'], '.2e')} |")
        lines.append("")
        lines += stop_lines(summaries) + tuned_lines(cell, results, label) + subset_lines(name, results, label)
        lines += pretraining_lines(summaries, label)
    if depth:
        loops = plan["depth_loops"]
        lines += ["## Test-time depth", "", "The trained weights scored with each number of loops, no retraining "
                  "(`python evaluate.py --ckpt ... --loops " + " ".join(map(str, loops)) + "`).", "",
                  "| run | " + " | ".join(f"{k} loops" for k in loops) + " |", "|---|" + "---|" * len(loops)]
        for term, rows in depth.items():
            for r in rows:
                accs = {x["n_loops"]: x["accuracy"] for x in r["loops"]}
                where = os.path.basename(os.path.dirname(r["ckpt"]))
                lines.append(f"| {term} {where} (trained: {r['loops'][0]['trained_loops']}) | " +
                             " | ".join(f"{accs[k]:.4f}" if k in accs else "–" for k in loops) + " |")
        lines.append("")
    if plots:
        lines += ["## Plots", ""]
        for title, p in plots:
            lines += [f"**{title}**", "", f"![{title}]({rel(p)})", ""]
    return lines


def stop_lines(summaries):
    """How a cell's finished runs stopped (train.py's reasons, with their counts), in a line."""
    stops = {}
    for s in summaries.values():
        if s is not None:
            stops[s["stopped"]] = stops.get(s["stopped"], 0) + 1
    return [f"How the runs stopped: {'; '.join(f'{why}: {n}' for why, n in sorted(stops.items()))}.", ""] if stops \
        else []


def tuned_lines(cell, results, label):
    """For a tuned cell: what each of its sweeps measured on validation at each value, and the value each
    config took."""
    lines = []
    for tune in cell_tunes(cell):
        sweep_runs = results[tune["sweep"]][1]
        parts = []
        for config in dict.fromkeys(run_config(name) for name, _ in sweep_runs):
            value, means = tuned_value(sweep_runs, config, tune["key"])
            chosen = ", ".join(chosen_settings(tune["key"], value)) if value is not None else None
            if value is None:
                parts.append(f"{label(config)}: its sweep is not finished")
                continue
            scores = ", ".join(f"{v}: {acc:.4f} ({loss:.4f})" for v, (acc, loss) in means.items())
            parts.append(f"{label(config)} {scores}; chosen {chosen}")
        lines += [f"{' and '.join(tune_keys(tune))} chosen by `{tune['sweep']}` on the validation split (validation accuracy of the "
                  f"best checkpoint, and its loss, mean over the sweep's seeds): " + "; ".join(parts) + ".", ""]
    return lines


def subset_lines(name, results, label):
    """A cell's test accuracy on the plan's subsets of its test sentences (negation, contrast), on those with
    none of their words, and on all of them: mean ± 95 % t-interval over seeds, per config."""
    cell, runs, summaries = results[name]
    subsets = cell["data"].get("test_subsets")
    if not subsets:
        return []
    n = len(cell["data"]["test_labels"])
    inside = {i for v in subsets.values() for i in v["index"]}
    groups = {**{k: v["index"] for k, v in subsets.items()}, "neither": [i for i in range(n) if i not in inside],
              "all": list(range(n))}
    lines = ["Accuracy on the test sentences that hold a word of each subset (the plan's `subsets`), on those that "
             "hold none, and on all (mean ± 95 % t-interval over seeds):", "",
             "| model | " + " | ".join(f"{k} ({len(v):,})" for k, v in groups.items()) + " |",
             "|---|" + "---|" * len(groups)]
    for config in dict.fromkeys(c for c, _ in runs):
        seeds = [s for s in finished_seeds(summaries, config) if "test_predictions" in summaries[(config, s)]]
        if not seeds:
            continue
        cells_ = []
        for index in groups.values():
            acc = correct(results, name, config, seeds, index).mean(axis=1)
            cells_.append(fmt_ci(mean_ci(acc) if len(acc) > 1 else (float(acc[0]), math.nan)))
        lines.append(f"| {label(config)} | " + " | ".join(cells_) + " |")
    return lines + [""]


def pretraining_lines(summaries, label):
    """For a cell's masked-LM configs, which have no test set: their held-out figures at the end of
    training (mean ± 95 % interval over seeds), a paragraph each."""
    lines = []
    for config in dict.fromkeys(n for (n, _), s in summaries.items() if s and s.get("task") == "mlm"):
        done = [s for (n, _), s in summaries.items() if n == config and s]
        ci = {m: fmt_ci(mean_ci([s[f"final_val_{m}"] for s in done]), digits)
              for m, digits in (("loss", 3), ("accuracy", 4), ("ppl", 1))}
        lines += [f"{label(config)}, on the corpus's held-out texts at the end of training ({done[0]['final_val_n']:,} "
                  f"masked tokens, masked the same way in every evaluation; {len(done)} seeds): masked-token loss "
                  f"{ci['loss']}, accuracy {ci['accuracy']}, perplexity {ci['ppl']}.", ""]
    return lines
