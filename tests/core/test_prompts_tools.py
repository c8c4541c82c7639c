"""Tools in the prompt and chat-formatted environment turns (``build_prompt(tools=)``, ``chat_turn_text``)."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from synco.core.prompts import TOOL_CALL_OPEN, build_prompt, chat_turn_text, tools_system_text

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
"""A ChatML template that ignores ``tools`` (as SmolLM2's does)."""

WITH_TOOLS = ("{% if tools %}<|im_start|>system\nTOOLS:{% for t in tools %}{{ t['function']['name'] }};{% endfor %}"
              "<|im_end|>\n{% endif %}{% for m in messages %}{% if m['role'] == 'tool' %}<|im_start|>user\n"
              "<tool_response>{{ m['content'] }}</tool_response><|im_end|>\n{% else %}<|im_start|>{{ m['role'] }}\n"
              "{{ m['content'] }}<|im_end|>\n{% endif %}{% endfor %}"
              "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
"""A template that renders tools and wraps tool results in a user turn (as Qwen3's does)."""

TOOLS = [{"type": "function", "function": {"name": "get_user", "description": "look a user up",
                                           "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}}]


def _tokenizer(template: str | None) -> PreTrainedTokenizerFast:
    vocab = {"<unk>": 0, "<|im_start|>": 1, "<|im_end|>": 2}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>", eos_token="<|im_end|>",
                                  additional_special_tokens=["<|im_start|>"])
    tok.chat_template = template
    return tok


def test_a_template_that_ignores_tools_gets_them_in_the_system_prompt() -> None:
    text = build_prompt(_tokenizer(CHATML), "hi", "POLICY", tools=TOOLS)
    assert text.startswith("<|im_start|>system\nPOLICY\n\n# Tools\n")
    assert TOOL_CALL_OPEN in text and json.dumps(TOOLS[0], sort_keys=True, separators=(",", ":")) in text
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    assert build_prompt(_tokenizer(CHATML), "hi", "POLICY") == \
        "<|im_start|>system\nPOLICY<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_a_template_that_renders_tools_writes_them_its_own_way() -> None:
    text = build_prompt(_tokenizer(WITH_TOOLS), "hi", None, tools=TOOLS)
    assert text == "<|im_start|>system\nTOOLS:get_user;<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_without_a_template_the_tools_lead_the_prompt() -> None:
    assert build_prompt(_tokenizer(None), "hi", tools=TOOLS) == f"{tools_system_text(None, TOOLS)}\n\nhi"


@pytest.mark.parametrize("closed, start", [(True, "\n"), (False, "<|im_end|>\n")])
def test_an_environment_turn_is_what_the_template_would_have_appended(closed: bool, start: str) -> None:
    tok = _tokenizer(CHATML)
    assert chat_turn_text(tok, "tool", '{"a": 1}', closed) == \
        f'{start}<|im_start|>tool\n{{"a": 1}}<|im_end|>\n<|im_start|>assistant\n'
    # the whole transcript, grown turn by turn, equals the template's rendering of it (no drift)
    prompt = build_prompt(tok, "q")
    grown = prompt + "call<|im_end|>" + chat_turn_text(tok, "tool", "r", True) + "bye<|im_end|>"
    rendered = tok.apply_chat_template([{"role": "user", "content": "q"}, {"role": "assistant", "content": "call"},
                                        {"role": "tool", "content": "r"}, {"role": "assistant", "content": "bye"}],
                                       tokenize=False)
    assert grown + "\n" == rendered


def test_a_template_with_its_own_tool_wrapping_is_followed() -> None:
    assert chat_turn_text(_tokenizer(WITH_TOOLS), "tool", "r", True) == \
        "\n<|im_start|>user\n<tool_response>r</tool_response><|im_end|>\n<|im_start|>assistant\n"


def test_no_template_gives_a_plain_labelled_turn() -> None:
    assert chat_turn_text(_tokenizer(None), "user", "ok", True) == "\nuser: ok\n"


@pytest.mark.parametrize("template", [CHATML, WITH_TOOLS, None])
@pytest.mark.parametrize("closed", [True, False])
def test_the_cached_frame_gives_the_rendered_turn(template: str | None, closed: bool) -> None:
    from synco.core.prompts import chat_turn_frame

    tok = _tokenizer(template)
    before, after = chat_turn_frame(tok, "tool", closed) or ("", "")
    for content in ('{"a": 1}', "", "x\ny"):
        assert before + content + after == chat_turn_text(tok, "tool", content, closed)
