"""
The study's statistics, each a plain function of numbers: Student's t (its quantiles from the density, no
scipy), the interval of a mean over seeds, the paired t-interval and bootstraps of a difference (over seeds,
and over seeds and test examples together), McNemar's exact test, the power of a paired comparison
(detectable_effect, seeds_needed), the rules that turn an interval into a verdict (claim_verdict:
superiority, non-inferiority, equivalence), and the Pareto frontier of the report's plots.

Read in this order: t_cdf and t_quantile; mean_ci, paired_t, paired_bootstrap; claim_verdict; the rest as
the report needs them. tests/test_encoder_study.py holds each to known cases.
"""

import functools
import math

import numpy as np

# -----------------------------------------------------------------------------
# statistics over seeds

# two-sided 95 % quantiles of Student's t, t_{0.975, df}, df = 1..30 (standard tables)
T_975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def t_quantile_975(df):
    """t_{0.975, df}: the table up to 30 degrees of freedom, then the Cornish-Fisher expansion around
    the normal quantile 1.959964, which is within 0.001 of the exact value from df = 30 on."""
    if df < 1:
        raise ValueError("a confidence interval needs at least two values")
    if df <= len(T_975):
        return T_975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def t_cdf(x, df):
    """P(T <= x) for Student's t with df degrees of freedom: 1/2 plus the density's integral from 0 to x
    (Simpson's rule on 2,000 intervals of the substitution x = tan(u), which keeps the tails short)."""
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    top = math.atan(abs(x))
    u = np.linspace(0.0, top, 2001)
    t = np.tan(u)
    f = np.exp(log_c - (df + 1) / 2 * np.log1p(t * t / df)) / np.cos(u) ** 2  # density * dx/du
    area = top / 6000 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())
    return 0.5 + math.copysign(float(area), x)


@functools.lru_cache(maxsize=None)  # 60 integrations a call, and the report asks for the same few again and again
def t_quantile(p, df):
    """The p-quantile of Student's t with df degrees of freedom (0.5 < p < 1), by bisection on t_cdf."""
    lo, hi = 0.0, 1e3
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


def detectable_effect(sd, n, power=0.8):
    """The smallest true mean difference a paired t-test on n seeds (differences with standard deviation sd)
    finds at the 95 % level (two-sided) with probability `power`: (t_{0.975,n-1} + t_{power,n-1}) * sd /
    sqrt(n). A smaller effect, if there is one, the study would most likely call inconclusive."""
    return (t_quantile_975(n - 1) + t_quantile(power, n - 1)) * sd / math.sqrt(n)


def seeds_needed(sd, effect, power=0.8, most=1000):
    """How many seeds a paired comparison whose per-seed differences have standard deviation sd needs to
    find a true difference `effect` at the 95 % level with probability `power` (None if more than `most`)."""
    if sd == 0:
        return 2
    if detectable_effect(sd, most, power) > effect:
        return None
    lo, hi = 1, most  # detectable_effect falls as n grows (both quantiles and 1/sqrt(n) do): bisect for the first
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if detectable_effect(sd, mid, power) > effect else (lo, mid)
    return hi  # >= 2: lo starts at 1


def mean_ci(values):
    """(mean, half-width of the 95 % confidence interval of the mean): t_{0.975,n-1} * s / sqrt(n),
    with s the sample standard deviation."""
    v = np.asarray(values, dtype=np.float64)
    return float(v.mean()), t_quantile_975(len(v) - 1) * float(v.std(ddof=1)) / math.sqrt(len(v))


def paired_bootstrap(baseline, variant, n_boot=10000, seed=0):
    """Paired bootstrap of the mean difference variant - baseline (pairs matched by seed): resample the
    per-seed differences with replacement n_boot times and take the 2.5th and 97.5th percentiles of the
    resampled means. Returns (mean difference, lower, upper)."""
    d = np.asarray(variant, dtype=np.float64) - np.asarray(baseline, dtype=np.float64)
    if d.ndim != 1 or len(d) < 2:
        raise ValueError("the paired bootstrap needs two equally long lists of at least two values")
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(n_boot, len(d)))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(d.mean()), float(lo), float(hi)


def paired_t(baseline, variant):
    """The paired t-interval of the mean difference variant - baseline (pairs matched by seed):
    mean +- t_{0.975, n-1} * s_d / sqrt(n). Returns (mean difference, lower, upper)."""
    d = np.asarray(variant, dtype=np.float64) - np.asarray(baseline, dtype=np.float64)
    mean, half = mean_ci(d)
    return mean, mean - half, mean + half


def verdict(lo, hi, better):
    """Words for a difference's CI, given which way the metric is better ('higher', 'lower' or
    'neither'): an interval that holds 0 is no evidence either way."""
    if lo <= 0 <= hi:
        return "no significant difference"
    up = lo > 0
    if better == "neither":
        return "higher" if up else "lower"
    if better not in ("higher", "lower"):
        raise ValueError(f"better={better!r}: expected 'higher', 'lower' or 'neither'")
    return "better" if up == (better == "higher") else "worse"


