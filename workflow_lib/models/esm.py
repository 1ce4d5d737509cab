"""ESM-2 through fair-esm: load by fair-esm name or local checkpoint, mean-pool residue embeddings.

VirNucPro's protein embedding is the chosen layer's representation averaged over the residues
(positions 1..L: BOS and EOS excluded) of BOS + sequence (truncated to 1022) + EOS.
"""

import argparse
from pathlib import Path

import esm
import torch

from ..errors import InputError
from .checkpoints import is_local

MAX_RESIDUES = 1022
# fair-esm's ESM-2 models: layers, embedding size.
ESM2_MODELS = {
    "esm2_t6_8M_UR50D": (6, 320),
    "esm2_t12_35M_UR50D": (12, 480),
    "esm2_t30_150M_UR50D": (30, 640),
    "esm2_t33_650M_UR50D": (33, 1280),
    "esm2_t36_3B_UR50D": (36, 2560),
    "esm2_t48_15B_UR50D": (48, 5120),
}


def _torch_load(path: Path):
    # Real fair-esm checkpoints hold their config as an argparse.Namespace: torch >= 2.6 loads
    # with weights_only=True and refuses it unless it is allowlisted.
    with torch.serialization.safe_globals([argparse.Namespace]):
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)


def read_config(checkpoint: str) -> tuple[int, int]:
    """(layers, embedding size) of an ESM-2 checkpoint, without building the model."""
    if not is_local(checkpoint):
        if checkpoint not in ESM2_MODELS:
            raise InputError(
                f"models.esm.checkpoint: '{checkpoint}' is no fair-esm ESM-2 model "
                f"({', '.join(ESM2_MODELS)}) and no local .pt file"
            )
        return ESM2_MODELS[checkpoint]
    cfg = _local_data(Path(checkpoint))["cfg"]["model"]
    return cfg.encoder_layers, cfg.encoder_embed_dim


def _local_data(path: Path) -> dict:
    if not path.is_file():
        raise InputError(
            f"{path}: ESM-2 checkpoint not found; set models.esm.checkpoint to a fair-esm name or a .pt file"
        )
    data = _torch_load(path)
    if not isinstance(data, dict) or "cfg" not in data or "model" not in data:
        raise InputError(f"{path}: not a fair-esm ESM-2 checkpoint (no 'cfg' and 'model' entries)")
    return data


def load(checkpoint: str, cache_dir: str | None = None) -> tuple[esm.ESM2, esm.Alphabet]:
    """Load an ESM-2 model by fair-esm name (downloaded into cache_dir/torch) or local .pt path.

    A local checkpoint may have `<stem>-contact-regression.pt` beside it, as fair-esm's own files
    do; the contact head is not used for embeddings, so it is optional here.
    """
    if not is_local(checkpoint):
        read_config(checkpoint)  # a clear error for unknown names
        if cache_dir:
            torch.hub.set_dir(str(Path(cache_dir) / "torch"))
        with torch.serialization.safe_globals([argparse.Namespace]):
            model, alphabet = esm.pretrained.load_model_and_alphabet_hub(checkpoint)
    else:
        path = Path(checkpoint)
        data = _local_data(path)
        regression_path = path.with_name(f"{path.stem}-contact-regression.pt")
        regression = _torch_load(regression_path) if regression_path.exists() else None
        # "esm2" selects fair-esm's ESM-2 builder whatever the file is called.
        model, alphabet = esm.pretrained.load_model_and_alphabet_core("esm2", data, regression)
    return model.eval(), alphabet


class ESMEmbedder:
    """Mean-pooled ESM-2 embeddings of protein sequences, in padded batches (fair-esm's forward)."""

    def __init__(
        self,
        model: esm.ESM2,
        alphabet: esm.Alphabet,
        layer: int,
        device: torch.device,
        dtype: torch.dtype = torch.float32,
    ):
        if not 0 <= layer <= model.num_layers:
            raise InputError(f"models.esm.layer: {layer} is out of range for a {model.num_layers}-layer ESM-2 model")
        self.model = model.to(device=device, dtype=dtype)
        self.alphabet, self.layer, self.device = alphabet, layer, device
        self.convert = alphabet.get_batch_converter(truncation_seq_length=MAX_RESIDUES)
        self.dim = model.embed_dim

    pooling = "mean over residues (BOS and EOS excluded)"

    @staticmethod
    def encode(sequences: list[str]) -> list[str]:
        return sequences  # fair-esm's batch converter tokenizes each batch

    @staticmethod
    def n_tokens(sequence: str) -> int:
        return min(len(sequence), MAX_RESIDUES) + 2

    @torch.inference_mode()
    def __call__(self, sequences: list[str]) -> torch.Tensor:
        _, _, tokens = self.convert([("", s) for s in sequences])
        tokens = tokens.to(self.device, non_blocking=True)
        hidden = self.model(tokens, repr_layers=[self.layer])["representations"][self.layer]
        lengths = torch.tensor([min(len(s), MAX_RESIDUES) for s in sequences], device=self.device)
        positions = torch.arange(tokens.shape[1], device=self.device)
        residues = (positions >= 1) & (positions <= lengths[:, None])  # BOS and EOS excluded
        summed = (hidden.float() * residues[..., None]).sum(1)
        return summed / lengths[:, None].clamp(min=1)
