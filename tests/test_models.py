"""Models against their references: ESM-2 against fair-esm's own forward, DNABERT-S against
vectors computed by the public DNABERT-S model code, the classifier against VirNucPro's files."""

import subprocess
import sys
import textwrap

import esm as fair_esm
import numpy as np
import pytest
import torch
from conftest import DATA

from workflow_lib.errors import InputError
from workflow_lib.models import classifier, dnabert, esm
from workflow_lib.models.checkpoints import is_local

CPU = torch.device("cpu")
PROTEINS = ["M", "MK", "ACDEFGHIKLMNPQRSTVWY" * 3, "MKV" * 40, "L" * 1030, "XBZUOMKV", "MKVLAAG" * 24]


def test_esm_matches_fair_esm_forward(demo_models):
    """Batched, sorted, padded embeddings equal fair-esm's forward on each sequence alone."""
    model, alphabet = esm.load(str(demo_models["esm"]))
    for layer in (1, 2):  # an intermediate (pre-LN) layer and the last (after emb_layer_norm_after)
        embedder = esm.ESMEmbedder(model, alphabet, layer, CPU)
        batched = embedder(PROTEINS)
        convert = alphabet.get_batch_converter()
        for i, protein in enumerate(PROTEINS):
            length = min(len(protein), 1022)  # BOS + 1022 residues + EOS at most
            _, _, tokens = convert([("", protein[:length])])
            with torch.no_grad():
                hidden = model(tokens, repr_layers=[layer])["representations"][layer]
            expected = hidden[0, 1 : length + 1].mean(0)  # residues only
            assert torch.allclose(batched[i], expected, atol=1e-5), (layer, i)


def test_esm_checkpoint_is_fair_esm_format(demo_models):
    """The demo checkpoint loads with fair-esm's own loader (file name, Namespace cfg, regression file)."""
    torch.serialization.add_safe_globals([__import__("argparse").Namespace])
    reference, _ = fair_esm.pretrained.load_model_and_alphabet_local(str(demo_models["esm"]))
    ours, _ = esm.load(str(demo_models["esm"]))
    assert all(torch.equal(a, b) for a, b in zip(reference.state_dict().values(), ours.state_dict().values()))
    assert esm.read_config(str(demo_models["esm"])) == (2, 64)
    assert esm.read_config("esm2_t36_3B_UR50D") == (36, 2560)
    with pytest.raises(InputError, match="no fair-esm ESM-2 model"):
        esm.read_config("esm2_t99_1T")


def test_esm_layer_out_of_range(demo_models):
    model, alphabet = esm.load(str(demo_models["esm"]))
    with pytest.raises(InputError, match="models.esm.layer: 3 is out of range"):
        esm.ESMEmbedder(model, alphabet, 3, CPU)


def test_dnabert_matches_public_reference_code():
    """Vectors computed once by MAGICS-LAB/DNABERT_S bert_layers.py on a tiny checkpoint (12 heads,
    so non-power-of-two ALiBi slopes; up to 845 tokens, past the 512 ALiBi starting size)."""
    reference = np.load(DATA / "dnabert_s_tiny" / "reference.npz", allow_pickle=False)
    model, tokenizer = dnabert.load(str(DATA / "dnabert_s_tiny"))
    embedder = dnabert.DNABERTEmbedder(model, tokenizer, CPU)
    sequences = [str(s) for s in reference["sequences"]]
    token_ids = embedder.encode(sequences)
    assert [len(t) for t in token_ids] == reference["n_tokens"].tolist()
    alone = torch.stack([embedder([ids])[0] for ids in token_ids]).numpy()
    padded = embedder(token_ids).numpy()  # one padded batch of all lengths
    assert np.abs(alone - reference["embeddings"]).max() < 1e-5
    assert np.abs(padded - reference["embeddings"]).max() < 1e-5


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
    a, _ = dnabert.load(str(DATA / "dnabert_s_tiny"))
    b, _ = dnabert.load(str(directory))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


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
    assert torch.allclose(classifier.scores(model, io["x"]), io["scores"], atol=1e-6)


def test_own_classifier_format_round_trip(tmp_path):
    torch.manual_seed(1)
    model = classifier.MLPClassifier(20)
    classifier.save(model.eval(), tmp_path / "c.pt", dnabert_dim=8, esm_dim=12)
    loaded, metadata = classifier.load(tmp_path / "c.pt")
    x = torch.randn(4, 20)
    assert torch.equal(classifier.scores(model, x), classifier.scores(loaded, x))
    assert metadata["esm_dim"] == 12
    with pytest.raises(InputError, match=r"takes 20 features but the configured models give 8 \(DNABERT-S\) \+ 64"):
        classifier.check_input_dim(tmp_path / "c.pt", 8, 64)


class _Payload:
    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


def test_pickle_that_runs_code_is_refused(tmp_path):
    payload = _Payload()
    payload.marker = tmp_path / "pwned"
    torch.save({"format": classifier.FORMAT, "state_dict": payload}, tmp_path / "evil.pth")
    with pytest.raises(InputError, match="refused to load"):
        classifier.load(tmp_path / "evil.pth")
    assert not payload.marker.exists()


def test_named_models_load_from_the_cache_offline(demo_models, tmp_path):
    """A fair-esm name and a Hugging Face id resolve to files already in models.cache_dir, with
    no network: the layout that fair-esm (torch hub) and huggingface_hub write when they download."""
    import json
    import os
    import shutil

    cache = tmp_path / "cache"
    checkpoints = cache / "torch" / "checkpoints"
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
        "import json, sys; from workflow_lib.models import dnabert, esm\n"
        f"model, _ = esm.load('esm2_t6_8M_UR50D', {str(cache)!r})\n"
        f"print(json.dumps([model.num_layers, str(dnabert.resolve('zhihan1996/DNABERT-S', {str(cache)!r}))]))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(DATA.parents[1])}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    layers, snapshot = json.loads(result.stdout.strip().splitlines()[-1])
    assert layers == 2  # the file in the cache was loaded (the demo model under a real name)
    assert snapshot == str(repo / "snapshots" / revision)
