"""arith-chat inside a run: a real co-training step on the shipped tiny models, and the held-out grading path."""

from __future__ import annotations

import re
from pathlib import Path

from synco.config import load_config
from synco.core.sampling import Completion
from synco.cotrain.engine import cotrain_step
from synco.domains.arith_chat import ArithChatDomain, read_equation_answer
from synco.grading.checker import AnswerChecker
from synco.run.heldout import evaluate_heldout
from synco.run.setup import setup_run


def test_a_cotrain_step_prompts_with_the_equation_and_grades_with_the_domain_reader(tmp_path: Path) -> None:
    """The arith preset's tiny char models on arith-chat (no chat template: plain prompts): every attempt starts
    with its problem's equation, and its grade is exactly the domain reader's answer against the oracle."""
    cfg = load_config("arith", overrides=["domain=arith-chat", "n_cards=16", "k=2", f"runs_dir={tmp_path}", "run_id=t",
                                          "heldout_per_group=0", "tensorboard=false", "progress=false", "threads=1"])
    state = setup_run(cfg).state
    domain = state.domain
    assert isinstance(domain, ArithChatDomain)
    cotrain_step(state, 0)
    records = state.pool.recent(100)
    graded = [(rec, r) for rec in records if rec.valid for r in rec.rollouts]
    assert graded, "the tiny Synthesizer writes valid arith cards"
    for rec, r in graded:
        assert rec.card is not None
        assert r.text.startswith(domain.reasoner_response_prefix_for(rec.card.payload.prompt_text()))
        answer = read_equation_answer(r.text)
        assert r.answer == answer and r.method == ("domain" if answer is not None else "none")
        assert r.correct == (answer == domain.answer(rec.card.payload.prompt_text()))
        assert r.reward == (1.0 if r.correct else 0.0) * 0.9  # the arith preset's correct_unboxed reward


class _Scripted:
    """Answers each held-out equation right when its first operand is even, else off by one (a test double)."""

    policy_version = 0

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def format_prompt(self, user_text: str, system: str | None = None) -> str:
        return f"<user>{user_text}</user>"

    def generate(self, prompts, n, params=None):  # noqa: ANN001, ANN201
        self.prompts += prompts
        out = []
        for p in prompts:
            a, op, b = re.search(r"(\d+) ([-+*]) (\d+) = $", p).groups()  # type: ignore[union-attr]
            value = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op] + int(a) % 2
            out.append([Completion(f"{value}.\n\nThis is", [1], [2], [-0.1], True, "length") for _ in range(n)])
        return out


def test_heldout_is_graded_with_the_domain_reader() -> None:
    domain = ArithChatDomain(heldout_levels=["L1", "L8"])
    items = domain.heldout(6, seed=2)
    policy = _Scripted()
    acc = evaluate_heldout(policy, domain, items, AnswerChecker(use_math_verify=False), 6)  # type: ignore[arg-type]
    want: dict[str, list[bool]] = {}
    for it in items:
        want.setdefault(it.group, []).append(int(re.match(r"\d+", it.problem).group(0)) % 2 == 0)  # type: ignore[union-attr]
    assert acc == {g: sum(v) / len(v) for g, v in want.items()}
    assert policy.prompts[0].startswith("<user>What is ") and policy.prompts[0].endswith(" = ")
