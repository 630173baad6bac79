"""Property tests: malformed run tables load cleanly (every row accounted for) or fail with a typed,
one-line error naming the file; never with another exception. The generator is shared with
``benchmarks/fuzz_loaders.py`` (which runs it over 10,000+ inputs)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.fuzz import CATEGORIES, ENCODINGS, LAYOUTS, make_case, run_case

FUZZ = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


@FUZZ
@given(rnd=st.randoms(use_true_random=False), category=st.sampled_from(CATEGORIES),
       encoding=st.sampled_from(ENCODINGS))
def test_malformed_tables_never_crash_the_loader(workdir, rnd, category, encoding):
    case = make_case(rnd, category, encoding)
    outcome = run_case(case, workdir)
    assert outcome.status in ("clean", "typed_error"), (
        f"{case.category}/{case.encoding}/{case.layout} ({case.note}; format={case.format}, "
        f"where={case.where}): {outcome.detail}")


def test_generator_covers_every_category_with_expected_outcomes(workdir):
    """Seeded sweep: each mutation that must fail does fail (typed), unmutated tables mostly load."""
    rnd = random.Random(20260101)
    seen: dict[tuple[str, str], int] = {}
    layouts = set()
    for i in range(len(CATEGORIES) * len(ENCODINGS) * 4):
        category = CATEGORIES[i % len(CATEGORIES)]
        encoding = ENCODINGS[(i // len(CATEGORIES)) % len(ENCODINGS)]
        case = make_case(rnd, category, encoding)
        layouts.add(case.layout)
        status = run_case(case, workdir).status
        assert status != "unhandled"
        seen[category, status] = seen.get((category, status), 0) + 1
    for always_bad in ("empty_file", "nonpositive_size", "non_utf8"):
        assert seen.get((always_bad, "clean"), 0) <= 1, always_bad  # parquet may mend a header
        assert seen.get((always_bad, "typed_error"), 0) >= 10, always_bad
    assert seen.get(("unmutated", "clean"), 0) >= 9
    assert seen.get(("duplicated_run", "typed_error"), 0) >= 9
    assert layouts >= {"canonical"} and len(layouts & set(LAYOUTS)) >= 4