def mcnemar_p(only_a, only_b):
    """McNemar's exact test: the two-sided p-value of `only_a` examples that A gets right and B wrong
    against `only_b` the other way round, under the null hypothesis that a disagreement goes either way
    with probability 1/2: 2 * P(X <= min) for X ~ Binomial(only_a + only_b, 1/2), at most 1. Summed in
    log space, so thousands of disagreements do not underflow."""
    n, k = only_a + only_b, min(only_a, only_b)
    if n == 0:
        return 1.0
    logs = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - n * math.log(2) for i in range(k + 1)]
    top = max(logs)
    return min(1.0, 2 * math.exp(top) * sum(math.exp(x - top) for x in logs))


def mcnemar(y_true, pred_a, pred_b):
    """Two classifiers' per-example predictions on the same test examples -> (right only by A, right
    only by B, McNemar's exact p-value). Examples both get right, or both wrong, carry no information
    about which is better, and are left out, as the test prescribes."""
    y, a, b = (np.asarray(v) for v in (y_true, pred_a, pred_b))
    if not len(y) == len(a) == len(b):
        raise ValueError(f"McNemar's test needs predictions of the same examples: {len(y)}, {len(a)}, {len(b)}")
    right_a, right_b = a == y, b == y
    only_a, only_b = int((right_a & ~right_b).sum()), int((~right_a & right_b).sum())
    return only_a, only_b, mcnemar_p(only_a, only_b)


def claim_verdict(lo, hi, better, rule="superiority", margin=0.0):
    """A claim about A against B, judged on the 95 % interval [lo, hi] of A - B in a metric whose better
    side is `better`, under its rule (RULES): 'confirmed', 'refuted' or 'inconclusive'.
    - superiority (A beats B): confirmed if the interval lies on the better side, refuted if on the worse
      side, inconclusive if it holds 0;
    - non-inferiority (A keeps B's performance): confirmed if A is at most `margin` worse anywhere in the
      interval (A better is no contradiction), refuted if A is more than `margin` worse everywhere in it;
    - equivalence (A matches B): confirmed if the whole interval lies within +-margin, refuted if it lies
      wholly outside, on either side."""
    if rule == "superiority":
        word = verdict(lo, hi, better)
        return {"better": "confirmed", "worse": "refuted"}.get(word, "inconclusive")
    if rule == "equivalence":
        return "confirmed" if -margin <= lo and hi <= margin else "refuted" if lo > margin or hi < -margin \
            else "inconclusive"
    if rule != "non-inferiority":
        raise ValueError(f"rule={rule!r}: expected one of {RULES}")
    lo, hi = (lo, hi) if better != "lower" else (-hi, -lo)  # A - B turned so that up is better
    return "confirmed" if lo >= -margin else "refuted" if hi < -margin else "inconclusive"


RULES = ("superiority", "non-inferiority", "equivalence")
RULE_WORDS = {"superiority": "", "non-inferiority": "; keeping B's performance means A − B ≥ −{m:g}",
              "equivalence": "; comparable means A − B within ±{m:g}"}


def seed_and_example_bootstrap(d, n_boot=10000, seed=0):
    """The 95 % percentile interval of a mean accuracy difference that resamples the seeds and the test
    examples both: d is (seeds, examples), each entry A's right minus B's (-1, 0 or 1), paired by seed and
    example. Each of the n_boot resamples draws the examples with replacement (the same draw for every seed
    and both models: the test set is one sample of sentences) and the seeds with replacement, and takes the
    mean over the drawn seeds of the accuracy difference on the drawn examples. With seeds alone (the
    t-interval) the test set is taken as fixed; this shows what its size adds. Returns (lower, upper)."""
    n_seeds, n = d.shape
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    d_t = np.asarray(d, dtype=np.float64).T  # (examples, seeds)
    for start in range(0, n_boot, 1000):
        k = min(1000, n_boot - start)
        draws = rng.integers(0, n, size=(k, n))
        counts = np.bincount((draws + n * np.arange(k)[:, None]).ravel(), minlength=k * n).reshape(k, n)
        # (k, seeds): integer sums, exact in float64 whatever the order of summation (so on every machine); a float
        # product goes through BLAS, 40x faster than numpy's integer loop
        per_seed = counts.astype(np.float64) @ d_t
        picks = rng.integers(0, n_seeds, size=(k, n_seeds))
        means[start:start + k] = np.take_along_axis(per_seed, picks, axis=1).mean(axis=1) / n
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(lo), float(hi)


def pareto_front(points):
    """The points no other point beats on both counts, for (cost, value) pairs where a lower cost and a
    higher value are better: sorted by cost, each kept point has a higher value than every cheaper one
    (of two at the same cost, the better value). Returns their indices in order of cost."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front, best = [], -math.inf
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front
