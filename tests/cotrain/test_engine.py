"""The co-training step on the embedded world, with the shipped warm-start models."""

import pytest
import torch

from synco.config import load_config
from synco.cotrain.engine import cotrain_step, screen_card
from synco.core.records import Verdict
from synco.grading.cards import parse_task_card
from synco.core.sampling import Completion
from synco.run.setup import setup_run
from synco.domains.arith import ArithDomain


def make_state(tmp_path, mode="cotrain", n_cards=16, k=4, synth_tokens=None, reasoner=None, seed=0):
    overrides = [f"mode={mode}", f"n_cards={n_cards}", f"k={k}", f"seed={seed}", f"runs_dir={tmp_path}",
                 "run_id=t", "heldout_per_group=0", "tensorboard=false", "progress=false"]
    if synth_tokens:
        overrides.append(f"synthesizer.sampling.max_new_tokens={synth_tokens}")
    state = setup_run(load_config("arith", overrides=overrides)).state
    if reasoner is not None:
        state.reasoner = reasoner
    return state


def snapshot(policy):
    return {n: p.detach().clone() for n, p in policy.trainable_parameters()}


def changed(before, policy):
    after = dict(policy.trainable_parameters())
    return {n for n, p in before.items() if not torch.equal(p, after[n].detach())}


def run_until_gradient(state, max_steps=4):
    for step in range(max_steps):
        stats = cotrain_step(state, step)
        if stats.n_gradient_bearing > 0:
            return stats
    pytest.fail("no gradient-bearing task in %d steps" % max_steps)


def test_cotrain_step_updates_every_parameter_of_both_agents(tmp_path):
    state = make_state(tmp_path, "cotrain")
    s0, r0 = snapshot(state.synthesizer), snapshot(state.reasoner)
    stats = run_until_gradient(state)
    assert changed(s0, state.synthesizer) == set(s0), "every Synthesizer parameter must change in cotrain"
    assert changed(r0, state.reasoner) == set(r0), "every Reasoner parameter must change"
    assert stats.n_valid > 0 and stats.reasoner_loss is not None


def test_frozen_mode_keeps_synthesizer_fixed(tmp_path):
    state = make_state(tmp_path, "frozen")
    s0, r0 = snapshot(state.synthesizer), snapshot(state.reasoner)
    run_until_gradient(state)
    assert changed(s0, state.synthesizer) == set()
    assert changed(r0, state.reasoner) == set(r0)


def test_static_mode_draws_from_the_domain_generator(tmp_path):
    state = make_state(tmp_path, "static", n_cards=8)
    s0 = snapshot(state.synthesizer)
    stats = cotrain_step(state, 0)
    assert stats.n_cards == 8 and stats.n_valid == 8  # the fixed generator writes valid cards
    assert changed(s0, state.synthesizer) == set()


def test_step_is_recorded_whole_in_the_pool(tmp_path):
    state = make_state(tmp_path, "cotrain", n_cards=8, k=3)
    stats = cotrain_step(state, 0)
    records = state.pool.by_step(0)
    assert len(records) == 8 == stats.n_cards
    assert len({r.task_id for r in records}) == 8
    for rec in records:
        assert rec.synth_reward is not None
        if rec.valid:
            assert len(rec.rollouts) == 3
            assert rec.card is not None and "level" in rec.card.factors
            assert rec.success_rate == sum(r.correct for r in rec.rollouts) / 3
        else:
            assert rec.synth_reward.total < 0


def test_all_invalid_batch_is_handled(tmp_path):
    # 8 tokens cannot hold a card: every card is truncated and invalid; the step still completes
    state = make_state(tmp_path, "cotrain", n_cards=8, synth_tokens=8)
    s0 = snapshot(state.synthesizer)
    stats = cotrain_step(state, 0)
    assert stats.n_valid == 0 and stats.n_synth_truncated == 8
    # all rewards equal (-0.5) in every context (one per cell the Designer gave slots to): no gradient, counted
    assert stats.evosyn.allocation is not None and sum(stats.evosyn.allocation.values()) == 8
    assert stats.synth_groups_skipped == sum(1 for n in stats.evosyn.allocation.values() if n)
    assert changed(s0, state.synthesizer) == set()
    assert len(state.pool.by_step(0)) == 8


