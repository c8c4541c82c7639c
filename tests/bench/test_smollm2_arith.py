"""bench/smollm2_arith.py: the statistics of the multi-seed comparison, on hand-computed numbers."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "bench" / "smollm2_arith.py"
_spec = importlib.util.spec_from_file_location("smollm2_arith_bench", _PATH)
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench  # dataclasses look their module up
_spec.loader.exec_module(bench)


def test_mean_se_hand_computed() -> None:
    m = bench.mean_se([0.1, 0.2, 0.3])  # sd 0.1, se 0.1 / sqrt(3)
    assert m.mean == pytest.approx(0.2) and m.se == pytest.approx(0.1 / math.sqrt(3)) and m.n == 3
    one = bench.mean_se([0.5])
    assert one.mean == 0.5 and math.isnan(one.se)
    assert bench.mean_se([]).n == 0
    assert str(bench.Rate(10, 50)) == "0.200 +- 0.057 (10/50)"


def test_summarise_gains_per_level_over_seeds() -> None:
    run = lambda b1, a1, b8, a8: {"heldout_before": {"L1": b1, "L8": b8}, "heldout_after": {"L1": a1, "L8": a8},  # noqa: E731
                                  "heldout_sampled_before": {}, "heldout_sampled_after": {}}
    out = bench.summarise({"cotrain": [run(0.2, 0.3, 0.2, 0.2), run(0.2, 0.5, 0.1, 0.3)]})
    greedy = out["cotrain"]["greedy"]
    assert greedy["levels"]["L1"]["gain"] == str(bench.MeanSE(0.2, 0.1, 2))  # gains 0.1, 0.3: mean 0.2, se 0.1
    assert greedy["levels"]["L8"]["before"] == str(bench.mean_se([0.2, 0.1]))
    assert greedy["mean_gain"] == str(bench.mean_se([0.05, 0.25]))  # per seed: mean of (0.1, 0) and (0.3, 0.2)
    assert out["cotrain"]["sampled"]["levels"] == {}


def test_summarise_learn_and_retain_over_seeds() -> None:
    run = lambda learn, retain: {"heldout_before": {"L1": 0.2}, "heldout_after": {"L1": 0.2 + learn + retain},  # noqa: E731
                                 "heldout_sampled_before": {}, "heldout_sampled_after": {},
                                 "learn": learn, "retain": retain}
    out = bench.summarise({"cotrain": [run(0.3, -0.1), run(0.1, -0.1)]})["cotrain"]
    assert out["learn"] == str(bench.MeanSE(0.2, 0.1, 2)) and out["retain"] == str(bench.MeanSE(-0.1, 0.0, 2))
    assert "learn" not in bench.summarise({"frozen": [{k: v for k, v in run(0.1, 0.0).items() if k != "learn"}]})["frozen"]
