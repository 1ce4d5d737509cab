"""Python 3.12 wheels of what benchmarks/gpu_check.py needs and the GPU machine lacks (it has no
network): fair-esm, snakemake, biopython, xopen and isal and their dependencies, at the versions of this project's
environment, less the packages the machine's image already has. Run here (with the project's
.venv, which has network to PyPI), then carry the folder to the GPU machine:

    .venv/bin/python benchmarks/gpu_wheels.py .whl
    # there:
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
"""

import argparse
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement

NEEDED = ("fair-esm", "snakemake", "biopython", "xopen", "isal")
# The GPU machine's image (its 'cuda' image, read 2026-11-17): carried again, a second version of
# one of these would shadow the one its torch was built with.
ON_THE_GPU_MACHINE = set(
    """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs certifi
    charset-normalizer click cloudpickle colorama contourpy coverage cycler cython einops filelock fonttools
    frozenlist fsspec h11 h5py hf-xet httpcore httpx huggingface-hub idna iniconfig jinja2 joblib kiwisolver
    markdown markdown-it-py markupsafe matplotlib mdurl mpmath msgpack multidict mypy-extensions networkx
    numpy packaging pandas pathspec pillow pip pluggy protobuf psutil pyarrow pygments pyparsing pytest
    python-dateutil pyyaml regex requests rich safetensors scipy setuptools six sympy tabulate tokenizers
    torch tqdm transformers triton typing-extensions urllib3 wheel wrapt yarl zipp""".split()
)
PLATFORM = ["--python-version", "3.12", "--implementation", "cp", "--only-binary=:all:"] + [
    arg
    for tag in ("manylinux_2_28", "manylinux_2_27", "manylinux_2_17", "manylinux2014", "manylinux1")
    for arg in ("--platform", f"{tag}_x86_64")
]
LINUX_312 = {"python_version": "3.12", "sys_platform": "linux", "platform_system": "Linux", "extra": ""}


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(names) -> dict[str, str]:
    """{name: version} of the packages and their dependencies as installed here, for Linux and Python 3.12."""
    found: dict[str, str] = {}
    pending = list(names)
    while pending:
        name = normalized(pending.pop())
        if name in found:
            continue
        distribution = importlib.metadata.distribution(name)
        found[name] = distribution.version
        for line in distribution.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate(LINUX_312):
                pending.append(requirement.name)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    folder = parser.parse_args().folder
    folder.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    for name, version in sorted(closure(NEEDED).items()):
        if name in ON_THE_GPU_MACHINE:
            continue
        pinned = f"{name}=={version}"
        download = subprocess.run(pip + ["download", "--no-deps", *PLATFORM, "-d", str(folder), pinned])
        if download.returncode:  # published as a source distribution only: pure Python, built here
            subprocess.run(pip + ["wheel", "--no-deps", "-w", str(folder), pinned], check=True)
    print(f"{folder}: {len(list(folder.glob('*.whl')))} wheels")


if __name__ == "__main__":
    main()
