"""The tools world's warm-start data: gold episodes as the environment really answers them, targeted cards, and
gold episodes on database variants."""

from __future__ import annotations

import json
import random

from synco.core.records import TaskCard
from synco.domains.tools.domain import ToolsDomain
from synco.domains.tools.syntax import parse_turn
from synco.domains.tools.warm_start import gold_segments, reasoner_row, synthesizer_pair, weighted_family


def test_gold_segments_replay_to_a_winning_episode() -> None:
    domain = ToolsDomain()
    rng = random.Random(3)
    for family in domain.families:
        task = domain.sample_task(rng, family)
        segments = gold_segments(domain, task)
        assert segments[0] == (domain.reasoner_prompt(task.instruction), False)
        card = domain.format_card(task.instruction, task.actions, task.outputs, family)
        tc = TaskCard(**json.loads(card))
        env = domain.environment(tc, domain.oracle(tc))
        for text, target in segments[1:]:
            if target:  # an agent turn: the environment answers with the next (non-target) segment
                step = env.step(text)
                assert step.error is None, (family, text)
            else:
                assert text == step.observation
        assert env.grade().correct, family


def test_synthesizer_targets_name_the_cards_own_cell() -> None:
    domain = ToolsDomain()
    rng = random.Random(0)
    order = [d.name for d in domain.factor_defs()]
    named: dict[str, int] = {}
    targeted = 0
    for _ in range(300):
        prompt, card = synthesizer_pair(domain, rng)
        c = json.loads(card)
        values = domain.card_factors(TaskCard(**c))
        if "\nDO:" in prompt:
            targeted += 1
            cell = [kv.split("=") for kv in prompt.split("\nDO:")[1].split("\n")[0].split(",")]
            assert cell[0][0] == "pattern"  # the built-in factor always, candidates after it in the domain's order
            assert [n for n, _ in cell] == sorted((n for n, _ in cell), key=order.index)
            for name, value in cell:
                assert values[name] == value  # computed from the gold actions, never the card's claims
                named[name] = named.get(name, 0) + 1
        assert parse_turn(c["solution"].split(";")[0]).call.name  # the card's actions parse as agent turns
    assert 200 < targeted < 280  # P_TARGET = 0.8 of 300
    assert named["pattern"] == targeted and named["family"] > max(named[n] for n in named if n not in ("pattern", "family"))
    assert set(named) == set(order)  # every candidate gets targets, so whichever the Reflector promotes is followed


# ----------------------------------------------------------------- database variants (--db-variants)


def test_a_gold_episode_on_a_variant_shows_the_variants_values() -> None:
    from synco.domains.tools.db import build_db
    from synco.domains.tools.tasks import task_of_instruction

    domain = ToolsDomain()
    db = build_db(1)  # the lamp: 24, 9 in stock (the fixed world: 26, 6)
    _, task = task_of_instruction(db, "what does the lamp cost?")
    assert gold_segments(domain, task, db) == [("T:what does the lamp cost?\n", False), ("find_product(lamp)", True),
                                               ("\n=p1,24,9\n", False), ("done(24)", True)]
    assert gold_segments(domain, task_of_instruction(domain.db, "what does the lamp cost?")[1])[2:] == [
        ("\n=p1,26,6\n", False), ("done(26)", True)]


def test_reasoner_rows_on_variants_are_gold_episodes_of_some_variant() -> None:
    """Every row is the gold episode of its instruction on one of variants 1..N (or on the fixed world when the
    drawn variant cannot pose it); most are on a variant, and many differ from the fixed world's episode."""
    from synco.domains.tools.db import build_db
    from synco.domains.tools.tasks import task_of_instruction

    domain = ToolsDomain()
    dbs = [build_db(v) for v in range(9)]
    rng = random.Random(7)
    on_variant = unlike_world = 0
    for _ in range(60):
        row = reasoner_row(domain, rng, 8)
        instruction = row[0][0][len("T:"):-1]
        matches = [v for v, db in enumerate(dbs)
                   if (solved := task_of_instruction(db, instruction)) is not None
                   and gold_segments(domain, solved[1], db) == row]
        assert matches, instruction
        on_variant += matches != [0]
        unlike_world += 0 not in matches
    assert on_variant > 45 and unlike_world > 20

    old, new = random.Random(7), random.Random(7)  # off: the shipped recipe's rows and random stream, unchanged
    for _ in range(5):
        assert reasoner_row(domain, new) == gold_segments(domain, domain.sample_task(old, weighted_family(old)))
