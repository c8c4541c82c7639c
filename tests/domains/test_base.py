"""synco.domains.base: the shared Reasoner-prompt path (solve) and the response prefix."""

import re

from synco.domains import base
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


def test_the_builtins_declare_their_capabilities_and_needs() -> None:
    """Each optional capability is a protocol checked with isinstance; the built-ins have what their runs use."""
    from synco.domains.arith import ArithDomain
    from synco.domains.base import (Domain, DomainNeeds, HasAnswerFormat, HasCardTemplate, HasFactorSpace,
                                    HasResponsePrefix)
    from synco.domains.math import MathDomain

    arith, math = ArithDomain(), MathDomain()
    has = [HasResponsePrefix, HasAnswerFormat, HasCardTemplate, HasFactorSpace]
    assert [isinstance(arith, p) for p in has] == [True, True, False, True]
    assert [isinstance(math, p) for p in has] == [False, False, True, True]
    assert isinstance(arith, Domain) and isinstance(math, Domain)
    assert arith.needs == DomainNeeds(chat_model=False) and math.needs == DomainNeeds(chat_model=True)
    assert response_prefix(arith) == "\\boxed{" and response_prefix(math) == ""


class _EquationDomain(_Domain):
    """A per-problem prefix (the problem's equation) and its own answer reader."""

    def __init__(self) -> None:
        super().__init__("\\boxed{")  # the per-problem prefix wins over a fixed one

    def reasoner_response_prefix_for(self, problem: str) -> str:
        return f"{problem} = "

    def extract_reasoner_answer(self, response: str) -> str | None:
        return response.rsplit("= ", 1)[-1].rstrip("}") or None


def test_a_per_problem_prefix_is_prefilled_and_put_back_per_problem() -> None:
    from synco.domains.base import problem_response_prefix, reasoner_prompts

    policy, domain = _EchoPolicy(), _EquationDomain()
    assert problem_response_prefix(domain, "3+4") == "3+4 = " and problem_response_prefix(_Domain("x"), "3+4") == "x"
    assert problem_response_prefix(_Domain(None), "3+4") == ""
    out = solve(policy, domain, ["3+4", "1+6"], 2)
    assert policy.prompts == ["[sys]Q:3+4\nA:3+4 = ", "[sys]Q:1+6\nA:1+6 = "]
    assert reasoner_prompts(policy, domain, ["3+4", "1+6"]) == policy.prompts
    assert [[c.text for c in g] for g in out] == [["3+4 = 7}"] * 2, ["1+6 = 7}"] * 2]
    assert out[1][0].completion_ids == [3, 4]  # the prefix stays out of the generated ids


def test_answer_extractor_is_the_domains_reader_or_none() -> None:
    from synco.domains.base import HasAnswerExtractor, HasProblemResponsePrefix, answer_extractor

    domain = _EquationDomain()
    assert isinstance(domain, HasAnswerExtractor) and isinstance(domain, HasProblemResponsePrefix)
    read = answer_extractor(domain)
    assert read is not None and read("3+4 = 7}") == "7"
    assert answer_extractor(_Domain("\\boxed{")) is None  # grading then uses reward-mode extraction


def test_the_module_docstring_names_every_capability() -> None:
    """Every runtime-checkable capability ``base`` exports is listed in its docstring, and nothing else."""
    capabilities = {n for n in base.__all__ if n.startswith("Has")}
    assert len(capabilities) == 14  # HasNativeTasks, HasAnswerForm, HasCellCards joined the twelve of the review;
    # HasFactorSubject left (the payload says what factors read), HasPayloadType moved beside the payloads
    assert set(re.findall(r":class:`(Has\w+)`", base.__doc__ or "")) == capabilities
