"""Weighing the calls: probabilities, a sample's own viral fraction and false discovery rates.

Evidence is carried as a log-likelihood ratio, LLR = logit P(virus | evidence) - logit(prior), free of
the class balance it was measured under; a sample's own prior is added back as logit(prior). A
calibration (`Calibration`, a JSON file) holds the chunk map (a chunk's best virus score to its LLR:
Platt scaling or isotonic regression, whichever predicts held-out records better), the record rule
(a record's n chunk LLRs summed and weighed as n / (1 + r (n - 1)) independent chunks, r their
correlation) and the priors it was fitted under. A sample's viral fraction is the maximum-likelihood
prior of its own LLRs (label shift, Saerens et al. 2002), with a bootstrap interval and a check that
the calibration's classes fit the sample; it and the q-values come from histograms of LLRs, so that
memory does not grow with the sample.
"""

import functools
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from workflow_lib.cli.errors import InputError
from workflow_lib.io.tables import write_json

# LLRs are clipped to +-LLR_LIMIT and binned at LLR_STEP for the composition and q-value histograms:
# a posterior moves by at most 0.25% within a bin.
LLR_LIMIT, LLR_STEP = 40.0, 0.01
N_BINS = int(round(2 * LLR_LIMIT / LLR_STEP)) + 1
CENTRES = np.linspace(-LLR_LIMIT, LLR_LIMIT, N_BINS)
SCORE_CLIP = 1e-7  # a softmax score of exactly 0 or 1 (float32) is clipped before its logit
WINDOWS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)  # chunks per labelled window (record rule)
KNOTS = np.linspace(-16.0, 16.0, 321)  # the chunk map, as LLR at these logits of the score
# A sample with fewer scored records than this keeps the calibration's own prior: its estimate
# would rest on too few records.
MIN_RECORDS_FOR_ESTIMATE = 20
ATYPICAL_QUANTILE = 0.98
# The score job computes a frame's atypicality again, in other batches, where it moves slightly: a
# calibration record at the limit would fall just outside it. The limit leaves room for that.
ATYPICAL_MARGIN = 1.01
# Whole records are held out (train's split, calibration's folds) when each class has at least this
# many; with fewer, one record would be too large a share of its class, and chunks are held out.
MIN_RECORDS_PER_CLASS = 10
# A sample's composition: its interval is a bootstrap over records, in bounded memory: the records
# are dealt at random into BOOTSTRAP_GROUPS groups, each with its own histograms, and the groups are
# resampled BOOTSTRAP_REPLICATES times.
BOOTSTRAP_GROUPS, BOOTSTRAP_REPLICATES, INTERVAL_LEVEL = 64, 200, 0.95
COARSE_BINS = 40  # of LLR at most, for the calibration's share of the interval (composition_intervals)
MIXTURE_REACH = 10  # how far beyond [0, 1] the share of a mixture in those bins may go (mixture_priors)
# The fit check compares the sample's share of chunks above FIT_BANDS LLRs (the fitted mixture's
# deciles) with the calibration's classes mixed at the estimate; the fit is poor beyond FIT_LIMIT
# standard errors in any.
FIT_BANDS, FIT_LIMIT = 9, 3.5
# The fit check compares the chunks' atypicality too, binned by ATYPICALITY_STEP of its log10 over
# ATYPICALITY_RANGE (typical frames about 1, random DNA tens); one more bin holds chunks without one
ATYPICALITY_RANGE, ATYPICALITY_STEP = (-3.0, 3.0), 0.01
N_ATYPICALITY_BINS = int(round((ATYPICALITY_RANGE[1] - ATYPICALITY_RANGE[0]) / ATYPICALITY_STEP)) + 1
VERSION = 2


def logit(p):
    p = np.clip(np.asarray(p, dtype=np.float64), SCORE_CLIP, 1 - SCORE_CLIP)
    return np.log(p) - np.log1p(-p)


def expit(x):
    return 0.5 * (1 + np.tanh(0.5 * np.asarray(x, dtype=np.float64)))  # never overflows


