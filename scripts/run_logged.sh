#!/usr/bin/env bash
# run_logged.sh LOG COMMAND [ARGS...]: run a job's command with all its output in LOG. On failure
# the console (stderr) gets the job's one-line error; on success, its warnings. Neither then hides
# in a log file.
log=$1
shift
# The scripts import workflow_lib from this checkout in any environment (a conda env of --sdm conda
# has it not installed).
export PYTHONPATH="$(cd "$(dirname "$0")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"
# The job also writes its error line to descriptor 3 (workflow_lib.errors.run_cli), kept here: the
# log may be on a disk too full to hold it.
# SLURM and Snakemake send SIGTERM to the whole process group: the job gets it too and leaves through
# its own exits (an embed job that has embedded every frame finishes first); its status is the one
# to report, so this shell waits for it instead of dying with 143.
trap ':' TERM
if reason=$(WORKFLOW_REASON_FD=3 exec "$@" 3>&1 >"$log" 2>&1); then
    grep -h ' WARNING ' "$log" >&2 || true
else
    status=$?
    if [ -n "$reason" ]; then
        printf '%s\n' "$reason" >&2
    else
        tail -n 1 "$log" >&2
    fi
    exit "$status"
fi
