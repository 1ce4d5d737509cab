"""The model files of a run, from its config: which checkpoints are local (the workflow can build
them), which classifier and calibration the jobs read, what the fetches download, and where jobs
that load models find them offline."""

import shlex

from workflow_lib.cli.settings import cli
from workflow_lib.models import Embedder, embedders
from workflow_lib.models.checkpoints import MANIFEST, classifier_path, is_local, is_url


def local_checkpoints(config: dict, model: str | None = None) -> list[str]:
    """The local checkpoints of the configured models (or of `model`), as inputs."""
    checkpoints = (e.checkpoint for e in embedders(config) if model in (None, e.name))
    return [c for c in checkpoints if is_local(c)]


def embedder_options(config: dict, fetched: bool = False) -> str:
    """--embedder per configured model, in input order (models.add_embedders_argument); `fetched`:
    for fetch_models, the named models with what decides their files alone, so that a layer or a
    local checkpoint changed downloads nothing again."""
    chosen = embedders(config)
    if fetched:
        chosen = [Embedder(e.name, e.architecture, e.checkpoint) for e in chosen if not is_local(e.checkpoint)]
    return cli(embedder=[e.option() for e in chosen])


def classifier_file(config: dict) -> str:
    """The classifier that jobs read: models.classifier, or where fetch_models puts a URL's download."""
    models = config["models"]
    return classifier_path(models["classifier"], models["cache_dir"])


def trains_here(config: dict, labelled: bool) -> bool:
    """This run trains the classifier it uses: models.classifier is the train target's output and
    the samples sheet labels samples."""
    return classifier_file(config) == config["train"]["classifier"] and labelled


def classifier_to_check(config: dict, trains: bool):
    """params.classifier of the model check: its --classifier, checked when the check runs (one
    given by URL if fetch_classifier has it by then; that job checks it too) but no input of it, so
    that the check (and the plans and scores after it) stands for the embedding models alone: a run
    that trains checks before its classifier exists, and the next one, with that classifier, need
    not check again; a classifier swap reruns no check. A function of the job's output, which
    Snakemake does not compare. A classifier changed later is checked at start-up
    (config_check.check_classifier_file). Its stated chunk length goes with it: stating one reruns
    no check either."""
    stated = config["models"]["classifier_chunk_length"]
    option = "" if trains else cli(classifier=classifier_file(config), classifier_chunk_length=stated)
    return lambda wildcards, output: option


def classifier_checks(config: dict):
    """params.checks of fetch_classifier: what it checks its download against (the models, chunk
    lengths, the calibration). Not compared, as classifier_to_check: the download is the URL's
    alone, so a change of these downloads nothing again (no job that needs the network, on a cluster
    without it); the start-up and the model check check them again."""
    models = config["models"]
    checks = cli(
        chunk_length=config["chunk_length"],
        classifier_chunk_length=models["classifier_chunk_length"],
        calibration=models["calibration"],
    )
    option = f"{embedder_options(config)} {checks}"
    return lambda wildcards, output: option


def pins(config: dict, classifier: bool) -> dict:
    """models.checksums for fetch_classifier (`classifier`), by the file name of its URL, or the
    rest, for fetch_models: pinning the classifier reruns no model's fetch."""
    models = config["models"]
    name = classifier_file(config).rsplit("/", 1)[-1] if is_url(models["classifier"]) else None
    return {file: sha for file, sha in models["checksums"].items() if (file == name) == classifier}


def calibration_file(config: dict) -> list[str]:
    calibration = config["models"]["calibration"]
    return [calibration] if calibration else []


def fetched_manifest(config: dict) -> str:
    return f"{config['models']['cache_dir']}/{MANIFEST}"


def fetched(config: dict) -> list[str]:
    """The named models' manifest (fetch_embedding_models'), if a model is named: the check waits for it."""
    remote = not all(is_local(e.checkpoint) for e in embedders(config))
    return [fetched_manifest(config)] if remote else []


def fetched_classifier(config: dict) -> list[str]:
    return [classifier_file(config)] if is_url(config["models"]["classifier"]) else []


def model_env(config: dict, compiles: bool = False) -> str:
    """A resource: the environment of jobs that load models: no network, named models from cache_dir;
    with `compiles`, the compile caches, shared across jobs and runs."""
    cache = config["models"]["cache_dir"]
    env = {"HF_HUB_OFFLINE": 1, "TORCH_HOME": f"{cache}/torch"}
    if compiles:
        kernels = config["embedding"]["compile_cache_dir"] or f"{cache}/compile"
        env |= {"TORCHINDUCTOR_CACHE_DIR": kernels, "TRITON_CACHE_DIR": f"{kernels}/triton"}
    return " ".join(f"{name}={shlex.quote(str(value))}" for name, value in env.items())
