import gzip
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
GENOMES = ROOT / "resources" / "genomes"
sys.path.insert(0, str(ROOT))


def read_tsv(path: Path) -> list[dict[str, str]]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as handle:
        header, *rows = handle.read().splitlines()
    names = header.split("\t")
    return [dict(zip(names, row.split("\t"))) for row in rows]


def read_fasta(path: Path) -> list[tuple[str, str]]:
    lines = Path(path).read_text().splitlines()
    return [(lines[i][1:], lines[i + 1]) for i in range(0, len(lines), 2)]


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def demo_models(tmp_path_factory) -> dict[str, Path]:
    """The tiny seeded demo models, in their real on-disk formats."""
    from workflow_lib.demo_models import build

    return build(tmp_path_factory.mktemp("demo_models"), [GENOMES / "lambda_NC_001416.fasta"])
