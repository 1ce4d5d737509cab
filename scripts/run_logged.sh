#!/usr/bin/env bash
# run_logged.sh LOG COMMAND [ARGS...]: run a job's command with all its output in LOG. On failure
# the console (stderr) gets the log's last line, which is the job's one-line error; on success,
# its warnings. Neither then hides in a log file.
log=$1
shift
# The scripts import workflow_lib from this checkout in any environment (a conda env of --sdm conda
# has it not installed).
export PYTHONPATH="$(cd "$(dirname "$0")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"
if "$@" >"$log" 2>&1; then
    grep -h ' WARNING ' "$log" >&2 || true
else
    status=$?
    tail -n 1 "$log" >&2
    exit "$status"
fi
