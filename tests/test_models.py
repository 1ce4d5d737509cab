"""Models against their references: ESM-2 against fair-esm's own forward, DNABERT-S against
vectors computed by the public DNABERT-S model code, the classifier against VirNucPro's files."""

import copy
import importlib.util
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import esm as fair_esm
import numpy as np
import pytest
import torch
from helpers import DATA, ENV, per_sequence_attention, random_row, tmpfs

from workflow_lib.cli.errors import InputError
from workflow_lib.embed.packing import greedy_batches, pack
from workflow_lib.io import checksums, locks
from workflow_lib.models import (
    Embedder,
    checkpoints,
    classifier,
    classifier_chunks,
    demo_models,
    dnabert,
    dnabert_loading,
    esm,
    esm_loading,
    varlen,
)
from workflow_lib.models.check_models import check_models
from workflow_lib.models.checkpoints import is_local
from workflow_lib.workflow import job_resources

CPU = torch.device("cpu")
WIDTHS = [("dnabert", 16), ("esm", 24)]  # the input of a test classifier of 40 features, in VirNucPro's order
# 1 residue, fair-esm's usual truncation (1022), VirNucPro's pooling limit (1024) and past both,
# ambiguous and rare letters
PROTEINS = [
    "M", "MK", "ACDEFGHIKLMNPQRSTVWY" * 3, "MKV" * 40, "L" * 1030, "W" * 1022, "XBZUOMKV", "MKVLAAG" * 24,
    "ACDEFGHIKLMNPQRSTVWY" * 55,
]  # fmt: skip


def one(encoded: np.ndarray) -> tuple[torch.Tensor, object]:
    """A model's input for one sequence alone: its tokens and their layout."""
    packed = pack([0], [encoded], 1).tensors()
    return packed.tokens, packed.layout()


def packed_run(embedder, encoded: list[np.ndarray], budget: int) -> torch.Tensor:
    """Embeddings in input order, through greedy packed batches of the given token budget."""
    lengths = np.array([len(e) for e in encoded])
    out = torch.zeros(len(encoded), embedder.dim)
    batches = greedy_batches(lengths, budget)
    for batch in batches:
        packed = pack(batch, [encoded[i] for i in batch.tolist()], budget).tensors()
        out[batch] = embedder(packed.tokens, packed.layout())
    return out, len(batches)


@pytest.mark.parametrize("layer", [0, 1, 2])  # embeddings, an intermediate (pre-LN) layer, the last (LN after)
@pytest.mark.parametrize("budget", [100_000, 1100, 200])  # one row; rows split across the budget
def test_esm_packed_matches_fair_esm_padded(demo_models, layer, budget):
    """Packed varlen batches equal VirNucPro's recipe: fair-esm's own forward on one padded batch of
    all lengths, whole proteins (its batch converter without truncation), the mean of the first
    1024 residues."""
    model, alphabet = esm_loading.load(str(demo_models["esm"]))
    embedder = esm.ESMEmbedder(model, alphabet, layer, CPU)
    packed, n_batches = packed_run(embedder, embedder.tokens([p.encode() for p in PROTEINS]), budget)
    assert n_batches == {100_000: 1, 1100: 4, 200: 6}[budget]
    _, _, tokens = alphabet.get_batch_converter()([("", p) for p in PROTEINS])
    with torch.no_grad():
        hidden = model(tokens, repr_layers=[layer])["representations"][layer]
    for i, protein in enumerate(PROTEINS):
        length = min(len(protein), 1024)
        expected = hidden[i, 1 : length + 1].mean(0)  # residues only
        assert (packed[i] - expected).abs().max() < 1e-5, (layer, i)


def test_esm_checkpoint_stored_in_float16_as_published(tmp_path):
    """The published checkpoints hold float16 tensors, the rotary frequencies among them: fair-esm
    then rotates with those rounded frequencies even in fp32, and so must the packed forward (with
    exact ones, a 6-layer model differed by 4e-5)."""
    config = {"encoder_layers": 6, "encoder_embed_dim": 320, "encoder_attention_heads": 20, "token_dropout": True}
    path = demo_models.build_esm(tmp_path / "esm2_t6_half.pt", 0, config, dtype=torch.float16)
    model, alphabet = esm_loading.load(str(path))
    embedder = esm.ESMEmbedder(copy.deepcopy(model), alphabet, 6, CPU)
    packed, _ = packed_run(embedder, embedder.tokens([p.encode() for p in PROTEINS[:4]]), 100_000)
    with torch.no_grad():
        for i, protein in enumerate(PROTEINS[:4]):
            tokens = torch.from_numpy(embedder.tokens([protein.encode()])[0])[None]
            expected = model(tokens, repr_layers=[6])["representations"][6][0, 1:-1].mean(0)
            assert (packed[i] - expected).abs().max() < 1e-5, i


def test_esm_token_dropout_rescale_per_sequence(demo_models):
    """<mask> tokens scale each sequence by 0.88 / (1 - its own mask share), as fair-esm does."""
    model, alphabet = esm_loading.load(str(demo_models["esm"]))
    embedder = esm.ESMEmbedder(model, alphabet, 2, CPU)
    encoded = embedder.tokens([b"MKVLAAGW", b"ACDE", b"MKVLAAGWPQ"])
    encoded[0][[2, 5]] = alphabet.mask_idx
    encoded[2][3] = alphabet.mask_idx
    packed, _ = packed_run(embedder, encoded, 100)
    for i, tokens in enumerate(encoded):
        with torch.no_grad():
            hidden = model(torch.from_numpy(tokens)[None], repr_layers=[2])["representations"][2]
        assert (packed[i] - hidden[0, 1:-1].mean(0)).abs().max() < 1e-5


def test_esm_checkpoint_is_fair_esm_format(demo_models):
    """The demo checkpoint loads with fair-esm's own loader (file name, Namespace cfg, regression file)."""
    torch.serialization.add_safe_globals([__import__("argparse").Namespace])
    reference, _ = fair_esm.pretrained.load_model_and_alphabet_local(str(demo_models["esm"]))
    ours, _ = esm_loading.load(str(demo_models["esm"]))
    assert all(torch.equal(a, b) for a, b in zip(reference.state_dict().values(), ours.state_dict().values()))
    assert esm_loading.read_config(str(demo_models["esm"])) == {"layers": 2, "dim": 64}
    assert esm_loading.read_config("esm2_t36_3B_UR50D") == {"layers": 36, "dim": 2560}