class OracleReasoner:
    """A stand-in Reasoner that always answers correctly: every group has equal rewards."""

    policy_version = 0  # a test double never steps its optimizer

    def __init__(self, domain):
        self.domain = domain
        self.updates = 0

    def format_prompt(self, text, system=None):
        return text

    def generate(self, prompts, n, params=None):
        out = []
        for p in prompts:
            problem = p[len("Q:"):].split("\n")[0] if p.startswith("Q:") else p
            ans = self.domain.answer(problem)
            out.append([Completion(text=f"\\boxed{{{ans}}}", prompt_ids=[1], completion_ids=[5, 6], logprobs=[-0.1, -0.1],
                                   truncated=False, finish_reason="stop") for _ in range(n)])
        return out

    def update(self, batch):
        self.updates += 1
        raise AssertionError("no update expected without a gradient-bearing group")


def test_step_without_gradient_bearing_groups_skips_reasoner_update(tmp_path):
    domain = ArithDomain()
    fake = OracleReasoner(domain)
    state = make_state(tmp_path, "frozen", n_cards=8, reasoner=fake)
    assert domain.reasoner_prompt("12+3").startswith("Q:")
    stats = cotrain_step(state, 0)
    assert stats.n_valid > 0
    assert stats.n_gradient_bearing == 0 and stats.reasoner_groups_skipped == stats.n_valid
    assert stats.reasoner_accuracy == 1.0 and fake.updates == 0


# ----------------------------------------------------------------- EvoSyn: contexts, cells and controllability

import json  # noqa: E402
import random  # noqa: E402
from types import SimpleNamespace  # noqa: E402

from synco.grading.checker import AnswerChecker# noqa: E402
from synco.cotrain.cards import SynthesizerCards  # noqa: E402
from synco.cotrain.engine import CoTrainState  # noqa: E402
from synco.cotrain.settings import StepSettings  # noqa: E402
from synco.evosyn.config import EvoSynConfig  # noqa: E402
from synco.evosyn.run import build_evo_state  # noqa: E402
from synco.evosyn.space import FactorDef, FactorSpace, FactorState, cell_key, factor_values  # noqa: E402
from synco.core.policy import UpdateStats  # noqa: E402
from synco.core.pool import TaskPool  # noqa: E402
from synco.core.report import build_report  # noqa: E402
from synco.core.rewards import synthesizer_reward  # noqa: E402
from synco.grading.verifier import TaskVerifier, VerifierConfig  # noqa: E402


def _plan_state(n_cards, n_contexts, evo=None, designer=False, feedback=True, records=()):
    """Just what ``SynthesizerCards.plan`` reads: settings, the factor space, the pool window and the rng."""
    settings = StepSettings(mode="cotrain", n_cards=n_cards, n_contexts=n_contexts,
                            evosyn=EvoSynConfig(designer=designer, feedback=feedback))
    pool = SimpleNamespace(recent=lambda n: list(records))
    return SimpleNamespace(settings=settings, evo=evo, pool=pool, rng=random.Random(n_cards * 100 + n_contexts))


def _plan(state, designer=False):
    plan, design = SynthesizerCards(designer).plan(state)
    return plan, design.allocation, design.gaps


def test_n_contexts_never_drops_or_adds_cards():
    for n_cards in range(1, 41):
        for n_contexts in range(1, 13):
            plan, allocation, gaps = _plan(_plan_state(n_cards, n_contexts))
            sizes = [c.n for c in plan]
            assert sum(sizes) == n_cards, (n_cards, n_contexts, sizes)
            assert len(plan) == min(n_cards, n_contexts) and max(sizes) - min(sizes) <= 1 and min(sizes) >= 1
            assert all(c.target is None for c in plan) and allocation is None and gaps == {}


def test_designer_contexts_sum_to_n_cards_one_per_cell():
    evo = build_evo_state(ArithDomain())
    for feedback in (True, False):
        for n_cards in range(1, 41):
            plan, allocation, gaps = _plan(_plan_state(n_cards, 3, evo, designer=True, feedback=feedback), designer=True)
            assert sum(c.n for c in plan) == n_cards == sum(allocation.values())
            assert all(c.n > 0 for c in plan)
            targets = [c.target for c in plan]
            assert len(set(targets)) == len(targets) and set(targets) <= set(evo.cells)
            assert set(allocation) == set(evo.cells) == set(gaps)
    # 128 slots over 11 unmeasured cells: everyone's need is 1, so 11 or 12 each
    plan, _, _ = _plan(_plan_state(128, 1, evo, designer=True), designer=True)
    assert len(plan) == 11 and {c.n for c in plan} <= {11, 12}


