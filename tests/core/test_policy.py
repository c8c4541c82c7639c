"""The learner's contract is torch-free and names no implementation; one prompt builder."""

from __future__ import annotations

import subprocess
import sys

import pytest

from synco.core.prompts import build_prompt


def test_config_and_policy_contract_load_without_torch() -> None:
    code = ("import sys, synco.config, synco.core.policy\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n"
            "import synco.learn.hf_policy\n"
            "assert 'torch' in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_contract_does_not_reexport_the_implementation() -> None:
    """The core layer must not reach up into ``synco.learn`` (the import contract); HFPolicy lives there only."""
    import synco.core.policy

    with pytest.raises(AttributeError, match="has no attribute 'HFPolicy'"):
        synco.core.policy.HFPolicy  # noqa: B018


class _Templated:
    chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def apply_chat_template(self, messages, tokenize, add_generation_prompt, **extra):  # noqa: ANN001, ANN201
        self.calls.append(extra)
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"


class _Plain:
    chat_template = None


def test_build_prompt_with_and_without_template() -> None:
    tok = _Templated()
    assert build_prompt(tok, "2+2?", "be brief") == "<system>be brief<user>2+2?<assistant>"
    assert build_prompt(tok, "2+2?") == "<user>2+2?<assistant>"
    assert build_prompt(tok, "2+2?", "sys", use_chat_template=False) == "sys\n\n2+2?"
    assert build_prompt(_Plain(), "2+2?", "sys") == "sys\n\n2+2?"
    assert build_prompt(_Plain(), "2+2?") == "2+2?"
    with pytest.raises(ValueError, match="no chat_template"):
        build_prompt(_Plain(), "x", use_chat_template=True)


def test_build_prompt_passes_thinking_only_when_set() -> None:
    tok = _Templated()
    build_prompt(tok, "q")
    build_prompt(tok, "q", enable_thinking=False)
    assert tok.calls == [{}, {"enable_thinking": False}]


def test_each_agent_can_name_its_own_gpu() -> None:
    from synco.config import ConfigError, load_config

    cfg = load_config("arith", overrides=["synthesizer.device=cuda:0", "reasoner.device=cuda:1"])
    assert (cfg.synthesizer.device, cfg.reasoner.device) == ("cuda:0", "cuda:1")
    with pytest.raises(ConfigError, match=r"reasoner\.device.*'gpu'"):
        load_config("arith", overrides=["reasoner.device=gpu"])
