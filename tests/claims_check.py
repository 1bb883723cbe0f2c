"""
What the pages say of the study verdicts and of the records, checked (issues 54 and 64). tests/test_claims.py
runs it on every page and plants overclaims in copies of them; this module only reads.

The pages are README.md, every docs/*.md (whichever exist: no sentence of a page is assumed) and RESULTS.md's
parts written by hand (the plan's notes, its conclusions' notes and its budget_note). A page's problems are
page_problems(where, text): [] when it says nothing its verdicts and records do not. Four kinds:

1. Comparisons (comparison_problems). A sentence compares when it holds a word of COMPARATIVE once what is not
   a claim is taken out (NOT_CLAIMS, each with its reason: code, a claim's name in quotes, the verdict words
   defined, a question, a hypothesis, a code path's speed): a gain or a loss (GAIN, LOSS: beats, outperforms,
   ahead, above both, better, helps, leads, behind, worse, hurts, trails), an intensifier (INTENSE: clearly,
   significantly), a sameness (SAME: level, on par, matches, meets), no effect (NULL: neither moves anything,
   makes no difference), or a verdict word (VERDICT: confirmed, refuted, not settled, inconclusive, in their
   forms); meeting a target is no comparison. Such a sentence carries FLAG, 'no verdict judges it' (or 'them'),
   the flag the pages use for what they compare unjudged, or it quotes a verdict's interval (VERDICT SOURCES
   below), and then:
   - every interval it quotes is one a verdict source holds;
   - its words are no stronger than those intervals: a gain, loss or intensifier not negated ('does not help'
     asserts none) needs an interval that excludes 0, and a sentence that quotes an interval holding 0 says so
     (HEDGE); an intensifier needs one even where the sentence is flagged (what no verdict judges is not
     significant); sameness and no effect need an equivalence verdict that is confirmed, and fail otherwise:
     an interval that holds 0 shows no difference was found, not that there is none;
   - a gain or loss asserted on an encoder verdict whose t-interval excludes 0 but whose interval with the test
     sentences resampled holds it is said "over seeds" in its own clause;
   - its direction agrees: quoted as the sentence's subject minus the other, gains above 0 (for accuracy; below
     for a loss), losses the other way.
2. Verdict words (verdict_word_problems), each on its own, against the encoder verdict it speaks of, never
   against another row the sentence quotes. Its interval: the first quoted after it, before the next verdict
   word or ; or :, else the one before it, else that of the verdict word or part before it ('the same
   interval'). Its rule: the one named after it ('confirmed as non-inferiority'), else before it ('"comparable"
   is not settled'), else that of the verdict word before it in its part (superiority: more accurate, beats;
   non-inferiority: keeps its accuracy; equivalence: comparable). The word is that row's verdict under each
   rule it names, the verdict under the first rule where it says 'first planned' (or 'the first reading'),
   and the seeds + sentences verdict where the words right after it are 'with the (test) sentences'. Where
   rows of its interval read differently and it names no rule, it names one. A confirmed or refuted whose
   seeds + sentences verdict differs says 'over seeds' before the next verdict word (or gives that status in
   brackets right after it), and its sentence gives that status with its interval; the sentence says 'after'
   where the row's rule or seeds changed after its data began, names the first rule where that changed, and
   says 'across devices' where the two sides trained on different devices.
3. Figures a record holds (figure_problems). On the encoder pages (README.md, docs/encoders.md, the plan's
   notes) every mean ± interval to 4 decimals is one RESULTS.md holds as a pair, every other 4-decimal figure
   and every factor to 2 decimals ('1.79×') one it holds (README.md may quote the docs pages too, and
   docs/encoders.md the grid's loop means, which RESULTS.md's grid table gives: derived_figures). On Pig
   Latin's page every 4-decimal mean ± interval is the mean ± 95 % t half-width over seeds of a figure of a
   committed config's records. In a paragraph that links a committed JSON record (results/.../step_speed.json), every
   factor to 2 decimals and every time to 3 ('4.714 s') is a number of that record at that precision. A
   sentence that says its figures were not recorded (UNRECORDED) is left out, and needs to say so.
4. Disclosures the pages owe (disclosure_problems, OWED): a paragraph that quotes a verdict of a cell that a
   cell with verdicts superseded says 'superseded'; one that quotes heldout_best's names its plateau schedule;
   a sentence that compares with the taught transformer (piglatin_transformer_compounds) says it was never
   tuned; a paragraph that gives Mamba large's verdict against the transformer says it was untuned. And (3)
   makes a figure no record holds say it was not recorded.
A verdict table's row (a table row of a page with an interval and better, worse, higher, lower, no significant
difference or inconclusive) says what its intervals say (table_problems).

VERDICT SOURCES: the encoder study's rows (RESULTS.md's Verdicts table: each row's t-interval and bootstrap
intervals), the paired t-interval of two Pig Latin configs' committed records on one figure (results/piglatin/,
recomputed with lab.stats.paired_t, as study.py pairs them), and, where no record is committed (the char GPT,
Llama, Pig Latin's first split), a verdict table of a page.
"""

import functools
import glob
import json
import os
import re

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def page_text(where):
    return open(os.path.join(REPO_ROOT, where), encoding="utf-8").read()


