"""Multi-turn episodes on a tiny char Llama: ids grow token-in/token-out, the mask marks who wrote what,
limits end episodes, environment errors stay inside one episode, and environment ids get no gradient."""

from __future__ import annotations

import torch

from synco.core.episodes import EnvStep, Episode, EpisodeGrade, EpisodeLimits, ToolCall
from synco.core.policy import GRPOConfig, PolicyConfig
from synco.core.sampling import Experience, SamplingParams
from synco.learn.charlm import char_tokenizer, tiny_llama
from synco.learn.grpo import policy_loss
from synco.learn.hf_policy import HFPolicy
from synco.rollout.episodes import run_episodes

torch.set_num_threads(1)


def make_policy(seed: int = 0) -> HFPolicy:
    tok = char_tokenizer()
    model = tiny_llama(tok, seed=seed, hidden_size=32, num_layers=2)
    return HFPolicy(model, tok, PolicyConfig(model_path="tiny", device="cpu", grpo=GRPOConfig(lr=1e-3)))


class CountingEnv:
    """A test environment: answers every turn with ``=<n>`` and ends after ``stop_after`` turns; grade = turns seen."""

    def __init__(self, stop_after: int = 99, raise_on: int | None = None) -> None:
        self.seen: list[str] = []
        self.stop_after, self.raise_on = stop_after, raise_on

    def step(self, text: str) -> EnvStep:
        self.seen.append(text)
        if self.raise_on is not None and len(self.seen) == self.raise_on:
            raise RuntimeError("environment bug")
        if len(self.seen) >= self.stop_after:
            return EnvStep("", True, ToolCall(name="done"))
        return EnvStep(f"\n={len(self.seen)}\n", False, ToolCall(name="look", arguments={"n": len(self.seen)}))

    def grade(self) -> EpisodeGrade:
        return EpisodeGrade(reward=float(len(self.seen)), correct=len(self.seen) == self.stop_after)


PARAMS = SamplingParams(temperature=1.0, max_new_tokens=8)


def test_ids_grow_turn_by_turn_and_the_mask_marks_the_environment() -> None:
    policy = make_policy()
    envs = [CountingEnv(stop_after=3) for _ in range(2)]
    eps = run_episodes(policy, ["T:go\n", "T:again\n"], lambda i: envs[i], PARAMS, EpisodeLimits(5, 400), seed=7)
    for ep, env in zip(eps, envs):
        assert ep.finish == "done" and ep.n_turns == 3 and ep.grade == EpisodeGrade(reward=3.0, correct=True)
        assert [t.role for t in ep.turns] == ["agent", "env", "agent", "env", "agent"]
        assert len(ep.completion_ids) == len(ep.mask) == len(ep.logprobs) == sum(t.n_tokens for t in ep.turns)
        at = 0
        for t in ep.turns:  # each turn's ids: agent ids as sampled (mask 1), observation ids as encoded (mask 0)
            ids = ep.completion_ids[at:at + t.n_tokens]
            assert ep.mask[at:at + t.n_tokens] == [int(t.role == "agent")] * t.n_tokens
            if t.role == "env":
                assert ids == policy.encode_text(t.text)
                assert ep.logprobs[at:at + t.n_tokens] == [0.0] * t.n_tokens
            else:
                assert policy.decode(ids) == t.text
            at += t.n_tokens
        assert [t.text for t in ep.turns if t.role == "agent"] == env.seen  # the environment saw the sampled texts


def test_agent_log_probs_are_the_models_on_the_whole_sequence() -> None:
    policy = make_policy(1)
    [ep] = run_episodes(policy, ["T:x\n"], lambda i: CountingEnv(stop_after=3), PARAMS, EpisodeLimits(5, 400), seed=3)
    ids = torch.tensor([ep.prompt_ids + ep.completion_ids])
    with torch.no_grad():
        logp = torch.log_softmax(policy.model(input_ids=ids).logits[0].float(), -1)
    p = len(ep.prompt_ids)
    forward = [float(logp[p + j - 1, ep.completion_ids[j]]) for j in range(len(ep.completion_ids))]
    for j, m in enumerate(ep.mask):
        if m:
            assert abs(forward[j] - ep.logprobs[j]) < 1e-4


def test_seeded_episodes_repeat_exactly() -> None:
    policy = make_policy(2)
    a = run_episodes(policy, ["T:a\n"] * 3, lambda i: CountingEnv(stop_after=2), PARAMS, EpisodeLimits(4, 200), seed=11)
    b = run_episodes(policy, ["T:a\n"] * 3, lambda i: CountingEnv(stop_after=2), PARAMS, EpisodeLimits(4, 200), seed=11)
    assert [e.completion_ids for e in a] == [e.completion_ids for e in b]


