"""What every world's warm-start data shares: the report-like prompt prefix and weighted factor draws."""

from __future__ import annotations

import random
from collections import Counter

from synco.domains.arith import ArithDomain
from synco.domains.warm_start import draw_factors, random_report

DOMAIN = ArithDomain()


def test_random_report_looks_like_a_compact_report() -> None:
    rng = random.Random(1)
    reports = [random_report(rng, DOMAIN.levels) for _ in range(200)]
    assert "" in reports and "no data" in reports
    for r in reports:
        assert len(r) <= 64 and "\n" not in r
        if r not in ("", "no data"):
            labels = [part.split(":")[0] for part in r.split("|")]
            assert set(labels) <= {"weak", "easy", "hard", "ok", "valid"} and "ok" in labels


def test_draw_factors_draws_distinct_candidates_by_weight() -> None:
    rng = random.Random(0)
    draws = [draw_factors(rng, ["a", "b", "c"], {"a": 8.0}, 2) for _ in range(400)]
    assert all(len(set(d)) == 2 and set(d) <= {"a", "b", "c"} for d in draws)
    first = Counter(d[0] for d in draws)
    assert first["a"] > 250  # P(a first) = 8 / 10
    assert draw_factors(rng, ["a", "b"], {}, 0) == [] and sorted(draw_factors(rng, ["a", "b"], {}, 2)) == ["a", "b"]
