"""Training VirNucPro's classifier on frames of samples labelled `virus` or `other`.

VirNucPro's recipe: SGD (lr 2e-4, momentum 0.9), StepLR (10 epochs, gamma 0.85), batch 32,
cross-entropy, early stopping on the validation loss (patience 5), a held-out split. Two
deliberate differences: the best weights are really restored (VirNucPro keeps a reference to
the live state dict, so it restores the last), and classes may be weighted by their inverse
frequency instead of VirNucPro's down-sampling of the larger class.
"""

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from . import h5store
from .errors import InputError
from .models import classifier
from .outputs import atomic_open, atomic_path

log = logging.getLogger("workflow")
LABELS = {"other": 0, "virus": 1}


@dataclass(frozen=True)
class TrainSettings:
    epochs: int = 200
    batch_size: int = 32
    learning_rate: float = 2e-4
    momentum: float = 0.9
    patience: int = 5
    validation_fraction: float = 0.1
    balance_classes: bool = True
    seed: int = 42


def load_examples(shards: list[tuple[str, str, str]]) -> tuple[np.ndarray, np.ndarray]:
    """Features and labels from (label, DNABERT-S HDF5, ESM-2 HDF5) per shard."""
    features, labels = [], []
    for label, dna_path, esm_path in shards:
        if label not in LABELS:
            raise InputError(f"label '{label}' for {dna_path}: a training sample's label must be 'virus' or 'other'")
        _, x, _ = h5store.read_features(dna_path, esm_path)
        features.append(x)
        labels.append(np.full(len(x), LABELS[label]))
    x, y = np.concatenate(features), np.concatenate(labels)
    if len(np.unique(y)) < 2:
        raise InputError("training needs frames of both classes: label at least one sample 'virus' and one 'other'")
    return x, y


def metrics(y: np.ndarray, score: np.ndarray) -> dict:
    """Accuracy, precision, recall, F1 (class virus, threshold: virus > other) and ROC-AUC."""
    predicted = score > 0.5
    tp, fp = int((predicted & (y == 1)).sum()), int((predicted & (y == 0)).sum())
    fn = int((~predicted & (y == 1)).sum())
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


def train(x: np.ndarray, y: np.ndarray, settings: TrainSettings) -> tuple[classifier.MLPClassifier, dict]:
    torch.manual_seed(settings.seed)
    generator = torch.Generator().manual_seed(settings.seed)
    order = torch.randperm(len(y), generator=generator).numpy()
    n_validation = max(1, int(len(y) * settings.validation_fraction))
    validation, training = order[:n_validation], order[n_validation:]
    x_train, y_train = torch.from_numpy(x[training]), torch.from_numpy(y[training])
    x_val, y_val = torch.from_numpy(x[validation]), torch.from_numpy(y[validation])
    weight = None
    if settings.balance_classes:
        counts = torch.bincount(y_train, minlength=2).clamp(min=1).float()
        weight = counts.sum() / (2 * counts)

    model = classifier.MLPClassifier(x.shape[1])
    optimizer = torch.optim.SGD(model.parameters(), lr=settings.learning_rate, momentum=settings.momentum)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.85)
    best_loss, best_state, stale, epoch = float("inf"), None, 0, 0
    for epoch in range(1, settings.epochs + 1):
        model.train()
        permutation = torch.randperm(len(y_train), generator=generator)
        for start in range(0, len(permutation), settings.batch_size):
            batch = permutation[start : start + settings.batch_size]
            if len(batch) < 2:  # BatchNorm needs two rows in training mode
                continue
            optimizer.zero_grad()
            F.cross_entropy(model(x_train[batch]), y_train[batch], weight=weight).backward()
            optimizer.step()
        scheduler.step()
        model.eval()
        with torch.no_grad():
            loss = float(F.cross_entropy(model(x_val), y_val, weight=weight))
        log.info("epoch %d: validation loss %.4f", epoch, loss)
        if loss < best_loss:
            best_loss, best_state, stale = loss, {k: v.clone() for k, v in model.state_dict().items()}, 0
        else:
            stale += 1
            if stale >= settings.patience:
                log.info("early stop after epoch %d (no improvement for %d epochs)", epoch, settings.patience)
                break
    if best_state is None:
        raise InputError(
            "the validation loss is not finite from the first epoch: the embeddings hold NaN or Inf, "
            "or train.learning_rate is far too high"
        )
    model.load_state_dict(best_state)
    validation_scores = classifier.scores(model, x_val)[:, 1].numpy()
    result = {
        "epochs_run": epoch,
        "best_validation_loss": best_loss,
        "n_train": int(len(training)),
        "validation": metrics(y[validation], validation_scores),
        "settings": asdict(settings),
    }
    return model.eval(), result


def train_classifier(
    shards: list[tuple[str, str, str]],
    output: str | Path,
    metrics_path: str | Path,
    settings: TrainSettings,
    **metadata,
) -> dict:
    x, y = load_examples(shards)
    log.info(
        "training on %d frames (%d virus, %d other), %d features", len(y), (y == 1).sum(), (y == 0).sum(), x.shape[1]
    )
    model, result = train(x, y, settings)
    with atomic_path(output) as tmp:
        classifier.save(model, tmp, validation=result["validation"], **metadata)
    with atomic_open(metrics_path) as handle:
        json.dump(result, handle, indent=2)
    log.info(
        "validation: %s", ", ".join(f"{k} {v:.3f}" for k, v in result["validation"].items() if isinstance(v, float))
    )
    return result
