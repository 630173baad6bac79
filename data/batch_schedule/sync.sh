#!/bin/sh
# Copy the finished runs of the running (or finished) batch-schedule sweep into this folder, in data/calibration/'s
# layout (runs.jsonl, runs/<run_id>/, manifest.json, sweep.toml).
#   PYTHON=<absolute path of the venv python> TRAINER=<trainer checkout> data/batch_schedule/sync.sh SWEEP_OUT_DIR
set -e
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: sync.sh SWEEP_OUT_DIR}
out=$(cd "$out" && pwd)
trainer=${TRAINER:?set TRAINER to the trainer checkout the sweep runs from}
# exit status 1: exported, the sweep not finished yet; 2: an error. Run from the trainer checkout: with
# `python -m`, the current folder comes before PYTHONPATH on sys.path.
rc=0
(cd "$trainer" && PYTHONPATH=$trainer nice -n 19 "${PYTHON:-python}" -m scalinfer.cli sweep --merge "$out" \
    --export "$here") || rc=$?
[ "$rc" -le 1 ] || exit "$rc"
