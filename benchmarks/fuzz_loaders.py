"""Fuzz the run-table loaders: 10,000+ malformed tables, every outcome classified.

Each input is drawn by `make_case` of tests/support/fuzz.py (the generator the property tests use):
a small table in the canonical layout or a dataset layout, one mutation (missing or renamed
columns, strings in numeric columns, NaN, inf, non-positive sizes, duplicated runs, mixed units,
empty files, huge values, non-UTF-8 bytes, or none: "unmutated", which a random
format= or where= can still make fail), written as CSV, JSONL or Parquet. A load must
end in a clean `RunTable` whose used and excluded rows account for every input row, or in a
`RunTableError` with a one-line message naming the file. Anything else is counted as unhandled;
an error on an unmutated table read with its own format and no query as "rejected valid".

Prints a table per category and encoding, then, as the last line, one JSON object
(``inputs``, ``clean``, ``typed_errors``, ``unhandled``, ``rejected_valid``, ``seconds``, ``seed``).

Usage: ``python benchmarks/fuzz_loaders.py [--inputs 10200] [--seed 0]`` (a few minutes on one core).
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # test tooling: tests/support/

from support.fuzz import CATEGORIES, ENCODINGS, make_case, run_case  # noqa: E402


def run_fuzz(inputs: int, seed: int, workdir: Path) -> tuple[dict, list[str]]:
    """Run ``inputs`` cases (categories and encodings in rotation, the rest drawn from ``seed``)."""
    rnd = random.Random(seed)
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    failures: list[str] = []
    for i in range(inputs):
        category = CATEGORIES[i % len(CATEGORIES)]
        encoding = ENCODINGS[(i // len(CATEGORIES)) % len(ENCODINGS)]
        case = make_case(rnd, category, encoding)
        outcome = run_case(case, workdir)
        counts[category][outcome.status] += 1
        counts[f"  {encoding}"][outcome.status] += 1
        if outcome.status in ("unhandled", "rejected_valid") and len(failures) < 20:
            failures.append(f"{outcome.status} #{i} {case.category}/{case.encoding}/{case.layout} ({case.note}; "
                            f"format={case.format}, where={case.where}): {outcome.detail}")
    return counts, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=10_200, help="number of fuzz inputs (>= 10,000)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="scalinfer-fuzz-") as tmp:
        counts, failures = run_fuzz(args.inputs, args.seed, Path(tmp))
    seconds = time.perf_counter() - start

    header = (f"{'category':<20}{'inputs':>8}{'clean':>8}{'typed':>8}{'unhandled':>11}"
              f"{'rejected valid':>16}")
    print(header)
    print("-" * len(header))
    totals = collections.Counter()
    for name in [*CATEGORIES, *(f"  {e}" for e in ENCODINGS)]:
        c = counts[name]
        n = sum(c.values())
        print(f"{name:<20}{n:>8}{c['clean']:>8}{c['typed_error']:>8}{c['unhandled']:>11}"
              f"{c['rejected_valid']:>16}")
        if not name.startswith(" "):
            totals.update(c)
    print("-" * len(header))
    inputs = sum(totals.values())
    print(f"{'total':<20}{inputs:>8}{totals['clean']:>8}{totals['typed_error']:>8}"
          f"{totals['unhandled']:>11}{totals['rejected_valid']:>16}")
    print(f"({seconds:.1f} s, {1000 * seconds / max(inputs, 1):.1f} ms per input; rows by encoding are "
          f"a breakdown of the same inputs)")
    for line in failures:
        print(line)
    print(json.dumps({"inputs": inputs, "clean": totals["clean"], "typed_errors": totals["typed_error"],
                      "unhandled": totals["unhandled"], "rejected_valid": totals["rejected_valid"],
                      "seconds": round(seconds, 1), "seed": args.seed}))
    return 1 if totals["unhandled"] or totals["rejected_valid"] else 0


if __name__ == "__main__":
    sys.exit(main())
