"""synco.domains.base: the shared Reasoner-prompt path (solve) and the response prefix."""

from synco.domains.base import response_prefix, solve
from synco.core.sampling import Completion, SamplingParams


class _EchoPolicy:
    """Records the prompts it is given and answers ``7}`` to each (a stand-in for a real policy)."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def format_prompt(self, user_text: str, system: str | None = None) -> str:
        return f"[{system}]{user_text}"

    def generate(self, prompts, n, params=None):
        self.prompts = list(prompts)
        return [[Completion("7}", [1, 2], [3, 4], [-0.1, -0.2], False, "stop") for _ in range(n)] for _ in prompts]


class _Domain:
    def __init__(self, prefix: str | None) -> None:
        if prefix is not None:
            self.reasoner_response_prefix = prefix

    def reasoner_prompt(self, problem: str) -> str:
        return f"Q:{problem}\nA:"

    def reasoner_system_prompt(self) -> str | None:
        return "sys"


def test_response_prefix_defaults_to_empty() -> None:
    assert response_prefix(_Domain(None)) == ""
    assert response_prefix(_Domain("\\boxed{")) == "\\boxed{"


def test_solve_prefills_the_prefix_and_puts_it_back_in_front_of_each_text() -> None:
    policy = _EchoPolicy()
    out = solve(policy, _Domain("\\boxed{"), ["3+4", "1+6"], 2, SamplingParams())
    assert policy.prompts == ["[sys]Q:3+4\nA:\\boxed{", "[sys]Q:1+6\nA:\\boxed{"]
    assert [[c.text for c in g] for g in out] == [["\\boxed{7}"] * 2] * 2
    # token ids and log-probs stay those of the generated tokens only: the prefix is part of the prompt
    assert out[0][0].completion_ids == [3, 4] and out[0][0].logprobs == [-0.1, -0.2]


def test_solve_without_prefix_returns_the_policy_output_unchanged() -> None:
    policy = _EchoPolicy()
    out = solve(policy, _Domain(None), ["3+4"], 1)
    assert policy.prompts == ["[sys]Q:3+4\nA:"] and out[0][0].text == "7}"
