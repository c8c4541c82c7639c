"""The Reflector: conditional mutual information, the stratified permutation test, promotion and retirement."""

from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np
import pytest

import synco.evosyn.reflector as reflector_module
from synco.evosyn.config import ReflectorConfig
from synco.evosyn.reflector import (
    Observation,
    cmi_from_codes,
    conditional_mi,
    factor_evidence,
    observations,
    permutation_null,
    python_seed,
    reflect,
)
from synco.evosyn.space import FactorDef, FactorSpace
from synco.core.records import CARD_FIELDS, Attempt, TaskCard, TaskRecord, Verdict

K = 4
LEVEL = FactorDef("level", ("L1", "L2"), lambda p: None)
INFORMATIVE = FactorDef("informative", ("a", "b"), lambda p: None)
NOISE = FactorDef("noise", ("x", "y"), lambda p: None)
DUPLICATE = FactorDef("duplicate", ("lo", "hi"), lambda p: None)  # a function of the level
DEFS = [LEVEL, INFORMATIVE, NOISE, DUPLICATE]
# failure probability of one attempt: depends on the level AND, within each level, on ``informative``
P_FAIL = {("L1", "a"): 0.1, ("L1", "b"): 0.5, ("L2", "a"): 0.5, ("L2", "b"): 0.9}
CFG = ReflectorConfig(min_tasks=100, min_bucket_tasks=20, permutations=200, alpha=0.01, min_excess_cmi=0.002,
                      retire_alpha=0.2)


def task(i: int, factors: dict[str, str], fails: int, k: int = K) -> TaskRecord:
    fields = {name: "x" for name in CARD_FIELDS}
    fields["problem"] = f"p{i}"
    rollouts = [Attempt(text="t", correct=j >= fails) for j in range(k)]
    return TaskRecord(step=0, slot=i, raw="r", card=TaskCard(**fields, factors=factors), verdict=Verdict(valid=True),
                      rollouts=rollouts, success_rate=1 - fails / k)


