#!/bin/sh
# Copy the finished runs of a running (or finished) study sweep into its folder under data/, in
# data/calibration/'s layout (runs.jsonl, runs/<run_id>/, manifest.json, sweep.toml), and rebuild the folder's
# summary.csv where it has a summarize.py.
#   PYTHON=<absolute path of the venv python> TRAINER=<trainer checkout> data/sync.sh STUDY_DIR SWEEP_OUT_DIR
# e.g. data/sync.sh data/stability <sweep-out>/stability
set -e
study=${1:?usage: sync.sh STUDY_DIR SWEEP_OUT_DIR}
out=${2:?usage: sync.sh STUDY_DIR SWEEP_OUT_DIR}
study=$(cd "$study" && pwd)
out=$(cd "$out" && pwd)
trainer=${TRAINER:?set TRAINER to the trainer checkout the sweep runs from}
# exit status 1: exported, the sweep not finished yet; 2: an error. Run from the trainer checkout: with
# `python -m`, the current folder comes before PYTHONPATH on sys.path.
rc=0
(cd "$trainer" && PYTHONPATH=$trainer nice -n 19 "${PYTHON:-python}" -m scalinfer.cli sweep --merge "$out" \
    --export "$study") || rc=$?
[ "$rc" -le 1 ] || exit "$rc"
if [ -f "$study/summarize.py" ]; then "${PYTHON:-python}" "$study/summarize.py"; fi