class CellWriter:
    """A stand-in Synthesizer: in each context, card j is ``write(target_level, j)`` -> (problem, claimed level)."""

    policy_version = 0  # a test double never steps its optimizer

    def __init__(self, domain, write, extra_factors=None):
        self.domain, self.write, self.extra_factors = domain, write, extra_factors or {}
        self.prompts = []

    def format_prompt(self, text, system=None):
        return text

    def generate(self, prompts, n, params=None):
        self.prompts += prompts
        out = []
        for prompt in prompts:
            target = prompt.split("DO:")[1].split("\n")[0]
            level = dict(kv.split("=") for kv in target.split(","))["level"]
            group = []
            for j in range(n):
                problem, claimed = self.write(level, j)
                card = json.loads(self.domain.format_card(problem, claimed, self.domain.answer(problem)))
                card["factors"] = {"level": claimed, **self.extra_factors}  # the model's own claims
                group.append(Completion(text=json.dumps(card), prompt_ids=[1], completion_ids=[2, 3],
                                        logprobs=[-0.5, -0.5], truncated=False, finish_reason="stop"))
            out.append(group)
        return out

    def update(self, batch):
        raise AssertionError("frozen mode never updates the Synthesizer")


class HalfRightReasoner:
    """A stand-in Reasoner: half of the attempts at each problem are right (p = 0.5, full teachability)."""

    policy_version = 0  # a test double never steps its optimizer

    def __init__(self, domain):
        self.domain = domain

    def format_prompt(self, text, system=None):
        return text

    def generate(self, prompts, n, params=None):
        out = []
        for p in prompts:
            ans = int(self.domain.answer(p[len("Q:"):].split("\n")[0]))
            out.append([Completion(text=f"{ans if j < n // 2 else ans + 1}}}", prompt_ids=[1], completion_ids=[5, 6],
                                   logprobs=[-0.1, -0.1], truncated=False, finish_reason="stop") for j in range(n)])
        return out

    def update(self, batch):
        return UpdateStats(loss=0.0, n_sequences=len(batch), n_tokens=2 * len(batch), n_skipped_zero_adv=0,
                           grad_norm=0.0, clip_frac=0.0, kl=0.0, lr=0.0, nan_skipped=False, stepped=True)


def _fake_state(tmp_path, write, cells, evosyn=None, space=None, defs=None, extra_factors=None):
    domain = ArithDomain()
    evo = build_evo_state(domain, space)
    if defs is not None:
        evo.defs = defs
    evo.cells = cells
    checker = AnswerChecker(use_math_verify=False)
    settings = StepSettings(mode="frozen", n_cards=2 * len(cells), k=4,
                            evosyn=evosyn or EvoSynConfig(designer=True, reflector=False))
    return CoTrainState(settings=settings, domain=domain, synthesizer=CellWriter(domain, write, extra_factors),
                        reasoner=HalfRightReasoner(domain),
                        verifier=TaskVerifier(VerifierConfig(max_problem_chars=40), checker=checker, oracle=domain.oracle),
                        checker=checker, pool=TaskPool(tmp_path / "pool.sqlite"), report=build_report([]),
                        rng=random.Random(0), evo=evo)


LEVEL_CELLS = [(("level", lv),) for lv in ("L2", "L5", "L8")]
OTHER = {"L2": "L10", "L5": "L11", "L8": "L4"}


def _on_and_off_target(level, j):
    """Card 0 of a context is of the requested level; card 1 is of another level but claims the requested one."""
    rng = random.Random(f"{level}-{j}")
    return (ArithDomain().sample_problem(rng, level if j == 0 else OTHER[level]), level)