def test_turn_limit_and_token_budget_end_episodes() -> None:
    policy = make_policy(3)
    [ep] = run_episodes(policy, ["T:a\n"], lambda i: CountingEnv(), PARAMS, EpisodeLimits(max_turns=2, max_tokens=400))
    assert ep.finish == "max_turns" and ep.n_turns == 2 and [t.role for t in ep.turns] == ["agent", "env", "agent"]
    [ep] = run_episodes(policy, ["T:a\n"], lambda i: CountingEnv(), PARAMS, EpisodeLimits(max_turns=50, max_tokens=20))
    assert ep.finish == "token_budget" and len(ep.completion_ids) <= 20
    assert ep.grade is not None  # graded as it stands


def test_an_environment_error_ends_only_its_own_episode() -> None:
    policy = make_policy(4)
    envs = [CountingEnv(stop_after=3, raise_on=2), CountingEnv(stop_after=3)]
    bad, good = run_episodes(policy, ["T:a\n", "T:b\n"], lambda i: envs[i], PARAMS, EpisodeLimits(5, 400), seed=1)
    assert bad.grade == EpisodeGrade(reward=0.0, correct=False, parts={"env_error": 1.0}) and bad.n_turns == 2
    assert good.finish == "done" and good.grade is not None and good.grade.correct

    def broken(i: int) -> CountingEnv:
        raise ValueError("cannot host this card")

    [ep] = run_episodes(policy, ["T:a\n"], broken, PARAMS, EpisodeLimits(5, 400))
    assert ep.n_turns == 0 and ep.grade is not None and ep.grade.parts == {"env_error": 1.0}


# --------------------------------------------------------------------------- the loss mask


def test_policy_loss_gives_masked_tokens_exactly_zero_gradient() -> None:
    logp = torch.tensor([[-1.0, -2.0, -0.5, -3.0]], requires_grad=True)
    old = torch.tensor([[-1.2, 50.0, -0.4, -80.0]])  # absurd old log-probs on the masked ids must not matter
    mask = torch.tensor([[1.0, 0.0, 1.0, 0.0]])
    loss, st = policy_loss(logp, old, torch.tensor([1.5]), mask)
    loss.backward()
    assert logp.grad is not None and logp.grad[0, 1] == 0.0 and logp.grad[0, 3] == 0.0
    assert logp.grad[0, 0] != 0.0 and st.n_tokens == 2


def _episode_row(policy: HFPolicy, adv: float, env_ids: list[int] | None = None) -> Experience:
    agent1 = policy.encode_text("look(a)") + [2]
    obs = policy.encode_text("\n=42\n") if env_ids is None else env_ids
    agent2 = policy.encode_text("done(42)") + [2]
    ep = Episode(prompt_ids=policy.encode_prompt("T:x\n"))
    ep.add_agent("look(a)", agent1, [-1.0] * len(agent1), None)
    ep.add_env("\n=42\n", obs, None)
    ep.add_agent("done(42)", agent2, [-1.0] * len(agent2), None)
    return Experience(prompt_ids=list(ep.prompt_ids), completion_ids=list(ep.completion_ids), advantage=adv,
                      old_logprobs=list(ep.logprobs), loss_mask=list(ep.mask))  # as an episode's Attempt is trained


def _grads(policy: HFPolicy, batch: list[Experience]) -> dict[str, torch.Tensor]:
    policy.model.zero_grad(set_to_none=True)
    policy.compute_gradients(batch)
    return {n: p.grad.detach().clone() for n, p in policy.model.named_parameters() if p.grad is not None}


def test_environment_ids_carry_no_loss_in_the_update() -> None:
    """The gradient of an episode equals the sum of its agent tokens' terms alone: changing the old log-probs at
    environment ids (if they counted, the ratio there would explode) changes nothing, and the normaliser counts
    agent ids only."""
    policy = make_policy(5)
    row = _episode_row(policy, 1.0)
    base = _grads(policy, [row])
    poisoned = Experience(row.prompt_ids, row.completion_ids, row.advantage,
                          [lp if m else 40.0 for lp, m in zip(row.old_logprobs or [], row.loss_mask or [])],
                          row.loss_mask)
    other = _grads(policy, [poisoned])
    assert base.keys() == other.keys() and all(torch.equal(base[k], other[k]) for k in base)
    stats = policy.update([row])
    assert stats.n_tokens == sum(row.loss_mask or []) < len(row.completion_ids)


