"""The tools warm start's data: gold episodes as the environment really answers them, and labels on the
agent's turns only (the split an episode's GRPO row has)."""

from __future__ import annotations

import json
import random

from synco.core.records import TaskCard
from synco.domains.tools.domain import ToolsDomain
from synco.domains.tools.syntax import parse_turn
from synco.learn.charlm import char_tokenizer
from synco.learn.pretrain_tools import encode_segments, gold_segments, synthesizer_pair


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


def test_labels_cover_agent_turns_and_their_eos_only() -> None:
    tok = char_tokenizer()
    rows = [[("T:go\n", False), ("find_user(bob)", True), ("\n=u2,24\n", False), ("done()", True)]]
    ids, mask, labels = encode_segments(tok, rows)
    text_ids = tok("T:go\nfind_user(bob)", add_special_tokens=False)["input_ids"]
    eos = tok.eos_token_id
    n_prompt = len("T:go\n")
    assert labels[0, :n_prompt].tolist() == [-100] * n_prompt
    call = len("find_user(bob)")
    assert labels[0, n_prompt:n_prompt + call].tolist() == text_ids[n_prompt:]
    assert labels[0, n_prompt + call].item() == eos
    obs_at = n_prompt + call + 1
    assert labels[0, obs_at:obs_at + len("\n=u2,24\n")].tolist() == [-100] * len("\n=u2,24\n")
    assert int(mask.sum()) == len(ids[0])
    assert labels[0, -1].item() == eos and (labels[0] != -100).sum().item() == call + 1 + len("done()") + 1


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


def test_the_warm_start_is_deterministic_in_its_seed(tmp_path) -> None:  # noqa: ANN001 - a path
    import torch
    from safetensors.torch import load_file

    from synco.learn.pretrain_tools import _Role, _train_role

    for run in ("a", "b"):
        _train_role(_Role("reasoner", 3, 3, 4, 1e-3, tmp_path / run, progress=False))
    a = load_file(str(tmp_path / "a" / "reasoner" / "model.safetensors"))
    b = load_file(str(tmp_path / "b" / "reasoner" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    _train_role(_Role("reasoner", 4, 3, 4, 1e-3, tmp_path / "c", progress=False))
    c = load_file(str(tmp_path / "c" / "reasoner" / "model.safetensors"))
    assert not all(torch.equal(a[k], c[k]) for k in a)  # another seed, other weights


def test_the_shipped_warm_start_is_the_recorded_one() -> None:
    """The shipped tools agents load, and their meta records the recipe that made them."""
    import json

    from synco.learn.pretrain_tools import ASSET_DIR, load_tools_warm_start

    assert load_tools_warm_start() == ASSET_DIR
    meta = json.loads((ASSET_DIR / "meta.json").read_text())
    assert meta["seed"] == 0 and meta["reasoner_steps"] == 400 and meta["synthesizer_steps"] == 1500
    assert set(meta["heldout_success"]) == {i.group for i in ToolsDomain().heldout(meta["heldout_per_group"], seed=0)}
    from synco.learn.pretrain_tools import ToolsPretrainMeta

    assert ToolsPretrainMeta.model_validate(meta).db_variants == 0  # made on the fixed world (meta before the field)
    from synco.evosyn.config import ReflectorConfig

    # the shipped Synthesizer writes the family it is asked for, so a promoted `family` passes the run's control check
    assert meta["control"]["family"] >= ReflectorConfig().min_control and meta["control"]["pattern"] >= 0.9


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
    from synco.learn.pretrain_tools import reasoner_row

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
    from synco.learn.pretrain_tools import weighted_family

    old, new = random.Random(7), random.Random(7)  # off: the shipped recipe's rows and random stream, unchanged
    for _ in range(5):
        assert reasoner_row(domain, new) == gold_segments(domain, domain.sample_task(old, weighted_family(old)))


def test_a_toy_warm_start_on_variants_records_them_in_meta(tmp_path, one_thread) -> None:  # noqa: ANN001 - fixtures
    """``pretrain_tools`` end to end at toy size (2 SFT steps per agent, 1 held-out task per group, 2 cards) with
    ``db_variants=4``: both agents saved, ``meta.json`` records the setting and held-out success on variants."""
    from synco.learn.pretrain_tools import ToolsPretrainMeta, pretrain_tools

    meta = pretrain_tools(tmp_path, seed=0, reasoner_steps=2, synthesizer_steps=2, batch=2, heldout_per_group=1,
                          n_cards=2, parallel=False, progress=False, db_variants=4)
    saved = ToolsPretrainMeta.model_validate_json((tmp_path / "meta.json").read_text())
    assert saved == meta and saved.db_variants == 4 and saved.reasoner_steps == 2
    assert set(saved.heldout_success) == set(saved.heldout_success_on_variants or {}) == {
        i.group for i in ToolsDomain().heldout(1, seed=0)}
    assert (tmp_path / "reasoner" / "model.safetensors").exists() and (tmp_path / "synthesizer" / "config.json").exists()
    names = [d.name for d in ToolsDomain().factor_defs()]
    assert list(saved.control or {}) == names and all(0.0 <= v <= 1.0 for v in saved.control.values())


def test_the_cli_passes_the_tools_section_to_the_tools_warm_start(tmp_path, monkeypatch, capsys) -> None:  # noqa: ANN001
    """``synco pretrain --world tools tools.db_variants=N``: the world's own settings, validated by its model."""
    import synco.learn.pretrain_tools as pretrain_tools_module
    from synco.cli import main

    calls = []
    monkeypatch.setattr(pretrain_tools_module, "pretrain_tools", lambda out, **kw: calls.append((out, kw)) or "meta")
    assert main(["pretrain", "--world", "tools", "tools.db_variants=16", "--out", str(tmp_path)]) == 0
    assert main(["pretrain", "--world", "tools", "--out", str(tmp_path)]) == 0
    assert [kw for _, kw in calls] == [{"seed": 0, "db_variants": 16}, {"seed": 0, "db_variants": 0}]
    assert main(["pretrain", "--world", "tools", "tools.db_variants=5000", "--out", str(tmp_path)]) == 2
    assert "tools.db_variants: Input should be less than or equal to 4096 (got 5000)" in capsys.readouterr().err
    assert main(["pretrain", "--world", "arith", "tools.db_variants=4", "--out", str(tmp_path)]) == 2
    assert "tools.db_variants: --world arith takes no settings" in capsys.readouterr().err
    assert len(calls) == 2 and not (tmp_path / "reasoner").exists()