def test_the_embedding_models_share_one_interface(demo_models):
    """The embed job and the model check handle ESM-2 and DNABERT-S alike, through the registry of
    architectures: the same functions with the same arguments, and sizes read without building the
    model that the built embedder has."""
    import inspect

    from workflow_lib.models import ARCHITECTURES, loading_module

    functions = ("resolve", "read_config", "checkpoint_files", "embedder")
    for function in functions:
        parameters = {
            name: list(inspect.signature(getattr(loading_module(name), function)).parameters) for name in ARCHITECTURES
        }
        assert parameters["esm2"] == parameters["dnabert_s"], function
    for name, architecture, files in (
        ("esm", "esm2", {"esm2_t2_demo.pt", "esm2_t2_demo-contact-regression.pt"}),
        ("dnabert", "dnabert_s", {"config.json", "model.safetensors", "tokenizer.json"}),
    ):
        model, checkpoint = loading_module(architecture), str(demo_models[name])
        config = model.read_config(checkpoint, None)
        assert {p.name for p in model.checkpoint_files(checkpoint, None)} == files
        embedder = model.embedder(checkpoint, None, config["layers"] if name == "esm" else None, CPU, torch.float32)
        assert (embedder.dim, config["layers"]) == ((64, 2) if name == "esm" else (48, 2))


def test_esm_layer_out_of_range(demo_models, tmp_path):
    """A local checkpoint's layer is checked by the model check, before any embedding job."""
    embedders = [Embedder("esm", "esm2", str(demo_models["esm"]), 3)]
    with pytest.raises(InputError, match=r"models.esm.layer: 3 is out of range for .*esm2_t2_demo.pt \(2 layers\)"):
        check_models(embedders, None, str(tmp_path), tmp_path / "check.json", 500)


@pytest.mark.parametrize("budget", [100_000, 1000, 150])
def test_dnabert_packed_matches_public_reference_code(budget):
    """Vectors computed once by MAGICS-LAB/DNABERT_S bert_layers.py on a tiny checkpoint (12 heads,
    so non-power-of-two ALiBi slopes; 3 to 845 tokens, past the 512 ALiBi starting size), against
    packed rows of every size: one row of all, and rows split across the budget."""
    reference = np.load(DATA / "dnabert_s_tiny" / "reference.npz", allow_pickle=False)
    model, tokens = dnabert_loading.load(str(DATA / "dnabert_s_tiny"))
    embedder = dnabert.DNABERTEmbedder(model, tokens, CPU)
    encoded = tokens([str(s).encode() for s in reference["sequences"]])
    assert [len(t) for t in encoded] == reference["n_tokens"].tolist()
    packed, n_batches = packed_run(embedder, encoded, budget)
    assert n_batches == {100_000: 1, 1000: 4, 150: 27}[budget]
    assert np.abs(packed.numpy() - reference["embeddings"]).max() < 1e-5


def test_padded_attention_masks_are_per_batch_not_per_row():
    """The padded path's mask is B x 1 x 1 x L, or B x H x L x L with ALiBi, for the batch's longest
    sequence L: never T x T for the whole row; and it computes each sequence's own attention."""
    lengths = [30] + [2] * 50
    q, k, v, layout = random_row(lengths)
    slopes = torch.tensor([0.5, 0.25])
    assert varlen.padded_mask(layout, None, q.dtype).shape == (51, 1, 1, 30)
    assert varlen.padded_mask(layout, slopes, q.dtype).shape == (51, 2, 30, 30)  # T = 130: T x T would be 130 x 130
    out = varlen.padded_attention(q, k, v, layout, slopes)
    assert torch.allclose(out, per_sequence_attention(q, k, v, layout, slopes), atol=1e-6)
    plain = varlen.padded_attention(q, k, v, layout)
    assert torch.allclose(plain, per_sequence_attention(q, k, v, layout), atol=1e-6)
    pair = slice(30, 32)  # a 2-token sequence attends to itself only
    bias = torch.tensor([[0.0, -0.5], [-0.5, 0.0]])
    weights = torch.softmax(q[pair, 0] @ k[pair, 0].T / 2 + bias, dim=-1)
    assert torch.allclose(out[pair, 0], weights @ v[pair, 0], atol=1e-6)


@pytest.mark.parametrize("longest", [29, 32])
def test_padded_masks_rows_are_aligned_for_the_memory_efficient_kernel(longest):
    """Every stride of the padded masks but the last is a multiple of 8, which CUDA's memory-efficient
    kernel takes as it is (another mask it pads into a copy at every layer); the values are those of
    padded keys at -inf and ALiBi's -slope |i - j|."""
    _, _, _, layout = random_row([longest, 7, 1])
    slopes = torch.tensor([0.5, 0.25, 0.125])
    for mask in (varlen.padded_mask(layout, None, torch.float16), varlen.padded_mask(layout, slopes, torch.float16)):
        assert all(stride % varlen.MASK_ALIGN == 0 for stride in mask.stride()[:-1]) and mask.stride(-1) == 1
    valid = torch.arange(longest)[None, :] < torch.tensor([longest, 7, 1])[:, None]
    keys = torch.zeros(3, longest).masked_fill(~valid, float("-inf"))[:, None, None, :]
    assert torch.equal(varlen.padded_mask(layout, None, torch.float16).float(), keys)
    alibi = varlen.alibi_bias(slopes, longest, torch.float16)[None] + keys.half()
    assert torch.equal(varlen.padded_mask(layout, slopes, torch.float16), alibi)


def test_one_attention_kernel_per_device_precision_and_model():
    """The CPU's exact kernel; on CUDA torch's varlen_attn for ESM-2 in half precision, the padded
    path for DNABERT-S's ALiBi and for fp32."""
    cuda = torch.device("cuda", 0)
    assert varlen.kernel_name(CPU, torch.float32, alibi=False) == varlen.kernel_name(CPU, torch.float16, True)
    assert varlen.kernel_name(CPU, torch.float32, alibi=False) == "sdpa by sequence length"
    has_varlen = importlib.util.find_spec("torch.nn.attention.varlen") is not None
    for dtype in (torch.float16, torch.bfloat16):
        assert varlen.kernel_name(cuda, dtype, alibi=False) == ("torch varlen_attn" if has_varlen else "padded sdpa")
        assert varlen.kernel_name(cuda, dtype, alibi=True) == "padded sdpa"
    assert varlen.kernel_name(cuda, torch.float32, alibi=False) == "padded sdpa"