def test_off_target_cards_are_recomputed_and_penalised(tmp_path):
    state = _fake_state(tmp_path, _on_and_off_target, LEVEL_CELLS)
    stats = cotrain_step(state, 0)
    assert sorted(p.split("\n")[1] for p in state.synthesizer.prompts) == ["DO:level=L2", "DO:level=L5", "DO:level=L8"]
    records = state.pool.by_step(0)
    assert len(records) == 6 and all(r.valid for r in records)
    for rec in records:
        assert rec.target in {cell_key(c) for c in LEVEL_CELLS}
        requested = rec.target.split("=")[1]
        on = rec.card.payload.prompt_text() == _on_and_off_target(requested, 0)[0]
        # the card claims the requested level in difficulty_estimate and factors; only the problem decides
        assert rec.card.difficulty_estimate == requested
        assert rec.card.factors["level"] == (requested if on else OTHER[requested])
        assert rec.on_target is on
        plain = synthesizer_reward(True, rec.verdict.quality, rec.verdict.reliability, rec.success_rate,
                                   novelty=rec.verdict.scores.get("novelty", 1.0))
        assert rec.success_rate == 0.5 and plain.total > 0.3
        assert rec.synth_reward.total == pytest.approx(plain.total - (0.0 if on else 0.3))
        assert rec.synth_reward.penalty == pytest.approx(0.0 if on else -0.3)
        assert rec.synth_reward.control == pytest.approx(0.0 if on else -0.3)  # kept in the pool
        assert rec.synth_reward.alignment == (1.0 if on else 0.0)  # the additive reward's alignment term: on-target
    assert stats.evosyn.controllability == pytest.approx(0.5) and stats.evosyn.controllability_by_factor == {"level": 0.5}
    assert stats.evosyn.allocation == {"level=L2": 2, "level=L5": 2, "level=L8": 2}
    # the on-target cards cover the 3 cells evenly; the off-target ones (L10, L11, L4) are outside them
    assert stats.evosyn.factor_coverage == pytest.approx(1.0) and stats.evosyn.factor_balance == pytest.approx(1.0)


def test_control_gate_gives_off_target_cards_the_invalid_penalty(tmp_path):
    state = _fake_state(tmp_path, _on_and_off_target, LEVEL_CELLS,
                        evosyn=EvoSynConfig(designer=True, reflector=False, control_gate=True))
    cotrain_step(state, 0)
    off = [r for r in state.pool.by_step(0) if r.on_target is False]
    assert len(off) == 3 and all(r.synth_reward.total == pytest.approx(-0.5) for r in off)


def test_a_factor_claimed_by_the_card_but_not_computable_never_places_it(tmp_path):
    # e.g. the math domain's `magnitude` of a problem without numbers: the domain cannot compute it, so the
    # card's own `factors` claim must not stand in for it (it would put the card in the requested cell).
    tag = FactorDef("tag", ("t", "u"), lambda p: None)
    space = FactorSpace(factors=[FactorState(name="level", buckets=["L2", "L5", "L8"]),
                                 FactorState(name="tag", buckets=["t", "u"])])
    cells = [(("level", "L5"), ("tag", "t"))]
    state = _fake_state(tmp_path, lambda level, j: (ArithDomain().sample_problem(random.Random(j), level), level),
                        cells, space=space, defs=[*ArithDomain().factor_defs(), tag], extra_factors={"tag": "t"})
    stats = cotrain_step(state, 0)
    records = state.pool.by_step(0)
    assert len(records) == 2 and all(r.valid and r.target == "level=L5,tag=t" for r in records)
    assert all("tag" not in r.card.factors and r.on_target is False for r in records)
    assert stats.evosyn.controllability == 0.0
    assert stats.evosyn.controllability_by_factor == {"level": 1.0, "tag": 0.0}  # which factor the cards missed


def test_screen_card_stamps_the_domains_factors_and_applies_its_rejection():
    domain = ArithDomain()
    defs = domain.factor_defs()
    raw = domain.static_cards(random.Random(0), 1)[0]  # 876-530: level L7

    card = parse_task_card(raw)
    card.factors.update({"level": "L1", "mine": "x"})  # the card's claims: level is the domain's to compute
    verdict = Verdict(valid=True, reasons=["reference_corrected: 345 -> 346"])
    assert screen_card(domain, defs, card, verdict) is verdict
    assert card.factors == {**domain.factors(card.payload.prompt_text()), **factor_values(card.payload.prompt_text(), defs), "mine": "x"}
    assert card.factors["level"] == "L7" and card.factors["zeros"] == "yes"  # a card factor and a candidate's

    held = domain.heldout(1, seed=1)[0]
    card = parse_task_card(raw.replace("876-530", held.problem))
    rejected = screen_card(domain, defs, card, verdict)
    assert not rejected.valid and rejected.reasons == ["heldout_problem", "reference_corrected: 345 -> 346"]
    assert verdict.valid  # the input verdict is not changed

    card = parse_task_card(raw)
    card.factors["level"] = "L1"
    invalid = Verdict(valid=False, reasons=["near_duplicate"])
    assert screen_card(domain, defs, card, invalid) is invalid and card.factors == {"level": "L1"}  # untouched
    # no factor space: the claims are not dropped first, the domain's card factors still overwrite them
    assert screen_card(domain, None, card, verdict) is verdict and card.factors["level"] == "L7"


