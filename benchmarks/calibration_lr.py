"""Replaced by ``benchmarks/sbc.py`` (issue #21): this name runs its well-specified row.

The old script simulated from the fitted model with most parameters fixed at Step Law's medians, targeted only
2x the largest size and produced no censored runs. ``sbc.py`` draws every parameter from the prior the fit uses,
simulates a design with censored runs, predicts at 2x, 10x and 100x and reports SBC ranks beside coverage.

    nice -n 10 .venv/bin/python benchmarks/calibration_lr.py [sbc.py's flags, e.g. --datasets 25]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sbc import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["--variants", "well_specified", *sys.argv[1:]]))
