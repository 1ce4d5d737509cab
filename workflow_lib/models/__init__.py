"""Model code: ESM-2 (through fair-esm), DNABERT-S (native), the VirNucPro MLP classifier."""
