"""The arith world's warm-start data: training pairs, targeted cells, and the scoring of generated texts."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from synco.core.records import CARD_FIELDS
from synco.domains.arith import ARITH_FACTORS, ArithDomain, evaluate
from synco.domains.arith_warm_start import (
    TargetMix,
    boxed_int,
    card_stats,
    cell_catalog,
    cell_of_problem,
    control_stats,
    control_targets,
    problem_in_cell,
    reasoner_pair,
    synthesizer_example,
    synthesizer_pair,
)
from synco.evosyn.space import factor_values, parse_cell_key

DOMAIN = ArithDomain()


def test_training_pairs_are_correct() -> None:
    rng = random.Random(0)
    weights = [1.0] + [0.0] * 10
    for _ in range(20):
        prompt, completion = reasoner_pair(DOMAIN, rng, weights)
        problem = prompt.removeprefix("Q:").removesuffix("\nA:")
        assert DOMAIN.level_of(problem) == "L1"
        assert completion == "\\boxed{" + str(evaluate(problem)) + "}"
    for _ in range(20):
        prompt, completion = synthesizer_pair(DOMAIN, rng)
        assert prompt.endswith("\nCARD:") and len(prompt) <= 110
        obj = json.loads(completion)
        assert str(evaluate(obj["problem"])) == obj["final_answer"]
        assert DOMAIN.level_of(obj["problem"]) == obj["difficulty_estimate"]
        assert not DOMAIN.is_heldout(obj["problem"])


def _target_of(prompt: str) -> str | None:
    """The ``DO:`` line of a Synthesizer prompt, or None."""
    lines = prompt.split("\n")
    return lines[-2].removeprefix("DO:") if len(lines) >= 3 and lines[-2].startswith("DO:") else None


def test_synthesizer_pairs_follow_their_target_cell() -> None:
    """Every card is a problem in the prompt's DO: cell; targets are mostly there, name the level and 0..2 more."""
    rng = random.Random(5)
    pairs = [synthesizer_pair(DOMAIN, rng) for _ in range(600)]
    extra_counts: Counter[int] = Counter()
    factors_seen: set[str] = set()
    for prompt, completion in pairs:
        assert prompt.endswith("\nCARD:") and len(prompt) <= 110, prompt
        problem = json.loads(completion)["problem"]
        key = _target_of(prompt)
        if key is None:
            continue
        cell = parse_cell_key(key)
        names = [n for n, _ in cell]
        assert names[0] == "level" and len(set(names)) == len(names)
        assert names == sorted(names, key=[d.name for d in ARITH_FACTORS].index)  # the world's factor order
        realised = factor_values(problem, ARITH_FACTORS)
        assert all(realised[n] == v for n, v in cell), (prompt, problem)
        extra_counts[len(cell) - 1] += 1
        factors_seen |= set(names)
    n_target = sum(extra_counts.values())
    assert 0.78 <= n_target / len(pairs) <= 0.92  # p_target = 0.85
    assert extra_counts[0] and extra_counts[1] and extra_counts[2]
    assert extra_counts[2] < extra_counts[1]  # two extra factors are the rare case
    assert factors_seen == {d.name for d in ARITH_FACTORS}


def test_uniform_cells_reach_rare_cells() -> None:
    """With every cell drawn uniformly, a cell that is rare under the natural distribution is trained often."""
    rng = random.Random(2)
    catalog = cell_catalog()
    mix = TargetMix(p_target=1.0, p_one=1.0, p_two=0.0, p_uniform=1.0)
    rare = (("level", "L1"), ("carries", "3+"))  # 999+1: under 1 % of L1 problems
    assert catalog.share[rare] < 0.02 and rare in catalog.cells[("level", "carries")]
    hits = 0
    for _ in range(400):
        cell, problem = synthesizer_example(DOMAIN, rng, catalog, mix)
        assert cell is not None and cell_of_problem(problem, [n for n, _ in cell]) == cell
        hits += cell == rare
    assert hits >= 2  # ~400 / 5 factors / 39 cells = 2 expected; natural sampling gives ~400 / 5 / 11 * 0.007 = 0.05


