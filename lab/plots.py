"""
The report's pictures (RESULTS.md's results/*.png): per training set, accuracy against latency and against
non-embedding parameters with their Pareto frontiers; every cell's learning curves; the length subsets'
histograms; accuracy against test-time depth. matplotlib is imported inside draw_plots (and drawn_data, which
it calls), and only there. The layout is rounded (tight_layout) so that the pictures come out the same on every
machine, and each PNG carries a digest of the data it draws (drawn_digest), which another Matplotlib, whose
pixels differ, draws the same.
"""

import hashlib
import itertools
import json
import math
import os
import re
import textwrap

import numpy as np

import data
from lab.cells import cell_rows, finished_seeds
from lab.plan import grid_settings
from lab.runs import log_records, run_file, timing_conditions
from lab.stats import mean_ci, pareto_front

# the PNG text key under which each plot carries the digest of what it draws (drawn_data)
DRAWN_KEY = "Drawn data sha256"
BUBBLE_PER_MB = 12  # a frontier plot's bubble area, in points^2, per MB of fp32 weights
FRONTIER_NUMBERED = 12  # a frontier plot with more models numbers only the points on its frontiers


def read_log(path):
    """The evaluation records of a run's log.jsonl: [(iter, val accuracy or None, val loss)]."""
    return [(r["iter"], r.get("val_accuracy"), r.get("val_loss")) for r in log_records(path, "eval")]


def tight_layout(fig, **kwargs):
    """fig.tight_layout(**kwargs), its result rounded to steps of 2**-20 of the figure (about a thousandth of
    a pixel), so that a plot comes out the same on every machine. tight_layout measures the artists' extents,
    and on a log axis a spine's ends go through numpy's log10, whose last bit depends on the CPU and the numpy
    version (its AVX-512 code and its AVX2 code round differently): the edge of the right panel of
    frontier_sst2_glue_compact.png, exactly on a half pixel (1303.5), was snapped to one pixel column or the
    next. The steps are binary fractions so that an exact value (a pad in points, a font metric in 1/64
    pixel) does not fall halfway between two of them."""
    fig.tight_layout(**kwargs)
    p = fig.subplotpars
    fig.subplots_adjust(**{k: round(getattr(p, k) * 2**20) / 2**20
                           for k in ("left", "right", "bottom", "top", "wspace", "hspace")})
    fig.set_layout_engine(None)  # laid out: savefig draws the figure once, not once more to lay it out again


def drawn_data(fig):
    """What a figure draws, as plain data: per panel its axis scales, title and labels, each labelled line's
    label and each line's points, each scatter's points and sizes, each error bar's segments, each bar's box,
    its texts and its legend's; then the figure's own texts. Not how (colours, fonts, where the ticks fall):
    that is Matplotlib's, and another version draws the same data with other pixels. Numbers to 10
    significant digits, so that a last bit of arithmetic does not count."""
    from matplotlib.collections import LineCollection, PathCollection
    from matplotlib.patches import Rectangle

    def numbers(values):
        return [format(float(v), ".10g") for v in np.ravel(np.ma.filled(np.ma.asarray(values, dtype=float), np.nan))]

    panels = []
    for ax in fig.axes:
        legend = ax.get_legend()
        panels.append(dict(
            shown=ax.axison, scales=[ax.get_xscale(), ax.get_yscale()],
            labels=[ax.get_title(), ax.get_xlabel(), ax.get_ylabel()],
            lines=[[line.get_label() if not line.get_label().startswith("_") else "", numbers(line.get_xydata())]
                   for line in ax.get_lines()],
            scatters=[[numbers(c.get_offsets()), numbers(c.get_sizes())] for c in ax.collections
                      if isinstance(c, PathCollection)],
            bars=[numbers(np.concatenate(c.get_segments()) if c.get_segments() else []) for c in ax.collections
                  if isinstance(c, LineCollection)],
            boxes=[numbers([r.get_x(), r.get_y(), r.get_width(), r.get_height()]) for r in ax.patches
                   if isinstance(r, Rectangle)],
            texts=[[t.get_text(), *numbers(getattr(t, "xy", t.get_position()))] for t in ax.texts],
            legend=[t.get_text() for t in legend.get_texts()] if legend else []))
    return dict(panels=panels, texts=[t.get_text() for t in fig.texts])


