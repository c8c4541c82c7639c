"""The co-training step in a domain with an environment (the tools world): the Reasoner acts in episodes,
the pool keeps their transcripts, the metrics carry the episode and trajectory keys, and the GRPO rows
mask the environment's ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from synco.config import load_config
from synco.core.episodes import Episode, EpisodeGrade
from synco.core.records import Attempt, TaskCard, TaskRecord, Verdict
from synco.cotrain.batches import reasoner_batch
from synco.cotrain.engine import cotrain_step
from synco.rollout.attempts import episode_attempt
from synco.learn.charlm import card_tokenizer, char_tokenizer, tiny_llama
from synco.run.setup import setup_run

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Random (untrained) tiny agents for the tools world: a char Reasoner and a card-token Synthesizer."""
    root = tmp_path_factory.mktemp("models")
    for role, tok in (("reasoner", char_tokenizer()), ("synthesizer", card_tokenizer())):
        model = tiny_llama(tok, seed=1, hidden_size=32, num_layers=1, max_positions=768)
        model.save_pretrained(root / role)
        tok.save_pretrained(root / role)
    return root / "synthesizer", root / "reasoner"


def tools_state(tmp_path: Path, models: tuple[Path, Path], *extra: str):  # noqa: ANN201 - a CoTrainState
    synth, reasoner = models
    overrides = ["mode=static", "n_cards=6", "k=3", "seed=0", f"runs_dir={tmp_path}", "run_id=t",
                 "heldout_per_group=0", "tensorboard=false", "progress=false", "threads=1",
                 f"synthesizer.model_path={synth}", f"reasoner.model_path={reasoner}",
                 "reasoner.sampling.max_new_tokens=12", "max_turns=3", "max_episode_tokens=120", *extra]
    return setup_run(load_config("tools", overrides=overrides))


def test_a_tools_step_records_episodes_with_masked_environment_ids(tmp_path: Path, tiny_models) -> None:
    run = tools_state(tmp_path, tiny_models)
    stats = cotrain_step(run.state, 0)
    assert stats.n_valid == 6  # static cards of the world's own generator are all valid
    assert stats.episodes.mean_turns is not None and 1 <= stats.episodes.mean_turns <= 3
    assert sum((stats.episodes.finishes or {}).values()) == 6 * 3
    assert stats.trajectory.interaction_coverage is not None and 0 < stats.trajectory.interaction_coverage <= 1
    assert stats.trajectory.trajectory_diversity is not None and stats.trajectory.contrastive_support is not None
    assert stats.trajectory.distinct_action_sequences is not None and stats.trajectory.distinct_action_sequences >= 1
    line = json.loads(stats.model_dump_json())
    assert {"mean_turns", "interaction_coverage", "trajectory_diversity", "distinct_action_sequences"} <= set(line)
    [rec, *_] = run.state.pool.by_step(0, token_ids=True)
    for ro in rec.rollouts:
        assert ro.turns is not None and ro.finish in ("done", "max_turns", "token_budget")
        assert ro.turns[0].role == "agent"
        mask = ro.loss_mask
        assert mask is not None and ro.completion_ids is not None and len(mask) == len(ro.completion_ids)
        assert ro.n_tokens == sum(mask)  # agent ids only
        assert ro.reward_parts is not None and ro.reward in (0.0, 1.0)
    env_turns = [t for ro in rec.rollouts for t in ro.turns or [] if t.role == "env"]
    assert all(t.text.startswith("\n") and t.text.endswith("\n") for t in env_turns)


def test_single_turn_metrics_lines_keep_their_keys(tmp_path: Path) -> None:
    """The episode and trajectory keys are absent from an arith run's lines (its metrics.jsonl is unchanged)."""
    from synco.cotrain.stats import StepStats

    line = json.loads(StepStats(step=0, mode="cotrain").model_dump_json())
    assert not {"mean_turns", "finishes", "interaction_coverage", "trajectory_diversity",
                "distinct_action_sequences", "contrastive_support"} & set(line)


def _episode(reward: float, agent: list[int], env: list[int]) -> Episode:
    ep = Episode(prompt_ids=[5, 6])
    ep.add_agent("a", agent, [-1.0] * len(agent), None)
    ep.add_env("e", env, None)
    ep.add_agent("b", agent, [-0.5] * len(agent), None)
    ep.finish, ep.grade = "done", EpisodeGrade(reward=reward, correct=reward == 1.0)
    return ep


