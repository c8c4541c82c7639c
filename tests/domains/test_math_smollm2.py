"""End to end on a real chat model: the ``smollm2`` preset (math domain, SmolLM2-135M-Instruct as both agents).

One real co-training step (the Synthesizer writes cards from the real prompts),
then one ``static`` step on the same state so that the Reasoner, the grader and
consensus certainly run on valid cards, then a forced-signal step in which both
real models must take a GRPO step. Token budgets are cut so the test stays
well under two minutes on one CPU thread. The parameter assertions are
two-sided: an agent's weights must change exactly when the step reports a
gradient-bearing group for it, and must not change otherwise.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import pytest

from synco.config import load_config
from synco.cotrain.engine import cotrain_step
from synco.learn.models import unavailable_reason
from synco.core.records import Attempt
from synco.core.rewards import reasoner_reward
from synco.run.logs import Loggers
from synco.run.setup import setup_run
from synco.domains.math import MathDomain

pytestmark = pytest.mark.slow


_REASON = unavailable_reason("smollm2")


def snapshot(policy):  # noqa: ANN001, ANN201
    return {n: p.detach().clone() for n, p in policy.trainable_parameters()}


def changed(before, policy) -> set[str]:  # noqa: ANN001
    import torch

    after = dict(policy.trainable_parameters())
    return {n for n, p in before.items() if not torch.equal(p, after[n].detach())}




@pytest.mark.skipif(_REASON is not None, reason=f"SmolLM2 preset unavailable: {_REASON}")
def test_smollm2_preset_runs_a_real_cotrain_step(tmp_path: Path, one_thread: None,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = load_config("smollm2", overrides=[
        f"runs_dir={tmp_path}", "run_id=smol", "n_cards=2", "k=2", "heldout_per_group=0", "threads=1",
        # free decoding: a 40-token budget cannot hold a template card (tests/test_smollm2.py samples those)
        "synth_decoding=free", "synthesizer.sampling.max_new_tokens=40", "reasoner.sampling.max_new_tokens=24",
        "tensorboard=false", "progress=false",
    ])
    run = setup_run(cfg)
    st = run.state
    assert st.domain.name == "math" and st.consensus_checker is None  # consensus reuses the K attempts

    sent: dict[str, list[str]] = {"synthesizer": [], "reasoner": []}
    for role in sent:
        policy = getattr(st, role)
        original = policy.generate

        def recording(prompts, n, params=None, _orig=original, _role=role):  # noqa: ANN001, ANN202
            sent[_role].extend(prompts)
            return _orig(prompts, n, params)

        policy.generate = recording

    loggers = Loggers(run)
    all_stats = []
    try:
        for step, mode in ((0, "cotrain"), (1, "static")):
            # a state with other settings chooses its features anew (the card source follows the mode)
            st = dataclasses.replace(st, settings=dataclasses.replace(st.settings, mode=mode))
            s0, r0 = snapshot(st.synthesizer), snapshot(st.reasoner)
            stats = cotrain_step(st, step)
            loggers.log(stats)
            all_stats.append(stats)

            records = st.pool.by_step(step)
            assert len(records) == stats.n_cards == 2
            assert all(r.synth_reward is not None for r in records)
            # Reasoner: every weight moves exactly when some valid task was gradient-bearing
            expect_r = set(r0) if stats.n_gradient_bearing > 0 else set()
            assert changed(r0, st.reasoner) == expect_r, stats
            # Synthesizer: only in cotrain, exactly when its one context's card rewards differed
            synth_signal = mode == "cotrain" and stats.synth_groups_skipped == 0
            assert changed(s0, st.synthesizer) == (set(s0) if synth_signal else set()), stats
            assert (stats.synth_loss is not None) == synth_signal
    finally:
        loggers.close()

    cotrain, static = all_stats
    # the real Synthesizer step: the system prompt was sent through the chat template
    system = st.domain.synthesizer_system_prompt()
    assert system is not None and len(sent["synthesizer"]) == 1
    assert sent["synthesizer"][0].startswith("<|im_start|>system\n" + system + "<|im_end|>")
    assert "named SmolLM" not in sent["synthesizer"][0]  # the template's default system prompt was replaced
    assert all(r.raw.strip() for r in st.pool.by_step(0))  # the model wrote something
    # the static step: valid cards were solved K times and consensus judged them
    assert static.n_valid + static.reasons.get("consensus_disagrees", 0) >= 1
    solved = [r for r in st.pool.by_step(1) if r.rollouts]
    assert solved and all(len(r.rollouts) == 2 for r in solved)
    assert sent["reasoner"] and all("\\boxed{}" in p and p.endswith("<|im_start|>assistant\n") for p in sent["reasoner"])
    lines = [json.loads(ln) for ln in (run.dir / "metrics.jsonl").read_text().splitlines()]
    assert [ln["step"] for ln in lines] == [0, 1]
    assert all("label_agreement" in ln for ln in lines)
    assert isinstance(lines[1]["label_agreement"], float) and 0.0 <= lines[1]["label_agreement"] <= 1.0
    assert lines[1]["label_agreement"] == static.label_agreement
    assert set(lines[1]["groups"]) <= set(st.domain.topics)

    # A forced-signal step on the same real models: the Synthesizer's real completions (token ids and
    # log-probs) are kept but their text is replaced by valid cards, and grading marks only the very
    # first attempt correct. Then task 0 is gradient-bearing (rewards 1.1 vs 0) and the two cards'
    # Synthesizer rewards differ (teachability 1 vs 0), so both agents must take a real GRPO step.
    import random

    cards = iter(st.domain.static_cards(random.Random(1), 2))
    synth_generate = st.synthesizer.generate

    def as_cards(prompts, n, params=None):  # noqa: ANN001, ANN202
        return [[dataclasses.replace(c, text=next(cards)) for c in g] for g in synth_generate(prompts, n, params)]

    calls = itertools.count()

    def first_attempt_only(c, graded, t_sample, cfg):  # noqa: ANN001, ANN202
        ok = next(calls) == 0
        return Attempt(text=c.text, answer="42" if ok else None, method="boxed" if ok else "none", correct=ok,
                       reward=reasoner_reward(ok, ["42"] if ok else [], cfg), n_tokens=len(c.completion_ids),
                       completion_ids=list(c.completion_ids), prompt_ids=list(c.prompt_ids), logprobs=list(c.logprobs),
                       policy_version=c.version)

    st.synthesizer.generate = as_cards
    short = tmp_path / "short_prompts"  # a short Synthesizer prompt keeps its update cheap on CPU
    short.mkdir()
    (short / "synthesizer.txt").write_text("{{report}}Card:{{schema}}")
    (short / "synthesizer_system.txt").write_text("Write one task card.")
    monkeypatch.setattr("synco.rollout.attempts.answer_attempt", first_attempt_only)
    st = dataclasses.replace(  # the new domain and mode, its features chosen anew
        st, domain=MathDomain(prompts_dir=short, report_budget=0),
        settings=dataclasses.replace(st.settings, mode="cotrain", synth_sampling=st.settings.synth_sampling.model_copy(
            update={"max_new_tokens": 16})))
    s0, r0 = snapshot(st.synthesizer), snapshot(st.reasoner)
    forced = cotrain_step(st, 2)
    assert forced.n_valid == 2 and forced.n_gradient_bearing == 1 and forced.synth_groups_skipped == 0, forced
    assert forced.reasoner_loss is not None and forced.synth_loss is not None and forced.nan_skipped == 0
    assert changed(r0, st.reasoner) == set(r0)
    assert changed(s0, st.synthesizer) == set(s0)
    st.pool.close()


@pytest.mark.skipif(_REASON is not None, reason=f"SmolLM2 preset unavailable: {_REASON}")
def test_enable_thinking_reaches_the_chat_template(one_thread: None) -> None:
    from synco.learn.models import resolve_model
    from synco.core.policy import PolicyConfig
    from synco.learn.hf_policy import HFPolicy

    policy = HFPolicy.from_config(PolicyConfig(model_path=resolve_model("smollm2"), device="cpu", trainable=False))
    seen: list[dict] = []
    original = policy.tokenizer.apply_chat_template

    def spy(messages, **kwargs):  # noqa: ANN001, ANN202
        seen.append(kwargs)
        return original(messages, **kwargs)

    policy.tokenizer.apply_chat_template = spy
    policy.format_prompt("hi", system="sys")
    assert "enable_thinking" not in seen[-1]  # None: the template's own default
    for flag in (True, False):
        policy.config = policy.config.model_copy(update={"enable_thinking": flag})
        text = policy.format_prompt("hi", system="sys")
        assert seen[-1]["enable_thinking"] is flag
        assert text.startswith("<|im_start|>system\nsys<|im_end|>")  # a template without the switch ignores it