@pytest.mark.parametrize(("window", "valid_per_step"), [(None, [4, 0, 0, 0]), (1, [4, 0, 4, 0]), (2, [4, 0, 0, 4])])
def test_novelty_window_lets_a_task_recur_once_it_left_the_window(tmp_path, monkeypatch, window, valid_per_step):
    """The same 4 cards every step: the whole pool (no window) rejects them for good; a window of N steps rejects
    them while a step of the last N admitted them, then lets them recur."""
    import random

    state = make_state(tmp_path, "uniform", n_cards=4, k=2)
    cards = state.domain.static_cards(random.Random(1), 4)
    assert len({parse_task_card(c).payload.prompt_text() for c in cards}) == 4
    monkeypatch.setattr(state.domain, "static_cards", lambda rng, n: cards[:n])
    state.verifier.config.novelty_window = window
    got = [cotrain_step(state, step).n_valid for step in range(4)]
    assert got == valid_per_step
    assert all(r.verdict.reason_codes == ["near_duplicate"] for r in state.pool.by_step(1))


@pytest.mark.slow
def test_the_pool_records_the_version_that_sampled_every_attempt(tmp_path) -> None:  # noqa: ANN001
    """Online co-training on the default world: each step's attempts (and cards) carry the agent's optimizer-step
    count when the engine sampled them, so the versions rise with the updates taken before."""
    import json
    import sqlite3

    from synco.cli import main

    main(["train", "steps=3", "seed=0", "threads=1", "n_cards=16", "heldout_per_group=1", "heldout_samples=0",
          f"runs_dir={tmp_path}", "run_id=v", "progress=false", "tensorboard=false"])
    run = tmp_path / "v"
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    con = sqlite3.connect(run / "pool.sqlite")
    got = con.execute("SELECT t.step, r.policy_version, t.synth_version FROM rollouts r JOIN tasks t USING (task_id) "
                      "GROUP BY t.step, r.policy_version, t.synth_version ORDER BY t.step").fetchall()
    reasoner = synth = 0
    want = []
    for line in lines:  # the version at a step is the number of updates the steps before it took
        want.append((line["step"], reasoner, synth))
        reasoner += line["reasoner_loss"] is not None
        synth += line["synth_loss"] is not None
    assert got == want and reasoner >= 1 and synth >= 1


def test_verified_cards_carry_their_domains_payload_whoever_verified_them(tmp_path) -> None:
    """A verifier that did not type its cards (Ray's check workers build theirs without the domain): the step's
    records still hold the domain's payload, so the pool stores it as such."""
    from synco.core.pool import TaskPool
    from synco.cotrain.cards import Draft
    from synco.cotrain.engine import verify
    from synco.domains.tools import ToolsDomain
    from synco.domains.tools.payload import ToolsPayload
    from synco.grading.verifier import TaskVerifier

    domain = ToolsDomain()
    untyped = TaskVerifier(oracle=domain.oracle)  # the default payload: a problem with solution and answer
    state = SimpleNamespace(verifier=untyped, settings=SimpleNamespace(revisits_corpus=False), evo=None, domain=domain,
                            pool=TaskPool(tmp_path / "pool.sqlite"))
    raws = domain.static_cards(random.Random(3), 2)
    records = verify(state, 0, [Draft(raw=r) for r in raws])
    assert [r.valid for r in records] == [True, True]
    assert all(isinstance(r.card.payload, ToolsPayload) for r in records)
    assert [json.dumps(r.card.wire(), separators=(",", ":")) for r in records] == raws  # the cards as written
    state.pool.close()
