"""synco.domains.rgym.domain: a config card materialised by the oracle, graded by the family's scorer, held out
per family and level; ``synco verify`` one verdict per line; a short co-training run."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

import synco.cli
from synco.core.records import CARD_FIELDS, CardRejected, TaskCard
from synco.domains.rgym import RgymDomain, RgymSettings
from synco.domains.rgym.domain import derive_seed, distinct_space, extract_answer, heldout_size
from synco.domains.rgym.payload import split_seeded
from synco.domains.rgym.gym import Gym


@pytest.fixture(scope="module")
def domain(gym: Gym) -> RgymDomain:
    return RgymDomain(RgymSettings(families=["chain_sum", "spell_backward", "gcd"], heldout_levels=2), seed=5, gym=gym)


def card(problem: str) -> TaskCard:
    values = dict.fromkeys(CARD_FIELDS, "x")
    values["problem"] = problem
    return TaskCard(**values)


def test_seeds_have_separate_namespaces() -> None:
    assert derive_seed("train", 0, 1) % 2 == 0 and derive_seed("heldout", 0, 1, heldout=True) % 2 == 1
    assert derive_seed("train", 0, 1) != derive_seed("train", 0, 2) and 0 <= derive_seed("x") < 2**31


def test_extract_answer_reads_what_follows_the_prefix() -> None:
    assert extract_answer("<answer>18</answer> and more", "<answer>") == "18"
    assert extract_answer("The answer is 18.\nBecause", "The answer is ") == "18"
    assert extract_answer("<answer>", "<answer>") == "" and len(extract_answer("<answer>" + "9" * 5000, "<answer>")) == 400
    assert extract_answer("The answer is 10 + 8 = 18", "The answer is ", first_number=True) == "10"
    assert extract_answer("The answer is -2.5, since", "The answer is ", first_number=True) == "-2.5"
    assert extract_answer("The answer is unclear", "The answer is ", first_number=True) == ""
    assert extract_answer("The answer is 24,877. That", "The answer is ", first_number=True) == "24877"
    assert extract_answer("The answer is 1, since", "The answer is ", first_number=True) == "1"


def test_the_oracle_materialises_a_card(domain: RgymDomain) -> None:
    c = card('{"family":"chain_sum","config":{"max_terms":3,"min_terms":3,"max_digits":1}}')
    answer = domain.oracle(c)
    config, seed = split_seeded(c.wire()["solution"])
    assert seed is not None and seed % 2 == 0
    assert json.loads(config)["config"] == {"max_digits": 1, "max_terms": 3, "min_terms": 3}
    assert c.payload.claimed_answer() == answer and c.payload.prompt_text().startswith("State the final answer")
    assert domain.card_factors(c) == {"family": "chain_sum", "level": "1"}  # num_terms level 1, num_digits 0
    default = card('{"family":"chain_sum","config":{}}')
    domain.oracle(default)
    assert domain.card_factors(default)["level"] == "4"  # unset fields count at their defaults (6 terms: level 4)
    assert domain.export_fields(c)["rgym_seed"] == seed
    other = card('{"family":"chain_sum","config":{"max_terms":3,"min_terms":3}}')
    domain.oracle(other)
    assert split_seeded(other.wire()["solution"])[1] != seed  # the same config twice: two items


@pytest.mark.parametrize(("problem", "code"), [
    ('{"family":"chain_sum","config":{"seed":1}}', "synco_owned_field"),
    ('{"family":"products","config":{}}', "unknown_family"),  # audited, but not in this run's rgym.families
    ('{"family":"chain_sum","config":{"max_terms":99}}', "out_of_range"),
    ("12+3", "bad_config"),
])
def test_the_oracle_refuses_with_a_code(domain: RgymDomain, problem: str, code: str) -> None:
    with pytest.raises(CardRejected) as err:
        domain.oracle(card(problem))
    assert err.value.code == code


def test_max_level_bounds_the_cards_and_the_cells(gym: Gym) -> None:
    capped = RgymDomain(RgymSettings(families=["chain_sum"], max_level=1), gym=gym)
    assert capped.oracle(card('{"family":"chain_sum","config":{"max_terms":3,"min_terms":3,"max_digits":1}}'))
    with pytest.raises(CardRejected) as err:  # level 4: the default's 6 terms
        capped.oracle(card('{"family":"chain_sum","config":{}}'))
    assert err.value.code == "out_of_range" and "rgym.max_level 1" in err.value.detail
    rng = random.Random(0)
    drawn = [json.loads(t)["difficulty_estimate"] for t in capped.static_cards(rng, 30)]
    drawn += [json.loads(t)["difficulty_estimate"] for t in capped.cell_cards(rng, (("family", "chain_sum"),), 30)]
    assert set(drawn) == {"L0", "L1"}
    levels = {capped.card_factors(card(capped.sample_any(rng)))["level"] for _ in range(30)}
    assert levels == {"0", "1"}  # the Designer's feasible cells come from these


def test_the_environment_grades_with_the_family_scorer(domain: RgymDomain) -> None:
    c = card('{"family":"spell_backward","config":{"max_word_len":5}}')
    answer = domain.oracle(c)
    right, junk = domain.environment(c, answer), domain.environment(c, answer)
    right.step("<answer>" + answer + "</answer>")
    junk.step("<answer>zzzz</answer>")
    assert right.grade().reward == 1.0 and right.grade().correct and right.grade().info == {"scorer": "ok"}
    assert junk.grade().reward == 0.0 and not junk.grade().correct
    empty = domain.environment(c, answer)
    empty.step("<answer></answer>")
    assert empty.grade().info == {"scorer": "empty"}
    assert domain.environment(card("anything"), "1").grade().reward == 0.0  # not a materialised card


def test_heldout_per_family_and_level_plus_transfer(domain: RgymDomain) -> None:
    items = domain.heldout(2, seed=1)
    groups = sorted({it.group for it in items})
    assert groups == sorted(["chain_sum/L0", "chain_sum/L1", "chain_sum/default", "gcd/L0", "gcd/L1", "gcd/default",
                             "spell_backward/L0", "spell_backward/L1", "spell_backward/default"])
    assert all(sum(it.group == g for it in items) == 2 for g in groups)
    held = domain.heldout_card(items[0])
    assert split_seeded(held.wire()["solution"])[1] % 2 == 1  # a held-out seed: odd, unreachable by a card
    assert domain.reject_reason(held) == "heldout_problem"


def test_distinct_space_solves_the_expected_distinct_count() -> None:
    # N (1 - (1 - 1/N)^2) = 2 - 1/N = 1 -> N = 1; N (1 - (1 - 1/N)^3) = 3 - 3/N + 1/N^2 = 2 -> N = (3 + sqrt 5) / 2
    assert distinct_space(2, 1) == pytest.approx(1.0)
    assert distinct_space(3, 2) == pytest.approx((3 + 5 ** 0.5) / 2)
    assert distinct_space(64, 64) == float("inf")
    with pytest.raises(ValueError, match="0 < distinct <= draws"):
        distinct_space(3, 4)


def test_heldout_size_takes_a_share_of_a_small_space() -> None:
    assert heldout_size(64, 0.25, 100.4) == 25 and heldout_size(64, 0.25, 1000.0) == 64
    assert heldout_size(64, 0.25, 2.0) == 1 and heldout_size(64, None, 100.0) == 64
    assert heldout_size(64, 0.25, float("inf")) == 64


def test_a_small_cell_holds_out_a_share_and_a_colliding_seed_is_redrawn(gym: Gym) -> None:
    # products at level 0: about 100 questions
    def make(**kw: object) -> RgymDomain:
        return RgymDomain(RgymSettings(families=["products"], heldout_levels=1, transfer=False, **kw), seed=3, gym=gym)

    shared = make()
    assert 15 <= len(shared.heldout(64, seed=0)) <= 40  # 25 % of ~100 (estimated from 64 draws: 33 here), not 64
    counts = {}
    for redraws in (0, 8):
        small = make(heldout_share=None, redraws=redraws)
        assert len(small.heldout(64, seed=0)) == 64
        cards = [card('{"family":"products","config":{"min_terms":2,"max_terms":2,"min_digits":1,"max_digits":1}}')
                 for _ in range(20)]
        for c in cards:
            small.oracle(c)
        counts[redraws] = (sum(small.reject_reason(c) == "heldout_problem" for c in cards),
                           len({c.payload.prompt_text() for c in cards}))
    assert counts[0][0] >= 6 and counts[8][0] <= 1  # 64 % of the questions held out: a fresh seed finds the rest
    assert counts[8][1] >= 15  # and prefers a question not generated yet


def test_factor_space_is_family_by_level_with_attribute_candidates(domain: RgymDomain) -> None:
    defs = {d.name: d for d in domain.factor_defs()}
    assert domain.builtin_factors == ("family", "level") and "chain_sum.num_terms" in defs
    subject = domain.sample_any(random.Random(0))
    assert defs["family"].value(subject) in domain.families and defs["level"].value(subject) is not None
    cards = [json.loads(t) for t in domain.static_cards(random.Random(1), 6)]
    assert all(set(c) == set(CARD_FIELDS) for c in cards)


def test_synco_verify_prints_one_verdict_per_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def line(problem: str) -> str:
        values = dict.fromkeys(CARD_FIELDS, "x")
        values["problem"] = problem
        return json.dumps(values)

    lines = [line('{"family":"letter_counting","config":{"max_words":7}}'),  # outside the preset's default set
             line('{"family":"chain_sum","config":{"seed":7}}'), "",
             line('{"family":"chain_sum","config":{"max_terms":1000}}'),
             line('{"family":"coin_flip","config":{}}'), line('{"family":"chain_sum","config":{"digits":2}}')]
    path = tmp_path / "cards.jsonl"
    path.write_text("\n".join(lines) + "\n")
    synco.cli.main(["verify", str(path), "domain=rgym"])  # the rgym world's own problem length bounds, no preset
    out = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    assert [o["line"] for o in out] == [1, 2, 4, 5, 6]
    assert out[0]["valid"] and out[0]["factors"]["family"] == "letter_counting"
    assert [o["reasons"][0] for o in out[1:]] == ["synco_owned_field", "out_of_range", "unknown_family",
                                                  "unknown_field"]


def rgym_workers() -> set[int]:
    """This process's live children running reasoning-gym's worker script."""
    pids = set()
    for children in Path("/proc/self/task").glob("*/children"):
        pids.update(int(p) for p in children.read_text().split())
    out = set()
    for pid in pids:
        try:
            if b"rgym/_worker.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
                out.add(pid)
        except OSError:  # exited meanwhile
            pass
    return out


@pytest.mark.slow
def test_a_short_run_records_cells_and_heldout_per_family(tmp_path: Path) -> None:
    before = rgym_workers()
    synco.cli.main(["train", "domain=rgym", "mode=uniform", "steps=2", "n_cards=8", "k=2", "heldout_per_group=2",
                    "heldout_samples=0", "threads=1", "run_id=rgym", f"runs_dir={tmp_path}", "max_turns=1",
                    "max_episode_tokens=16", "verifier.max_problem_chars=600", "group_factor=family",
                    "rgym.families=[chain_sum,spell_backward]", "rgym.heldout_levels=1"])
    assert rgym_workers() <= before  # the run stopped its generator worker (a bench runs one run after another)
    run = tmp_path / "rgym"
    summary = json.loads((run / "summary.json").read_text())
    assert "chain_sum/L0" in json.dumps(summary) and "spell_backward/default" in json.dumps(summary)
    steps = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    notes = [s["episode_notes"] for s in steps if s.get("episode_notes")]  # scorer failures are counted here
    assert notes and all(set(n) <= {"scorer=ok", "scorer=empty", "scorer=error", "scorer=timeout"} for n in notes)
    from synco.analysis.run import heldout_by_family  # what `synco analyze` prints per family

    assert set(heldout_by_family(run)) == {"chain_sum", "spell_backward"} == set(summary["heldout_by_family"])
    task = json.loads((run / "valid_tasks.jsonl").read_text().splitlines()[0])
    assert task["factors"]["family"] in ("chain_sum", "spell_backward") and task["rgym_seed"] % 2 == 0


def test_cell_cards_land_in_their_cell(domain: RgymDomain) -> None:
    rng = random.Random(3)
    cell = (("family", "chain_sum"), ("level", "2"), ("chain_sum.num_terms", "1"))
    for text in domain.cell_cards(rng, cell, 5):
        problem = json.loads(text)["problem"]
        factors = {d.name: d.value(problem) for d in domain.factor_defs()}
        assert (factors["family"], factors["level"], factors["chain_sum.num_terms"]) == ("chain_sum", "2", "1")


def test_designer_mode_needs_the_designer_and_a_cell_sampler() -> None:
    from synco.config import ConfigError, load_config

    assert load_config("rgym", overrides=["mode=designer"]).mode == "designer"
    with pytest.raises(ConfigError, match="evosyn.designer=true"):
        load_config("rgym", overrides=["mode=designer", "evosyn.designer=false"])
    with pytest.raises(ConfigError, match="HasCellCards"):
        load_config("arith", overrides=["mode=designer"])


@pytest.mark.slow
def test_designer_mode_fills_the_designers_cells(tmp_path: Path) -> None:
    synco.cli.main(["train", "--preset", "rgym", "mode=designer", "steps=1", "n_cards=8", "k=1",
                    "heldout_per_group=1", "heldout_samples=0", "threads=1", "run_id=d", f"runs_dir={tmp_path}",
                    "rgym.families=[chain_sum,gcd]", "rgym.heldout_levels=1", "rgym.transfer=false",
                    "reasoner.model_path=builtin:arith/reasoner", "synthesizer.model_path=builtin:arith/synthesizer"])
    step = json.loads((tmp_path / "d" / "metrics.jsonl").read_text().splitlines()[0])
    assert step["n_cards"] == 8 and step["controllability"] == 1.0  # every card in the cell it was drawn for
