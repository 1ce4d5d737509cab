"""The embed jobs' measured rates, kept in models.cache_dir for the time requests of later runs
(workflow/job_resources.py): per model (its key) and device, the last KEPT steady rates, in the
shard's ESM-2 tokens per second (the unit of the plan's shard tokens, whatever the model reads).

One file per model and device, `<cache_dir>/rates/<key>/<device>.json`, changed under a lock and
renamed into place: many jobs may record at once, and a reader never sees half a file."""

import functools
import logging
import os
import re
import statistics
from pathlib import Path

from workflow_lib.cli.errors import InputError
from workflow_lib.io import locks
from workflow_lib.io.tables import read_json, write_json

log = logging.getLogger("workflow")
KEPT = 5


def model_key(check: dict, precision: str) -> str:
    """What makes two jobs' rates comparable: the architecture, layers and width (a model check's
    entry of the model) and the configured precision."""
    return f"{check['architecture']}-{check['layers']}x{check['dim']}-{precision}"


def record(cache_dir: str, key: str, device: str, rate: float) -> None:
    """Add a job's steady rate on `device` (its name, or "cpu"); a cache it cannot write to is said
    in one line, and the job goes on."""
    path = Path(cache_dir) / "rates" / key / f"{re.sub(r'[^A-Za-z0-9._-]+', '_', device)}.json"
    try:
        with locks.exclusive(path.with_suffix(".lock")):
            kept = _load(path)[1]  # none where there is no file yet
            write_json({"model": key, "device": device, "rates": [*kept, round(rate)][-KEPT:]}, path)
    except (OSError, InputError) as error:
        log.warning("the rate of %s on %s is not recorded in %s: %s", key, device, path.parent, error)
        return
    log.info("recorded %s: %.0f shard tokens/s on %s", path, rate, device)


def recorded(cache_dir: str, key: str) -> dict[str, float]:
    """{device: the median of its last rates} of a model; read again only when its directory changes."""
    directory = Path(cache_dir) / "rates" / key
    try:
        return _read(str(directory), directory.stat().st_mtime_ns)
    except FileNotFoundError:
        return {}


@functools.cache
def _read(directory: str, mtime_ns: int) -> dict[str, float]:
    found = map(_load, Path(directory).glob("*.json"))
    return {device: statistics.median(kept) for device, kept in found if kept}


def _load(path: Path) -> tuple[str, list[float]]:
    """A rate file's device and rates; none from a file that is not one (edited by hand, say): a
    bad file must fail neither the plan nor a job that has done its GPU work."""
    try:
        entry = read_json(path)
        return str(entry["device"]), [float(rate) for rate in entry["rates"] if rate > 0]
    except (OSError, ValueError, KeyError, TypeError):
        return "", []


def preflight_line(model: str, found: dict) -> str:
    """A model's line of the preflight's report (workflow/preflight.py)."""
    return (
        f"preflight: {model}: {found['tokens_per_s']:,} shard tokens/s on {found['device']}; a shard of "
        f"{found['shard_tokens']:,} tokens takes {found['shard_minutes']} min, its embed job asks for "
        f"{found['shard_runtime_request_minutes']} min; memory: {found['memory']}"
    )


def preflight_lines(report: str, since: float) -> list[str]:
    """The lines of the preflight's report `report` when it was written after `since` (a time)."""
    if not os.path.isfile(report) or os.path.getmtime(report) < since:
        return []
    return [preflight_line(model, found) for model, found in read_json(report)["models"].items()]