def pages():
    """The pages that exist: README.md and docs/*.md, as (where, path) in that order."""
    paths = [os.path.join(REPO_ROOT, "README.md"), *sorted(glob.glob(os.path.join(REPO_ROOT, "docs", "*.md")))]
    return [os.path.relpath(p, REPO_ROOT) for p in paths if os.path.exists(p)]


def hand_written_parts():
    """[(where, text)]: the pages, and RESULTS.md's parts written by hand, in the plan."""
    parts = [(where, page_text(where)) for where in pages()]
    plan = {}
    exec(page_text(os.path.join("config", "encoders_study.py")), plan)  # its settings, unchecked
    parts += [("config/encoders_study.py notes", n) for n in plan["notes"]]
    parts += [(f"config/encoders_study.py conclusion {c['claim']!r}", c["note"]) for c in plan["conclusions"]
              if "note" in c]
    return parts + [("config/encoders_study.py budget_note", plan["budget_note"])]


# -----------------------------------------------------------------------------
# words

W = r"(?<![\w-])({})(?![\w-])"  # a whole word, not part of a hyphenated one (char-level, top-level)
GAIN = re.compile(W.format(r"beat|beats|beaten|beating|outperforms?|outperformed|outperforming|ahead|above both|"
                           r"better|helps?|helped|helping|leads? (?:the|both|its)"), re.I)
LOSS = re.compile(W.format(r"behind|worse|hurts?|hurting|trails?|trailed"), re.I)
INTENSE = re.compile(W.format(r"clearly|significantly|decisively"), re.I)
SAME = re.compile(W.format(r"level|on par|par with|match|matches|matched|matching|as good as|as accurate as|"
                           r"indistinguishable|(?:meets|meeting)(?!\W+(?:\w+\W+){0,4}?(?:target|goal|moonshot))"),
                  re.I)  # meeting a target is no comparison of two models
NULL = re.compile(r"(?<![\w-])(?:(?:neither|nothing|none)\W+(?:\w+\W+){0,2}?(?:moves?|changes?|matters?)(?:\W+"
                  r"anything)?|moves? nothing|changes? nothing|makes? no difference|ha(?:s|ve) no effect)(?![\w-])",
                  re.I)
VERDICT = re.compile(r"(?<![\w-])(confirmed|refuted|inconclusive|unsettled|"
                     r"(?:not|no longer|neither|nor)(?:\W+\w+){0,2}?\W+settled)(?![\w-])", re.I)
COMPARATIVE = re.compile("|".join([GAIN.pattern, LOSS.pattern, SAME.pattern, NULL.pattern,
                                   VERDICT.pattern, W.format("settled")]), re.I)
NEGATED = re.compile(r"\b(not|no|nor|never|neither|none|without)\b(\W+[\w*]+){0,3}\W*$", re.I)  # before the word
HEDGE = re.compile(r"not significant|no significant difference|not settled|neither (is )?settled|inconclusive|"
                   r"not told apart|not found|not shown", re.I)
FLAG = re.compile(r"no verdict judges (it|them)\b", re.I)
OVER_SEEDS = re.compile(r"over (the |its |\d+ )?seeds", re.I)
WITH_SENTENCES = re.compile(r"with (the )?(test )?sentences|sentences resampled", re.I)
RULE_CUES = {  # what names a rule in a sentence, around its verdict word
    "superiority": re.compile(r"superiority|more accurate|(?<![\w-])(beats?|outperforms?)(?![\w-])", re.I),
    "non-inferiority": re.compile(r"non-inferiority|keeps? (the baseline's|its) accuracy", re.I),
    "equivalence": re.compile(r"equivalence|comparable", re.I),
}
FIRST_RULE = re.compile(r"first (planned|rule|reading|read)", re.I)
NOT_CLAIMS = {  # what a sentence says that is not a claim, taken out of it before it is read: pattern -> why
    r"`[^`]*`": "code: a name, an option, a command (`--help`, `piglatin_transformer_compounds`)",
    r"\"[^\"]*\"|“[^”]*”": "a claim's name in quotes (\"the recurrent model beats the bag of words\" is "
                         "refuted): the claim the verdict judges, not the page's",
    r"\*?confirmed\*?, \*?refuted\*?,? (or|and) \*?(inconclusive|not settled)\*?": "the verdict words, defined",
    r"confirmed: [^,;]*, refuted: [^,;]*, inconclusive: [^,;.]*": "the verdict words, defined for one claim",
    r"the recurrent model ahead refutes the claim, behind confirms it": "how a verdict reads, defined for one claim",
    r"at most one point worse than the baseline(, if worse at all)?": "the non-inferiority rule, defined",
    r"\*better\* or \*worse\*|better / worse|\*higher\* or \*lower\*, since neither direction is better|"
    r"which way is better|with no better side": "study.py's verdict words, defined",
    r"[^.:;()?]*\?": "a question (does normalizing the embeddings help?)",
    r"\bwould (\w+ ){0,4}(help|hurt)\w*": "a hypothesis: what a change would do, or what a result would mean",
    r"paths that did not help": "speed.md's code paths that measured no faster: code, timed, not a study's claim",
    r"the better of eager and compiled": "a GPU target's definition (whichever path is faster)",
    r"the code behind": "code: what prints a table",
    r"\b(with (its|their)|command.s|argparse.s) help\b": "a command's help text: code",
    r"\btop level\b": "the layout of the code",
    r"\bat rounding level\b": "a numerical error's size (the scans agree to float32's rounding): code, not a study's",
    r"which move nothing": "Pig Latin's rule (a vowel word moves no consonant), not an effect",
}
QUOTES = r"\"[^\"]*\"|“[^”]*”"