def informative_window(n: int = 400, seed: int = 0) -> list[TaskRecord]:
    """``n`` tasks: level, informative and noise drawn uniformly; failures binomial(K, P_FAIL[level, informative])."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        level, z, noise = rng.choice(["L1", "L2"]), rng.choice("ab"), rng.choice("xy")
        fails = sum(rng.random() < P_FAIL[level, z] for _ in range(K))
        out.append(task(i, {"level": level, "informative": z, "noise": noise,
                            "duplicate": "lo" if level == "L1" else "hi"}, fails))
    return out


def level_space() -> FactorSpace:
    return FactorSpace.from_defs([LEVEL])


def h(q: float) -> float:
    """Binary entropy in nats."""
    return -sum(x * math.log(x) for x in (q, 1 - q) if x > 0)


# ----------------------------------------------------------------- CMI by hand


def test_cmi_on_a_tiny_table_by_hand() -> None:
    # stratum s1: z=a 1 task 1/4 failed, z=b 1 task 3/4 failed;  stratum s2: z=a 0/2 failed, z=b 2/2 failed.
    # s1: n=8, f=4 -> 8 H(1/2) = 8 ln 2 = 5.5452; minus 4 H(1/4) + 4 H(3/4) = 8 * 0.5623 = 4.4987 -> 1.0465
    # s2: n=4, f=2 -> 4 ln 2 = 2.7726; both z buckets are pure (H = 0)                               -> 2.7726
    # I(fail; z | s) = (1.0465 + 2.7726) / 12 = 0.3183 nats  (= ln 2 - (2/3) H(1/4))
    obs = [Observation({"s": "s1", "z": "a"}, 4, 1), Observation({"s": "s1", "z": "b"}, 4, 3),
           Observation({"s": "s2", "z": "a"}, 2, 0), Observation({"s": "s2", "z": "b"}, 2, 2)]
    cmi = conditional_mi(obs, lambda o: o.factors["z"], lambda o: o.factors["s"])
    assert cmi == pytest.approx(0.318257, abs=1e-6)
    assert cmi == pytest.approx(math.log(2) - 2 / 3 * h(0.25))
    # the same from integer codes; and with one stratum: z=a has 1 failure in 6 attempts, z=b 5 in 6,
    # so I(fail; z) = H(6/12) - [6 H(1/6) + 6 H(5/6)] / 12
    codes = cmi_from_codes(np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1]), np.array([4.0, 4, 2, 2]),
                           np.array([1.0, 3, 0, 2]), 2, 2)
    assert codes == pytest.approx(cmi)
    marginal = conditional_mi(obs, lambda o: o.factors["z"], lambda o: "all")
    assert marginal == pytest.approx(h(0.5) - (6 * h(1 / 6) + 6 * h(5 / 6)) / 12)


def test_cmi_is_zero_without_information_and_skips_undefined_rows() -> None:
    same = [Observation({"s": "s1", "z": "a"}, 4, 1), Observation({"s": "s1", "z": "b"}, 4, 1),
            Observation({"s": "s2", "z": "a"}, 4, 3), Observation({"s": "s2", "z": "b"}, 4, 3),
            Observation({"s": "s2"}, 4, 0)]  # no z: left out
    assert conditional_mi(same, lambda o: o.factors.get("z"), lambda o: o.factors["s"]) == pytest.approx(0.0)
    assert conditional_mi([], lambda o: "z", lambda o: "s") == 0.0


def test_a_factor_that_only_duplicates_the_cell_has_zero_cmi() -> None:
    obs = observations(informative_window())
    ev = factor_evidence(obs, "duplicate", ["level"], 50, np.random.default_rng(0))
    assert ev.cmi == pytest.approx(0.0, abs=1e-12) and ev.excess == pytest.approx(0.0, abs=1e-12)
    assert ev.p_value == 1.0  # every shuffle gives the same (zero) information
    # ... while it does carry information about failure on its own (it is the level)
    alone = factor_evidence(obs, "duplicate", [], 50, np.random.default_rng(0))
    assert alone.cmi > 0.001


def test_permutation_keeps_each_strata_multiset_of_z(monkeypatch: pytest.MonkeyPatch) -> None:
    strata = np.array([0, 1, 0, 2, 1, 0, 2, 2, 0, 1])
    z = np.array([0, 1, 1, 0, 1, 0, 1, 1, 1, 0])
    n = np.full(10, 4.0)
    fails = np.array([0, 1, 4, 2, 3, 0, 4, 1, 2, 2], dtype=float)
    seen: list[np.ndarray] = []
    real = reflector_module.cmi_from_codes

    def spy(s, zp, *rest):
        seen.append(zp.copy())
        return real(s, zp, *rest)

    monkeypatch.setattr(reflector_module, "cmi_from_codes", spy)
    null = permutation_null(strata, z, n, fails, 3, 2, 30, np.random.default_rng(1))
    assert len(null) == len(seen) == 30
    for zp in seen:
        for c in range(3):
            assert Counter(zp[strata == c].tolist()) == Counter(z[strata == c].tolist())
    assert any(not np.array_equal(zp, z) for zp in seen)  # it does shuffle
    assert len({tuple(zp) for zp in seen}) > 5


# ----------------------------------------------------------------- promotion on constructed data


def test_an_informative_factor_is_promoted_and_a_random_one_is_not() -> None:
    records = informative_window()
    space = level_space()
    r = reflect(records, space, DEFS, ["level"], CFG, step=9, seed=0)
    assert r.n_tasks == 400
    inf, noise, dup = r.candidates["informative"], r.candidates["noise"], r.candidates["duplicate"]
    # population CMI: in L1 failure is 0.3 overall, 0.1 / 0.5 by z: H(.3) - [H(.1) + H(.5)] / 2 = 0.6109 - 0.5091
    # = 0.1018 nats; L2 is its mirror image: the same. (In bits it would be 0.147: the unit is checked too.)
    assert inf.cmi == pytest.approx(h(0.3) - (h(0.1) + h(0.5)) / 2, abs=0.025)
    assert inf.p_value == pytest.approx(1 / 201)  # no shuffle comes close
    assert inf.excess > 0.07
    assert inf.failure_by_bucket["a"] == pytest.approx(0.3, abs=0.04)
    assert inf.failure_by_bucket["b"] == pytest.approx(0.7, abs=0.04)
    assert sum(inf.n_by_bucket.values()) == 400 and inf.n_attempts == 1600
    assert noise.p_value > 0.2 and noise.cmi < 0.005
    assert dup.cmi == pytest.approx(0.0, abs=1e-12)
    [change] = r.changes
    assert (change.action, change.factor, change.step, change.version) == ("promote", "informative", 9, 1)
    assert change.evidence == inf and change.evidence.p_value <= CFG.alpha
    assert space.active_names() == ["level", "informative"]
    assert space.get("informative").status == "experimental" and space.get("noise") is None


def test_too_little_evidence_changes_nothing() -> None:
    records = informative_window(n=80)
    space = level_space()
    r = reflect(records, space, DEFS, ["level"], CFG, step=9, seed=0)  # 80 < min_tasks 100
    assert r.changes == [] and r.candidates == {} and space.version == 0
    strict = CFG.model_copy(update={"min_tasks": 50, "min_bucket_tasks": 60})  # ~40 tasks per bucket < 60
    r = reflect(records, space, DEFS, ["level"], strict, step=9, seed=0)
    assert r.changes == [] and "informative" in r.candidates and space.version == 0


def test_reflection_is_repeatable_in_its_seed() -> None:
    records = informative_window(n=200)
    a = reflect(records, level_space(), DEFS, ["level"], CFG, step=3, seed=7)
    b = reflect(records, level_space(), DEFS, ["level"], CFG, step=3, seed=7)
    assert a.candidates == b.candidates
    assert python_seed(0, 9) == python_seed(0, 9) != python_seed(0, 19)


def test_max_cells_blocks_a_promotion() -> None:
    records = informative_window()

    def n_cells(sp: FactorSpace) -> int:
        return math.prod(len(f.buckets) for f in sp.active())

    blocked = level_space()
    r = reflect(records, blocked, DEFS, ["level"], CFG.model_copy(update={"max_cells": 3}), 9, 0, n_cells=n_cells)
    assert r.changes == [] and blocked.active_names() == ["level"]
    assert r.candidates["informative"].p_value <= CFG.alpha  # the evidence was there; only the size blocked it
    allowed = level_space()
    r = reflect(records, allowed, DEFS, ["level"], CFG.model_copy(update={"max_cells": 4}), 9, 0, n_cells=n_cells)
    assert [c.factor for c in r.changes] == ["informative"]


# ----------------------------------------------------------------- confirmation and retirement


def promoted_space() -> FactorSpace:
    space = level_space()
    reflect(informative_window(), space, DEFS, ["level"], CFG, step=9, seed=0)
    assert space.get("informative").status == "experimental"
    return space


def test_a_factor_that_still_explains_failure_is_confirmed() -> None:
    space = promoted_space()
    r = reflect(informative_window(seed=1), space, DEFS, ["level"], CFG, step=19, seed=1)
    assert [(c.action, c.factor, c.version) for c in r.changes] == [("confirm", "informative", 2)]
    assert space.get("informative").status == "standard"
    assert r.candidates["informative"].p_value <= CFG.retire_alpha


def test_a_factor_that_stopped_explaining_failure_is_retired() -> None:
    space = promoted_space()
    # the Reasoner learnt the hard bucket: every task comes in a pair (z=a, z=b) with the same failures,
    # so within each level failure says nothing about z (CMI exactly 0, p = 1)
    rng = random.Random(2)
    records = []
    for i in range(200):
        level = rng.choice(["L1", "L2"])
        fails = sum(rng.random() < (0.2 if level == "L1" else 0.6) for _ in range(K))
        for z in "ab":
            records.append(task(2 * i + (z == "b"), {"level": level, "informative": z, "noise": rng.choice("xy"),
                                                      "duplicate": "lo" if level == "L1" else "hi"}, fails))
    r = reflect(records, space, DEFS, ["level"], CFG, step=19, seed=1)
    assert r.candidates["informative"].cmi == pytest.approx(0.0, abs=1e-12)
    assert [(c.action, c.factor) for c in r.changes] == [("retire", "informative")]
    assert "retire_alpha" in r.changes[0].note
    assert space.active_names() == ["level"] and space.get("informative").status == "retired"
    assert space.version == 2


def test_builtin_factors_are_never_retired() -> None:
    space = level_space()
    records = [task(i, {"level": "L1" if i % 2 else "L2", "informative": "a"}, i % 3) for i in range(200)]
    r = reflect(records, space, DEFS, ["level"], CFG, step=9, seed=0)
    assert all(c.factor != "level" for c in r.changes) and space.active_names() == ["level"]
