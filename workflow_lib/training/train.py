"""Training VirNucPro's classifier on frames of samples labelled `virus` or `other`.

VirNucPro's recipe: SGD (lr 2e-4, momentum 0.9), StepLR (10 epochs, gamma 0.85), batch 32,
cross-entropy, early stopping on the validation loss (patience 5), a held-out split. Deliberate
differences: the best weights are really restored (VirNucPro keeps a reference to the live
state dict, so it restores the last); classes may be weighted by their inverse frequency
instead of VirNucPro's down-sampling of the larger class; and the validation split holds out
whole chunks (whole sequences when there are enough), not single frames: the six frames of a
chunk are near-duplicates, and a split by frame scores the classifier on frames it was trained on.
"""

import logging
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from workflow_lib.classify.calibration import MIN_RECORDS_PER_CLASS
from workflow_lib.cli.errors import InputError
from workflow_lib.cli.progress import Progress
from workflow_lib.cli.settings import TrainSettings
from workflow_lib.io import checksums, h5store
from workflow_lib.io.outputs import atomic_path
from workflow_lib.io.tables import read_table, write_json
from workflow_lib.models import classifier
from workflow_lib.training.calibrate import LABELS, fit_chunks

log = logging.getLogger("workflow")
FEW_FRAMES = 1000  # of a class: fewer, and the train job warns
# the job's settings, not the training's: metrics.json's settings are the train section's
NOT_THE_RECIPE = ("chunk_length", "progress_seconds", "threads")
# training rows copied and scored at a time: classifier.scores_and_atypicality's batch, 55 MB at production width
SCORE_ROWS = 4096


@dataclass(frozen=True)
class Examples:
    x: np.ndarray  # [N, D] features: each configured model's, in input order
    y: np.ndarray  # [N] labels, 1 = virus
    chunk: np.ndarray  # [N] the frame's chunk, numbered over all samples
    sequence: np.ndarray  # [N] the frame's input record, numbered over all samples
    embedders: tuple = ()  # ([model, width], ...) of the features, in input order


def load_examples(shards: list[tuple], progress_seconds: float) -> Examples:
    """Frames from (label, its embeddings HDF5 files (one per model, in input order), the sample's
    prepare frames table, first row, end row) per sample's piece of a pooled shard; chunks and
    sequences come from the frames table, joined on frame_id. The features are read once, into one
    array, whose size the first pass over the files gives, in a canonical order: the samples as
    first listed, each one's frames in its frames table's order, so that the classifier does not
    depend on how the plan cut the pooled shards."""
    widths, tables, placed = [], {}, []  # placed: per piece, its frames' rows in its frames table
    for label, paths, frames_path, first, end in shards:
        if label not in LABELS:  # the scripts run by hand too
            raise InputError(f"label '{label}' for {paths[0]}: a training sample's label must be 'virus' or 'other'")
        if frames_path not in tables:
            if not Path(frames_path).is_file():
                raise InputError(f"{frames_path}: frames table not found; run the prepare step of its sample first")
            tables[frames_path] = read_table(frames_path, ["frame_id", "sequence_id", "chunk"]).set_index("frame_id")
        with h5store.FeatureBlocks(*paths) as blocks:
            widths.append([[str(attrs["model"]), dim] for attrs, dim in zip(blocks.attrs, blocks.dims)])
            ids = blocks.ids(first, end)
        if widths[-1] != widths[0]:
            described = [" + ".join(f"{name} {width}" for name, width in w) for w in (widths[-1], widths[0])]
            raise InputError(
                f"{' and '.join(map(str, paths))}: {blocks.dim} features a frame ({described[0]}) where "
                f"{' and '.join(map(str, shards[0][1]))} have {sum(w for _, w in widths[0])} ({described[1]}); "
                "embed every training sample with the same models"
            )
        where = tables[frames_path].index.get_indexer(ids)
        if (where < 0).any():
            raise InputError(
                f"{paths[0]}: {(where < 0).sum()} frames are not in {frames_path} (e.g. "
                f"{[ids[i] for i in np.flatnonzero(where < 0)[:3]]}); delete the sample's embeddings and run again"
            )
        placed.append(where)
    # each piece's rows of x: after the samples listed before its own, at its frames' rank in its table
    destinations, keys, offset = [None] * len(shards), [], 0
    for frames_path in dict.fromkeys(piece[2] for piece in shards):
        pieces = [i for i, piece in enumerate(shards) if piece[2] == frames_path]
        rows = np.sort(np.concatenate([placed[i] for i in pieces]))
        if (repeated := rows[1:][rows[1:] == rows[:-1]]).size:
            frame = tables[frames_path].index[repeated[0]]
            raise InputError(f"frame {frame} is in more than one shard: list each shard once")
        for i in pieces:
            destinations[i] = offset + np.searchsorted(rows, placed[i])
        keys.append(tables[frames_path].iloc[rows].reset_index().assign(sample=frames_path))
        offset += rows.size
    x = np.empty((offset, sum(w for _, w in widths[0])), dtype=np.float32)
    y = np.empty(offset, dtype=np.int64)
    progress = Progress(log, "shards read", total=len(shards), interval=progress_seconds)
    for done, ((label, paths, _, first, _), destination) in enumerate(zip(shards, destinations), 1):
        y[destination] = LABELS[label]
        with h5store.FeatureBlocks(*paths) as blocks:
            blocks.read_into(x, destination, first)
        progress.update(done)
    key = pd.concat(keys, ignore_index=True)
    if len(np.unique(y)) < 2:
        raise InputError("training needs frames of both classes: label at least one sample 'virus' and one 'other'")
    if np.bincount(y).min() < FEW_FRAMES:
        log.warning(
            "training on %d virus and %d other frames: with fewer than %d of a class the classifier will hardly "
            "generalise (VirNucPro trained on hundreds of thousands); label more sequences",
            (y == 1).sum(),
            (y == 0).sum(),
            FEW_FRAMES,
        )
    chunk = key.groupby(["sample", "sequence_id", "chunk"], sort=False).ngroup().to_numpy()
    sequence = key.groupby(["sample", "sequence_id"], sort=False).ngroup().to_numpy()
    return Examples(x, y, chunk, sequence, tuple(widths[0]))