@dataclass(frozen=True)
class Calibration:
    classifier_sha256: str
    chunk_length: int
    method: str  # the chunk map's: platt or isotonic
    knots: list[float]  # logit(max_score_virus) ...
    chunk_llr: list[float]  # ... and the chunk's LLR there (linear between knots, flat beyond)
    chunk_prior: float  # viral share of the chunks it was fitted on
    record_scale: float  # t
    record_correlation: float  # r
    record_offset: float  # c
    record_prior: float  # viral share of the records it was fitted on
    # a record whose median chunk atypicality (MLPClassifier.atypicality) is above this is unlike
    # the data: the quantile ATYPICAL_QUANTILE of the chunks it was fitted on, or of their records'
    # medians where that is higher
    atypicality_limit: float
    fitted_on: dict  # counts, the methods' held-out log loss, calibration error before and after
    # per class (virus, other): its chunks' LLRs (a sparse histogram: bins, counts) and
    # their worth in independent chunks (`effective`), for the composition's interval and its fit;
    # where the chunks had one, their atypicality too (`atypicality`: bins, counts, effective)
    class_llrs: dict
    version: int = VERSION

    def chunk_llrs(self, max_score_virus) -> np.ndarray:
        return np.interp(logit(max_score_virus), self.knots, self.chunk_llr)

    def record_llrs(self, n_chunks, sum_llr) -> np.ndarray:
        """The LLR of records (or regions) of `n_chunks` scored chunks whose chunk LLRs sum to `sum_llr`."""
        n = np.maximum(np.asarray(n_chunks, dtype=np.float64), 1)
        llr = self.record_scale * np.asarray(sum_llr) / (1 + self.record_correlation * (n - 1)) + self.record_offset
        return np.clip(llr, -LLR_LIMIT, LLR_LIMIT)

    def save(self, path: str | Path) -> None:
        write_json(asdict(self), path)

    @classmethod
    def load(cls, path: str | Path) -> "Calibration":
        try:
            values = json.loads(Path(path).read_text())
            if values.get("version") != VERSION:
                raise ValueError(f"version {values.get('version')}, this workflow reads {VERSION}")
            return cls(**values)
        except (OSError, ValueError, TypeError) as error:
            raise InputError(
                f"{path}: not a calibration this workflow wrote ({error}); run the calibrate target"
            ) from None

    def refusal(self, classifier_sha256: str, chunk_length: int | None, path: str | Path) -> str | None:
        """Why this calibration cannot weigh a classifier's calls, in one line; None if it can
        (chunk_length None: not checked)."""
        if self.classifier_sha256 != classifier_sha256:
            return (
                f"{path}: made for another classifier file (SHA-256 {self.classifier_sha256[:12]}..., the "
                f"configured one is {classifier_sha256[:12]}...); run the calibrate target for it"
            )
        if chunk_length not in (None, self.chunk_length):
            return (
                f"{path}: made for chunks of {self.chunk_length} bp, the config's chunk_length is {chunk_length}; "
                "run the calibrate target for it"
            )
        return None


# Fitting


