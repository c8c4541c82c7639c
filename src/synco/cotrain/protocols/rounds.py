"""EvoSyn's synthesis rounds and rejection-sampling fine-tuning (``protocol=rounds`` / ``rft``).

A round is ``rounds.steps_per_round`` ordinary steps of :func:`synco.cotrain.engine.cotrain_step`
with the Reasoner's update switched off: tasks are written (or, for rft, drawn from the
fixed corpus), verified, solved ``k`` times and recorded; the Reasoner does not change
within a round, so every attempt of the round measures the same learner (the report, the
Designer's allocation and the Reflector read those measurements). The round's last step
then trains the Reasoner on what the pool holds of the round (or of every round so far,
``accumulate``): SFT on correct attempts or reference answers, or GRPO on the round's tasks. In a
world whose cards carry a gold trajectory (tools), a reference is the task's gold episode, replayed
on its environment (:mod:`synco.rollout.gold`): EvoSyn's SFT on verified, executable trajectories.

Everything a round trains on is read back from the pool, and the shuffling is seeded by
the run seed and the round, so a run resumed mid-round rebuilds exactly the same data:
nothing of a round is pickled into a checkpoint. The fresh attempts of ``update=grpo``
draw their request seeds as the step's own requests do (:func:`~synco.cotrain.settings.request_seed`),
so with ``seed_per_request`` a Ray run records the same round as the in-process one. An attempt is
trained on the token ids it was sampled as (the pool keeps them), not on its text tokenised again:
with a BPE tokenizer the two can differ, and the update must raise the probability of what was
sampled and graded. Attempts of a pool written before the ids were kept are tokenised from their
text (counted in ``round_retokenized``, with a warning).
"""

from __future__ import annotations

import dataclasses
import random
import time
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence, TypeVar, cast

from synco.domains.base import (Domain, HasAnswerFormat, HasEnvironment, HasProblemResponsePrefix,
                               problem_response_prefix, reasoner_prompts)
from synco.cotrain.protocols.base import TrainingProtocol
from synco.cotrain.protocols.config import RoundsConfig, legacy_rounds
from synco.cotrain.settings import StepPlan, request_seed
from synco.cotrain.stats import RoundStats, StepStats
from synco.rollout.attempts import Task
from synco.core.episodes import EpisodeLimits
from synco.core.policy import Learner, Policy, UpdateStats
from synco.core.sampling import SFTExample
from synco.core.records import TaskCard, TaskRecord
from synco.core.text import counted
from synco.rollout.gold import GoldPolicy, gold_episodes

if TYPE_CHECKING:
    from synco.cotrain.engine import CoTrainState

T = TypeVar("T")


@dataclass(frozen=True)
class RoundTraining:
    """What a round's training did: examples (or tasks), optimizer steps, mean loss, fresh rollouts, and how
    many attempt examples had no stored ids and were tokenised from their text (an old pool's)."""

    examples: int
    updates: int
    loss: float | None
    rollouts: int
    retokenized: int = 0


@dataclass(frozen=True)
class SFTCompletion:
    """One completion a task contributes to SFT: its text without the prefilled response prefix, the ids
    that were sampled after the prompt (None for a reference answer, or an attempt stored without ids) and,
    for an episode, which of them the agent sampled (1) and which the environment wrote (0)."""

    text: str
    ids: tuple[int, ...] | None = None
    mask: tuple[int, ...] | None = None


def round_of(step: int, cfg: RoundsConfig) -> int:
    """The round a step belongs to."""
    return step // cfg.steps_per_round


def round_ends(step: int, cfg: RoundsConfig, total_steps: int) -> bool:
    """Whether ``step`` closes its round (a full round, or the run's last step)."""
    return (step + 1) % cfg.steps_per_round == 0 or step + 1 == total_steps


def round_plan(step: int, cfg: RoundsConfig, total_steps: int, protocol: str = "rounds") -> StepPlan:
    """What a step of a round changes in the co-training step: the Reasoner only solves; the round's last step
    is its ``train`` phase (trained afterwards by :func:`train_round`), the others ``collect``."""
    phase = "train" if round_ends(step, cfg, total_steps) else "collect"
    return StepPlan(update_reasoner=False, protocol=protocol, round=round_of(step, cfg), phase=phase)


