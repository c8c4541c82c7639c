"""bench/tools_cotrain.py and bench/tools_diagnosis.py: extra KEY=VALUE overrides reach every run and the scoring
around it (the database variants and a new warm start must be measurable without editing the scripts)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from synco.config import load_config
from synco.run.build import build_domain

_BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str):  # noqa: ANN202 - a module
    if str(_BENCH) not in sys.path:
        sys.path.insert(0, str(_BENCH))  # the benches import their sibling cotrain_modes
    spec = importlib.util.spec_from_file_location(f"{name}_bench", _BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


EXTRA = ["tools.db_variants=16", "reasoner.model_path=builtin:tools/synthesizer"]  # any model path the config accepts


def test_cotrain_bench_overrides_reach_every_arm_and_seed(tmp_path: Path) -> None:
    bench = _load("tools_cotrain")
    jobs = bench.arm_jobs(bench.ARMS, list(bench.ARMS), [1, 2], 5, tmp_path, 2, EXTRA)
    assert len(jobs) == len(bench.ARMS) * 2
    for arm, seed, overrides in jobs:
        cfg = load_config("tools", overrides=overrides)  # what _run and its held-out scoring (_per_item) load
        assert cfg.tools.db_variants == 16 and cfg.reasoner.model_path == "builtin:tools/synthesizer", arm
        assert cfg.seed == seed and cfg.steps == 5 and build_domain(cfg).settings.db_variants == 16
    frozen = next(o for arm, _, o in jobs if arm == "frozen")
    assert load_config("tools", overrides=frozen).mode == "frozen"  # the arm's own settings are kept


def test_diagnosis_overrides_choose_the_domain_and_the_reasoner() -> None:
    bench = _load("tools_diagnosis")
    cfg, domain, limits, greedy = bench.diagnosis_setup(EXTRA)
    assert domain.settings.db_variants == 16 and cfg.reasoner.model_path == "builtin:tools/synthesizer"
    assert (limits.max_turns, limits.max_tokens) == (8, 400) and greedy.greedy and greedy.max_new_tokens == 24
    _, plain, _, _ = bench.diagnosis_setup([])
    assert plain.settings.db_variants == 0  # the preset: the fixed database
