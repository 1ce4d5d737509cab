"""Model code (ESM-2 through fair-esm, DNABERT-S native, VirNucPro's MLP classifier), the registry
of embedding models, and the tooling of their files (fetch, check, the tiny demo models).

An *architecture* is code: a loading module (esm_loading, dnabert_loading) with resolve,
read_config, checkpoint_files and embedder, all with the same arguments, declared in
ARCHITECTURES. A *configured model* is data: an entry `models.<name>` listed in `models.embedders`,
in the order of the classifier's input. Nothing outside this package names a model or imports a
loading module by name.

May import: cli, io.
"""

import argparse
import dataclasses
import importlib
from types import ModuleType

from workflow_lib.models.checkpoints import ESM2_MODELS, is_local


@dataclasses.dataclass(frozen=True)
class Architecture:
    """What the rules and the checks need of an architecture before torch is imported."""

    display_name: str
    loading: str  # its loading module in this package
    source: str  # where fetch_models downloads a named checkpoint from: "fair-esm" or "huggingface"
    alphabet: str  # the shard FASTA it reads: "faa" (proteins) or "fna" (nucleotides)
    stored_tokens: bool  # its tokens are made once per shard by a CPU tokenize job
    # with embedding.precision fp8, the weights a layer (times width squared) held in FP8 in every
    # layer but the first and the last (ESM-2: its feed-forward's); 0: no FP8 path, fp16 instead
    fp8_weights_per_layer: int
    # its embed job's GPU memory (workflow/job_resources.py): weights, this times layers times
    # width squared; activations, this times the token budget times the width
    weights_per_layer: int
    activations_per_token: int
    # the defaults of an entry models.<name> that does not give them (model_entry): tokens per
    # packed batch, and its embed job's rates with none recorded (docs/cluster.md)
    token_budget: int
    assumed_tokens_per_s: dict


ARCHITECTURES = {
    # ESM-2: attention 4 d^2 and feed-forward 8 d^2 a layer; DNABERT-S: its gated feed-forward 12 d^2.
    # Activations: rounded up from the growth per token of the peaks the GPU check measured
    # (docs/gpu-check/model.json; tests/test_rule_helpers.py holds them to it).
    "esm2": Architecture(
        "ESM-2", "esm_loading", "fair-esm", "faa", False, 8, 12, 15, 16384, {"cuda": 19_000, "cpu": 200}
    ),
    "dnabert_s": Architecture(
        "DNABERT-S", "dnabert_loading", "huggingface", "fna", True, 0, 16, 24, 32768, {"cuda": 230_000, "cpu": 5000}
    ),
}


@dataclasses.dataclass(frozen=True)
class Embedder:
    """A configured embedding model: its entry models.<name> (model_entry)."""

    name: str
    architecture: str
    checkpoint: str
    layer: int | None = None  # None: the last

    @property
    def declared(self) -> Architecture:
        return ARCHITECTURES[self.architecture]

    def option(self) -> tuple:
        """Its --embedder words (add_embedders_argument)."""
        return self.name, self.architecture, self.checkpoint, "last" if self.layer is None else self.layer

    @classmethod
    def parse(cls, words: list[str]) -> "Embedder":
        name, architecture, checkpoint, layer = words
        return cls(name, architecture, checkpoint, None if layer == "last" else int(layer))


def add_embedders_argument(parser: argparse.ArgumentParser) -> None:
    """--embedder, once per configured model (`args.embedders`: Embedder.parse each)."""
    parser.add_argument(
        "--embedder",
        dest="embedders",
        nargs=4,
        action="append",
        required=True,
        metavar=("NAME", "ARCHITECTURE", "CHECKPOINT", "LAYER"),
        help="a configured embedding model (models.embedders), in input order; LAYER: a number or last",
    )


def loading_module(architecture: str) -> ModuleType:
    """Imported when first asked for: fair-esm and torch take seconds."""
    return importlib.import_module(f"{__name__}.{ARCHITECTURES[architecture].loading}")


def named_shape(embedder: Embedder) -> tuple[int, int] | None:
    """(layers, width) of a named fair-esm checkpoint, known without its files; None for a local
    checkpoint or a hub's. A name fair-esm lacks: LookupError, saying what it has."""
    if embedder.declared.source != "fair-esm" or is_local(embedder.checkpoint):
        return None
    if embedder.checkpoint not in ESM2_MODELS:
        raise LookupError(
            f"fair-esm {embedder.declared.display_name} model ({', '.join(ESM2_MODELS)}) and no local .pt file"
        )
    return ESM2_MODELS[embedder.checkpoint]


def embedders(config: dict) -> list[Embedder]:
    """The configured embedding models, in the classifier's input order."""
    entries = [(name, config["models"][name]) for name in config["models"]["embedders"]]
    return [Embedder(name, e["architecture"], e["checkpoint"], e["layer"]) for name, e in entries]


def model_entry(name: str, entry: dict) -> dict:
    """A listed model's entry with its architecture's defaults for the keys it lacks; a new dict."""
    declared = ARCHITECTURES[entry["architecture"]]
    defaults = {
        "display_name": f"{declared.display_name} ({name})",
        "layer": None,
        "token_budget": declared.token_budget,
        "assumed_tokens_per_s": dict(declared.assumed_tokens_per_s),
    }
    return entry | {key: value for key, value in defaults.items() if key not in entry}