def test_varlen_attn_failing_gives_way_to_the_padded_path(monkeypatch, caplog):
    """A GPU without varlen_attn's kernel: the batch goes through the padded path, and so do later
    ones (one warning); the job goes on."""

    def no_kernel(*args):
        raise RuntimeError("FlashAttention only supports Ampere GPUs or newer.\n(more)")

    monkeypatch.setattr(varlen, "_varlen_failed", False)
    monkeypatch.setattr(varlen, "_torch_varlen", no_kernel)
    real = varlen.kernel_name
    monkeypatch.setattr(varlen, "kernel_name", lambda device, dtype, alibi: real(torch.device("cuda"), dtype, alibi))
    monkeypatch.setattr(varlen, "_HAS_VARLEN", True)
    q, k, v, layout = random_row([40, 56], heads=4, head_dim=8)
    for _ in range(2):
        out = varlen.attention(q.half(), k.half(), v.half(), layout)
        assert torch.allclose(out.float(), per_sequence_attention(q, k, v, layout), atol=1e-2)
    assert caplog.text.count("attention: torch varlen_attn failed (FlashAttention only supports Ampere") == 1


@pytest.mark.parametrize("kernel", ["by length", "padded"])
def test_every_attention_kernel_reproduces_the_public_dnabert_s_code(kernel, monkeypatch):
    """The tiny DNABERT-S fixture's reference vectors (public model code) through each kernel the
    embed job may run with ALiBi: the CPU's, and CUDA's padded path run here."""
    kernels = {"by length": varlen.grouped_attention, "padded": varlen.padded_attention}
    monkeypatch.setitem(varlen.KERNELS, varlen.GROUPED, kernels[kernel])
    reference = np.load(DATA / "dnabert_s_tiny" / "reference.npz", allow_pickle=False)
    model, tokens = dnabert_loading.load(str(DATA / "dnabert_s_tiny"))
    embedder = dnabert.DNABERTEmbedder(model, tokens, CPU)
    packed, _ = packed_run(embedder, tokens([str(s).encode() for s in reference["sequences"]]), 1000)
    assert np.abs(packed.numpy() - reference["embeddings"]).max() < 1e-5


@pytest.mark.parametrize("model", ["esm", "dnabert"])
def test_embeddings_do_not_depend_on_the_batch(demo_models, model):
    """A sequence's embedding is the same, to 1e-6, alone or packed with others of any length, at
    any token budget, on 1 or 2 threads."""
    rng = np.random.default_rng(0)
    if model == "esm":
        m, alphabet = esm_loading.load(str(demo_models["esm"]))
        embedder = esm.ESMEmbedder(m, alphabet, 2, CPU)
        letters = np.frombuffer(b"ACDEFGHIKLMNPQRSTVWY", dtype=np.uint8)
    else:
        m, tokens = dnabert_loading.load(str(demo_models["dnabert"]))
        embedder = dnabert.DNABERTEmbedder(m, tokens, CPU)
        letters = np.frombuffer(b"ACGT", dtype=np.uint8)
    sequences = [letters[rng.integers(0, len(letters), n)].tobytes() for n in rng.integers(1, 600, 40)]
    encoded = embedder.tokens(sequences)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        alone = torch.stack([embedder(*one(e))[0] for e in encoded])
        for n_threads, budget in ((1, 100_000), (2, 100_000), (2, 700), (1, 2000)):
            torch.set_num_threads(n_threads)
            order = rng.permutation(len(encoded))  # other neighbours in every run
            packed, _ = packed_run(embedder, [encoded[i] for i in order], budget)
            assert (packed - alone[order]).abs().max() <= 1e-6, (n_threads, budget)
    finally:
        torch.set_num_threads(threads)


def test_dnabert_alibi_slopes():
    assert dnabert.alibi_slopes(12) == pytest.approx(
        [2**-i for i in range(1, 9)] + [2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5]
    )


def test_dnabert_loads_prefixed_checkpoint_with_heads(tmp_path):
    """Checkpoints may prefix keys with 'bert.' and carry the pooler and MLM head: both load."""
    import shutil

    directory = tmp_path / "prefixed"
    shutil.copytree(DATA / "dnabert_s_tiny", directory)
    state = torch.load(directory / "pytorch_model.bin", weights_only=True)
    state = {f"bert.{k}": v for k, v in state.items()}
    state["cls.predictions.bias"] = torch.zeros(256)
    torch.save(state, directory / "pytorch_model.bin")
    a, _ = dnabert_loading.load(str(DATA / "dnabert_s_tiny"))
    b, _ = dnabert_loading.load(str(directory))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def resident_kib(path) -> int:
    """Kilobytes of `path`'s pages resident in this process's mappings of it."""
    kib, mapping = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if line[:1].isdigit() or line[:1] in "abcdef":  # a mapping's first line: address range ... path
            mapping = line.endswith(str(path))
        elif mapping and line.startswith("Rss:"):
            kib += int(line.split()[1])
    return kib


@pytest.mark.skipif(sys.platform != "linux", reason="pages are handed back on Linux only")
def test_a_checkpoint_converted_in_place_hands_its_pages_back(tmp_path):
    """The models are converted from memory-mapped checkpoints tensor by tensor, each tensor's file
    pages handed back once converted: they would sit beside the whole converted model (ESM-2 3B in
    float32: 5.7 GB of pages). Tied tensors (one storage, two names) still convert right."""
    generator = torch.Generator().manual_seed(0)
    state = {f"w{i}": torch.randn(512, 1024, generator=generator).half() for i in range(64)}  # 64 MiB
    state["tied"] = state["w0"]
    torch.save(state, tmp_path / "checkpoint.pt")
    mapped = torch.load(tmp_path / "checkpoint.pt", weights_only=True, mmap=True)
    out = checkpoints.converted(mapped, lambda _, t: t.float())
    assert resident_kib(tmp_path / "checkpoint.pt") < 1024
    assert all(torch.equal(out[name], state[name].float()) for name in state)
    same = checkpoints.converted({"w1": out["w1"]}, lambda _, t: t)  # nothing new made: nothing handed back
    assert same["w1"] is out["w1"] and torch.equal(out["w1"], state["w1"].float())