def drawn_digest(fig):
    """sha256 of drawn_data(fig): what the plot shows, the same under any Matplotlib. Saved in the PNG (its
    text chunk DRAWN_KEY), so that the plots can be compared without comparing pixels."""
    return hashlib.sha256(json.dumps(drawn_data(fig), sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def one_timing_pass(records, timed):
    """The points of `timed` ([(cell, row)]) that one timing pass measured, and the cells left out: latencies
    of different passes (study.py --time, and a --cells pass of its own, whose conditions stand in the cell's
    folder as timing.json) do not compare, so a latency panel shows the pass that timed the most of them."""
    passes = [json.dumps(timing_conditions(records, n), sort_keys=True) for n, _ in timed]  # null: the plan's
    kept = max(dict.fromkeys(passes), key=passes.count, default=None)
    left_out = list(dict.fromkeys(n for (n, _), p in zip(timed, passes) if p != kept))
    return [item for item, p in zip(timed, passes) if p == kept], left_out


def draw_plots(plan, results, timing, depth, folder, label):
    """The report's PNGs in `folder`: per test set, accuracy against latency (bubble area = fp32 size)
    and against non-embedding parameters, each with its Pareto frontier; the learning curves of every
    cell; the length histograms of the short/long subsets; accuracy against test-time depth. Returns
    [(title, path)]. matplotlib is imported here, and only here."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    os.makedirs(folder, exist_ok=True)
    made = []

    def save(fig, file, title, layout=True):
        path = os.path.join(folder, file)
        if layout:
            tight_layout(fig)
        fig.savefig(path, dpi=110, metadata={DRAWN_KEY: drawn_digest(fig)})
        plt.close(fig)
        made.append((title, path))

    # one frontier per training set (a cell's prepared dataset, data.json): models trained on other data
    # (a subset, the other protocol) are not points of the same trade-off, even on the same test set; nor
    # are a grid's, trained at a budget of its own: a grid cell has a frontier to itself
    groups = {}  # (training set, test set, grid cell or "") -> [(cell, row)] with a test accuracy
    for name in results:
        cell = results[name][0]
        trained_on = cell["data"].get("dataset", name)
        for row in cell_rows(name, results, timing):
            if "test_accuracy" in row:
                key = (trained_on, cell.get("test_set", name), name if cell.get("grid") else "")
                groups.setdefault(key, []).append((name, row))
    for (trained_on, test_set, grid_cell), items in groups.items():
        if len(items) < 2:
            continue
        # past a dozen points the numbers run together: then only each panel's frontier is numbered
        numbered = set()
        timed, other_pass = one_timing_pass(plan["records"], [(n, r) for n, r in items if r.get("latency_ms")])
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
        for ax, key, xlabel, pts in ((axes[0], "latency_ms", "latency at batch 1 (ms, one CPU thread)", timed),
                                     (axes[1], "params_non_embedding", "non-embedding parameters", items)):
            if not pts:
                ax.text(0.5, 0.5, "not timed yet (study.py --time)", ha="center", va="center", transform=ax.transAxes)
                ax.set_xlabel(xlabel)
                continue
            xy = [(r[key], r["test_accuracy"][0]) for _, r in pts]
            # bubble area (points^2) proportional to the fp32 size, on the latency panel
            sizes = [BUBBLE_PER_MB * (r.get("size_mb") or 0) for _, r in pts] if key == "latency_ms" else 30
            ax.scatter([p[0] for p in xy], [p[1] for p in xy], s=sizes, alpha=0.45, edgecolors="k")
            ax.errorbar([p[0] for p in xy], [p[1] for p in xy], fmt="none", ecolor="grey", lw=0.8,
                        yerr=[0 if math.isnan(r["test_accuracy"][1]) else r["test_accuracy"][1] for _, r in pts])
            front = pareto_front(xy)
            for i, (x, y) in enumerate(xy):  # numbers, not names: the legend below says which is which
                k = items.index(pts[i])
                if len(items) <= FRONTIER_NUMBERED or i in front:
                    ax.annotate(str(k + 1), (x, y), fontsize=7, ha="center", va="center")
                    numbered.add(k)
            if len(front) > 1:
                ax.plot([xy[i][0] for i in front], [xy[i][1] for i in front], "r--", lw=1, label="Pareto frontier")
                ax.legend(fontsize=7, loc="lower right")
            if max(p[0] for p in xy) / max(min(p[0] for p in xy), 1e-12) > 20:  # a log axis only for a wide range
                ax.set_xscale("log")
                ax.xaxis.set_major_formatter(matplotlib.ticker.LogFormatterSciNotation(labelOnlyBase=True))
                ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            ax.margins(0.15)
            ax.set_xlabel(xlabel)
            ax.set_ylabel("test accuracy (mean over seeds)")
        point_label = (lambda c: " ".join(grid_settings(c))) if grid_cell else label  # noqa: E731
        key = "; ".join(f"{i + 1} {point_label(r['config'])}" + ("" if grid_cell else f" [{n}]")
                        for i, (n, r) in enumerate(items) if i in numbered)
        if len(items) > FRONTIER_NUMBERED:
            key = f"{len(items)} models, the frontiers' numbered (the others: the cell's table): {key}"
        axes[0].set_title(f"bubble area ∝ fp32 size ({BUBBLE_PER_MB:g} pt² per MB); bars: 95 % CI over seeds"
                          + (f"\nlatencies of one timing pass; {', '.join(other_pass)}: another pass, in the tables"
                             if other_pass else ""), fontsize=8)
        fig.suptitle(f"trained on {trained_on}" + (f", the {grid_cell} cell at its own budget" if grid_cell else "")
                     + f", tested on {test_set}", fontsize=10)
        fig.text(0.01, 0.01, textwrap.fill(key, 190), fontsize=6.5, va="bottom")
        tight_layout(fig, rect=(0, 0.04 + 0.02 * (len(key) // 190), 1, 1))
        save(fig, f"frontier_{re.sub(r'[^A-Za-z0-9]+', '_', grid_cell or trained_on).strip('_')}.png",
             f"Accuracy against latency and non-embedding parameters (trained on {trained_on}"
             + (f", the {grid_cell} cell" if grid_cell else "") + f"; {test_set})", layout=False)

    curves = [(name, cell, runs, summaries) for name, (cell, runs, summaries) in results.items()
              if any(s is not None for s in summaries.values())]
    if curves:
        cols = 3
        rows = math.ceil(len(curves) / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
        for ax, (name, cell, runs, summaries) in zip(axes.flat, curves):
            # a colour and a legend entry per config; in a grid, per value of its first setting (its width)
            group = (lambda c: grid_settings(c)[0]) if cell.get("grid") else label
            colors = dict(zip(dict.fromkeys(group(n) for n, _ in runs),
                              itertools.cycle(plt.rcParams["axes.prop_cycle"].by_key()["color"])))
            shown = set()
            for config in dict.fromkeys(n for n, _ in runs):
                for s in finished_seeds(summaries, config):
                    log = read_log(run_file(*runs[(config, s)][1:], "log.jsonl"))
                    use_acc = log and log[0][1] is not None
                    g = group(config)
                    ax.plot([x[0] for x in log], [x[1] if use_acc else x[2] for x in log], color=colors[g], lw=1,
                            alpha=0.8, label=None if g in shown else g)
                    shown.add(g)
                    ax.set_ylabel("validation accuracy" if use_acc else "validation loss")
            ax.set_title(name, fontsize=9)
            ax.set_xlabel("step")
            ax.legend(fontsize=6)
        for ax in list(axes.flat)[len(curves):]:
            ax.axis("off")
        save(fig, "learning_curves.png", "Learning curves (validation, every seed)")

    # the length subsets' training splits beside the whole one they are cut from (data.json of each cell)
    subsets = {cell["data"]["dataset"]: next(iter(runs.values()))[1] for cell, runs, _ in results.values()
               if cell["data"].get("train_lengths")}
    counts = {cell["data"]["dataset"]: cell["data"]["train_lengths"] for cell, _, _ in results.values()
              if cell["data"].get("train_lengths")}
    lengths = {}
    for folder_, cfg in subsets.items():
        if re.fullmatch(r"(short|long)\d+", cfg.get("subset", "")):
            lengths[cfg["subset"]] = counts[folder_]
            whole = os.path.basename(data.dataset_dir(cfg["dataset"], cfg.get("protocol"), cfg.get("vocab"), "", "",
                                                      cfg.get("max_len")))
            if whole in counts:
                lengths["all"] = counts[whole]
    if len(lengths) > 1:
        fig, ax = plt.subplots(figsize=(6.5, 3.6))
        top = max(int(n) for c in lengths.values() for n in c)
        for name, c in sorted(lengths.items()):
            n = sum(c.values())
            ax.hist([int(k) for k in c], bins=range(1, top + 2), weights=[v / n for v in c.values()], alpha=0.5,
                    label=f"{name} (n={n:,})")
        ax.set_xlabel("tokens per training example (incl. [CLS])")
        ax.set_ylabel("share of the split")
        ax.legend(fontsize=8)
        save(fig, "length_histograms.png", "Length histograms of the short / long subsets' training splits")

    if depth:
        fig, ax = plt.subplots(figsize=(6.5, 3.8))
        for term, rows in depth.items():  # one line per run group: the mean over its seeds, bars its 95 % CI
            loops = sorted({x["n_loops"] for r in rows for x in r["loops"]})
            accs = [[x["accuracy"] for r in rows for x in r["loops"] if x["n_loops"] == k] for k in loops]
            stats = [mean_ci(a) if len(a) > 1 else (a[0], 0.0) for a in accs]
            ax.errorbar(loops, [m for m, _ in stats], yerr=[h for _, h in stats], fmt="o-", lw=1, capsize=3,
                        label=f"{term} ({len(rows)} seeds; trained with {rows[0]['loops'][0]['trained_loops']})")
        ax.set_xticks(sorted({x["n_loops"] for rows in depth.values() for r in rows for x in r["loops"]}))
        ax.set_xlabel("loops at test time")
        ax.set_ylabel("test accuracy (mean over seeds)")
        ax.legend(fontsize=7)
        save(fig, "test_time_depth.png", "Test-time depth: accuracy against the number of loops (each seed)")
    return made