def split(examples: Examples, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray, str]:
    """(training rows, validation rows, unit): whole sequences are held out when each class has
    MIN_RECORDS_PER_CLASS of them, else whole chunks. Per class, its groups in a seeded order
    until they hold `fraction` of its frames: at least one group, never all of them."""
    y = examples.y
    per_class = [np.unique(examples.sequence[y == label]).size for label in (0, 1)]
    unit = "sequence" if min(per_class) >= MIN_RECORDS_PER_CLASS else "chunk"
    group = examples.sequence if unit == "sequence" else examples.chunk
    rng = np.random.default_rng(seed)
    held = np.zeros(y.size, dtype=bool)
    for label in (0, 1):
        groups, sizes = np.unique(group[y == label], return_counts=True)
        if groups.size < 2:
            continue  # its one group is needed for training
        order = rng.permutation(groups.size)
        cumulative = np.cumsum(sizes[order])
        n = min(int(np.searchsorted(cumulative, fraction * cumulative[-1])) + 1, groups.size - 1)
        held |= np.isin(group, groups[order[:n]])
    if not held.any():
        raise InputError("too few chunks to hold out a validation split: give the train target more sequences")
    return np.flatnonzero(~held), np.flatnonzero(held), unit


def metrics(y: np.ndarray, score: np.ndarray) -> dict:
    """Accuracy, precision, recall, F1 (class virus, threshold: virus > other) and ROC-AUC."""
    predicted = score > 0.5
    tp, fp = int((predicted & (y == 1)).sum()), int((predicted & (y == 0)).sum())
    fn, tn = int((~predicted & (y == 1)).sum()), int((~predicted & (y == 0)).sum())
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    return {
        "n": int(y.size),
        "n_virus": int((y == 1).sum()),
        "accuracy": float((predicted == (y == 1)).mean()),
        "precision": precision,
        "recall": recall,
        "f1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
        "roc_auc": _roc_auc(y, score),
        "confusion": {"tp": tp, "fp": fp, "tn": tn, "fn": fn},
    }


def _roc_auc(y: np.ndarray, score: np.ndarray) -> float | None:
    """Probability that a random virus frame outscores a random other frame (ties count half)."""
    positives, negatives = score[y == 1], score[y == 0]
    if not positives.size or not negatives.size:
        return None
    ranks = pd.Series(np.concatenate([positives, negatives])).rank().to_numpy()  # ties: average rank
    return float(
        (ranks[: positives.size].sum() - positives.size * (positives.size + 1) / 2) / (positives.size * negatives.size)
    )