def mask(sentence, keep=()):
    """The sentence with what is not a claim (NOT_CLAIMS, but those in `keep`) blanked out, each character a
    space, so that a position in it is the same position in the sentence."""
    for pattern in NOT_CLAIMS:
        if pattern not in keep:
            sentence = re.sub(pattern, lambda m: " " * len(m.group(0)), sentence, flags=re.I)
    return sentence


def claim_text(sentence):
    """The sentence with what is not a claim (NOT_CLAIMS) taken out."""
    return mask(sentence)


FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def blocks(text):
    """The blocks of a page's prose (code blocks left out): its paragraphs, list items and table rows, each
    one line; headings are blocks of their own."""
    out, block = [], []
    for line in FENCE.sub("", text).splitlines():
        if not line.strip() or re.match(r"\s*(#|\||[-*] |\d+\. )", line):
            out.append(" ".join(block))
            block = []
        if line.strip():
            block.append(line.strip())
    out.append(" ".join(block))
    return [b for b in out if b]


def split_sentences(block):
    """A block's sentences: split at a full stop that ends a sentence."""
    return [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z*\"'(\[`])", block) if s]


def sentences(text):
    """The sentences of a page's prose, block after block."""
    return [s for b in blocks(text) for s in split_sentences(b)]


# -----------------------------------------------------------------------------
# intervals and the verdict sources

INTERVAL = re.compile(r"\[\s*([+\-−]?\d+\.\d+),\s*([+\-−]?\d+\.\d+)\s*\]")
VERDICT_CELL = re.compile(r"\*\*(\w+)\*\*(?: \((\w+) with sentences\))?(?: \(across devices: ([^)]*)\))?"
                          r"(?:; under its first rule \((\w[\w-]*)[^)]*\): (\w+))?$")


def number(text):
    return float(text.replace("−", "-"))


def interval(text):
    """(lo, hi) of the first '[lo, hi]' in text, as numbers (a '−' is a minus)."""
    lo, hi = INTERVAL.search(text).groups()
    return tuple(round(number(x), 4) for x in (lo, hi))


def quoted_intervals(text):
    """[(lo, hi, decimals)] of every '[lo, hi]' in text."""
    return [(number(m.group(1)), number(m.group(2)), len(m.group(1).split(".")[1])) for m in INTERVAL.finditer(text)]