def training_steps(step: int, cfg: RoundsConfig) -> range:
    """The steps whose pool records the round closed by ``step`` trains on: its own, or all so far."""
    first = 0 if cfg.accumulate else round_of(step, cfg) * cfg.steps_per_round
    return range(first, step + 1)


def reference_response(domain: Domain, card: TaskCard, reference: str) -> str:
    """A task's verified answer as a whole Reasoner response (response prefix included).

    The domain's ``format_reasoner_answer`` when it has one (:class:`~synco.domains.base.HasAnswerFormat`;
    arith: ``\\boxed{2082}``), after the problem's own prefix in a domain that has one (arith-chat:
    ``964 + 6 = 970``), else the card's solution (``TaskPayload.solution_text``) followed by the boxed answer.
    """
    task = card.payload
    if isinstance(domain, HasAnswerFormat):
        lead = (domain.reasoner_response_prefix_for(task.prompt_text()) if isinstance(domain, HasProblemResponsePrefix)
                else "")
        return lead + str(domain.format_reasoner_answer(reference))
    return f"{task.solution_text().strip()}\n\n\\boxed{{{reference}}}"


def sft_completions(record: TaskRecord, domain: Domain, cfg: RoundsConfig) -> list[SFTCompletion]:
    """The completions one task contributes to SFT, without the prefilled response prefix.

    Valid tasks only. ``attempts``: up to ``per_task`` distinct correct, untruncated attempts (distinct
    by text; the first attempt's sampled ids), in attempt order; ``reference``: the verified answer as a
    response, except where the oracle corrected the card's answer and the domain builds the response
    from the card's solution, which argues for the wrong answer (nothing then). A text that does not
    start with the prefix the prompt ends with cannot be a continuation of it and is left out.

    An episode (a rollout with turns) is trained as it ran: its ids, agent and environment turns in order,
    with the mask that trains the agent's ids only; one stored without ids cannot be rebuilt token for
    token from its text and is left out.
    """
    if not record.valid or record.card is None:
        return []
    found: dict[str, SFTCompletion] = {}  # by the whole response text; the prefix is cut below
    if cfg.target == "reference":
        if "reference_corrected" in record.verdict.reason_codes and not isinstance(domain, HasAnswerFormat):
            return []
        text = reference_response(domain, record.card, record.reference)
        found[text] = SFTCompletion(text)
    else:
        for r in record.rollouts:
            if not r.correct or r.truncated or r.text in found:
                continue
            ids = tuple(r.completion_ids) if r.completion_ids else None
            mask = r.loss_mask
            if mask is None:  # every id sampled (a one-turn answer)
                found[r.text] = SFTCompletion(r.text, ids)
                continue
            # an episode with environment ids: kept only when its ids and mask can be trained as they ran
            if ids is not None and len(mask) == len(ids) and any(mask):
                found[r.text] = SFTCompletion(r.text, ids, tuple(mask))
    prefix = problem_response_prefix(domain, record.card.payload.prompt_text())
    return [dataclasses.replace(c, text=c.text[len(prefix):]) for c in found.values()
            if c.text.startswith(prefix)][:cfg.per_task]


def sft_examples(records: Sequence[TaskRecord], policy: Policy, domain: Domain, cfg: RoundsConfig,
                 limits: EpisodeLimits | None = None) -> list[SFTExample]:
    """The round's SFT data: distinct (prompt text, completion text) pairs, prompts exactly as
    :func:`~synco.domains.base.solve` builds them, completions as the ids that were sampled.

    The policy encodes a prompt text the same way for sampling and for SFT, so the prompt ids are the
    ones sampling conditioned on (the prefilled prefix belongs to the prompt); the completion ids are
    the stored sampled ids, so SFT trains exactly the tokens a rollout sampled and was graded on.
    ``target=reference`` on a domain whose Reasoner acts: each task's gold episode (:func:`gold_examples`).
    """
    if cfg.target == "reference" and isinstance(domain, HasEnvironment):
        if limits is None:
            raise ValueError("gold episodes need the run's episode limits (max_turns, max_episode_tokens)")
        return gold_examples(records, policy, domain, limits)
    pairs: dict[tuple[str, str], SFTCompletion] = {}
    for r in records:
        if r.card is not None:
            for c in sft_completions(r, domain, cfg):
                pairs.setdefault((r.card.payload.prompt_text(), c.text), c)
    prompts = reasoner_prompts(policy, domain, [p for p, _ in pairs])
    return [SFTExample(prompt, text, c.ids, c.mask) for prompt, ((_, text), c) in zip(prompts, pairs.items())]