def roc_curve(y: np.ndarray, score: np.ndarray) -> dict | None:
    """The exact ROC curve: one step per distinct score from the highest down (tied frames step
    together, a diagonal), from (0, 0) to (1, 1). Points inside straight runs are left out: the
    curve and its area are the same. threshold[i]: frames scoring at least this are called virus
    (None at (0, 0), where no frame is)."""
    positives = int((y == 1).sum())
    negatives = y.size - positives
    if not positives or not negatives:
        return None
    order = np.argsort(-score, kind="stable")
    ranked = score[order]
    last = np.r_[np.flatnonzero(np.diff(ranked)), ranked.size - 1]  # the last frame of each distinct score
    tp = np.r_[0, np.cumsum(y[order] == 1)[last]]
    fp = np.r_[0, last + 1 - tp[1:]]
    keep = np.r_[True, (np.diff(tp, 2) != 0) | (np.diff(fp, 2) != 0), True]
    return {
        "false_positive_rate": (fp[keep] / negatives).tolist(),
        "true_positive_rate": (tp[keep] / positives).tolist(),
        "threshold": [None, *ranked[last][keep[1:]].tolist()],
    }


def fit(
    model: classifier.MLPClassifier,
    training: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    validation: tuple[torch.Tensor, torch.Tensor] | None,
    settings: TrainSettings,
) -> dict:
    """VirNucPro's SGD and StepLR on `training` (features, labels, the rows to train on), stopping
    once the validation loss has not improved for `patience` epochs; the best epoch's weights are
    loaded into `model`. Without a validation split it runs all `epochs`, watching the training loss.
    With train.balance_classes, the loss weighs the classes by their inverse frequency in `rows`."""
    x, y, rows = training
    weight = None
    if settings.balance_classes:
        counts = torch.bincount(y[rows], minlength=2).clamp(min=1).float()
        weight = counts.sum() / (2 * counts)
    generator = torch.Generator().manual_seed(settings.seed)  # the batches' own seeded order
    optimizer = torch.optim.SGD(model.parameters(), lr=settings.learning_rate, momentum=settings.momentum)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.85)
    best_loss, best_state, best_epoch, stale, epoch, stopped = float("inf"), None, 0, 0, 0, False
    history = {"train_loss": [], "validation_loss": []}
    progress = Progress(log, "epochs", total=settings.epochs, interval=settings.progress_seconds)
    status, watched = "epoch 1 running", "training" if validation is None else "validation"
    for epoch in range(1, settings.epochs + 1):
        batches = rows[torch.randperm(len(rows), generator=generator)].split(settings.batch_size)
        total, seen = 0.0, 0
        model.train()
        for step, batch in enumerate(batches, 1):
            if len(batch) >= 2:  # BatchNorm needs two rows in training mode
                optimizer.zero_grad()
                loss = F.cross_entropy(model(x[batch]), y[batch], weight=weight)
                loss.backward()
                optimizer.step()
                total, seen = total + loss.item() * len(batch), seen + len(batch)
            # checked after every batch: the first line comes after one interval even when epochs are long
            progress.update(epoch - 1 + step / len(batches), status)
        scheduler.step()
        model.eval()
        loss = total / max(seen, 1)
        history["train_loss"].append(loss)
        if validation is not None:
            with torch.no_grad():
                loss = float(F.cross_entropy(model(validation[0]), validation[1], weight=weight))
            history["validation_loss"].append(loss)
        if loss < best_loss:
            best_loss, best_epoch, stale = loss, epoch, 0
            best_state = {k: v.clone() for k, v in model.state_dict().items()}
        else:
            stale += 1
        status = f"{watched} loss {loss:.4f} at epoch {epoch}, best {best_loss:.4f} at epoch {best_epoch}"
        progress.update(float(epoch), status)
        stopped = validation is not None and stale >= settings.patience
        if stopped:
            break
    if best_state is None:
        raise InputError(
            "the validation loss is not finite from the first epoch: the embeddings hold NaN or Inf, "
            "or train.learning_rate is far too high"
        )
    model.load_state_dict(best_state)
    log.info(
        "%d epochs in %.1f s (%s); best %s loss %.4f at epoch %d",
        epoch,
        time.monotonic() - progress.start,
        f"early stop: no improvement for {settings.patience} epochs" if stopped else "all epochs",
        watched,
        best_loss,
        best_epoch,
    )
    return {"epochs_run": epoch, "best_epoch": best_epoch, "best_validation_loss": best_loss, "history": history}


