"""Calibration of the batch-floor posterior: coverage of B_min and B_opt on simulated loss curves.

Each data set is drawn from the noise-floor model (docs/laws.md section 5) with parameters drawn at random
around `BatchFloor.true_params` (every exponent and coefficient perturbed, each model size off its power
laws by a random deviation), on `BatchFloor.default_design` (3 model sizes x 4 batch sizes of loss curves),
then fit with NUTS. At the middle model size and the target loss that the true token-efficient path reaches
after half that size's token budget, we record whether the true B_min and B_opt fall inside the posterior's
equal-tailed 50% and 90% intervals. A calibrated posterior covers about 50% and 90% of the time.

Usage::

    python benchmarks/calibration_batch.py [--datasets 40] [--chains 2] [--warmup 400] [--samples 400]

Prints one line per data set, a summary, and as its LAST line one JSON object with ``coverage_50`` and
``coverage_90`` (each ``{"batch_min": ..., "batch_opt": ...}``), their binomial standard errors, the
number of data sets and the time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # test tooling: tests/support/

from support.batch_calibration import one, summarize  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", type=int, default=40)
    ap.add_argument("--first-seed", type=int, default=1000)
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=400)
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--records", type=int, default=10, help="records per loss curve")
    args = ap.parse_args(argv)
    import scalinfer.runtime

    scalinfer.runtime.configure(args.chains)  # as the CLI: a device per chain, float64, the persistent cache
    t0 = time.perf_counter()
    rows = []
    for k in range(args.datasets):
        r = one(args.first_seed + k, args.chains, args.warmup, args.samples, args.records)
        rows.append(r)
        print(f"#{r['seed']}: L*={r['target_loss']:.4f}  B_min true {r['batch_min']:.4g} median "
              f"{r['batch_min_median']:.4g} in50 {r['batch_min_in50']} in90 {r['batch_min_in90']} | B_opt true "
              f"{r['batch_opt']:.4g} median {r['batch_opt_median']:.4g} in50 {r['batch_opt_in50']} in90 "
              f"{r['batch_opt_in90']} | {r['divergences']} div, {r['fit_s']:.0f} s", flush=True)
    out = summarize(rows)
    out["seconds"] = time.perf_counter() - t0
    out["settings"] = {"chains": args.chains, "warmup": args.warmup, "samples": args.samples,
                       "records": args.records, "first_seed": args.first_seed}
    print(f"coverage over {out['n_datasets']} data sets: 50% intervals B_min {out['coverage_50']['batch_min']:.2f}, "
          f"B_opt {out['coverage_50']['batch_opt']:.2f}; 90% intervals B_min {out['coverage_90']['batch_min']:.2f}, "
          f"B_opt {out['coverage_90']['batch_opt']:.2f}")
    print(json.dumps(out, allow_nan=False))
    return out


if __name__ == "__main__":
    main()