def gold_examples(records: Sequence[TaskRecord], policy: Policy, domain: Domain,
                  limits: EpisodeLimits) -> list[SFTExample]:
    """EvoSyn's training data on an acting domain: the gold episode of each distinct valid task (by prompt text and
    gold solution), replayed on the task's environment (:func:`~synco.rollout.gold.gold_episodes`), trained on the
    agent's turns only (the observations are context, mask 0). A task whose gold episode does not pass its own
    grade within the episode limits gives nothing."""
    if not isinstance(policy, GoldPolicy):
        raise TypeError(f"rounds.target=reference on domain {domain.name!r} replays gold episodes with the Reasoner's "
                        f"tokenizer; {type(policy).__name__} has no encode_text / eos_ids (GoldPolicy)")
    tasks = {(r.card.payload.prompt_text(), r.card.payload.solution_text()): (r.card, r.reference)
             for r in records if r.valid and r.card is not None}
    cards = [c for c, _ in tasks.values()]
    episodes = gold_episodes(policy, domain, cards, [ref for _, ref in tasks.values()], limits)
    prompts = reasoner_prompts(policy, domain, [c.payload.prompt_text() for c in cards])
    return [SFTExample(prompt, ep.text, tuple(ep.completion_ids), tuple(ep.mask))
            for prompt, ep in zip(prompts, episodes) if ep is not None]


def grpo_tasks(records: Sequence[TaskRecord]) -> list[Task]:
    """Each distinct valid task (by prompt text and reference, in pool order, with its card for an environment): what
    ``update=grpo`` trains on."""
    tasks: dict[tuple[str, str], Task] = {}
    for r in records:
        if r.valid and r.card is not None:
            task = Task.of(r.card, r.reference)
            tasks.setdefault((task.prompt, task.reference), task)
    return list(tasks.values())


def grpo_update(state: CoTrainState, tasks: Sequence[Task]) -> tuple[UpdateStats | None, int]:
    """One Reasoner GRPO step on ``tasks``: k fresh attempts each through the rollout seam (answers graded against
    the reference, or episodes graded by their environments), in any domain.

    The request is seeded as a step's own (:func:`~synco.cotrain.settings.request_seed`) and the batch is built
    as a step's (:func:`~synco.cotrain.batches.attempts_batch`): groups with equal rewards stay in it with
    advantage 0, and no step is taken when nothing is gradient-bearing. The update is published before the next
    one samples (asynchronously the learner does not publish by itself: the round's GRPO is on-policy all the same).
    Returns the update (None when none was taken) and the number of attempts sampled.
    """
    from synco.cotrain.batches import attempts_batch  # torch: only when a round trains by GRPO

    s = state.settings
    groups = state.solver.attempts(state.reasoner, tasks, s.k, s.reasoner_sampling, request_seed(state))
    batch, _ = attempts_batch(groups, s.reasoner_scale_by_std)
    n = sum(len(g) for g in groups)
    if not batch:
        return None, n
    learner = cast(Learner, state.reasoner)
    upd = learner.update(batch)
    learner.publish()
    return upd, n


def _minibatches(data: Sequence[T], cfg: RoundsConfig, rng: random.Random) -> list[list[T]]:
    """``epochs`` passes over ``data``, each freshly shuffled, cut into batches of ``batch_size``."""
    out: list[list[T]] = []
    for _ in range(cfg.epochs):
        order = list(data)
        rng.shuffle(order)
        out += [order[i:i + cfg.batch_size] for i in range(0, len(order), cfg.batch_size)]
    return out