def virus_scores(
    model: classifier.MLPClassifier, features: torch.Tensor, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The virus scores and atypicality of `rows` of `features`, SCORE_ROWS at a time (a multiple
    of the scoring batch: the same batches, so the same figures, as scoring a copy of those rows)."""
    scores, atypicality = np.zeros(rows.size, dtype=np.float32), np.zeros(rows.size, dtype=np.float32)
    for i in range(0, rows.size, SCORE_ROWS):
        block, typical = classifier.scores_and_atypicality(model, features[rows[i : i + SCORE_ROWS]])
        scores[i : i + SCORE_ROWS], atypicality[i : i + SCORE_ROWS] = block[:, 1].numpy(), typical.numpy()
    return scores, atypicality


def sequence_folds(examples: Examples, most: int, seed: int) -> np.ndarray | None:
    """Each frame's fold for cross-fitting, whole sequences to a fold: each class's sequences dealt
    in a seeded order over as many folds as the smaller class has sequences (at most `most`), so
    that every fold holds both classes. None where that is fewer than two."""
    rng = np.random.default_rng(seed)
    per_class = [np.unique(examples.sequence[examples.y == label]) for label in (0, 1)]
    folds = min(most, *(sequences.size for sequences in per_class))
    if folds < 2:
        return None
    fold_of = np.zeros(examples.sequence.max() + 1, dtype=np.int64)
    for sequences in per_class:
        fold_of[rng.permutation(sequences)] = np.arange(sequences.size) % folds
    return fold_of[examples.sequence]


def cross_fitted_scores(examples: Examples, settings: TrainSettings, epochs: int) -> tuple[np.ndarray, int] | None:
    """Every frame's virus score from a classifier trained, as the final one was for `epochs`
    epochs, without its sequence's fold: what the classifier makes of genomes it never saw, which a
    validation split of chunks of the training genomes overstates; and the number of folds. None
    with fewer than two folds."""
    folds = sequence_folds(examples, settings.calibration_folds, settings.seed)
    if folds is None:
        return None
    features, labels = torch.from_numpy(examples.x), torch.from_numpy(examples.y)
    fold_settings = replace(settings, epochs=epochs)
    scores = np.zeros(labels.shape[0], dtype=np.float32)
    for fold in range(folds.max() + 1):
        held, kept = np.flatnonzero(folds == fold), torch.from_numpy(np.flatnonzero(folds != fold))
        log.info(
            "cross-fitting the calibration: fold %d of %d, %d frames held out", fold + 1, folds.max() + 1, held.size
        )
        torch.manual_seed(settings.seed + 1 + fold)
        model = classifier.MLPClassifier(examples.x.shape[1])
        fit(model, (features, labels, kept), None, fold_settings)
        scores[held] = virus_scores(model, features, held)[0]
    return scores, folds.max() + 1


def train(examples: Examples, settings: TrainSettings) -> tuple[classifier.MLPClassifier, dict, pd.DataFrame]:
    """Split, fit with early stopping, and describe the result (the metrics JSON); the validation
    split's chunks (chunk_table)."""
    torch.manual_seed(settings.seed)  # weights and dropout; the split and the batches have their own seeded generators
    training, validation, unit = split(examples, settings.validation_fraction, settings.seed)
    x, y = examples.x, examples.y
    # the training rows are indexed in place (a copy would double the memory); the validation rows,
    # scored whole every epoch, are copied
    features, labels = torch.from_numpy(x), torch.from_numpy(y)
    x_val, y_val = torch.from_numpy(x[validation]), torch.from_numpy(y[validation])
    log.info(
        "held out by %s: %d validation frames (%d virus), %d training frames (%d virus)",
        unit,
        len(validation),
        y[validation].sum(),
        len(training),
        y[training].sum(),
    )
    if len(np.unique(y[validation])) < 2:
        log.warning("the validation split holds one class only: its ROC-AUC is undefined; train on more sequences")
    model = classifier.MLPClassifier(x.shape[1])
    fitted = fit(model, (features, labels, torch.from_numpy(training)), (x_val, y_val), settings)
    history = fitted.pop("history")
    validation_scores, atypicality = virus_scores(model, features, validation)
    chunks = chunk_table(examples, validation, validation_scores, atypicality)
    result = {
        **fitted,
        "split": {
            "unit": unit,
            "train_frames": int(training.size),
            "validation_frames": int(validation.size),
            "train_chunks": int(np.unique(examples.chunk[training]).size),
            "validation_chunks": int(np.unique(examples.chunk[validation]).size),
            "train_sequences": int(np.unique(examples.sequence[training]).size),
            "validation_sequences": int(np.unique(examples.sequence[validation]).size),
            "seed": settings.seed,
        },
        "train": metrics(y[training], virus_scores(model, features, training)[0]),
        "validation": metrics(y[validation], validation_scores),
        "roc_curve": roc_curve(y[validation], validation_scores),
        "history": history,
        "settings": {k: v for k, v in asdict(settings).items() if k not in NOT_THE_RECIPE},
    }
    return model, result, chunks


def chunk_table(examples: Examples, rows: np.ndarray, scores: np.ndarray, atypicality: np.ndarray) -> pd.DataFrame:
    """The chunks of `rows` as a calibration learns from them: each one's best virus score
    (chunks.tsv's max_score_virus), mean atypicality, label and record, a record's chunks together
    in their order."""
    frames = pd.DataFrame(
        {"chunk": examples.chunk[rows], "record": examples.sequence[rows], "score": scores, "atypicality": atypicality}
    )
    chunks = frames.groupby("chunk").agg(
        record=("record", "first"), max_score_virus=("score", "max"), atypicality=("atypicality", "mean")
    )
    chunks["label"] = pd.Series(examples.y[rows], index=examples.chunk[rows]).groupby(level=0).first()
    return chunks.reset_index().sort_values(["record", "chunk"], kind="stable")


def calibration_chunks(
    examples: Examples, model: classifier.MLPClassifier, settings: TrainSettings, epochs: int, validation: pd.DataFrame
) -> tuple[pd.DataFrame, str]:
    """The chunks a calibration is fitted on, and where their scores come from: every chunk with
    its cross-fitted score (the final classifier's atypicality, which the calibration's limit is
    for), or else the `validation` split's chunks."""
    cross_fitted = cross_fitted_scores(examples, settings, epochs)
    if cross_fitted is None:
        if settings.calibration_folds >= 2:
            log.warning(
                "a class has a single sequence: the calibration is fitted on the validation split, chunks of the "
                "genomes the classifier learned from, and will be overconfident on other genomes; label more sequences"
            )
        return validation, "validation split"
    (scores, folds), rows = cross_fitted, np.arange(examples.y.size)
    atypicality = virus_scores(model, torch.from_numpy(examples.x), rows)[1]
    return chunk_table(examples, rows, scores, atypicality), f"cross-fitted over {folds} folds of whole sequences"


def train_classifier(
    shards: list[tuple],
    output: str | Path,
    metrics_path: str | Path,
    settings: TrainSettings,
    calibration_path: str | Path | None = None,
) -> dict:
    """Train on the shards (load_examples); write the classifier (with its models and their widths,
    in input order), the metrics JSON and the calibration, fitted on scores the classifier did not
    learn from (calibration_chunks)."""
    examples = load_examples(shards, settings.progress_seconds)
    x, y = examples.x, examples.y
    log.info(
        "training on %d frames (%d virus, %d other) of %d chunks, %d features",
        len(y),
        (y == 1).sum(),
        (y == 0).sum(),
        np.unique(examples.chunk).size,
        x.shape[1],
    )
    model, result, chunks = train(examples, settings)
    with atomic_path(output) as tmp:
        classifier.save(
            model,
            tmp,
            validation=result["validation"],
            chunk_length=settings.chunk_length,
            embedders=[list(e) for e in examples.embedders],
        )
    if calibration_path:
        chunks, result["calibration_scores"] = calibration_chunks(
            examples, model, settings, result["best_epoch"], chunks
        )
        fitted = fit_chunks(chunks, checksums.sha256(output), settings.chunk_length, calibration_path)
        result["calibration"] = {"method": fitted.method, **fitted.fitted_on}
        result["calibration"].pop("reliability")
    write_json(result, metrics_path)
    log.info(
        "validation: %s", ", ".join(f"{k} {v:.3f}" for k, v in result["validation"].items() if isinstance(v, float))
    )
    return result
