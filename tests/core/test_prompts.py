"""Prompt templates: literal substitution, user folders, the shipped Reasoner prompt."""

from __future__ import annotations

from pathlib import Path

import pytest

from synco.core.prompts import PROMPTS_ENV, PromptError, load_prompt, placeholders, reasoner_prompt, render


@pytest.fixture(autouse=True)
def _no_user_prompt_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROMPTS_ENV, raising=False)


def test_render_replaces_exactly_the_given_names() -> None:
    assert render("Q: {{problem}} ({{style}})", problem="1+1?", style="short") == "Q: 1+1? (short)"
    # a name not given stays verbatim
    assert render("{{problem}} {{other}}", problem="x") == "x {{other}}"


def test_latex_braces_survive_in_template_and_value() -> None:
    template = r"Write \boxed{} and \frac{a}{b}; {single} {{ spaced }} {{problem}}"
    value = r"Compute $\frac{1}{2} + \sqrt{\frac{3}{4}}$ with {0} and {}."
    out = render(template, problem=value)
    assert out == r"Write \boxed{} and \frac{a}{b}; {single} {{ spaced }} " + value


def test_value_containing_a_placeholder_is_not_substituted_again() -> None:
    out = render("A={{a}} B={{b}}", a="{{b}}", b="{{a}}")
    assert out == "A={{b}} B={{a}}"
    assert render("{{problem}}", problem="see {{problem}}") == "see {{problem}}"


def test_render_rejects_a_name_missing_from_the_template() -> None:
    with pytest.raises(PromptError, match=r"\{\{problem\}\}"):
        render("no placeholder here", problem="x")


def test_render_rejects_non_string_values() -> None:
    with pytest.raises(PromptError, match="string"):
        render("{{n}}", n=3)  # type: ignore[arg-type]


def test_placeholders() -> None:
    assert placeholders(r"{{a}} {{b_2}} {{ c }} \frac{{x}}{y} {{}}") == {"a", "b_2", "x"}


def test_shipped_reasoner_prompt_holds_the_problem_and_the_box_instruction() -> None:
    text = reasoner_prompt(r"What is $\frac{6}{3}$?")
    assert text.startswith(r"What is $\frac{6}{3}$?")
    assert r"\boxed{}" in text and "step by step" in text
    assert "{{" not in text
    assert load_prompt("reasoner_system") == ""


def test_user_folder_overrides_and_env_var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "reasoner.txt").write_text("Solve: {{problem}}\n\n", encoding="utf-8")
    assert reasoner_prompt("2+2", prompts_dir=tmp_path) == "Solve: 2+2"  # trailing newlines dropped
    monkeypatch.setenv(PROMPTS_ENV, str(tmp_path))
    assert reasoner_prompt("3+3") == "Solve: 3+3"
    # a template the user folder lacks still comes from the shipped folder
    assert load_prompt("reasoner_system") == ""


def test_missing_folder_and_template_are_errors(tmp_path: Path) -> None:
    with pytest.raises(PromptError, match="does not exist"):
        load_prompt("reasoner", prompts_dir=tmp_path / "nope")
    with pytest.raises(PromptError, match="no template"):
        load_prompt("no_such_template", prompts_dir=tmp_path)
    with pytest.raises(PromptError, match="invalid template name"):
        load_prompt("../etc/passwd")
