"""VirNucPro's MLP classifier, and loading its files without running code from them.

Linear(in -> 512), BatchNorm1d, ReLU, Dropout(0.5), Linear(512 -> 2) over the configured models'
embeddings one after the other; softmax, class 1 = virus. Two file formats load, both through
torch.load(weights_only=True): ours, a dict {"format": FORMAT, "state_dict", "input_dim",
"hidden_dim", "embedders", "chunk_length", ...}; and VirNucPro's published .pth files, whole
pickled modules, whose classes are mapped to an inert stand-in that only receives the pickled
attributes (anything else in the pickle is refused).
"""

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from workflow_lib.cli.errors import InputError
from workflow_lib.models.checkpoints import load_weights
from workflow_lib.models.classifier_chunks import FORMAT, check_chunk_length, embedders_refusal

HIDDEN_DIM = 512
_PICKLED_CLASSES = (
    "__main__.MLPClassifier",
    "torch.nn.modules.linear.Linear",
    "torch.nn.modules.batchnorm.BatchNorm1d",
    "torch.nn.modules.dropout.Dropout",
)


class MLPClassifier(nn.Module):
    """VirNucPro's classifier; attribute names match its files' state-dict keys."""

    def __init__(self, input_dim: int, hidden_dim: int = HIDDEN_DIM, num_class: int = 2):
        super().__init__()
        self.hidden_layer = nn.Linear(input_dim, hidden_dim)
        self.bn1 = nn.BatchNorm1d(hidden_dim)
        self.output_layer = nn.Linear(hidden_dim, num_class)
        self.dropout = nn.Dropout(0.5)
        nn.init.xavier_uniform_(self.hidden_layer.weight)
        nn.init.xavier_uniform_(self.output_layer.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.hidden_layer(x))

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.output_layer(self.dropout(F.relu(self.bn1(hidden))))

    def atypicality(self, hidden: torch.Tensor) -> torch.Tensor:
        """How unlike the training frames a frame is: the mean square of its hidden activations
        standardised by BatchNorm's running statistics (near 1 for frames like them)."""
        return ((hidden - self.bn1.running_mean) ** 2 / (self.bn1.running_var + self.bn1.eps)).mean(dim=1)

    @property
    def input_dim(self) -> int:
        return self.hidden_layer.in_features


class _PickledModule(nn.Module):
    """Stand-in for each pickled module: nn.Module's __setstate__ fills its __dict__, and nothing
    of the pickled classes' own code runs; its state_dict() then reads the pickled tensors."""


def save(model: MLPClassifier, path: str | Path, **metadata) -> None:
    torch.save(
        {
            "format": FORMAT,
            "state_dict": model.state_dict(),
            "input_dim": model.input_dim,
            "hidden_dim": model.hidden_layer.out_features,
            **metadata,
        },
        path,
    )


def load(path: str | Path) -> tuple[MLPClassifier, dict]:
    """Load a classifier file of either format; return the model (eval mode) and its metadata."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: classifier file not found; set models.classifier or run the train target")
    data = load_weights(path, "VirNucPro or workflow classifier", [(_PickledModule, name) for name in _PICKLED_CLASSES])
    if isinstance(data, dict) and data.get("format") == FORMAT:
        state, metadata = data["state_dict"], {k: v for k, v in data.items() if k != "state_dict"}
    elif isinstance(data, _PickledModule):
        try:  # a pickle whose modules lack nn.Module's attributes
            state = data.state_dict()
        except (AttributeError, TypeError):
            raise InputError(f"{path}: the classifier's weights do not fit VirNucPro's architecture") from None
        metadata = {"format": "virnucpro-pickle"}
    else:
        raise InputError(f"{path}: not a classifier file (expected a VirNucPro .pth or a workflow classifier)")
    try:
        weight = state["hidden_layer.weight"]
        model = MLPClassifier(weight.shape[1], weight.shape[0], state["output_layer.weight"].shape[0])
        model.load_state_dict(state)
    except (KeyError, RuntimeError) as error:
        raise InputError(f"{path}: the classifier's weights do not fit VirNucPro's architecture ({error})") from None
    metadata["input_dim"] = model.input_dim
    return model.eval(), metadata


def check_fits(path: str | Path, widths: list[tuple[str, int]], chunk_length: int, stated: int | None = None) -> None:
    """Fail before any embedding job when the classifier cannot take the configured models'
    embeddings (`widths`: names and widths, in input order) or was made for other chunks."""
    _, metadata = load(path)
    if refusal := embedders_refusal(path, metadata, widths):
        raise InputError(refusal)
    total = sum(width for _, width in widths)
    if metadata["input_dim"] != total:
        raise InputError(
            f"{path}: the classifier takes {metadata['input_dim']} features but the configured models give "
            f"{' + '.join(f'{width} ({name})' for name, width in widths)} = {total}; use the classifier "
            "trained for these models (VirNucPro's: DNABERT-S 768 + ESM-2 3B 2560) or train one"
        )
    check_chunk_length(path, chunk_length, stated)


@torch.inference_mode()
def scores_and_atypicality(
    model: MLPClassifier, features: torch.Tensor, batch_size: int = 4096
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax probabilities [N, 2] (others, virus), in eval mode as VirNucPro predicts, and each
    frame's atypicality [N], from one pass of the hidden layer."""
    model.eval()
    probabilities, atypical = [], []
    for i in range(0, features.shape[0], batch_size):
        hidden = model.hidden_layer(features[i : i + batch_size])
        probabilities.append(F.softmax(model.head(hidden), dim=1))
        atypical.append(model.atypicality(hidden))
    if not probabilities:
        return torch.empty(0, 2), torch.empty(0)
    return torch.cat(probabilities), torch.cat(atypical)