def verdict_rows_of(report):
    """The Verdicts table of a report (RESULTS.md's text), a dict a row: its claim, rule, t-interval, seeds
    bootstrap interval, seeds + sentences interval (or None), its difference A − B, verdict, verdict with
    sentences, devices (or None), its first rule and the verdict under it (or None), and whether its rule or
    seeds changed after its data began. Rows not run are left out."""
    section = report.split("\n## Verdicts\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("| ") or line.startswith("| claim |"):
            continue
        cells = [c.strip() for c in line.strip("| ").split(" | ")]
        claim, rule, _, _, _, t, boot, sent, _, _, _, verdict, fixed = cells
        if verdict == "not run":
            continue
        word, with_sentences, across, first_rule, first_verdict = VERDICT_CELL.match(verdict).groups()
        rows.append(dict(claim=claim, rule=rule.split(",")[0], diff=number(cells[4]), t=interval(t),
                         boot=interval(boot), sentences=interval(sent) if sent != "–" else None, verdict=word,
                         with_sentences=with_sentences or word, across=across, first_rule=first_rule,
                         first_verdict=first_verdict, changed=not fixed.startswith("as planned")))
    return rows


def encoder_source(rows):
    """The encoder study's intervals: each RESULTS.md verdict row's t-interval and bootstrap intervals."""
    return [dict(lo=r[k][0], hi=r[k][1], better="higher", where=f"RESULTS.md '{r['claim']}'", row=r)
            for r in rows for k in ("t", "boot", "sentences") if r[k]]


PIGLATIN_RECORDS = ["results/piglatin/runs", "results/piglatin/tuned", "results/piglatin/superseded/leaky_split"]


def piglatin_records():
    """{split: {config: {seed: {figure: value}}}} of the committed Pig Latin records: runs/ and tuned/ are one
    split ('now'), superseded/leaky_split/ the first."""
    split = {}
    for folder in PIGLATIN_RECORDS:
        for path in sorted(glob.glob(os.path.join(REPO_ROOT, folder, "*", "seed*", "summary.json"))):
            config, seed = path.split(os.sep)[-3], path.split(os.sep)[-2]
            figures = {k: v for k, v in json.load(open(path)).items()
                       if isinstance(v, (int, float)) and not isinstance(v, bool)}
            split.setdefault("first" if "superseded" in folder else "now", {}).setdefault(config, {})[seed] = figures
    return split


def piglatin_source(split):
    """The paired t-interval (lab.stats.paired_t: 95 %, paired by seed) of every figure two Pig Latin configs'
    committed records share, for every two configs of one split with the same seeds, either way round; and,
    within each config, its compounds of known parts against those of new parts. What study.py's table and
    `--stage confirm` print, from the records alone."""
    import lab.stats

    out = []

    def add(a, b, where, better):
        _, lo, hi = lab.stats.paired_t(a, b)
        out.extend([dict(lo=lo, hi=hi, better=better, where=where, row=None),
                    dict(lo=-hi, hi=-lo, better=better, where=f"{where}, the other way", row=None)])

    for name, configs in split.items():
        for a, b in [(a, b) for a in sorted(configs) for b in sorted(configs) if a < b]:
            seeds = sorted(set(configs[a]) & set(configs[b]))
            if len(seeds) < 2:
                continue
            for k in sorted(set.intersection(*(set(configs[c][s]) for c in (a, b) for s in seeds))):
                add([configs[a][s][k] for s in seeds], [configs[b][s][k] for s in seeds],
                    f"{b} − {a}, {k} ({name} split)", "lower" if "loss" in k else "higher")
        for c, runs in configs.items():
            for k in [k for k in runs[sorted(runs)[0]] if k.endswith("_known_parts")]:
                new = k.replace("_known_parts", "_new_parts")
                add([runs[s][new] for s in sorted(runs)], [runs[s][k] for s in sorted(runs)],
                    f"{c}: {k} − new parts ({name} split)", "higher")
    return out


TABLE_VERDICT = re.compile(r"\b(better|worse|higher|lower|no significant difference|inconclusive|not significant)\b",
                           re.I)


def table_source(text):
    """The intervals of a page's verdict tables: every table row that gives an interval and a verdict read from it
    (better, worse, higher, lower, no significant difference, inconclusive)."""
    return [dict(lo=lo, hi=hi, better="lower" if re.search(r"loss|perplexity|gradient norm", line, re.I) else "higher",
                 where="a verdict table of the page", row=None)
            for line in FENCE.sub("", text).splitlines() if line.startswith("|") and TABLE_VERDICT.search(line)
            for lo, hi, _ in quoted_intervals(line)]


def table_problems(line):
    """What a verdict table's row says beyond its intervals: an interval that holds 0 in a row that does not say
    so, or one that excludes 0 in a row with no verdict (better, worse, higher, lower) for it."""
    if not line.startswith("|") or not TABLE_VERDICT.search(line):
        return []
    spans = quoted_intervals(line)
    problems = []
    if any(lo <= 0 <= hi for lo, hi, _ in spans) and not HEDGE.search(line):
        problems.append("gives an interval that holds 0 but no 'no significant difference' or 'inconclusive'")
    if any(not lo <= 0 <= hi for lo, hi, _ in spans) and not re.search(r"\b(better|worse|higher|lower)\b", line):
        problems.append("gives an interval that excludes 0 but no verdict for it")
    return problems


def source_of(lo, hi, decimals, sources):
    """The sources' entries that hold the quoted interval at the precision it is quoted to."""
    tolerance = 0.5 * 10 ** -decimals + 1e-9
    return [s for s in sources if abs(s["lo"] - lo) <= tolerance and abs(s["hi"] - hi) <= tolerance]


def results_rows(text):
    """{(cell, model label): [the row's cells]} of RESULTS.md's cell tables (each cell's first table; the ones
    after it, by subset of the test sentences, have other columns)."""
    rows, cell, in_table = {}, None, False
    for line in text.splitlines():
        if line.startswith("### "):
            cell, in_table = line[4:].split(":")[0], False
        elif cell and line.startswith("| ") and not line.startswith(("| model |", "|---")):
            parts = [p.strip() for p in line.strip("|").split("|")]
            rows[(cell, parts[0])] = parts
            in_table = True
        elif in_table and not line.strip():
            cell = None  # the cell's first table has ended
    return rows


# -----------------------------------------------------------------------------
# what a page's checks read, read once

class Context:
    """The committed verdicts and records the pages are checked against: RESULTS.md (which the fresh-clone test
    holds to what the records write; not that test's fixture: under pytest-xdist another process would write
    the whole report again for it), its verdict rows, every verdict source, the Pig Latin records, the cells
    superseded by a cell that has verdicts, and the pages as committed."""

    def __init__(self):
        self.results = page_text("RESULTS.md")
        self.rows = verdict_rows_of(self.results)
        self.parts = hand_written_parts()
        self.piglatin = piglatin_records()
        self.sources = (encoder_source(self.rows) + piglatin_source(self.piglatin)
                        + [e for _, text in self.parts for e in table_source(text)])
        headings = dict(re.findall(r"^### ([\w.-]+): (.*)$", self.results, re.M))
        judged = {row_cell(r, headings) for r in self.rows}
        self.superseded = {c for c, h in headings.items()
                           if (m := re.search(r"superseded by (\w+)", h)) and m.group(1) in judged}
        self.headings = headings
        self.docs = {where: page_text(where) for where in pages() if where.startswith("docs/")}
        self.derived = derived_figures(self.results)
        self.piglatin_means = piglatin_means(self.piglatin)
        self.held, self.checked = {}, {}  # filled as pages are checked: figures each page may give, blocks' problems


@functools.lru_cache(maxsize=None)
def context():
    return Context()


def row_cell(row, headings):
    """The cell a verdict row judges where its claim names one ('recurrent beats baseline: sst2_glue'), else None."""
    cell = row["claim"].rsplit(": ", 1)[-1]
    return cell if cell in headings else None


# -----------------------------------------------------------------------------
# 1. comparisons

def clauses(text):
    """A sentence's clauses: the text between ; and : and each bracket's content."""
    out, depth = [], [""]
    for ch in text:
        if ch in "([":
            depth.append("")
        elif ch in ")]" and len(depth) > 1:
            out.append(depth.pop())
        elif ch in ";:":
            out.append(depth[-1])
            depth[-1] = ""
        else:
            depth[-1] += ch
    return out + depth


def asserted(pattern, text):
    """The words of `pattern` in text that are not negated (not, no, never, ... within three words before)."""
    return [m.group(0) for m in pattern.finditer(text) if not NEGATED.search(text[:m.start()])]


def equivalence_confirmed(entries):
    """Whether the entries hold an encoder equivalence verdict that is confirmed: what 'level' or 'on par' needs."""
    return any(e["row"] and e["row"]["rule"] == "equivalence" and e["row"]["verdict"] == "confirmed" for e in entries)


def comparison_problems(sentence, ctx):
    """What a sentence that compares lacks under the convention (kind 1 and 2; [] if nothing)."""
    claim = claim_text(sentence)
    if not (COMPARATIVE.search(claim) or asserted(INTENSE, claim)):  # 'none significantly' hedges
        return []
    flagged = FLAG.search(sentence)  # what it compares, no verdict judges: its intervals are held all the same
    found = [(q, source_of(*q, ctx.sources)) for q in quoted_intervals(sentence)]
    if not flagged and not any(entries for _, entries in found):
        said = {m.group(0).lower() for m in COMPARATIVE.finditer(claim)} | set(asserted(INTENSE, claim))
        return [f"compares ({', '.join(sorted(said))}) but "
                f"quotes no verdict's interval and does not say 'no verdict judges it'"]
    problems = [f"quotes [{lo:+}, {hi:+}], which no verdict source holds" for (lo, hi, _), entries in found
                if not entries]
    entries = [e for _, es in found for e in es]
    holds_zero = [q for q, es in found if es and q[0] <= 0 <= q[1]]
    decisive = [(q, es) for q, es in found if es and not q[0] <= 0 <= q[1]]
    gains, losses, intense = asserted(GAIN, claim), asserted(LOSS, claim), asserted(INTENSE, claim)
    if (gains or losses) and not decisive and not flagged:
        problems.append(f"says {', '.join(gains + losses)}, but every interval it quotes holds 0")
    if intense and not decisive:
        problems.append(f"says {', '.join(intense)}, but no interval it quotes excludes 0")
    if holds_zero and not HEDGE.search(claim):
        problems.append(f"quotes {', '.join(f'[{lo:+}, {hi:+}]' for lo, hi, _ in holds_zero)}, which holds 0, "
                        "and does not say the difference is not significant (or not settled, not found, ...)")
    same = asserted(SAME, claim) + [m.group(0) for m in NULL.finditer(claim)]
    if same and not equivalence_confirmed(entries):
        problems.append(f"says '{', '.join(same)}': no confirmed equivalence verdict shows two things the same, "
                        "and an interval that holds 0 shows none was found, not that there is none; say 'no "
                        "significant difference' with the intervals, and what they do not rule out")
    if decisive and bool(gains) != bool(losses) and not flagged:
        up = [(q[0] > 0) == (es[0]["better"] == "higher") for q, es in decisive]  # a gain for the subject
        if (gains and not any(up)) or (losses and all(up)):
            problems.append(f"says {', '.join(gains or losses)}, but its intervals go the other way (quote the "
                            "difference as the subject minus the other)")
    for part in clauses(claim):
        if asserted(GAIN, part) + asserted(LOSS, part) + asserted(INTENSE, part) and not OVER_SEEDS.search(part):
            weak = [r["claim"] for r in (e["row"] for e in entries) if r and r["sentences"]
                    and r["sentences"][0] <= 0 <= r["sentences"][1] and not r["t"][0] <= 0 <= r["t"][1]]
            if weak:
                problems.append(f"says '{part.strip()}', but {', '.join(sorted(set(weak)))} holds 0 with the test "
                                "sentences resampled: say 'over seeds' there")
    return problems + verdict_word_problems(sentence, ctx.rows)


# -----------------------------------------------------------------------------
# 2. verdict words, each against its own row and rule

def segments(text):
    """[(start, end)] of a sentence's parts between ; and : (at any depth of brackets)."""
    cuts = [-1] + [i for i, ch in enumerate(text) if ch in ";:"] + [len(text)]
    return [(a + 1, b) for a, b in zip(cuts, cuts[1:])]


def canonical(word):
    word = word.lower()
    return "confirmed" if word.startswith("confirm") else "refuted" if word.startswith("refut") else "inconclusive"


def verdict_words(sentence):
    """Each verdict word of the sentence with what is around it: a dict of its verdict, its position, the text
    before it (back to the verdict word or ; or : before it) and after it (on to the next), the intervals
    quoted in each, and the rules named around it."""
    claim, cues = mask(sentence), mask(sentence, keep=(QUOTES,))
    spans = [(m.start(), m.end()) for m in INTERVAL.finditer(sentence)]
    words = []
    for a, b in segments(claim):
        found = [m for m in VERDICT.finditer(claim, a, b) if not re.search(r"\bnot\W*$", claim[max(a, m.start() - 6):
                                                                                             m.start()])]
        for i, m in enumerate(found):
            lo = found[i - 1].end() if i else a
            hi = found[i + 1].start() if i + 1 < len(found) else b
            before, after = cues[lo:m.start()], cues[m.end():hi]
            named_after = {r for r, cue in RULE_CUES.items() if cue.search(after)}
            words.append(dict(
                word=canonical(m.group(0)), text=m.group(0), segment=(a, b), before=claim[lo:m.start()],
                after=claim[m.end():hi],
                intervals_after=[interval(sentence[s:e]) for s, e in spans if m.end() <= s < hi],
                intervals_before=[interval(sentence[s:e]) for s, e in spans if lo <= s < m.start()],
                # the rules named after it ('confirmed as non-inferiority'), else before it ('"comparable" is
                # not settled'): the text between two verdict words names the later one's rule only where that
                # one names none after it
                rules=named_after or {r for r, cue in RULE_CUES.items() if cue.search(before)}
                or (words[-1]["rules"] if words and words[-1]["segment"] == (a, b) else set()),
                first=bool(FIRST_RULE.search(before + " " + after)),
                with_sentences=bool(re.match(r"[\s*,]*(with (the )?(test )?sentences|sentences resampled)",
                                             claim[m.end():hi], re.I))))
    return words, [interval(sentence[s:e]) for s, e in spans], spans


def readings(row, quoted, word, rule=None):
    """What a row says of the intervals a verdict word quotes: {verdict: how it is read} ('t', 'sentences' or
    'first'). Under `rule`, a row of another rule says nothing, but a row whose first rule it is says its
    verdict under that rule."""
    if rule is not None and rule != row["rule"]:
        return {row["first_verdict"]: "first"} if rule == row["first_rule"] and row["t"] in quoted else {}
    out = {}
    if word["with_sentences"]:
        if row["sentences"] in quoted:
            out[row["with_sentences"]] = "sentences"
    elif row["t"] in quoted:
        out[row["verdict"]] = "t"
    if rule is None and word["first"] and row["first_rule"] and row["t"] in quoted:
        return {row["first_verdict"]: "first"}  # 'under the rule first planned': that rule's verdict
    return out


def verdict_word_problems(sentence, rows):
    """What each verdict word of a sentence says beyond the encoder verdict it speaks of ([] if nothing): the
    word against that row's verdict under the rule it names, and what must stand beside a confirmed or
    refuted (kind 2 of the convention)."""
    words, quoted, spans = verdict_words(sentence)
    lowered = sentence.lower()
    problems = []
    previous = []  # the intervals each verdict word before this one read, for 'the same interval'
    for w in words:
        tries = [w["intervals_after"] or w["intervals_before"]] + previous[::-1]
        # the intervals of the parts between ; and : before this one, nearest first
        tries += [[interval(sentence[s:e]) for s, e in spans if a <= s < b]
                  for a, b in reversed(segments(mask(sentence))) if b <= w["segment"][0]]
        mine, rows_read = [], []
        for its in tries:
            rows_read = [r for r in rows if readings(r, its, w)
                         or any(readings(r, its, w, rule) for rule in w["rules"])]
            if rows_read:
                mine = its
                break
        previous.append(mine)
        if not rows_read:
            if w["word"] != "inconclusive":
                problems.append(f"says {w['word']} but quotes no verdict's 95 % t-interval")
            continue
        # the rules it names that a row of its interval has (a rule named of another comparison is not its)
        named = [rule for rule in sorted(w["rules"]) if any(readings(r, mine, w, rule) for r in rows_read)]
        matched = []
        for rule in named:
            said = {}
            for r in rows_read:
                for v, how in readings(r, mine, w, rule).items():
                    said.setdefault(v, []).append((r, how))
            if w["word"] not in said:
                problems.append(f"says {w['text']!r} under {rule}, but the verdict it quotes there reads "
                                f"{' or '.join(sorted(said))}")
            else:
                matched += said[w["word"]]
        if not named:
            said = {}
            for r in rows_read:
                for v, how in readings(r, mine, w).items():
                    said.setdefault(v, []).append((r, how))
            if w["word"] not in said:
                problems.append(f"says {w['text']!r}, but the verdict it quotes reads {' or '.join(sorted(said))}")
            elif len(said) > 1:
                other = sorted({r["rule"] for v, rs in said.items() if v != w["word"] for r, _ in rs})
                problems.append(f"says {w['text']!r} of an interval that {', '.join(other)} reads otherwise: "
                                f"name the rule")
            else:
                matched = said[w["word"]]
        for r, how in matched:
            if how != "t" or w["word"] == "inconclusive":
                continue
            if r["first_rule"] and r["first_rule"] not in lowered:
                problems.append(f"'{r['claim']}' was first planned as {r['first_rule']} ({r['first_verdict']} "
                                f"under it): say so")
            if r["changed"] and not re.search(r"\bafter\b", lowered):
                problems.append(f"'{r['claim']}': its rule or seeds changed after its data began: say so")
            if r["with_sentences"] != w["word"]:
                if not (WITH_SENTENCES.search(lowered) and r["sentences"] in quoted):
                    problems.append(f"'{r['claim']}' is {r['with_sentences']} with the sentences resampled "
                                    f"{list(r['sentences'])}: give that too")
                if not (OVER_SEEDS.search(w["after"]) or re.match(r"[\s*]*\([^)]*with (the )?(test )?sentences",
                                                                   w["after"], re.I)):
                    problems.append(f"says {w['word']} of '{r['claim']}' with no qualifier: it is {w['word']} over "
                                    f"seeds and {r['with_sentences']} with the test sentences resampled; say "
                                    f"'{w['word']} over seeds' there")
            if r["across"] and "across devices" not in lowered:
                problems.append(f"'{r['claim']}' compares devices ({r['across']}): say 'across devices'")
    return problems


# -----------------------------------------------------------------------------
# 3. figures a record holds

ENCODER_PAGES = ("README.md", "docs/encoders.md", "config/encoders_study.py")
FOUR = re.compile(r"(?<![\d.])[+\-−]?(\d+\.\d{4})(?![\d])")
PAIR = re.compile(r"(?<![\d.])(\d+\.\d{4}) ± (\d+\.\d{4})(?!\d)")
FACTOR = re.compile(r"(?<![\d.])(\d+\.\d{2})×")
SECONDS = re.compile(r"(?<![\d.])(\d+\.\d{3}) s\b")
RECORD_LINK = re.compile(r"results/[\w./@=,+-]+\.json")
UNRECORDED = re.compile(r"no record|not recorded|unrecorded|(was|were) not kept", re.I)


def derived_figures(results):
    """Figures the pages give that RESULTS.md's tables give by a sum: the grid's mean accuracy for each number of
    loops, over every width and depth (docs/encoders.md: '1, 2 and 3 loops score ...')."""
    grid = results.split("\n### grid:", 1)[1].split("\n### ", 1)[0]
    by_loops = {}
    for loops, acc in re.findall(r"^\| sst2_recurrent@n_embd=\d+,n_layer=\d+,n_loops=(\d+) \| \d+ of \d+ \| "
                                 r"(\d\.\d{4}) ", grid, re.M):
        by_loops.setdefault(loops, []).append(float(acc))
    return " ".join(f"{sum(v) / len(v):.4f}" for v in by_loops.values())


def piglatin_means(split):
    """Every 'mean ± half-width' (lab.stats.mean_ci: 95 % t over seeds) of a figure of a committed Pig Latin
    config's records, to 4 decimals."""
    import lab.stats

    out = set()
    for configs in split.values():
        for runs in configs.values():
            for k in set.intersection(*(set(f) for f in runs.values())):
                if len(runs) > 1:
                    mean, half = lab.stats.mean_ci([f[k] for f in runs.values()])
                    out.add(f"{mean:.4f} ± {half:.4f}")
    return out


FIGURES = re.compile(r"(?<![\d.])\d+\.\d+(?: ± \d+\.\d+|×)?")


@functools.lru_cache(maxsize=None)
def figures_of(text):
    """Every figure a text gives, as written (minus signs dropped): numbers, 'mean ± half' pairs and factors."""
    found = FIGURES.findall(text.replace("−", "-"))
    return set(found) | {f.split(" ± ")[0] for f in found} | {f.rstrip("×") for f in found}


def holds(text, figure):
    """Whether text gives the figure (its digits, not as part of a longer number)."""
    return figure in figures_of(text)


def record_numbers(path):
    """Every number of a JSON record, at any depth."""
    def walk(x):
        if isinstance(x, dict):
            return [n for v in x.values() for n in walk(v)]
        if isinstance(x, list):
            return [n for v in x for n in walk(v)]
        return [x] if isinstance(x, (int, float)) and not isinstance(x, bool) else []
    return walk(json.load(open(os.path.join(REPO_ROOT, path))))


def held_figures(where, ctx):
    """The figures an encoder page may give: RESULTS.md's; for docs/encoders.md those RESULTS.md's tables give
    by a sum too; for the README the pages' too (the char GPT's figures, say)."""
    if where not in ctx.held:
        text = ctx.results + ("\n" + ctx.derived if where == "docs/encoders.md" else "")
        if where == "README.md":
            text += "\n".join(ctx.docs.values())
        ctx.held[where] = figures_of(text)
    return ctx.held[where]


def block_figure_problems(where, block, ctx):
    """Figures of a block of a page that a record holds and the block gives otherwise (kind 3; [] if none)."""
    problems = []
    records = [p for p in RECORD_LINK.findall(block) if os.path.isfile(os.path.join(REPO_ROOT, p))]
    numbers = [n for p in records for n in record_numbers(p)]
    held = held_figures(where, ctx) if where.startswith(ENCODER_PAGES) else None
    for s in split_sentences(block):
        if UNRECORDED.search(s):
            continue
        plain = s.replace("−", "-")
        if held is not None:
            pairs = [(m.start(), m.end()) for m in PAIR.finditer(plain)]
            problems += [f"gives {m.group(0)}, which RESULTS.md does not hold" for m in PAIR.finditer(plain)
                         if m.group(0) not in held]
            problems += [f"gives {m.group(1)}, which RESULTS.md does not hold" for m in FOUR.finditer(plain)
                         if not any(a <= m.start() < b for a, b in pairs) and m.group(1) not in held]
            problems += [f"gives {m.group(0)}, which RESULTS.md does not hold" for m in FACTOR.finditer(plain)
                         if m.group(0) not in held]
        if where == "docs/piglatin_mamba.md":
            problems += [f"gives {m.group(0)}, which is no config's mean ± 95 % interval in its records"
                         for m in PAIR.finditer(plain) if m.group(0) not in ctx.piglatin_means]
        if records:
            for pattern, decimals, unit in ((FACTOR, 2, "×"), (SECONDS, 3, " s")):
                given = {f"{n:.{decimals}f}" for n in numbers}
                problems += [f"gives {m.group(1)}{unit} beside {', '.join(records)}, which holds no such number "
                             f"(say so where a figure was not recorded)" for m in pattern.finditer(plain)
                             if m.group(1) not in given]
    return problems


def figure_problems(where, text, ctx):
    """Figures of a page that a record holds and the page gives otherwise (kind 3; [] if none)."""
    return [p for block in blocks(text) for p in block_figure_problems(where, block, ctx)]


# -----------------------------------------------------------------------------
# 4. disclosures the pages owe

def quoted_rows(sentence, ctx):
    """The encoder verdict rows whose t-interval the sentence quotes."""
    quoted = {interval(m.group(0)) for m in INTERVAL.finditer(sentence)}
    return [r for r in ctx.rows if r["t"] in quoted]


def quoted_piglatin(sentence, ctx, a, b):
    """Whether the sentence quotes the paired interval of Pig Latin configs a and b (either way round)."""
    return any(re.search(rf"\b{a} − {b},|\b{b} − {a},", e["where"])
               for q in quoted_intervals(sentence) for e in source_of(*q, ctx.sources))


# (what is owed, when: a function of (sentence, ctx), the words that disclose it, where they stand, why)
OWED = [
    ("superseded", lambda s, ctx: any(row_cell(r, ctx.headings) in ctx.superseded for r in quoted_rows(s, ctx)),
     re.compile(r"supersed", re.I), "block",
     "a verdict of a cell another cell's verdicts replaced (RESULTS.md's heading: 'superseded by ...') is read as "
     "history, not as the study's answer"),
    ("plateau", lambda s, ctx: any(r["claim"].endswith(": heldout_best") or "heldout_best beats" in r["claim"]
                                   for r in quoted_rows(s, ctx)),
     re.compile(r"plateau", re.I), "block",
     "heldout_best's rate never anneals (halved after every two evaluations without a gain): it is named for what "
     "it is, a plateau schedule without decay, not each model at its best"),
    ("never tuned", lambda s, ctx: any("piglatin_transformer_compounds" in e["where"] and "tuned" in e["where"]
                                       for q in quoted_intervals(s) for e in source_of(*q, ctx.sources)),
     re.compile(r"never tuned|untuned|not tuned", re.I), "sentence",
     "the taught transformer kept the write-up's recipe: a tuned model beside it is not compared like for like"),
    ("untuned", lambda s, ctx: quoted_piglatin(s, ctx, "piglatin_mamba_large", "piglatin_transformer"),
     re.compile(r"untuned", re.I), "block",
     "the first Mamba verdict is of Mamba large at the transformer's recipe, before either was tuned"),
]


def block_disclosure_problems(block, ctx):
    """Disclosures a block of a page owes and does not make (kind 4; [] if none)."""
    return [f"owes '{what}' ({why}), and its {scope} does not say it:\n    {s}" for s in split_sentences(block)
            for what, owed, says, scope, why in OWED if owed(s, ctx) and not says.search(block if scope == "block"
                                                                                         else s)]


def disclosure_problems(where, text, ctx):
    """Disclosures a page owes and does not make (kind 4; [] if none)."""
    return [p for block in blocks(text) for p in block_disclosure_problems(block, ctx)]


def block_problems(where, block, ctx):
    """Every problem of one block of a page (a paragraph, list item or table row), remembered: a page copy with
    one sentence changed is checked again in the time its changed block takes."""
    key = (where if where.startswith(ENCODER_PAGES) or where == "docs/piglatin_mamba.md" else "", block)
    if key not in ctx.checked:
        problems = [f"{problem}:\n    {s}" for s in split_sentences(block) for problem in comparison_problems(s, ctx)]
        problems += [f"a verdict table's row {problem}:\n    {block}" for problem in table_problems(block)]
        ctx.checked[key] = problems + block_figure_problems(where, block, ctx) + block_disclosure_problems(block, ctx)
    return ctx.checked[key]


def page_problems(where, text, ctx=None):
    """Every problem of a page under the convention: its sentences' comparisons and verdict words, its verdict
    tables' rows, its figures against the records, and the disclosures it owes. [] for a page that says nothing
    its verdicts and records do not."""
    ctx = ctx or context()
    return [f"{where}: {p}" for block in blocks(text) for p in block_problems(where, block, ctx)]