def test_cell_catalog_lists_feasible_cells_only() -> None:
    catalog = cell_catalog()
    assert catalog.candidates == ("carries", "answer_digits", "zeros", "lead", "ones")
    assert [c[0][1] for c in catalog.cells[("level",)]] == DOMAIN.levels
    assert all(catalog.share[c] == 1.0 for c in catalog.cells[("level",)])
    carries = catalog.cells[("level", "carries")]
    assert (("level", "L2"), ("carries", "3+")) not in carries  # 3d-1d borrows at most twice
    assert (("level", "L1"), ("answer_digits", "6")) not in catalog.cells[("level", "answer_digits")]
    assert len(catalog.cells[("level", "carries", "lead")]) > len(carries)
    for level in DOMAIN.levels:  # P(bucket | level) sums to at most 1 over the listed buckets
        assert sum(catalog.share[c] for c in carries if c[0][1] == level) <= 1.0 + 1e-9


def test_problem_in_cell_gives_up_on_an_infeasible_cell() -> None:
    rng = random.Random(0)
    assert problem_in_cell(DOMAIN, rng, (("level", "L2"), ("carries", "3+")), max_tries=50) is None
    problem = problem_in_cell(DOMAIN, rng, (("level", "L8"), ("carries", "0")), max_tries=2000)
    assert problem is not None and DOMAIN.factors(problem)["carries"] == "0"


def test_boxed_int() -> None:
    assert boxed_int("\\boxed{2082}") == "2082"
    assert boxed_int("x \\boxed{1} then \\boxed{-14}") == "-14"
    assert boxed_int("\\boxed{12a}") is None
    assert boxed_int("\\boxed{") is None
    assert boxed_int("2082") is None
    assert boxed_int("\\boxed{²}") is None and boxed_int("\\boxed{-}") is None


def test_card_stats_counts_hand_made_outputs() -> None:
    good = DOMAIN.format_card("347*6", "L8", "2082")
    held = DOMAIN.heldout(1, seed=0)[0]
    held_card = DOMAIN.format_card(held.problem, held.group, held.answer)
    off_family = DOMAIN.format_card("1+2", "L1", "3")
    missing = json.dumps({k: "x" for k in CARD_FIELDS[:-1]})
    stats = card_stats(DOMAIN, [good, good, held_card, off_family, missing, "{not json", "[]", ""])
    assert stats.n == 8
    assert stats.wellformed_rate == 4 / 8
    assert stats.valid_rate == 2 / 8  # the two copies of 347*6
    assert stats.distinct_rate == 3 / 8
    assert stats.level_counts["L8"] == 2 and sum(stats.level_counts.values()) == 2


def test_control_targets_are_the_designers_feasible_cells() -> None:
    targets = control_targets(DOMAIN)
    assert list(targets) == [d.name for d in ARITH_FACTORS]
    assert targets["level"] == [(("level", lv),) for lv in DOMAIN.levels]
    assert 35 <= len(targets["carries"]) <= 44 and {c[0][1] for c in targets["carries"]} == set(DOMAIN.levels)
    for name in ("answer_digits", "zeros", "lead", "ones"):
        assert targets[name] and all(len(c) == 2 and c[1][0] == name for c in targets[name])


def test_control_stats_scores_hand_made_outputs() -> None:
    catalog = cell_catalog()
    l8_0 = (("level", "L8"), ("carries", "0"))
    held = DOMAIN.heldout(1, seed=0)[0]
    texts = [
        DOMAIN.format_card("111*3", "L8", "333"),  # in the cell
        DOMAIN.format_card("347*6", "L8", "2082"),  # right level, carries 3+
        DOMAIN.format_card("36+47", "L3", "83"),  # wrong level
        DOMAIN.format_card(held.problem, held.group, held.answer),  # held out: not valid
        "{broken",
    ]
    stats = control_stats(DOMAIN, [l8_0] * len(texts), texts, catalog)
    assert (stats.n_targets, stats.n) == (1, 5)
    assert stats.wellformed_rate == 4 / 5 and stats.valid_rate == 3 / 5 and stats.distinct_rate == 4 / 5
    assert stats.hit_rate == pytest.approx(1 / 3) and stats.level_hit_rate == pytest.approx(2 / 3)
    assert stats.chance_given_level == catalog.share[l8_0] and stats.chance == pytest.approx(catalog.share[l8_0] / 11)
    with pytest.raises(ValueError, match="differ in length"):
        control_stats(DOMAIN, [l8_0], texts, catalog)
