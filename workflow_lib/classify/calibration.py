"""Weighing the calls: probabilities, a sample's own viral fraction and false discovery rates.

Everything is carried as a log-likelihood ratio, LLR = logit P(virus | evidence) - logit(prior):
evidence free of the class balance it was measured under, to which a sample's own prior is added
back as logit(prior). Three fitted parts, kept in the calibration JSON (`Calibration`):
- the chunk map: a chunk's best virus score (chunks.tsv's max_score_virus) to its LLR, fitted on
  labelled chunks the classifier did not learn from, by Platt scaling or isotonic regression,
  whichever predicts held-out records better (grouped two-fold cross-validation, log loss);
- the record rule: a record's LLR from its n scored chunks, t * (sum of chunk LLRs) / (1 + r (n - 1))
  + c, fitted on windows of consecutive chunks of labelled records (1 to 128 chunks). Chunks of one
  record are not independent evidence: with evidence equally correlated (r) between any two chunks,
  n chunks weigh as n / (1 + r (n - 1)) independent ones (r = 0: a plain product; r = 1: a mean);
- the priors of the data it was fitted on (chunks and records).
A sample's viral fraction is the maximum-likelihood prior of its own LLRs (label shift, Saerens et
al. 2002), computed on a histogram of LLRs so that memory does not grow with the sample;
q-values come from the same histogram.
"""

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from workflow_lib.cli.errors import InputError
from workflow_lib.io.outputs import atomic_open

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
# The score job computes a frame's atypicality again, in other batches: a mean of squared z-scores
# over small BatchNorm variances, it moves by about 1e-4 of itself, so that a calibration record at
# the limit (the most atypical of a few) fell just outside it. The limit leaves that much room.
ATYPICAL_MARGIN = 1.01
# Held-out folds go by record when each class has this many records (as train's split does)
MIN_RECORDS_PER_CLASS = 10
VERSION = 1


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
    version: int = VERSION

    def chunk_llrs(self, max_score_virus) -> np.ndarray:
        return np.interp(logit(max_score_virus), self.knots, self.chunk_llr)

    def record_llrs(self, n_chunks, sum_llr) -> np.ndarray:
        """The LLR of records (or regions) of `n_chunks` scored chunks whose chunk LLRs sum to `sum_llr`."""
        n = np.maximum(np.asarray(n_chunks, dtype=np.float64), 1)
        llr = self.record_scale * np.asarray(sum_llr) / (1 + self.record_correlation * (n - 1)) + self.record_offset
        return np.clip(llr, -LLR_LIMIT, LLR_LIMIT)

    def save(self, path: str | Path) -> None:
        with atomic_open(path) as handle:
            json.dump(asdict(self), handle, indent=2)
            handle.write("\n")

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

    def refusal(self, classifier_sha256: str, chunk_length: int, path: str | Path) -> str | None:
        """Why this calibration cannot weigh a classifier's calls, in one line; None if it can."""
        if self.classifier_sha256 != classifier_sha256:
            return (
                f"{path}: made for another classifier file (SHA-256 {self.classifier_sha256[:12]}..., the "
                f"configured one is {classifier_sha256[:12]}...); run the calibrate target for it"
            )
        if self.chunk_length != chunk_length:
            return (
                f"{path}: made for chunks of {self.chunk_length} bp, the config's chunk_length is {chunk_length}; "
                "run the calibrate target for it"
            )
        return None


# Fitting


def _logistic(features: np.ndarray, y: np.ndarray, weight: np.ndarray, iterations: int = 50) -> np.ndarray:
    """Weighted logistic regression by Newton's method (features include a column of ones); a small
    ridge keeps separable data finite."""
    beta = np.zeros(features.shape[1])
    for _ in range(iterations):
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


def _folds(records: np.ndarray, y: np.ndarray, seed: int = 0) -> np.ndarray:
    """Fold 0 or 1 of each row: by record (a record's chunks never straddle folds) when each class
    has MIN_RECORDS_PER_CLASS records, else by chunk, so that each fold sees both classes."""
    per_class = [np.unique(records[y == label]).size for label in (0, 1)]
    groups = records if min(per_class) >= MIN_RECORDS_PER_CLASS else np.arange(records.size)
    unique, inverse = np.unique(groups, return_inverse=True)
    return np.random.default_rng(seed).integers(0, 2, unique.size)[inverse]


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
    """(window, chunks in it, sum of `values` over it): non-overlapping windows of each size in
    WINDOWS over consecutive rows of each record (`records`: rows of a record together, in order
    along it). Window numbers index (records' first row, size) combinations."""
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
    weight = np.zeros(size.size)
    for s in np.unique(size):
        weight[size == s] = 1.0 / (size == s).sum()
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


