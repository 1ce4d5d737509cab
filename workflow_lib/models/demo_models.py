"""Tiny seeded models in the real on-disk formats, for the demo and the tests: random weights in a
fair-esm ESM-2 checkpoint (with its contact-regression file) and a DNABERT-S directory (config.json,
model.safetensors, a BPE tokenizer.json trained on DNA)."""

import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, models, processors, trainers

from workflow_lib.io.outputs import atomic_dir, atomic_path
from workflow_lib.io.seqio import read_records
from workflow_lib.models.dnabert import DNABERT

ESM_CONFIG = {"encoder_layers": 2, "encoder_embed_dim": 64, "encoder_attention_heads": 4, "token_dropout": True}
DNABERT_CONFIG = {
    "architectures": ["BertModel"],
    "model_type": "bert",
    "alibi_starting_size": 512,
    "attention_probs_dropout_prob": 0.0,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 48,
    "intermediate_size": 96,
    "num_attention_heads": 12,
    "num_hidden_layers": 2,
    "layer_norm_eps": 1e-12,
    "max_position_embeddings": 512,
    "pad_token_id": 3,
    "type_vocab_size": 2,
    "vocab_size": 256,
    "initializer_range": 0.02,
    "torch_dtype": "float32",
}
# The published models' shapes, for random checkpoints of the real size (benchmarks, the GPU check)
ESM2_SHAPES = {
    "650M": {"encoder_layers": 33, "encoder_embed_dim": 1280, "encoder_attention_heads": 20, "token_dropout": True},
    "3B": {"encoder_layers": 36, "encoder_embed_dim": 2560, "encoder_attention_heads": 40, "token_dropout": True},
}
DNABERT_S = {
    **DNABERT_CONFIG,
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_hidden_layers": 12,
    "vocab_size": 4096,
}
SPECIAL_TOKENS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]


def build_esm(path: Path, seed: int, config: dict = ESM_CONFIG, dtype: torch.dtype = torch.float32) -> Path:
    """A fair-esm ESM-2 checkpoint at `path`, and its contact regression file beside it (`dtype`:
    float16 as the published checkpoints store)."""
    import esm

    from workflow_lib.models.esm_loading import regression_path

    torch.manual_seed(seed)
    model = esm.ESM2(
        config["encoder_layers"],
        config["encoder_embed_dim"],
        config["encoder_attention_heads"],
        "ESM-1b",
        config["token_dropout"],
    )
    state = {k: v.to(dtype) for k, v in model.state_dict().items()}
    regression = {k: state.pop(k) for k in list(state) if k.startswith("contact_head.")}
    prefixed = {
        (f"encoder.{k}" if k.startswith("lm_head.") else f"encoder.sentence_encoder.{k}"): v for k, v in state.items()
    }
    path = Path(path)
    with atomic_path(path) as tmp:
        torch.save({"model": prefixed, "cfg": {"model": argparse.Namespace(**config)}}, tmp)
    with atomic_path(regression_path(path)) as tmp:
        torch.save({"model": regression}, tmp)
    return path


def build_dnabert(directory: Path, genomes: list[Path], seed: int, config: dict = DNABERT_CONFIG) -> Path:
    """A DNABERT-S directory, its BPE tokenizer trained on `genomes`."""
    with atomic_dir(directory) as tmp:
        tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
        trainer = trainers.BpeTrainer(
            vocab_size=config["vocab_size"], special_tokens=SPECIAL_TOKENS, show_progress=False
        )
        pieces = [
            seq[i : i + 1000].decode()
            for path in genomes
            for _, _, seq in read_records(path)
            for i in range(0, len(seq), 1000)
        ]
        tokenizer.train_from_iterator(pieces, trainer)
        tokenizer.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 1), ("[SEP]", 2)]
        )
        tokenizer.save(str(tmp / "tokenizer.json"))
        (tmp / "tokenizer_config.json").write_text(
            json.dumps(
                {
                    "tokenizer_class": "PreTrainedTokenizerFast",
                    "cls_token": "[CLS]",
                    "sep_token": "[SEP]",
                    "pad_token": "[PAD]",
                    "unk_token": "[UNK]",
                    "mask_token": "[MASK]",
                },
                indent=2,
            )
        )
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        torch.manual_seed(seed)
        model = DNABERT(config)
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, tmp / "model.safetensors")
    return Path(directory)


def build(esm_path: str | Path, dnabert_dir: str | Path, genomes: list[Path], seed: int) -> dict[str, Path]:
    """The demo's two models; the tokenizer is trained on `genomes`."""
    return {"esm": build_esm(esm_path, seed), "dnabert": build_dnabert(dnabert_dir, genomes, seed)}