def train_round(state: CoTrainState, step: int, cfg: RoundsConfig, seed: int) -> RoundTraining:
    """Train the Reasoner on the pool's records of the round that ``step`` closes (see :func:`training_steps`)."""
    sft = cfg.update == "sft"
    records = [rec for s in training_steps(step, cfg) for rec in state.pool.by_step(s, token_ids=sft)]
    rng = random.Random(f"rounds:{seed}:{round_of(step, cfg)}")
    updates: list[UpdateStats] = []
    rollouts = retokenized = 0
    if sft:
        examples = sft_examples(records, state.reasoner, state.domain, cfg, state.settings.limits)
        n_data = len(examples)
        if cfg.target == "attempts":
            retokenized = sum(e.completion_ids is None for e in examples)
        if retokenized:
            warnings.warn(f"round {round_of(step, cfg)}: {retokenized} of {n_data} SFT attempts have no stored "
                          f"token ids (a pool written before they were kept) and are re-tokenised from their text, "
                          f"which a BPE tokenizer may split otherwise than it was sampled", stacklevel=2)
        for batch in _minibatches(examples, cfg, rng):
            updates.append(state.reasoner.sft_update(batch, cfg.sft_lr))
    else:
        tasks = grpo_tasks(records)
        n_data = len(tasks)
        for chunk in _minibatches(tasks, cfg, rng):
            upd, n = grpo_update(state, chunk)
            rollouts += n
            if upd is not None:
                updates.append(upd)
    stepped = [u for u in updates if u.stepped]
    loss = sum(u.loss for u in stepped) / len(stepped) if stepped else None
    return RoundTraining(examples=n_data, updates=len(stepped), loss=loss, rollouts=rollouts, retokenized=retokenized)


def after_round_step(state: CoTrainState, step: int, stats: StepStats, cfg: RoundsConfig, total_steps: int,
                     seed: int) -> StepStats:
    """Once a step of a round is recorded: at the round's last step, train the Reasoner on the round's data."""
    if not round_ends(step, cfg, total_steps):
        return stats
    t = time.perf_counter()
    done = train_round(state, step, cfg, seed)
    return stats.model_copy(update={"t_train": stats.t_train + time.perf_counter() - t, "training": RoundStats(
        round_examples=done.examples, round_updates=done.updates, round_loss=done.loss, round_rollouts=done.rollouts,
        round_retokenized=done.retokenized)})


def round_training(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per trained round, from metrics.jsonl rows: step, round, examples, updates, loss, rollouts, retokenized."""
    return [{"step": r["step"], "round": r.get("round"), "examples": r["round_examples"],
             "updates": r.get("round_updates"), "loss": r.get("round_loss"), "rollouts": r.get("round_rollouts"),
             "retokenized": r.get("round_retokenized")}
            for r in rows if r.get("round_examples") is not None]


@dataclass(frozen=True, kw_only=True)
class Rounds(TrainingProtocol):
    """EvoSyn's rounds: the Reasoner only solves within a round; the round's last step then trains it (``after``).
    A learning-effect period is a round, in which the Reasoner does not change."""

    name: str = "rounds"
    rounds: RoundsConfig = field(default_factory=RoundsConfig)
    seed: int = 0  # the run seed: a round's shuffling is seeded by it and the round

    @property
    def sft_on_references(self) -> bool:
        return self.rounds.update == "sft" and self.rounds.target == "reference"

    def plan(self, step: int) -> StepPlan:
        return round_plan(step, self.rounds, self.steps, self.name)

    def after(self, state: CoTrainState, step: int, stats: StepStats) -> StepStats:
        return after_round_step(state, step, stats, self.rounds, self.steps, self.seed)

    def closes_round(self, step: int) -> bool:
        return round_ends(step, self.rounds, self.steps)

    def period_length(self) -> int:
        return self.rounds.steps_per_round

    def settings(self) -> dict[str, Any]:
        return {"rounds": self.rounds.model_dump()}

    def saved_settings(self, saved: dict[str, Any]) -> dict[str, Any]:
        if isinstance(saved.get("rounds"), dict):  # a checkpoint written before rounds.lr became rounds.sft_lr
            saved = {**saved, "rounds": legacy_rounds(saved["rounds"])}
        return saved

    def describe(self, rows: Sequence[dict[str, Any]]) -> list[str]:
        if not rows:
            return []
        n_rounds = len({r.get("round") for r in rows})
        out = [f"protocol {self.name}: {counted(n_rounds, 'round')}; the Reasoner trained at the end of each on"]
        for t in round_training(rows):
            loss = "-" if t["loss"] is None else f"{t['loss']:.4f}"
            extra = f", {t['rollouts']} fresh rollouts" if t.get("rollouts") else ""
            if t.get("retokenized"):
                extra += f", {t['retokenized']} attempts re-tokenised from text (no stored ids)"
            unit = counted(t["examples"], "task") + " (GRPO)" if t.get("rollouts") else \
                counted(t["examples"], "example") + " (SFT)"
            out.append(f"  round {t['round']} (step {t['step']}): {unit}, {counted(t['updates'], 'update')}, "
                       f"loss {loss}{extra}")
        return out