def half_checkpoint(path: Path, seed: int = 0) -> Path:
    """A tiny ESM-2 checkpoint in float16, as the published ones."""
    return demo_models.build_esm(path, seed, dtype=torch.float16)


def esm_embeddings(checkpoint: Path, cache_dir: Path | None, dtype: torch.dtype) -> torch.Tensor:
    model, alphabet = esm_loading.load(str(checkpoint), cache_dir and str(cache_dir), CPU, dtype)
    embedder = esm.ESMEmbedder(model, alphabet, 2, CPU, dtype)
    return packed_run(embedder, embedder.tokens([p.encode() for p in PROTEINS[:6]]), 2000)[0]


@pytest.fixture
def log(caplog):
    caplog.set_level("INFO", logger="workflow")
    return caplog


def copies(cache: Path) -> list[str]:
    return sorted(p.name.split(".", 1)[1] for p in (cache / "esm-copies").glob("*.safetensors"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_half_precision_loads_write_a_safetensors_copy_that_embeds_bit_identically(tmp_path, dtype, log):
    """The first half-precision load writes its weights to a safetensors copy in cache_dir; later
    loads map the copy instead of converting the .pt, with bit-identical embeddings. In float32
    nothing is copied."""
    checkpoint, cache = half_checkpoint(tmp_path / "esm2_t2_half.pt"), tmp_path / "cache"
    today = esm_embeddings(checkpoint, None, dtype)
    first = esm_embeddings(checkpoint, cache, dtype)
    log.clear()
    again = esm_embeddings(checkpoint, cache, dtype)
    assert torch.equal(first, today) and torch.equal(again, today)
    if dtype == torch.float32:
        assert not (cache / "esm-copies").exists()
    else:
        assert copies(cache) == [f"{str(dtype).removeprefix('torch.')}.safetensors"]
        assert "ESM-2 loaded from" in log.text and str(cache / "esm-copies") in log.text


def test_a_changed_checkpoint_is_never_served_its_old_copy(tmp_path, log):
    """A copy is named after the content of the files it was made from: a checkpoint written again
    is loaded from itself and copied again (the old copy removed), its regression file gone too."""
    checkpoint, cache = half_checkpoint(tmp_path / "esm2_t2_half.pt"), tmp_path / "cache"
    old = esm_embeddings(checkpoint, cache, torch.bfloat16)
    half_checkpoint(checkpoint, seed=1)
    new = esm_embeddings(checkpoint, cache, torch.bfloat16)
    assert torch.equal(new, esm_embeddings(checkpoint, None, torch.bfloat16)) and not torch.equal(new, old)
    esm_loading.regression_path(checkpoint).unlink()
    log.clear()
    assert torch.equal(esm_embeddings(checkpoint, cache, torch.bfloat16), new)  # the contact head is not used
    assert "weights copied to" in log.text and copies(cache) == ["bfloat16.safetensors"]


def test_the_copy_is_found_again_by_the_checkpoints_content_at_another_path(tmp_path, log):
    """The copy is named after the checkpoint's content: the same files moved, or copied to a
    node-local path (a new inode and ctime), load from it; the job's digests are used, not recomputed."""
    checkpoint, cache = half_checkpoint(tmp_path / "esm2_t2_half.pt"), tmp_path / "cache"
    expected = esm_embeddings(checkpoint, cache, torch.bfloat16)
    moved = tmp_path / "node_local" / "renamed.pt"
    moved.parent.mkdir()
    checkpoint.rename(moved)
    esm_loading.regression_path(checkpoint).rename(esm_loading.regression_path(moved))
    copied = tmp_path / "elsewhere.pt"
    shutil.copyfile(moved, copied)  # no regression file beside it: other content, another copy
    for path, same in ((moved, True), (copied, False)):
        log.clear()
        assert torch.equal(esm_embeddings(path, cache, torch.bfloat16), expected)
        assert ("ESM-2 loaded from" in log.text) == same and ("weights copied to" in log.text) != same, path
    assert copies(cache) == ["bfloat16.safetensors"] * 2
    files = esm_loading.checkpoint_files(str(moved))
    digests = checksums.digests(checksums.describe(files))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(checksums, "sha256", lambda path: pytest.fail(f"{path} hashed again"))
        model, _ = esm_loading.load(str(moved), str(cache), CPU, torch.bfloat16, digests)
    assert "ESM-2 loaded from" in log.text


def test_a_damaged_copy_is_made_again(tmp_path, log):
    checkpoint, cache = half_checkpoint(tmp_path / "esm2_t2_half.pt"), tmp_path / "cache"
    expected = esm_embeddings(checkpoint, cache, torch.bfloat16)
    (copy_file,) = (cache / "esm-copies").glob("*.safetensors")
    copy_file.write_bytes(copy_file.read_bytes()[:1000])
    assert torch.equal(esm_embeddings(checkpoint, cache, torch.bfloat16), expected)
    assert "is unreadable" in log.text and "weights copied to" in log.text
    log.clear()
    assert torch.equal(esm_embeddings(checkpoint, cache, torch.bfloat16), expected)
    assert "ESM-2 loaded from" in log.text


@pytest.mark.parametrize("options", ["ro", "size=64k"])  # a read-only disk, a full one
def test_a_copy_that_cannot_be_written_costs_one_line_not_the_job(tmp_path, options, log):
    checkpoint = half_checkpoint(tmp_path / "esm2_t2_half.pt")
    expected = esm_embeddings(checkpoint, None, torch.bfloat16)
    with tmpfs(tmp_path / "disk", options) as disk:
        assert torch.equal(esm_embeddings(checkpoint, disk, torch.bfloat16), expected)
        warnings = [r.getMessage() for r in log.records if r.levelname == "WARNING"]
        assert len(warnings) == 1 and "no copy of the weights written" in warnings[0], warnings
        assert not [p.name for p in disk.rglob("*") if p.is_file() and p.suffix != ".lock"], "nothing left behind"


def test_a_load_never_waits_for_another_job_writing_the_copy(tmp_path, log):
    """Jobs starting together: the one that takes the copy's lock writes it; the others load the
    .pt at once rather than wait."""
    checkpoint, cache = half_checkpoint(tmp_path / "esm2_t2_half.pt"), tmp_path / "cache"
    copy_file = esm_loading.copy_path(esm_loading.content_of(checkpoint, None), str(cache), torch.bfloat16)
    with locks.exclusive(copy_file.with_name(f".{copy_file.name}.lock")):  # another job writing it
        expected = esm_embeddings(checkpoint, cache, torch.bfloat16)
    assert not copy_file.exists() and "WARNING" not in log.text
    assert torch.equal(esm_embeddings(checkpoint, cache, torch.bfloat16), expected) and copy_file.exists()


def test_checkpoint_kinds():
    assert not is_local("esm2_t36_3B_UR50D")
    assert not is_local("zhihan1996/DNABERT-S")
    assert is_local("models/esm2.pt")
    assert is_local("resources/demo_models/dnabert_s_demo")
    assert is_local("./zhihan1996/DNABERT-S")


VIRNUCPRO_SAVE = textwrap.dedent("""
    import sys
    import torch
    import torch.nn.functional as F
    from torch import nn

    class MLPClassifier(nn.Module):  # as in VirNucPro's train.py
        def __init__(self, input_dim, hidden_dim, num_class):
            super(MLPClassifier, self).__init__()
            self.hidden_layer = nn.Linear(input_dim, hidden_dim)
            self.bn1 = nn.BatchNorm1d(hidden_dim)
            self.output_layer = nn.Linear(hidden_dim, num_class)
            self.dropout = nn.Dropout(0.5)

        def forward(self, x):
            x = self.hidden_layer(x)
            x = self.bn1(x)
            x = F.relu(x)
            x = self.dropout(x)
            return self.output_layer(x)

    torch.manual_seed(0)
    model = MLPClassifier(40, 512, 2)
    with torch.no_grad():
        model.bn1.running_mean.uniform_(-1, 1)
        model.bn1.running_var.uniform_(0.5, 2)
    torch.save(model, sys.argv[1])  # the whole module, pickled from __main__
    model.eval()
    x = torch.randn(7, 40)
    torch.save({"x": x, "scores": F.softmax(model(x), dim=1).detach()}, sys.argv[2])
""")


def test_virnucpro_pickled_classifier(tmp_path):
    script = tmp_path / "save.py"
    script.write_text(VIRNUCPRO_SAVE)
    subprocess.run([sys.executable, str(script), str(tmp_path / "500_model.pth"), str(tmp_path / "io.pt")], check=True)
    model, metadata = classifier.load(tmp_path / "500_model.pth")
    assert metadata == {"format": "virnucpro-pickle", "input_dim": 40}
    io = torch.load(tmp_path / "io.pt", weights_only=True)
    assert torch.allclose(classifier.scores_and_atypicality(model, io["x"])[0], io["scores"], atol=1e-6)
    # its name says nothing: a file that is not one of VirNucPro's published ones must be stated
    with pytest.raises(InputError, match="cannot tell which chunk length .* set models.classifier_chunk_length"):
        classifier.check_fits(tmp_path / "500_model.pth", WIDTHS, 500)
    classifier.check_fits(tmp_path / "500_model.pth", WIDTHS, 300, stated=300)
    with pytest.raises(InputError, match=r"made for 300 bp chunks \(stated in config\) but chunk_length is 500"):
        classifier.check_fits(tmp_path / "500_model.pth", WIDTHS, 500, stated=300)
    # it records no models: VirNucPro's, DNABERT-S then ESM-2
    with pytest.raises(InputError, match=r"trained on the models dnabert, esm \(in that order\) but models.embedders"):
        classifier.check_fits(tmp_path / "500_model.pth", WIDTHS[::-1], 300, stated=300)


def test_published_classifiers_are_known_by_their_git_blob_ids(tmp_path, monkeypatch):
    """VirNucPro's files are recognised by content, as git records them (`git hash-object`)."""
    script = tmp_path / "save.py"
    script.write_text(VIRNUCPRO_SAVE)
    published = tmp_path / "300_model.pth"
    subprocess.run([sys.executable, str(script), str(published), str(tmp_path / "io.pt")], check=True)
    blob = subprocess.run(["git", "hash-object", str(published)], capture_output=True, text=True, check=True)
    assert classifier_chunks.git_blob_id(published) == blob.stdout.strip()
    assert set(classifier_chunks.VIRNUCPRO_BLOBS.values()) == {300, 500}
    monkeypatch.setitem(classifier_chunks.VIRNUCPRO_BLOBS, blob.stdout.strip(), 300)  # as a published file
    renamed = tmp_path / "500_model.pth"
    published.rename(renamed)
    assert classifier_chunks.made_for(renamed)[0] == 300
    with pytest.raises(InputError, match=r"500_model.pth: this classifier was made for 300 bp chunks \(VirNucPro's"):
        classifier_chunks.check_chunk_length(renamed, 500, None)
    with pytest.raises(InputError, match="models.classifier_chunk_length is 500, but .* made for 300 bp chunks"):
        classifier_chunks.check_chunk_length(renamed, 500, 500)
    classifier_chunks.check_chunk_length(renamed, 300, None)


def test_own_classifier_format_round_trip(tmp_path):
    torch.manual_seed(1)
    model = classifier.MLPClassifier(20)
    classifier.save(model.eval(), tmp_path / "c.pt", embedders=[["dnabert", 8], ["esm", 12]], chunk_length=500)
    loaded, metadata = classifier.load(tmp_path / "c.pt")
    x = torch.randn(4, 20)
    assert torch.equal(classifier.scores_and_atypicality(model, x)[0], classifier.scores_and_atypicality(loaded, x)[0])
    assert metadata["embedders"] == [["dnabert", 8], ["esm", 12]]
    with pytest.raises(InputError, match=r"trained on 12 features of esm but its checkpoint gives 64; configure"):
        classifier.check_fits(tmp_path / "c.pt", [("dnabert", 8), ("esm", 64)], 500)
    with pytest.raises(
        InputError, match=r"trained on the models dnabert, esm \(in that order\) but models.embedders lists"
    ):
        classifier.check_fits(tmp_path / "c.pt", [("dnabert", 8), ("esm", 12), ("esm_small", 4)], 500)
    classifier.check_fits(tmp_path / "c.pt", [("dnabert", 8), ("esm", 12)], 500)
    recorded = classifier_chunks.recorded_metadata(tmp_path / "c.pt")  # read without torch
    assert recorded["chunk_length"] == 500 and recorded["embedders"] == [["dnabert", 8], ["esm", 12]]
    with pytest.raises(InputError, match="made for 500 bp chunks .* but chunk_length is 300; set chunk_length to 500"):
        classifier.check_fits(tmp_path / "c.pt", [("dnabert", 8), ("esm", 12)], 300)
    classifier.save(model.eval(), tmp_path / "old.pt", chunk_length=500)  # as the train target wrote them before
    with pytest.raises(
        InputError, match=r"takes 20 features but the configured models give 8 \(dnabert\) \+ 64 \(esm\)"
    ):
        classifier.check_fits(tmp_path / "old.pt", [("dnabert", 8), ("esm", 64)], 500)


class _Payload:
    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("kind", ["classifier", "esm", "dnabert"])
def test_pickle_that_runs_code_is_refused(demo_models, tmp_path, kind):
    """A classifier, an ESM-2 checkpoint or DNABERT-S weights whose pickle would run a command on
    loading is refused with one line, and the command never runs."""
    import shutil

    from workflow_lib.models import dnabert_loading

    payload = _Payload()
    payload.marker = tmp_path / "pwned"
    if kind == "classifier":
        torch.save({"format": classifier.FORMAT, "state_dict": payload, "chunk_length": 300}, tmp_path / "evil.pth")
        load, message = lambda: classifier.load(tmp_path / "evil.pth"), "VirNucPro or workflow classifier"
        # the start-up check reads its metadata without building anything in it
        assert classifier_chunks.made_for(tmp_path / "evil.pth")[0] == 300 and not payload.marker.exists()
    elif kind == "esm":
        torch.save({"cfg": {}, "model": payload}, tmp_path / "esm2_evil.pt")
        load, message = lambda: esm_loading.load(str(tmp_path / "esm2_evil.pt")), "fair-esm ESM-2 checkpoint"
    else:
        directory = tmp_path / "dnabert"
        shutil.copytree(demo_models["dnabert"], directory)
        (directory / "model.safetensors").unlink()
        torch.save({"bert.embeddings.word_embeddings.weight": payload}, directory / "pytorch_model.bin")
        load, message = lambda: dnabert_loading.load(str(directory)), "DNABERT-S weights"
    with pytest.raises(
        InputError, match=f"refused to load: not a {message} file, or it holds code that would run"
    ) as e:
        load()
    assert not payload.marker.exists()
    assert "weights_only" not in str(e.value) and "GLOBAL" in str(e.value).upper()  # the reason, not torch's advice


def test_named_models_load_from_the_cache_offline(demo_models, tmp_path):
    """A fair-esm name and a Hugging Face id resolve to files already in models.cache_dir, with
    no network: the layout that fair-esm (torch hub) and huggingface_hub write when they download."""
    import os
    import shutil

    cache = tmp_path / "cache"
    checkpoints = cache / "torch" / "hub" / "checkpoints"
    checkpoints.mkdir(parents=True)
    shutil.copy(demo_models["esm"], checkpoints / "esm2_t6_8M_UR50D.pt")
    shutil.copy(
        demo_models["esm"].with_name("esm2_t2_demo-contact-regression.pt"),
        checkpoints / "esm2_t6_8M_UR50D-contact-regression.pt",
    )
    repo = cache / "models--zhihan1996--DNABERT-S"
    revision = "0123456789abcdef0123456789abcdef01234567"
    shutil.copytree(DATA / "dnabert_s_tiny", repo / "snapshots" / revision)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    script = (
        "import json, sys; from workflow_lib.models import dnabert_loading, esm_loading\n"
        f"model, _ = esm_loading.load('esm2_t6_8M_UR50D', {str(cache)!r})\n"
        f"print(json.dumps([model.num_layers, str(dnabert_loading.resolve('zhihan1996/DNABERT-S', {str(cache)!r}))]))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(DATA.parents[1])}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    layers, snapshot = json.loads(result.stdout.strip().splitlines()[-1])
    assert layers == 2  # the file in the cache was loaded (the demo model under a real name)
    assert snapshot == str(repo / "snapshots" / revision)


def test_no_remote_code_is_ever_trusted(root):
    """Models load through this project's own code: never `trust_remote_code`, which would run
    Python shipped with a Hugging Face checkpoint."""
    for path in [*(root / "workflow_lib").rglob("*.py"), *(root / "scripts").glob("*.py")]:
        text = path.read_text()
        assert "trust_remote_code=" not in text and "from_pretrained(" not in text, path


def test_esm_compiled_layers_match_eager(demo_models):
    """The compiled layer work (torch.compile fusing LayerNorms, rotary, GELU and adds around the
    attention kernel) gives the eager forward's embeddings, on rows of every length at once."""
    model, alphabet = esm_loading.load(str(demo_models["esm"]))
    eager = esm.ESMEmbedder(copy.deepcopy(model), alphabet, 2, CPU)
    compiled = esm.ESMEmbedder(model, alphabet, 2, CPU, compiled=True)
    encoded = eager.tokens([p.encode() for p in PROTEINS])
    for budget in (100_000, 700):  # rows of other lengths: one compile serves them all
        expected, _ = packed_run(eager, encoded, budget)
        got, _ = packed_run(compiled, encoded, budget)
        assert (got - expected).abs().max() < 1e-5, budget
    assert compiled.compiled  # compiled to the end: it never fell back to the eager layers


@pytest.mark.slow  # a compile of every variant of the layer functions: tens of seconds
def test_esm_every_lever_and_fp8_compile(monkeypatch):
    """Compiled as the GPU check's lever runs are, every lever and FP8 together give the eager
    forward's embeddings and stay compiled: the variants of the layer functions (FP8 and FP16
    weights, a pending residual or none, chunks of every length) compile."""
    monkeypatch.setattr(esm, "FFN_CHUNK", 7)
    torch.manual_seed(0)
    model = fair_esm.ESM2(4, 64, 4, "ESM-1b", True).eval()
    eager = esm.ESMEmbedder(copy.deepcopy(model), model.alphabet, 4, CPU, levers=esm.LEVERS, fp8=True)
    compiled = esm.ESMEmbedder(model, model.alphabet, 4, CPU, compiled=True, levers=esm.LEVERS, fp8=True)
    encoded = eager.tokens([p.encode() for p in PROTEINS])
    expected, _ = packed_run(eager, encoded, 1100)
    got, _ = packed_run(compiled, encoded, 1100)
    assert compiled.compiled and (got - expected).abs().max() < 1e-4  # FP8 rounding of fused arithmetic


COMPILE_WITHOUT_COMPILER = """
import copy, json, sys, torch
from workflow_lib.models import esm, esm_loading
model, alphabet = esm_loading.load(sys.argv[1])
eager = esm.ESMEmbedder(copy.deepcopy(model), alphabet, 2, torch.device("cpu"))
compiled = esm.ESMEmbedder(model, alphabet, 2, torch.device("cpu"), compiled=True)
batch = __import__("workflow_lib.embed.packing", fromlist=["pack"]).pack(
    [0, 1], eager.tokens([b"MKVLAAGWPQ", b"ACDEFGHIKLMNPQRSTVWY"]), 100).tensors()
inputs = batch.tokens, batch.layout()
print(json.dumps([float((compiled(*inputs) - eager(*inputs)).abs().max()), compiled.compiled]))
"""


def test_esm_compile_failure_falls_back_to_eager(demo_models, tmp_path):
    """A node without a working C compiler cannot compile the layers: the job goes on with the eager
    layers (one warning), giving the same embeddings, instead of failing."""
    env = {**ENV, "CXX": str(tmp_path / "no-such-g++"), "CC": str(tmp_path / "no-such-gcc")}
    env |= {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "PYTHONPATH": str(Path(__file__).parents[1])}
    result = subprocess.run(
        [sys.executable, "-c", COMPILE_WITHOUT_COMPILER, str(demo_models["esm"])],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    difference, still_compiled = json.loads(result.stdout.strip().splitlines()[-1])
    assert difference < 1e-5 and not still_compiled
    assert "the compiled layers failed" in result.stderr


LEVER_RUNS = [frozenset({name}) for name in sorted(esm.LEVERS)] + [esm.DEFAULT_LEVERS, esm.LEVERS]


@pytest.mark.parametrize("levers", LEVER_RUNS, ids=lambda levers: "+".join(sorted(levers)))
def test_esm_levers_give_the_plain_forward(demo_models, monkeypatch, levers):
    """Each lever alone, the default ones and all together give the plain forward's embeddings in
    float32 (on the CPU the GELU epilogue computes ESM-2's erf form), feed-forward chunks cutting
    through rows and sequences."""
    monkeypatch.setattr(esm, "FFN_CHUNK", 7)
    model, alphabet = esm_loading.load(str(demo_models["esm"]))
    plain = esm.ESMEmbedder(copy.deepcopy(model), alphabet, 2, CPU, levers=frozenset())
    lever = esm.ESMEmbedder(model, alphabet, 2, CPU, levers=levers)
    encoded = plain.tokens([p.encode() for p in PROTEINS])
    expected, _ = packed_run(plain, encoded, 1100)
    got, _ = packed_run(lever, encoded, 1100)
    assert (got - expected).abs().max() < 1e-6


def test_esm_gelu_epilogue_in_its_cuda_form_is_not_exact(demo_models, monkeypatch):
    """On CUDA the epilogue computes GELU's tanh form (torch's own decomposition of
    _addmm_activation says so), not ESM-2's erf: emulated here, it moves the demo model's
    embeddings (values up to 2.6) by 1.6e-4, cosine 0.9999999. So the lever is off by default, and
    the GPU check measures its cosine against FP32 at the 3B and 650M shapes."""

    def tanh_epilogue(bias, x, w, use_gelu):
        return torch.nn.functional.gelu(torch.addmm(bias, x, w), approximate="tanh")

    monkeypatch.setattr(torch, "_addmm_activation", tanh_epilogue)
    model, alphabet = esm_loading.load(str(demo_models["esm"]))
    plain = esm.ESMEmbedder(copy.deepcopy(model), alphabet, 2, CPU, levers=frozenset())
    epilogue = esm.ESMEmbedder(model, alphabet, 2, CPU, levers={"gelu_epilogue"})
    encoded = plain.tokens([p.encode() for p in PROTEINS])
    expected, _ = packed_run(plain, encoded, 1100)
    got, _ = packed_run(epilogue, encoded, 1100)
    assert 1e-5 < (got - expected).abs().max() < 1e-3
    assert torch.nn.functional.cosine_similarity(got, expected).min() > 0.99999
    assert "gelu_epilogue" not in esm.DEFAULT_LEVERS and "ffn_chunks" not in esm.DEFAULT_LEVERS


def test_fp8_quantisation_per_row():
    """Each row's largest magnitude becomes e4m3's 448; every value comes back within e4m3's
    rounding (3 mantissa bits: 2^-4 relative; subnormals spaced 2^-9 of the scale); a zero row stays 0."""
    x = torch.randn(50, 64, generator=torch.Generator().manual_seed(0)) * torch.logspace(-3, 3, 50)[:, None]
    x[3] = 0
    quantised, scale = esm.quantise(x)
    assert quantised.dtype == torch.float8_e4m3fn and scale.shape == (50, 1)
    amax = quantised.float().abs().amax(dim=1)
    assert amax[3] == 0 and (amax[torch.arange(50) != 3] == 448).all()
    back = quantised.float() * scale
    assert ((back - x).abs() <= 2**-4 * x.abs() + 2**-10 * scale).all()


def test_fp8_linear_is_the_product_of_the_quantised_operands():
    """torch._scaled_mm (which runs on the CPU too) gives the product of the per-token quantised
    activations and the per-channel quantised weights exactly as a float32 emulation does; against
    the float32 linear, the error e4m3 makes (cosine 0.9999)."""
    generator = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(40, 64, generator=generator), torch.randn(96, 64, generator=generator), torch.randn(96)
    weight = esm.FP8Weight.of(w)
    assert weight.weight.dtype == torch.float8_e4m3fn and weight.scale.shape == (1, 96)
    got = esm.linear(x, weight, b)
    x8, x_scale = esm.quantise(x)
    emulated = (x8.float() * x_scale) @ (weight.weight.float() * weight.scale.t()).t() + b
    assert (got - emulated).abs().max() < 1e-5
    cosine = torch.nn.functional.cosine_similarity(got.flatten(), torch.nn.functional.linear(x, w, b).flatten(), dim=0)
    assert 0.999 < cosine < 0.99999


def test_esm_fp8_feed_forward_in_the_middle_layers():
    """fp8: the feed-forward GEMMs of every layer but the first and the last in FP8; on a random
    4-layer ESM-2 in float32 the embeddings stay within cosine 0.9998 of the plain forward's."""
    torch.manual_seed(0)
    model = fair_esm.ESM2(4, 64, 4, "ESM-1b", True).eval()
    plain = esm.ESMEmbedder(copy.deepcopy(model), model.alphabet, 4, CPU)
    fp8 = esm.ESMEmbedder(model, model.alphabet, 4, CPU, fp8=True)
    assert [isinstance(after[7], esm.FP8Weight) for _, after in fp8.layers] == [False, True, True, False]
    encoded = plain.tokens([p.encode() for p in PROTEINS])
    expected, _ = packed_run(plain, encoded, 1100)
    got, _ = packed_run(fp8, encoded, 1100)
    cosine = torch.nn.functional.cosine_similarity(got, expected)
    assert 0.9998 < cosine.min() and cosine.max() < 0.99999


def held_bytes(embedder: esm.ESMEmbedder) -> int:
    """The bytes of every tensor an ESM-2 embedder holds: its model's and its FP8 weights'."""
    tensors = [*embedder.model.parameters(), *embedder.model.buffers()]
    tensors += [t for before, after in embedder.layers for w in (*before, *after) if isinstance(w, esm.FP8Weight)
                for t in w[:2]]  # fmt: skip
    unique = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(unique.values())


def test_the_fp8_model_holds_less_than_the_fp16_one_and_its_gpu_claim_says_so():
    """fp8 drops the half-precision feed-forward weights it quantised: the model holds what the
    embed job's GPU memory estimate counts once loaded (within the biases, LayerNorms and scales
    it leaves out), less than in fp16; while loading, the fp16 weights."""
    torch.manual_seed(0)
    model = fair_esm.ESM2(6, 64, 4, "ESM-1b", True).eval()
    held = {}
    for precision, fp8 in (("fp16", False), ("fp8", True)):
        embedder = esm.ESMEmbedder(copy.deepcopy(model), model.alphabet, 6, CPU, torch.float16, fp8=fp8)
        held[precision] = held_bytes(embedder)
        loading, loaded = job_resources.weight_bytes("esm2", 6, 64, precision)
        assert loaded <= held[precision] <= 1.1 * loaded, precision
        assert loading == job_resources.weight_bytes("esm2", 6, 64, "fp16")[1]
    # the 4 middle layers' feed-forward weights (8 d^2 each) at 1 byte, not 2, less their float32 scales
    assert held["fp16"] - held["fp8"] >= 0.95 * 4 * 8 * 64**2


def test_fp8_fast_accumulation_is_asked_of_the_gemm_only_when_chosen(monkeypatch):
    """fast_accum (unmeasured: the GPU check times it) reaches torch._scaled_mm's use_fast_accum."""
    asked = []
    scaled_mm = torch._scaled_mm
    monkeypatch.setattr(torch, "_scaled_mm", lambda *a, **k: asked.append(k["use_fast_accum"]) or scaled_mm(*a, **k))
    torch.manual_seed(0)
    model = fair_esm.ESM2(3, 64, 4, "ESM-1b", True).eval()
    for fast_accum in (False, True):
        embedder = esm.ESMEmbedder(copy.deepcopy(model), model.alphabet, 3, CPU, fp8=True, fast_accum=fast_accum)
        packed_run(embedder, embedder.tokens([p.encode() for p in PROTEINS[:3]]), 1100)
        assert asked and set(asked) == {fast_accum}
        asked.clear()


def test_fp8_is_refused_where_its_gemm_fails_or_is_wrong(demo_models, monkeypatch):
    """The ESM-2 job asked for fp8 tries one FP8 GEMM before loading its model: where it fails (a
    GPU without FP8 tensor cores, a torch without the kernel) or is wrong, the job stops with one line."""
    esm.check_fp8(CPU, torch.float16)  # torch's CPU kernel runs

    def no_kernel(*args, **kwargs):
        raise RuntimeError("torch._scaled_mm is only supported on CUDA devices with compute capability >= 9.0\n(more)")

    monkeypatch.setattr(torch, "_scaled_mm", no_kernel)
    with pytest.raises(InputError) as refused:
        esm_loading.embedder(str(demo_models["esm"]), None, None, CPU, torch.float32, fp8=True)
    assert str(refused.value) == (
        "embedding.precision fp8: cpu cannot run FP8 GEMMs (torch._scaled_mm is only supported on CUDA devices "
        "with compute capability >= 9.0); set it to fp16"
    )

    def unsupported(*args, **kwargs):  # newer torch builds refuse a scaling they lack with ValueError
        raise ValueError("Invalid scaling configuration. For RowWise scaling, out_dtype must be bfloat16")

    monkeypatch.setattr(torch, "_scaled_mm", unsupported)
    with pytest.raises(InputError) as refused:
        esm.check_fp8(CPU, torch.float16)
    assert str(refused.value) == (
        "embedding.precision fp8: cpu cannot run FP8 GEMMs (Invalid scaling configuration. For RowWise scaling, "
        "out_dtype must be bfloat16); set it to fp16"
    )
    monkeypatch.setattr(torch, "_scaled_mm", lambda a, b, *args, **kwargs: torch.zeros(a.shape[0], b.shape[1]))
    with pytest.raises(InputError, match=r"cannot run FP8 GEMMs \(wrong results\)"):
        esm.check_fp8(CPU, torch.float32)
