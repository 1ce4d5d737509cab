"""Seconds of the compiled ESM-2 layers' first forward in a fresh process, cold (an empty compile
cache) and warm (the cache that the cold process left), as embed jobs share one through
TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR (embedding.compile_cache_dir). Prints JSON.

    python benchmarks/compile_cache.py                       # the demo's tiny ESM-2 on the CPU
    python benchmarks/compile_cache.py --device cuda --arch 36,2560,40

The embed job compiles its layers on CUDA only; on the CPU this measures the same cache (Inductor's
FX graph and AOT caches), with C++ kernels in place of Triton's.
"""

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from workflow_lib.harness.measure import header, print_figures, print_progress, run_python

# In the child: the model (random, seeded, kept in argv[2]), one packed batch, and the seconds of the
# first and the second forward, written to argv[1] as JSON.
FORWARD = """
import json, pathlib, sys, time, torch
from workflow_lib.models import esm, esm_loading, varlen
from workflow_lib.models import demo_models
layers, dim, heads = map(int, sys.argv[3].split(","))
device = torch.device(sys.argv[4])
dtype = torch.float16 if device.type == "cuda" else torch.float32
config = {"encoder_layers": layers, "encoder_embed_dim": dim, "encoder_attention_heads": heads, "token_dropout": True}
path = pathlib.Path(sys.argv[2]) / f"esm_{sys.argv[3]}.pt"
path.exists() or demo_models.build_esm(path, 0, config)
model, alphabet = esm_loading.load(str(path), device=device, dtype=dtype)
embedder = esm.ESMEmbedder(model, alphabet, layers, device, dtype, compiled=True)
lengths = [170, 168, 120, 97]
tokens = torch.randint(4, 24, (sum(lengths),), device=device)
cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)
layout = varlen.Layout(cu, max(lengths), sum(lengths))
seconds = []
for _ in range(2):
    start = time.perf_counter()
    embedder(tokens, layout)
    torch.cuda.synchronize() if device.type == "cuda" else None
    seconds.append(round(time.perf_counter() - start, 2))
pathlib.Path(sys.argv[1]).write_text(json.dumps({"first_forward_s": seconds[0], "second_forward_s": seconds[1]}))
"""


def forward(workdir: Path, arch: str, device: str, cache: Path) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "TRITON_CACHE_DIR": str(cache / "triton")}
    status, written = run_python(FORWARD, workdir, arch, device, output=workdir / "output", env=env)
    if status:
        sys.exit(f"the compiled forward failed:\n{(workdir / 'output').read_text()[-3000:]}")
    return json.loads(written)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="2,64,4", help="layers,dim,heads of the random ESM-2")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    result = header("compile_cache") | {"arch": args.arch, "device": args.device}
    with tempfile.TemporaryDirectory() as tmp:
        workdir, cache = Path(tmp), Path(tmp) / "compile"
        for run in ("cold", "warm"):
            result[run] = forward(workdir, args.arch, args.device, cache)
            print_progress({run: result[run]})
    print_figures(result)


if __name__ == "__main__":
    main()
