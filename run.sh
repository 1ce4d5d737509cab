#!/usr/bin/env bash
# Entry points that work on a fresh machine. Both set up .venv with the pinned dependencies first.
#   bash run.sh demo [snakemake args]   the whole workflow on bundled genomes and tiny demo models
#   bash run.sh test [pytest args]      the test suite (all of it; the fast lane, a minute or two:
#                                       bash run.sh test -m "not slow")
#   bash run.sh setup                   only the set-up (on a GPU node, before a run)
# TORCH_INDEX_URL: an index of torch builds, passed to pip (--extra-index-url): its build of the
# pinned torch is taken, e.g. https://download.pytorch.org/whl/cpu (no CUDA libraries) or
# .../whl/cu130 (README.md: GPU nodes). Without it pip takes PyPI's build: CUDA on Linux x86_64.
set -euo pipefail
cd "$(dirname "$0")"

setup() {
    # Reinstall only when requirements.txt or pyproject.toml (its packages) changed since the last set-up.
    if [ ! -x .venv/bin/python ] || ! cat requirements.txt pyproject.toml | cmp -s - .venv/installed-requirements.txt; then
        python3 -m venv .venv
        .venv/bin/pip install --disable-pip-version-check -q ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} \
            -r requirements.txt
        .venv/bin/pip install --disable-pip-version-check -q --no-deps -e .
        cat requirements.txt pyproject.toml > .venv/installed-requirements.txt
    fi
    export PATH="$PWD/.venv/bin:$PATH"
}

case "${1:-}" in
    setup)
        setup
        python -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "GPU:", torch.cuda.is_available())'
        ;;
    demo)
        setup
        shift
        start=$(date +%s)
        snakemake --profile profiles/local --configfile config/demo.yaml "$@"
        snakemake --configfile config/demo.yaml --report results/report.html
        echo
        echo "Demo finished in $(($(date +%s) - start)) s (tiny demo models: the calls carry no biological meaning)."
        echo "Report (open in a browser): results/report.html"
        echo "Per sample: results/<sample>/frames.tsv, chunks.tsv, sequences.tsv, viral.fasta, regions.tsv, regions.fasta, run_summary.json, prediction_results*.txt|csv"
        for table in results/*/sequences.tsv; do
            calls=$(tail -n +2 "$table" | cut -f9 | sort | uniq -c | awk '{printf "%s %s, ", $1, $2}')
            echo "  $table: ${calls%, }"
        done
        echo "Trained classifier: results/train/classifier.pt; validation metrics: results/train/metrics.json"
        ;;
    test)
        setup
        shift
        # tests/test_report.py opens the report in headless Chromium (Debian's package; CI runs as root)
        if ! command -v chromium >/dev/null; then
            if [ "$(id -u)" = 0 ]; then
                apt-get update -qq && apt-get install -y -qq chromium
            else
                echo "run.sh: tests/test_report.py needs Chromium: sudo apt-get install chromium" >&2
            fi
        fi
        # a worker a core, at most 4 (each runs whole workflows); a file's tests on one worker (those
        # using one whole run all on one: tests/conftest.py), so that a fixture is made once, in
        # conftest's order (longest first); -n 0 runs them in this process
        python -m pytest -n auto --maxprocesses 4 --dist loadfile --no-loadscope-reorder "$@"
        ;;
    *)
        echo "usage: bash run.sh demo|test|setup [args]" >&2
        exit 2
        ;;
esac
