"""Tokenizers for loader workers: picklable, and light to import (no fair-esm, no model code),
since every spawn worker imports them afresh."""

import functools
from pathlib import Path

import numpy as np


class ESMTokens:
    """ESM-2 tokens: BOS + all residues + EOS, one token per character, as fair-esm's batch
    converter gives for protein letters. Not truncated: VirNucPro's converter is called without a
    limit (ESM-2's rotary positions have none); its pooling limit is the embedder's."""

    def __init__(self, lut: np.ndarray, bos: int, eos: int):
        self.lut, self.bos, self.eos = lut, bos, eos

    @classmethod
    def of(cls, alphabet) -> "ESMTokens":
        """From a fair-esm Alphabet; characters it does not know become <unk>."""
        lut = np.full(256, alphabet.unk_idx, dtype=np.int64)
        for token, index in alphabet.tok_to_idx.items():
            if len(token) == 1:
                lut[ord(token)] = index
        return cls(lut, alphabet.cls_idx, alphabet.eos_idx)

    def __call__(self, sequences: list[bytes]) -> list[np.ndarray]:
        encoded = []
        for sequence in sequences:
            tokens = np.empty(len(sequence) + 2, dtype=np.int64)
            tokens[0], tokens[-1] = self.bos, self.eos
            tokens[1:-1] = self.lut[np.frombuffer(sequence, dtype=np.uint8, count=len(tokens) - 2)]
            encoded.append(tokens)
        return encoded


class DNABERTTokens:
    """DNABERT-S tokens: [CLS] + BPE tokens of the whole sequence + [SEP], no truncation, no
    padding (as VirNucPro tokenizes). The tokenizer file is read once in each process."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def __getstate__(self) -> dict:
        return {"path": self.path}  # not the tokenizer: each worker reads it again

    @functools.cached_property
    def tokenizer(self):
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(self.path))
        tokenizer.no_truncation()
        tokenizer.no_padding()
        return tokenizer

    def __call__(self, sequences: list[bytes]) -> list[np.ndarray]:
        # encode_batch_fast skips character offsets, which are not needed here
        encodings = self.tokenizer.encode_batch_fast([s.decode("ascii") for s in sequences], add_special_tokens=True)
        return [np.array(e.ids, dtype=np.int64) for e in encodings]