def _logistic(features: np.ndarray, y: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Weighted logistic regression by Newton's method (features include a column of ones); a small
    ridge keeps separable data finite."""
    beta = np.zeros(features.shape[1])
    for _ in range(50):
        p = expit(features @ beta)
        gradient = features.T @ (weight * (y - p)) - 1e-6 * beta
        hessian = (features * (weight * p * (1 - p))[:, None]).T @ features + 1e-6 * np.eye(features.shape[1])
        step = np.linalg.solve(hessian, gradient)
        beta += step
        if np.abs(step).max() < 1e-10:
            break
    return beta


def _log_loss(y: np.ndarray, p: np.ndarray, weight: np.ndarray | None = None) -> float:
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return float(-np.average(y * np.log(p) + (1 - y) * np.log1p(-p), weights=weight))


def _platt(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Logit of P(virus) at KNOTS, from a logistic fit on the score's logit."""
    a, b = _logistic(np.column_stack([x, np.ones_like(x)]), y, np.ones_like(x))
    return a * KNOTS + b


def _isotonic(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Logit of P(virus) at KNOTS from a non-decreasing step fit (pool adjacent violators), each step's
    share smoothed towards the prior by one pseudo-count, joined linearly between step centres."""
    order = np.argsort(x, kind="stable")
    xs, ys = x[order], y[order].astype(np.float64)
    values, starts = np.unique(xs, return_index=True)  # equal scores pool first
    sums, counts = np.add.reduceat(ys, starts), np.diff(np.append(starts, xs.size)).astype(np.float64)
    blocks: list[list[float]] = []  # [sum, count, sum of x * count]
    for s, c, v in zip(sums, counts, values):
        blocks.append([s, c, v * c])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] >= blocks[-1][0] / blocks[-1][1]:
            s2, c2, v2 = blocks.pop()
            blocks[-1] = [blocks[-1][0] + s2, blocks[-1][1] + c2, blocks[-1][2] + v2]
    block = np.array(blocks)
    prior = ys.mean()
    share = (block[:, 0] + prior) / (block[:, 1] + 1)
    return np.interp(KNOTS, block[:, 2] / block[:, 1], logit(share))


METHODS = {"platt": _platt, "isotonic": _isotonic}


def _folds(records: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Fold 0 or 1 of each row: by record (a record's chunks never straddle folds) when each class
    has MIN_RECORDS_PER_CLASS records, else by chunk, so that each fold sees both classes."""
    per_class = [np.unique(records[y == label]).size for label in (0, 1)]
    groups = records if min(per_class) >= MIN_RECORDS_PER_CLASS else np.arange(records.size)
    unique, inverse = np.unique(groups, return_inverse=True)
    return np.random.default_rng(0).integers(0, 2, unique.size)[inverse]


def _cross_validated(method, x, y, folds) -> np.ndarray:
    """Out-of-fold logit P(virus) of every row."""
    out = np.empty_like(x)
    for fold in (0, 1):
        train, test = folds != fold, folds == fold
        if not test.any():
            continue
        if len(np.unique(y[train])) < 2:  # one class only in the other fold: the prior is all it knows
            out[test] = logit(y[train].mean() if train.any() else 0.5)
            continue
        out[test] = np.interp(x[test], KNOTS, method(x[train], y[train]))
    return out


def windows(records: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(record number, chunks in the window, sum of `values` over it): non-overlapping windows of each
    size in WINDOWS over consecutive rows of each record (a record's rows together, in order)."""
    starts = np.flatnonzero(np.r_[True, records[1:] != records[:-1]])
    lengths = np.diff(np.append(starts, records.size))
    position = np.arange(records.size) - np.repeat(starts, lengths)  # row's place in its record
    record_index = np.repeat(np.arange(starts.size), lengths)
    keys, sizes, sums = [], [], []
    cumulative = np.r_[0.0, np.cumsum(values)]
    for size in WINDOWS:
        whole = lengths // size  # windows of this size in each record
        if not whole.any():
            break
        first = (position % size == 0) & (position // size < whole[record_index])
        rows = np.flatnonzero(first)
        keys.append(record_index[rows])
        sizes.append(np.full(rows.size, size))
        sums.append(cumulative[rows + size] - cumulative[rows])
    return np.concatenate(keys), np.concatenate(sizes), np.concatenate(sums)


def _record_rule(records: np.ndarray, y: np.ndarray, llr: np.ndarray) -> tuple[float, float, float, float, float]:
    """(t, r, c, record prior, windows' log loss) of the record rule, fitted on windows of each size;
    each size weighs the same in the fit, so that reads and long contigs are served alike."""
    record_of, size, total = windows(records, llr)
    label = y[np.flatnonzero(np.r_[True, records[1:] != records[:-1]])][record_of]
    _, inverse, per_size = np.unique(size, return_inverse=True, return_counts=True)
    weight = 1.0 / per_size[inverse]
    weight *= size.size / weight.sum()
    prior = float(np.average(label, weights=weight))

    def fitted(r: float) -> tuple[float, float, float, float, float]:
        evidence = total / (1 + r * (size - 1))
        t, c = _logistic(np.column_stack([evidence, np.ones_like(evidence)]), label, weight)
        t = max(t, 0.0)  # more viral evidence never makes a record less probably viral
        loss = _log_loss(label, expit(t * evidence + c), weight)
        return float(t), float(r), float(c - logit(prior)), prior, loss

    coarse = min((fitted(r) for r in np.linspace(0, 1, 11)), key=lambda f: f[-1])
    fine = np.clip(coarse[1] + np.linspace(-0.1, 0.1, 21), 0, 1)  # then to 0.01 around the best
    return min((fitted(r) for r in np.unique(fine)), key=lambda f: f[-1])


def _binned(y: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per tenth of probability: rows, summed probability and summed labels."""
    which = np.minimum((np.asarray(p) * 10).astype(int), 9)
    return np.bincount(which, minlength=10), np.bincount(which, p, 10), np.bincount(which, y, 10)


def calibration_error(y: np.ndarray, p: np.ndarray) -> float:
    """Expected calibration error: |observed viral share - mean probability| per tenth, weighted by its rows."""
    counts, predicted, observed = _binned(y, p)
    return float(np.abs(observed - predicted).sum() / max(counts.sum(), 1))


def reliability_curve(y: np.ndarray, p: np.ndarray) -> dict:
    """Per equal-width bin of probability: rows, mean probability and observed viral share."""
    counts, predicted, observed = _binned(y, p)
    safe = np.maximum(counts, 1)
    return {
        "rows": counts.tolist(),
        "mean_probability": (predicted / safe).tolist(),
        "observed_share": (observed / safe).tolist(),
    }


def fit(
    max_score_virus: np.ndarray,
    labels: np.ndarray,
    records: np.ndarray,
    classifier_sha256: str,
    chunk_length: int,
    method: str = "auto",
    atypicality: np.ndarray | None = None,
) -> Calibration:
    """The calibration from labelled chunks: each chunk's best virus score, its label (1 = virus),
    its record (rows of a record together, in order along it) and its mean atypicality over frames."""
    y = np.asarray(labels, dtype=np.float64)
    if len(np.unique(y)) < 2:
        raise InputError("calibration needs chunks of both classes: label at least one sample 'virus' and one 'other'")
    x = np.clip(logit(max_score_virus), KNOTS[0], KNOTS[-1])
    records = np.asarray(records)
    folds = _folds(records, y)
    held_out = {name: _cross_validated(m, x, y, folds) for name, m in METHODS.items()}
    losses = {name: _log_loss(y, expit(v)) for name, v in held_out.items()}
    chosen = min(losses, key=losses.get) if method == "auto" else method
    prior = float(y.mean())
    chunk_llr = METHODS[chosen](x, y) - logit(prior)
    # the record rule learns from held-out chunk LLRs, as the runs will meet them
    t, r, c, record_prior, window_loss = _record_rule(records, y, held_out[chosen] - logit(prior))
    # what it was fitted on, and how its chosen map did on held-out chunks against the scores as they are
    scores, calibrated = np.asarray(max_score_virus, dtype=np.float64), expit(held_out[chosen])
    fitted_on = {
        "chunks": int(y.size),
        "viral_chunks": int(y.sum()),
        "records": int(np.unique(records).size),
        "held_out_log_loss": losses,
        "method_chosen_by": "held-out log loss" if method == "auto" else "config",
        "held_out_calibration_error": {
            "scores": calibration_error(y, scores),
            chosen: calibration_error(y, calibrated),
        },
        "reliability": {"scores": reliability_curve(y, scores), chosen: reliability_curve(y, calibrated)},
        "windows_log_loss": window_loss,
    }
    limit, unreliable = _atypicality_limit(atypicality, records)
    if unreliable is not None:
        fitted_on["records_unreliable"] = unreliable
    return Calibration(
        classifier_sha256=classifier_sha256,
        chunk_length=int(chunk_length),
        method=chosen,
        knots=KNOTS.tolist(),
        chunk_llr=chunk_llr.tolist(),
        chunk_prior=prior,
        record_scale=t,
        record_correlation=r,
        record_offset=c,
        record_prior=record_prior,
        atypicality_limit=limit,
        fitted_on=fitted_on,
        # the map a sample meets, so that its chunks and these share one scale
        class_llrs=_class_llrs(np.interp(x, KNOTS, chunk_llr), y, records, atypicality),
    )


def _atypicality_limit(atypicality: np.ndarray | None, records: np.ndarray) -> tuple[float, float | None]:
    """The atypicality beyond which a record is unreliable, and the share of the calibration's beyond it."""
    if atypicality is None or not np.isfinite(atypicality).any():
        return float("inf"), None
    # a record is judged by its median chunk: the limit admits all but the most atypical 2% of the
    # calibration's chunks and of its records' medians, so that its own records pass
    per_record = pd.Series(atypicality).groupby(records).median()
    quantiles = [np.nanquantile(v, ATYPICAL_QUANTILE, method="higher") for v in (atypicality, per_record.to_numpy())]
    limit = float(max(quantiles)) * ATYPICAL_MARGIN
    return limit, float((per_record > limit).mean())


def _class_llrs(llr: np.ndarray, y: np.ndarray, records: np.ndarray, atypicality: np.ndarray | None) -> dict:
    """Per class, the chunks' LLRs as a sparse histogram, and what they are worth in independent
    chunks (_effective); where the chunks have one, their atypicality alike."""
    classes = {}
    typical = atypicality is not None and np.isfinite(atypicality).all()
    for name, label in (("virus", 1), ("other", 0)):
        mine = y == label
        classes[name] = sparse(histogram(llr[mine])) | {"effective": _effective(llr, records, mine)}
        if typical:
            counts = np.bincount(atypicality_bin(atypicality[mine]), minlength=N_ATYPICALITY_BINS + 1)
            effective = _effective(np.log(np.maximum(atypicality, 1e-12)), records, mine)
            classes[name]["atypicality"] = sparse(counts) | {"effective": effective}
    return classes


def sparse(counts: np.ndarray) -> dict:
    """A histogram as the JSON files keep it: its bins that hold something, and their counts."""
    bins = np.flatnonzero(counts)
    return {"bins": bins.tolist(), "counts": counts[bins].tolist()}


def dense(counted: dict, size: int) -> np.ndarray:
    """A sparse histogram's counts in each of `size` bins."""
    counts = np.zeros(size)
    counts[counted["bins"]] = counted["counts"]
    return counts


def _effective(values: np.ndarray, records: np.ndarray, mine: np.ndarray) -> float:
    """What the chunks `mine` are worth in independent chunks: a record's n chunks as
    n / (1 + rho (n - 1)), rho the share of the `values`' variance that lies between records (one-way
    analysis of variance). Chunks of one genome score alike, so a class of a few genomes is worth
    little more than a few chunks, however long they are."""
    starts = np.flatnonzero(np.r_[True, records[1:] != records[:-1]])
    sizes = np.diff(np.append(starts, records.size))
    means = np.add.reduceat(values, starts) / sizes
    n, m = sizes[mine[starts]], means[mine[starts]]
    within = ((values[mine] - np.repeat(m, n)) ** 2).sum() / max(n.sum() - n.size, 1)
    between = max((n * (m - np.average(m, weights=n)) ** 2).sum() / max(n.size - 1, 1) - within, 0.0)
    between /= max((n.sum() - (n**2).sum() / n.sum()) / max(n.size - 1, 1), 1e-12)  # per record, n unequal
    # one record: how its chunks vary between records is unknown; count them as one
    rho = between / (between + within) if n.size > 1 and between + within > 0 else 1.0
    return float((n / (1 + rho * (n - 1))).sum())


def atypicality_bin(atypicality: np.ndarray) -> np.ndarray:
    """The bin of each chunk's atypicality (log scale, clipped to ATYPICALITY_RANGE); N_ATYPICALITY_BINS
    for a chunk without one (NaN: scores that predate it)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = (np.log10(np.asarray(atypicality, dtype=np.float64)) - ATYPICALITY_RANGE[0]) / ATYPICALITY_STEP
    bins = np.rint(np.clip(scaled, 0, N_ATYPICALITY_BINS - 1))
    return np.where(np.isnan(bins), N_ATYPICALITY_BINS, bins).astype(np.int64)


# A sample's composition and q-values, from histograms of LLRs


def bin_of(llr: np.ndarray) -> np.ndarray:
    """The histogram bin of each LLR."""
    return np.rint((np.clip(llr, -LLR_LIMIT, LLR_LIMIT) + LLR_LIMIT) / LLR_STEP).astype(np.int64)


def histogram(llr: np.ndarray) -> np.ndarray:
    """Counts of `llr` in the N_BINS bins centred on CENTRES."""
    return np.bincount(bin_of(llr), minlength=N_BINS)


def estimate_prior(counts: np.ndarray) -> float:
    """The viral share that makes the LLRs counted in `counts` most likely (label shift)."""
    return float(estimate_priors(counts[None, :])[0])


def estimate_priors(counts: np.ndarray, steps: int = 60) -> np.ndarray:
    """estimate_prior of each row of `counts`: where the log-likelihood's slope in the share,
    sum c (L - 1) / (1 + share (L - 1)) with L = exp(LLR), is zero. The slope falls as the share
    grows, so bisection finds it in a fixed number of `steps` (EM needs thousands near 0 or 1)."""
    used = counts.any(axis=0)
    ratio, counts = np.expm1(CENTRES[used]), counts[:, used]  # L - 1

    def rising(share: np.ndarray) -> np.ndarray:
        return (counts * ratio / (1 + share[:, None] * ratio)).sum(axis=1) > 0

    low, high = np.zeros(counts.shape[0]), np.ones(counts.shape[0])
    at_one, at_zero = rising(high), ~rising(low)
    found = np.where(at_one, 1.0, np.where(at_zero, 0.0, _bisect(rising, low, high, steps)))
    return np.where(counts.any(axis=1), found, 0.5)


def _bisect(rising, low: np.ndarray, high: np.ndarray, steps: int) -> np.ndarray:
    """Per row, the share between `low` and `high` where `rising` (a slope falling as the share grows: > 0?) turns."""
    for _ in range(steps):
        middle = (low + high) / 2
        up = rising(middle)
        low, high = np.where(up, middle, low), np.where(up, high, middle)
    return (low + high) / 2


def record_share(weighted: np.ndarray, records: int, chunk_prior: float) -> float:
    """The share of viral records among `records`, from their chunks' LLRs counted in `weighted`
    each with the weight 1 / (its record's scored chunks): the mean over records of their chunks'
    mean probability at the sample's viral fraction of chunks (`chunk_prior`). Unlike the record
    rule (fitted on fewer, correlated windows), calibrated chunk probabilities leave it unbiased."""
    return float((weighted * expit(CENTRES + logit(chunk_prior))).sum() / records)


def qvalues(counts: np.ndarray, prior: float) -> np.ndarray:
    """The q-value of each bin: the expected share of non-viral among all counted items at least
    that probable viral (the bin included), at the sample's prior; then the least such share from
    there down, so that q never falls as the probability falls."""
    p = expit(CENTRES + logit(prior))
    taken = np.cumsum(counts[::-1])  # from the most probable bin down
    false = np.cumsum((counts * (1 - p))[::-1])
    fdr = false / np.maximum(taken, 1)
    return np.minimum.accumulate(fdr[::-1])  # least from each bin down, in bin order


def qvalue_share(found: dict) -> float:
    """The viral fraction the q-values are computed at: the lower end of the composition's interval
    (fewer records pass there), the estimate where the calibration's own fraction stands in."""
    return found["interval"][0] if found.get("interval") else found["viral_fraction_estimate"]


def bootstrap_group(ordinals: np.ndarray) -> np.ndarray:
    """The bootstrap group of the records numbered `ordinals` in the sample's order: a hash of the
    number (splitmix64), so that it does not depend on how the records came in blocks."""
    z = ordinals.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)  # uint64 arithmetic wraps, as the hash wants
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return ((z ^ (z >> np.uint64(31))) % np.uint64(BOOTSTRAP_GROUPS)).astype(np.int64)


def _at_or_above(counts: np.ndarray) -> np.ndarray:
    """Along the last axis: the count at or above each bin."""
    return np.cumsum(counts[..., ::-1], axis=-1)[..., ::-1]


def _band_gaps(
    counts, replicates, share: float, shares, classes, size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """In FIT_BANDS bands, each the chunks at or above one decile of the calibration's classes
    (`classes`: virus, other, as class_llrs keeps them, in `size` bins) mixed at `share`, the sample's
    share (of `counts`) against the mixture's, in standard errors (from the bootstrap's `replicates`
    and `shares`, and the classes' `effective` worth); and the sample's share and the viral class's in each band."""
    tails = [_at_or_above(dense(counted, size)) for counted in classes]
    virus, other = tails[0] / tails[0][0], tails[1] / tails[1][0]
    n_virus, n_other = classes[0]["effective"], classes[1]["effective"]
    mixture = share * virus + (1 - share) * other
    # mixture is non-increasing along the bins: each band starts at the last bin that keeps its decile above
    levels = np.arange(1, FIT_BANDS + 1) / (FIT_BANDS + 1)
    bands = np.unique([np.flatnonzero(mixture >= level).max(initial=0) for level in levels])
    v, o = virus[bands], other[bands]
    observed = _at_or_above(counts)[bands] / counts.sum()
    boot_observed = _at_or_above(replicates)[:, bands] / np.maximum(replicates.sum(axis=1, keepdims=True), 1)
    boot_expected = shares[:, None] * v + (1 - shares[:, None]) * o
    variance = (
        np.var(boot_observed - boot_expected, axis=0)
        + share**2 * v * (1 - v) / n_virus
        + (1 - share) ** 2 * o * (1 - o) / n_other
    )
    gap = np.abs(observed - (share * v + (1 - share) * o))
    z = np.divide(gap, np.sqrt(variance), out=np.where(gap > 0, np.inf, 0.0), where=variance > 0)
    return z, observed, v


def composition_fit(counts: np.ndarray, replicates: np.ndarray, share: float, shares: np.ndarray, cal, typical) -> dict:
    """Whether the calibration's classes mixed at the sample's viral fraction of chunks (`share`)
    fit the sample's chunk LLRs (`counts`) and, where both have them, its chunks' atypicality
    (`typical`: (counts, replicates) in atypicality_bin's bins): label shift assumes each class looks
    in the sample as in the calibration, so chunks unlike both (random DNA, say) fail it though their
    scores may fit. The statistic is the largest band gap (_band_gaps); beyond FIT_LIMIT the fit is
    poor. `most`: the most the viral fraction can be if the viral chunks score like the
    calibration's, whatever the others do (no band holds fewer chunks than its viral ones)."""
    classes = [cal.class_llrs[name] for name in ("virus", "other")]
    z, observed, v = _band_gaps(counts, replicates, share, shares, classes, N_BINS)
    statistics = {"scores": float(z.max())}
    if typical[0].sum() and all("atypicality" in c for c in classes):
        atypical = [c["atypicality"] for c in classes]
        statistics["atypicality"] = float(_band_gaps(*typical, share, shares, atypical, N_ATYPICALITY_BINS)[0].max())
    statistic = max(statistics.values())
    return {
        "fit": "poor" if statistic > FIT_LIMIT else "ok",
        "statistic": round(statistic, 3),
        "statistics": {key: round(value, 3) for key, value in statistics.items()},
        "limit": FIT_LIMIT,
        "most": float(np.min(observed[v > 0] / v[v > 0], initial=1.0)),
    }


def mixture_priors(observed: np.ndarray, virus: np.ndarray, other: np.ndarray) -> np.ndarray:
    """Per row: the viral share that makes the counts `observed` in coarse bins most likely as a mixture
    of the classes' shares of those bins (`virus`, `other`): where the slope
    sum o (v - n) / (share v + (1 - share) n) is zero (it falls as the share grows), by bisection.
    The share may leave [0, 1] as far as the mixture stays a distribution (no bin below 0; within
    MIXTURE_REACH): the replicates are read as departures from the data's own estimate, which a
    share held at 0 would cut off, leaving an interval that cannot reach below the estimate."""
    gap = virus - other
    with np.errstate(divide="ignore", invalid="ignore"):
        low = np.max(np.where(gap > 0, -other / gap, -MIXTURE_REACH), axis=-1, initial=-MIXTURE_REACH)
        high = np.min(np.where(gap < 0, other / -gap, 1 + MIXTURE_REACH), axis=-1, initial=1 + MIXTURE_REACH)
    low, high = np.broadcast_to(low, observed.shape[:1]), np.broadcast_to(high, observed.shape[:1])

    def rising(share: np.ndarray) -> np.ndarray:
        mixed = other + share[:, None] * gap
        # a bin neither class holds (0 / 0) says nothing; one that the share leaves empty, though the
        # sample has chunks there, pulls the share away without limit (+-inf at the range's ends)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.nansum(observed * gap / mixed, axis=1) > 0

    return _bisect(rising, low, high, 60)


def composition_intervals(chunks, weighted, records, typical, record_llrs: np.ndarray, cal: Calibration) -> dict:
    """The sample's viral fraction of chunks and of records, each with its interval, and the fit
    (composition_fit), from what its records counted per bootstrap group (rows): their chunks' LLRs
    (histogram bins), the same each weighing 1 / its record's chunks, the records, and their chunks'
    atypicality (atypicality_bin's bins); and the records' LLRs counted (`record_llrs`). The
    bootstrap resamples both what the estimate rests on: the sample's records (its groups) and the
    calibration's chunks of each class (as many as they are worth independent ones), whose share
    moves the estimate as much as the sample's. Each replicate's departure from the data's own
    estimate, as a mixture in coarse bins of LLR (mixture_priors), moves the estimate. The records'
    interval is for this sample's records: each replicate adds the spread of their labels about
    their probabilities (variance sum p (1 - p) / n^2), which the bootstrap misses where the classes
    barely separate. Where the fit is poor, non-viral sequences may score like viral ones: the
    interval then runs from 0 to the most the sample's chunks allow."""
    counts, total = chunks.sum(axis=0), records.sum()
    groups = records.size
    rng = np.random.default_rng(0)
    # in floats: numpy's integer matrix product has no BLAS behind it
    resampled = rng.multinomial(groups, np.full(groups, 1 / groups), BOOTSTRAP_REPLICATES).astype(np.float64)
    # the bins from the lowest LLR counted to the highest: the products need no others, and most
    # samples' LLRs span a few of the bins
    held = np.flatnonzero(counts)
    window = slice(held.min(initial=0), held.max(initial=0) + 1)
    replicates = np.zeros((BOOTSTRAP_REPLICATES, N_BINS))
    replicates[:, window] = resampled @ chunks[:, window].astype(np.float64)
    share = estimate_prior(counts)
    typical = (typical.sum(axis=0), resampled @ typical.astype(np.float64))
    fit = composition_fit(counts, replicates, share, estimate_priors(replicates, steps=30), cal, typical)
    shares = _replicated_chunk_shares(counts, replicates, share, cal, rng)
    record_share_of = functools.partial(record_share, weighted.sum(axis=0), total)
    record_shares = ((resampled @ weighted[:, window]) * expit(CENTRES[window] + logit(shares)[:, None])).sum(axis=1)
    record_shares /= np.maximum(resampled @ records, 1)
    p = expit(CENTRES + logit(record_share_of(share)))
    record_shares += rng.normal(0, np.sqrt((record_llrs * p * (1 - p)).sum()) / total, BOOTSTRAP_REPLICATES)
    np.clip(record_shares, 0, 1, out=record_shares)
    found = {"chunks": _interval(share, shares, fit, fit["most"])}
    # the records' interval is at least as wide as the chunks' makes it
    widest = [record_share_of(end) for end in found["chunks"]["interval"]]
    found["records"] = _interval(record_share_of(share), record_shares, fit, record_share_of(fit["most"]), widest)
    return found | {"fit": fit}


def _replicated_chunk_shares(counts, replicates, share: float, cal: Calibration, rng) -> np.ndarray:
    """Each bootstrap replicate's viral fraction of chunks: `share`, moved by how far its mixture of the
    calibration's classes (redrawn) departs from the data's as they are, in coarse bins of LLR."""
    # coarse bins: equal shares of the calibration's chunks of both classes together, each worth about
    # ten independent chunks of the smaller class at least: redrawn, a class of few records left most
    # bins empty, and empty bins, not the data, then made the replicates
    classes = [dense(cal.class_llrs[name], N_BINS) for name in ("virus", "other")]
    pooled = np.cumsum(classes[0] / classes[0].sum() + classes[1] / classes[1].sum()) / 2
    fewest = min(cal.class_llrs[name]["effective"] for name in ("virus", "other"))
    n_bins = int(np.clip(fewest // 10, 2, COARSE_BINS))
    starts = np.unique(np.r_[0, np.searchsorted(pooled, np.linspace(0, 1, n_bins + 1)[1:-1], "right")])
    coarse = functools.partial(np.add.reduceat, indices=starts, axis=-1)
    drawn = []
    for counted, name in zip(classes, ("virus", "other")):
        share_of_bins = coarse(counted) / counted.sum()
        effective = max(int(round(cal.class_llrs[name]["effective"])), 1)
        drawn.append((share_of_bins, rng.multinomial(effective, share_of_bins, BOOTSTRAP_REPLICATES) / effective))
    as_is = mixture_priors(coarse(counts)[None, :], drawn[0][0][None, :], drawn[1][0][None, :])[0]
    return np.clip(share + mixture_priors(coarse(replicates), drawn[0][1], drawn[1][1]) - as_is, 0, 1)


def _interval(estimate: float, replicated: np.ndarray, fit: dict, most: float, widest=None) -> dict:
    """The estimate and the middle INTERVAL_LEVEL of its replicates, widened to hold the estimate (and
    `widest`); where the fit is poor the sample's non-viral chunks may score like its viral ones, so
    none may be viral: from 0 to at most `most`."""
    low, high = np.quantile(replicated, [(1 - INTERVAL_LEVEL) / 2, (1 + INTERVAL_LEVEL) / 2])
    if widest is not None:
        low, high = min(low, widest[0]), max(high, widest[1])
    low, high = min(low, estimate), max(high, estimate)
    if fit["fit"] == "poor":
        low, high = 0.0, max(high, most)
    return {"viral_fraction_estimate": estimate, "interval": [float(low), float(high)]}
