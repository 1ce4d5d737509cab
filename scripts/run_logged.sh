#!/usr/bin/env bash
# run_logged.sh LOG COMMAND [ARGS...]: run a job's command with all its output in LOG. On failure
# the console (stderr) gets the job's one-line error; on success, its warnings. Neither then hides
# in a log file.
log=$1
shift
# The scripts import workflow_lib from this checkout in any environment (a conda env of --sdm conda
# has it not installed).
export PYTHONPATH="$(cd "$(dirname "$0")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"
# The job also writes its error line to descriptor 3 (workflow_lib.cli.errors.run_cli), kept here: the
# log may be on a disk too full to hold it.
# SLURM and Snakemake send SIGTERM to the whole process group: the job gets it too and leaves through
# its own exits (an embed job that has embedded every frame finishes first); its status is the one
# to report, so this shell waits for it instead of dying with 143.
trap ':' TERM

# OOM kills counted in this job's memory cgroup (cgroup v2, else v1), or nothing where none is readable.
oom_kills() {
    local v2 v1
    v2=$(sed -n 's/^0:://p' /proc/self/cgroup)
    v1=$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup)
    for events in "/sys/fs/cgroup$v2/memory.events" "/sys/fs/cgroup/memory$v1/memory.oom_control"; do
        if [ -n "$v2$v1" ] && [ -r "$events" ]; then
            awk '$1 == "oom_kill" { print $2 }' "$events"
            return
        fi
    done
}

# A SIGKILL leaves the job no time to say why: the kernel's or SLURM's OOM killer most often. Under
# SLURM the job's memory is its rule's mem_mb (SLURM_MEM_PER_NODE, in MB).
killed() {
    local rule=${log##*logs/} more  # every rule logs to logs/RULE/... or logs/RULE.log
    rule=${rule%%/*}
    rule=${rule%.log}
    if [ -n "${SLURM_MEM_PER_NODE:-}" ]; then
        more="it asked for mem_mb=$SLURM_MEM_PER_NODE: raise it in the profile (set-resources: $rule: mem_mb: ...)"
    else
        more="give it more memory (fewer jobs at once, or smaller settings)"
    fi
    if [ -n "$1" ] && [ -n "$2" ] && [ "$2" -gt "$1" ]; then
        echo "error: rule $rule was killed for memory by the kernel's OOM killer; $more and run again"
    else
        echo "error: rule $rule was killed (SIGKILL): out of memory most often ($more), else a time limit or by hand"
    fi
}

before=$(oom_kills)
if reason=$(WORKFLOW_REASON_FD=3 exec "$@" 3>&1 >"$log" 2>&1); then
    grep -h ' WARNING ' "$log" >&2 || true
else
    status=$?
    if [ "$status" -eq 137 ] && [ -z "$reason" ]; then
        reason=$(killed "$before" "$(oom_kills)")
        printf '%s\n' "$reason" >>"$log" 2>/dev/null  # the log's last line: what a SLURM run prints
    fi
    if [ -n "$reason" ]; then
        printf '%s\n' "$reason" >&2
    else
        tail -n 1 "$log" >&2
    fi
    exit "$status"
fi