def calibration_error(y: np.ndarray, p: np.ndarray, bins: int = 10) -> float:
    """Expected calibration error: the mean over equal-width probability bins of |observed viral share -
    mean probability|, weighted by the bin's rows."""
    which = np.minimum((np.asarray(p) * bins).astype(int), bins - 1)
    counts = np.bincount(which, minlength=bins)
    gap = np.abs(np.bincount(which, y, bins) - np.bincount(which, p, bins))
    return float(gap.sum() / max(counts.sum(), 1))


def reliability_curve(y: np.ndarray, p: np.ndarray, bins: int = 10) -> dict:
    """Per equal-width bin of probability: rows, mean probability and observed viral share."""
    which = np.minimum((np.asarray(p) * bins).astype(int), bins - 1)
    counts = np.bincount(which, minlength=bins)
    safe = np.maximum(counts, 1)
    return {
        "rows": counts.tolist(),
        "mean_probability": (np.bincount(which, p, bins) / safe).tolist(),
        "observed_share": (np.bincount(which, y, bins) / safe).tolist(),
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
    fitted_on = {
        "chunks": int(y.size),
        "viral_chunks": int(y.sum()),
        "records": int(np.unique(records).size),
        "held_out_log_loss": losses,
        "method_chosen_by": "held-out log loss" if method == "auto" else "config",
        "held_out_calibration_error": {
            "scores": calibration_error(y, np.asarray(max_score_virus, dtype=np.float64)),
            chosen: calibration_error(y, expit(held_out[chosen])),
        },
        "reliability": {
            "scores": reliability_curve(y, np.asarray(max_score_virus, dtype=np.float64)),
            chosen: reliability_curve(y, expit(held_out[chosen])),
        },
        "windows_log_loss": window_loss,
    }
    limit = float("inf")
    if atypicality is not None and np.isfinite(atypicality).any():
        # a record is judged by its median chunk: the limit admits all but the most atypical 2% of the
        # calibration's chunks and of its records' medians, so that its own records pass
        per_record = pd.Series(atypicality).groupby(records).median()
        quantiles = [
            np.nanquantile(v, ATYPICAL_QUANTILE, method="higher") for v in (atypicality, per_record.to_numpy())
        ]
        limit = float(max(quantiles)) * ATYPICAL_MARGIN
        fitted_on["records_unreliable"] = float((per_record > limit).mean())
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
    )


# A sample's composition and q-values, from histograms of LLRs


def bin_of(llr: np.ndarray) -> np.ndarray:
    """The histogram bin of each LLR."""
    return np.rint((np.clip(llr, -LLR_LIMIT, LLR_LIMIT) + LLR_LIMIT) / LLR_STEP).astype(np.int64)


def histogram(llr: np.ndarray) -> np.ndarray:
    """Counts of `llr` in the N_BINS bins centred on CENTRES."""
    return np.bincount(bin_of(llr), minlength=N_BINS)


def estimate_prior(counts: np.ndarray) -> float:
    """The viral share that makes the LLRs counted in `counts` most likely (label shift, Saerens et
    al. 2002): where the log-likelihood's slope in the share, sum c (L - 1) / (1 + share (L - 1))
    with L = exp(LLR), is zero. The slope falls as the share grows, so bisection finds it to the
    last bit; EM reaches the same point, but in thousands of steps when the share is near 0 or 1."""
    ratio, counts = np.expm1(CENTRES)[counts > 0], counts[counts > 0]  # L - 1
    if counts.size == 0:
        return 0.5

    def rising(share: float) -> bool:
        return float((counts * ratio / (1 + share * ratio)).sum()) > 0

    if rising(1.0) or not rising(0.0):
        return float(rising(1.0))
    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if rising(middle) else (low, middle)
    return (low + high) / 2


def record_share(weighted: np.ndarray, records: int, chunk_prior: float) -> float:
    """The share of viral records among `records`, from their chunks' LLRs counted in `weighted`
    each with the weight 1 / (its record's scored chunks): the mean over records of their chunks'
    mean probability at the sample's viral fraction of chunks (`chunk_prior`). Calibrated chunk
    probabilities make it unbiased whatever the record rule, which is fitted on fewer, correlated
    windows and misjudges most where the classifier meets genomes unlike its training ones."""
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