def test_a_mask_of_all_ones_is_the_single_turn_row() -> None:
    policy = make_policy(6)
    row = _episode_row(policy, -0.7)
    ones = Experience(row.prompt_ids, row.completion_ids, row.advantage, row.old_logprobs, [1] * len(row.completion_ids))
    plain = Experience(row.prompt_ids, row.completion_ids, row.advantage, row.old_logprobs)
    a, b = _grads(policy, [ones]), _grads(policy, [plain])
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_an_episode_update_changes_every_parameter() -> None:
    policy = make_policy(7)
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    stats = policy.update([_episode_row(policy, 1.0), _episode_row(policy, -1.0, policy.encode_text("\n=7\n"))])
    assert stats.stepped
    unchanged = [n for n, p in policy.model.named_parameters() if torch.equal(before[n], p.detach())]
    assert not unchanged


def test_a_bad_mask_is_refused_naming_the_row() -> None:
    policy = make_policy(8)
    row = _episode_row(policy, 1.0)
    import pytest

    with pytest.raises(ValueError, match="experience 0: loss_mask"):
        policy.update([Experience(row.prompt_ids, row.completion_ids, 1.0, None, [1, 0])])


class ChatEnv(CountingEnv):
    """CountingEnv whose observations are tool messages (``role``): written by the policy's chat format."""

    def step(self, text: str) -> EnvStep:
        step = super().step(text)
        return EnvStep(step.observation.strip(), step.done, step.tool_call, step.error, role="tool")


def test_an_observation_with_a_role_is_written_as_that_roles_chat_message() -> None:
    policy = make_policy()  # char tokenizer, no chat template: "\n<role>: <content>\n"
    [ep] = run_episodes(policy, ["T:go\n"], lambda i: ChatEnv(stop_after=3), PARAMS, EpisodeLimits(5, 400), seed=7)
    env_turns = [t for t in ep.turns if t.role == "env"]
    assert [t.text for t in env_turns] == ["\ntool: =1\n", "\ntool: =2\n"]
    at = 0
    for t in ep.turns:
        if t.role == "env":
            assert ep.completion_ids[at:at + t.n_tokens] == policy.encode_text(t.text)
            assert ep.mask[at:at + t.n_tokens] == [0] * t.n_tokens
        at += t.n_tokens


def test_a_turn_prefix_is_prefilled_at_every_turn_and_seen_by_the_environment() -> None:
    policy = make_policy()
    env = ChatEnv(stop_after=3)
    [ep] = run_episodes(policy, ["T:go\n>"], lambda i: env, PARAMS, EpisodeLimits(5, 400), seed=7, turn_prefix=">")
    agent = [t.text for t in ep.turns if t.role == "agent"]
    assert env.seen == [">" + a for a in agent]  # the environment reads each whole turn, prefix included
    assert [t.text for t in ep.turns if t.role == "env"] == ["\ntool: =1\n>", "\ntool: =2\n>"]  # prefilled: mask 0


def test_each_episode_builds_its_environment_with_its_attempt_index_at_its_card() -> None:
    """``act`` numbers a card's n episodes 0..n-1 and the jobs carry the numbers across their cuts, so a domain
    that varies its world by attempt (the tools world's database variants) gets the same index in any process."""
    import json

    import pytest

    from synco.core.records import TaskCard
    from synco.domains.tools import ToolsDomain
    from synco.rollout.episodes import act, episode_jobs

    class Recording(ToolsDomain):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[tuple[str, int]] = []

        def environment(self, card, reference, attempt=0):  # noqa: ANN001, ANN202 - the protocol's
            self.calls.append((card.payload.prompt_text(), attempt))
            return super().environment(card, reference, attempt)

    domain = Recording()
    cards = [TaskCard(**json.loads(domain.format_card(p, "find_product(lamp)", "26", "lookup")))
             for p in ("what does the lamp cost?", "how much is a lamp?")]
    episodes = act(make_policy(), domain, cards, ["26", "26"], 4, PARAMS, EpisodeLimits(1, 40), seed=1, group_size=3)
    assert [len(g) for g in episodes] == [4, 4]
    assert domain.calls == [(c.payload.prompt_text(), a) for c in cards for a in range(4)]
    jobs = episode_jobs(["p"] * 8, [cards[0]] * 8, ["26"] * 8, [0, 1, 2, 3] * 2, PARAMS, EpisodeLimits(1, 40), 1, 3)
    assert [j.attempts for j in jobs] == [(0, 1, 2), (3, 0, 1), (2, 3)]
    with pytest.raises(ValueError, match="8 prompts, 8 cards, 8 references and 7 attempt indices"):
        episode_jobs(["p"] * 8, [cards[0]] * 8, ["26"] * 8, [0] * 7, PARAMS, EpisodeLimits(1, 40), 1, 3)