def test_the_reasoner_batch_of_episodes_carries_their_masks() -> None:
    group = [_episode(1.0, [7, 8, 2], [9, 9]), _episode(0.0, [7, 2], [9, 9, 9])]
    rec = TaskRecord(step=0, slot=0, raw="x", verdict=Verdict(valid=True), rollouts=[episode_attempt(e) for e in group])
    batch, skipped = reasoner_batch([rec], scale_by_std=True)
    assert skipped == 0 and len(batch) == 2
    assert batch[0].loss_mask == [1, 1, 1, 0, 0, 1, 1, 1] and batch[1].loss_mask == [1, 1, 0, 0, 0, 1, 1]
    assert batch[0].advantage > 0 > batch[1].advantage
    assert batch[0].completion_ids == [7, 8, 2, 9, 9, 7, 8, 2] and batch[0].old_logprobs == [-1.0] * 3 + [0.0] * 2 + [-0.5] * 3


def test_episode_attempt_keeps_the_transcript() -> None:
    ro: Attempt = episode_attempt(_episode(1.0, [7, 2], [9]))
    assert ro.correct and ro.reward == 1.0 and ro.n_tokens == 4 and ro.loss_mask == [1, 1, 0, 1, 1]
    assert [t.role for t in ro.turns or []] == ["agent", "env", "agent"] and ro.answer == "b"


def test_rounds_run_on_episode_domains_with_sft_on_episodes(tiny_models) -> None:
    """protocol=rounds / rft train an acting Reasoner by SFT on its own correct episodes, or (tools: cards carry a
    replayable gold trajectory) on gold episodes, or by GRPO on fresh episodes (update=grpo); a reference in a
    world without gold episodes (tau2) is refused, naming the setting."""
    assert load_config("tools").rounds.target == "reference" and load_config("tools").protocol == "rounds"  # the preset
    assert load_config("tools", overrides=["rounds.target=attempts"]).rounds.target == "attempts"
    assert load_config("tools", overrides=["protocol=rft"]).run_mode == "static"
    assert load_config("tools", overrides=["protocol=rft", "rounds.target=reference"]).rounds.target == "reference"
    assert load_config("tools", overrides=["protocol=rounds", "rounds.update=grpo"]).rounds.update == "grpo"
    # τ² replays its gold agent's script (HasGoldTurns): EvoSyn's SFT on verified trajectories runs there too
    assert load_config("tools", overrides=["domain=tau2", "protocol=rft", "rounds.target=reference"]).rounds.target \
        == "reference"


def test_a_rounds_reference_example_is_the_tasks_gold_episode(tmp_path: Path, tiny_models) -> None:
    """rounds.target=reference in the tools world: one example per distinct valid task, its gold episode replayed on
    the task's environment (graded correct), trained on the agent's ids only; the update moves the Reasoner."""
    from synco.cotrain.protocols.config import RoundsConfig
    from synco.cotrain.protocols.rounds import sft_examples
    from synco.core.episodes import EpisodeLimits
    from synco.rollout.gold import gold_episodes

    run = tools_state(tmp_path, tiny_models, "protocol=rft", "rounds.target=reference", "max_episode_tokens=400",
                      "max_turns=8")
    cotrain_step(run.state, 0)
    records = run.state.pool.by_step(0)
    valid = [r for r in records if r.valid]
    assert valid
    st, limits = run.state, EpisodeLimits(8, 400)
    examples = sft_examples(records + valid[:1], st.reasoner, st.domain, RoundsConfig(target="reference"), limits)
    assert len(examples) == len({(r.card.payload.prompt_text(), r.card.payload.solution_text()) for r in valid})  # a repeated task counts once
    episodes = gold_episodes(st.reasoner, st.domain, [r.card for r in valid], [r.verdict.reference for r in valid],
                             limits)
    assert all(ep is not None for ep in episodes) and len(episodes) == len(examples)  # distinct tasks: one each
    for ex, ep in zip(examples, episodes):
        assert ep is not None and ex.completion_ids == tuple(ep.completion_ids) and ex.completion_mask == tuple(ep.mask)
        assert 0 in ex.completion_mask and ex.completion == ep.text
    before = [p.detach().clone() for p in st.reasoner.model.parameters()]
    stats = st.reasoner.sft_update(examples, 1e-3)
    assert stats.stepped and stats.n_tokens == sum(sum(ex.completion_mask) for ex in examples)
    assert any(not torch.equal(a, p.detach()) for a, p in zip(before, st.reasoner.model.parameters()))
    with pytest.raises(ValueError, match="episode limits"):
        sft_examples(records, st.reasoner, st.domain, RoundsConfig(target="reference"))


