#!/bin/sh
# Copy the finished runs of a running (or finished) sweep into this folder, in data/calibration/'s layout
# (runs.jsonl, runs/<run_id>/, manifest.json, sweep.toml), and rebuild summary.csv.
#   PYTHON=.venv/bin/python TRAINER=<trainer checkout> data/module_lr/sync.sh SWEEP_OUT_DIR
set -e
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: sync.sh SWEEP_OUT_DIR}
# exit status 1: exported, the sweep not finished yet; 2: an error
rc=0
PYTHONPATH=${TRAINER:?set TRAINER to the trainer checkout the sweep runs from} \
    nice -n 19 "${PYTHON:-python}" -m scalinfer.cli sweep --merge "$out" --export "$here" || rc=$?
[ "$rc" -le 1 ] || exit "$rc"
"${PYTHON:-python}" "$here/summarize.py"