def test_a_rounds_sft_example_is_the_episode_as_it_ran(tmp_path: Path, tiny_models) -> None:
    """The round's SFT data of a tools step: a correct episode becomes one example whose prompt ids are the ones the
    episode started from and whose completion ids and mask are the episode's own; the update trains the agent's
    ids only (its token count) and moves the Reasoner."""
    from synco.cotrain.protocols.config import RoundsConfig
    from synco.cotrain.protocols.rounds import sft_examples

    run = tools_state(tmp_path, tiny_models, "protocol=rft")
    cotrain_step(run.state, 0)
    records = run.state.pool.by_step(0, token_ids=True)
    # the random Reasoner solves nothing: call one episode correct, as a grader would have
    rec = records[0]
    ro = rec.rollouts[0].model_copy(update={"correct": True, "truncated": False})
    rec = rec.model_copy(update={"rollouts": [ro, *rec.rollouts[1:]]})
    [ex] = sft_examples([rec], run.state.reasoner, run.state.domain, RoundsConfig())
    reasoner = run.state.reasoner
    row = reasoner.encode_sft(ex)
    assert row.prompt_ids == reasoner.encode_prompt(reasoner.format_prompt(run.state.domain.reasoner_prompt(rec.card.payload.prompt_text())))
    assert row.completion_ids == ro.completion_ids and row.loss_mask == ro.loss_mask and 0 in row.loss_mask
    before = [p.detach().clone() for p in reasoner.model.parameters()]
    stats = reasoner.sft_update([ex], 1e-3)
    assert stats.stepped and stats.n_tokens == sum(ro.loss_mask) == ro.n_tokens
    assert any(not torch.equal(a, p.detach()) for a, p in zip(before, reasoner.model.parameters()))


def test_valid_tasks_rows_of_the_tools_world_carry_instruction_actions_outputs(tmp_path: Path, tiny_models) -> None:
    from synco.domains.base import export_fields

    run = tools_state(tmp_path, tiny_models)
    cotrain_step(run.state, 0)
    out = tmp_path / "valid_tasks.jsonl"
    n = run.state.pool.export_jsonl(out, export_fields(run.state.domain))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert n == len(rows) == 6
    for row in rows:
        assert row["instruction"] == row["problem"]
        assert row["actions"] and all(set(a) == {"name", "arguments"} for a in row["actions"])
        assert isinstance(row["outputs"], list)
        assert (",".join(row["outputs"]) or "none") == row["final_answer"]  # the verified reference, not a claim
        assert ";".join(a["name"] for a in row["actions"]) == ";".join(c.split("(")[0] for c in row["solution"].split(";"))


def test_a_failed_episode_records_its_first_wrong_call_and_the_report_counts_them() -> None:
    from synco.core.episodes import EnvStep, ToolCall
    from synco.core.report import build_report

    gold = [ToolCall(name="find_user", arguments={"name": "bob"}), ToolCall(name="cancel_order", arguments={"order_id": "o5"})]
    ep = Episode(prompt_ids=[1])
    ep.add_agent("find_user(bob)", [3], [0.0], EnvStep("\n=u2,9\n", False, gold[0]))
    ep.add_env("\n=u2,9\n", [4], None)
    ep.add_agent("cancel_order(o6)", [5], [0.0], EnvStep("", False, ToolCall(name="cancel_order", arguments={"order_id": "o6"})))
    ep.add_env("\n!not_found\n", [4], "not_found")
    ep.add_agent("done()", [6], [0.0], EnvStep("", True, ToolCall(name="done")))
    ep.finish, ep.grade = "done", EpisodeGrade(reward=0.0, correct=False)
    ro = episode_attempt(ep, gold=gold, tools={"find_user", "cancel_order"})
    assert ro.first_wrong == "wrong_arguments:cancel_order"
    won = _episode(1.0, [7], [8])
    assert episode_attempt(won, gold=gold, tools={"find_user", "cancel_order"}).first_wrong is None  # a solved episode needs no diagnosis
    rec = TaskRecord(step=0, slot=0, raw="x", verdict=Verdict(valid=True), rollouts=[ro, ro, episode_attempt(won, gold=gold, tools={"find_user"})])
    report = build_report([rec])
    assert [(c.code, c.count) for c in report.first_wrong] == [("wrong_arguments:cancel_order", 2)]
    assert "first go wrong at" in report.render() and "wrong_arguments:cancel_order: 2 (100%)" in report.render()


def test_an_episode_graded_against_its_own_gold_is_diagnosed_against_it() -> None:
    """On a database variant the environment's gold (``EpisodeGrade.gold_actions``) may be another branch than the
    card's: the first wrong call is measured against the gold the episode was graded by."""
    from synco.core.episodes import EnvStep, ToolCall

    card_gold = [ToolCall(name="find_user", arguments={"name": "bob"}), ToolCall(name="place_order", arguments={
        "user_id": "u2", "product_id": "p2", "qty": 1})]  # the fixed world: the mug
    variant_gold = [card_gold[0], ToolCall(name="place_order", arguments={"user_id": "u2", "product_id": "p1", "qty": 1})]
    ep = Episode(prompt_ids=[1])
    ep.add_agent("find_user(bob)", [3], [0.0], EnvStep("\n=u2,48\n", False, card_gold[0]))
    ep.add_env("\n=u2,48\n", [4], None)
    ep.add_agent("place_order(u2,p2,1)", [5], [0.0], EnvStep("", False, card_gold[1]))  # the card's branch: wrong here
    ep.add_env("\n=o65\n", [4], None)
    ep.add_agent("done()", [6], [0.0], EnvStep("", True, ToolCall(name="done")))
    tools = {"find_user", "place_order"}
    ep.finish, ep.grade = "done", EpisodeGrade(reward=0.0, correct=False)
    assert episode_attempt(ep, gold=card_gold, tools=tools).first_wrong is None  # against the card's gold nothing is wrong
    ep.grade = EpisodeGrade(reward=0.0, correct=False, info={"db_variant": "1", "gold_outputs": "none"},
                            gold_actions=variant_gold)
    ro = episode_attempt(ep, gold=card_gold, tools=tools)
    assert ro.first_wrong == "wrong_arguments:place_order" and ro.episode_info == {"db_variant": "1", "gold_outputs": "none"}
    assert episode_attempt(ep).first_wrong is None  # a domain without trajectories: no diagnosis either way


def test_a_tools_step_with_database_variants_records_each_episodes_variant_and_gold(tmp_path: Path, tiny_models) -> None:
    """``tools.db_variants=8``: the K attempts at a card run on different variants, each graded against the card's
    instruction solved on its variant; the pool records the variant and the required outputs per episode."""
    from synco.domains.tools.db import build_db, episode_variant
    from synco.domains.tools.syntax import format_outputs
    from synco.domains.tools.tasks import task_of_instruction

    run = tools_state(tmp_path, tiny_models, "tools.db_variants=8", "n_cards=12", "k=4")
    assert run.state.domain.settings.db_variants == 8
    stats = cotrain_step(run.state, 0)
    assert stats.n_valid == 12
    varied = 0
    for rec in run.state.pool.by_step(0):
        instruction = rec.card.payload.prompt_text()
        picked = [episode_variant(instruction, a, 8) for a in range(4)]
        assert len(set(picked)) == 4
        golds = set()
        for attempt, ro in enumerate(rec.rollouts):
            info = ro.episode_info
            assert info is not None and set(info) == {"db_variant", "gold_outputs"}
            solved = task_of_instruction(build_db(picked[attempt]), instruction)
            if solved is None:  # the variant cannot pose the task: the fixed world, the verified reference
                assert info == {"db_variant": "0", "gold_outputs": rec.verdict.reference}
            else:
                assert info == {"db_variant": str(picked[attempt]), "gold_outputs": format_outputs(solved[1].outputs)}
            golds.add(info["gold_outputs"])
        varied += len(golds) > 1
    assert varied > 0  # some card's attempts had to state different values on their databases


def test_exported_outputs_are_the_oracles_not_the_cards_claim() -> None:
    from synco.domains.tools.domain import ToolsDomain

    tools = ToolsDomain()
    card = TaskCard(**json.loads(tools.format_card("what does the lamp cost?", "find_product(lamp)", "999", "lookup")))
    assert tools.export_fields(card) == {"instruction": "what does the lamp cost?",
                                         "actions": [{"name": "find_product", "arguments": {"name": "lamp"}}],
                                         "outputs": ["26"]}


@pytest.mark.slow
def test_a_tools_round_trains_the_reasoner_by_grpo_on_its_episodes(tmp_path: Path) -> None:
    """``protocol=rounds rounds.update=grpo`` in the tools world (3 steps, one round): the round's last step samples
    fresh episodes of every task so far and takes GRPO optimizer steps on them (the shipped warm start solves some,
    so groups carry signal); the checkpointed optimizer-step count is the round's updates."""
    from synco.cli import main

    main(["train", "--preset", "tools", "steps=3", "n_cards=16", "k=4", "heldout_per_group=1", "heldout_samples=0",
          "threads=1", "seed=0", "rounds.update=grpo", "rounds.steps_per_round=3", "rounds.batch_size=8",
          "rounds.epochs=1", f"runs_dir={tmp_path}", "run_id=grpo", "progress=false", "tensorboard=false"])
    run = tmp_path / "grpo"
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["phase"] == "train" and last["round_examples"] > 0
    assert last["round_rollouts"] == 4 * last["round_examples"] and last["round_updates"] >= 1
    assert last["round_loss"] is not None
    state = torch.load(run / "checkpoints" / "step_2" / "reasoner_state" / "learner_state.pt", weights_only=True)
    assert state["step"] == last["round_updates"]  # the Reasoner took exactly the round's GRPO steps
