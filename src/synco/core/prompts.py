"""Prompt templates: plain text files a user can edit, filled by literal substitution.

Templates live in ``src/synco/core/prompts/<name>.txt`` (shipped with the package).
A user folder given with ``prompts_dir=`` (``--prompts-dir`` on the command
line) or the ``SYNCO_PROMPTS_DIR`` environment variable is searched first, so
copying a file there and editing it overrides the shipped one.

Shipped templates:

* ``reasoner.txt``: the Reasoner's user message, the problem plus the
  instruction to reason step by step and box the single final answer;
* ``reasoner_system.txt``: the Reasoner's system prompt (empty: no system
  message, so the chat template's own default applies);
* ``synthesizer_system.txt``: the math domain's Synthesizer system prompt (its
  role and what makes a good task);
* ``synthesizer.txt``: the math domain's Synthesizer user message, with
  ``{{report}}``, ``{{rejections}}``, ``{{recent_tasks}}`` and ``{{schema}}``
  (see ``synco.domains.math``).

Placeholders are written ``{{name}}`` (no spaces). :func:`render` replaces
exactly the names it is given, in one pass, by plain text: LaTeX braces in
the template or in a value survive verbatim (``str.format`` would mangle
``\\frac{1}{2}``), and a value that itself contains ``{{problem}}`` is never
substituted again.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

PROMPTS_ENV = "SYNCO_PROMPTS_DIR"
"""Environment variable naming a folder of user templates, searched before the shipped ones."""

BUILTIN_DIR = Path(__file__).resolve().parent.parent / "prompts"
"""The shipped templates."""

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PLACEHOLDER = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}")


class PromptError(ValueError):
    """A template that cannot be found or filled; the message says which and why."""


def placeholders(template: str) -> set[str]:
    """Names of every ``{{name}}`` placeholder in ``template``."""
    return set(_PLACEHOLDER.findall(template))


def render(template: str, **values: str) -> str:
    """``template`` with each ``{{name}}`` of the given ``values`` replaced by its text.

    One left-to-right pass over the template: substituted text is never
    scanned again, and placeholders of names not given stay as they are.
    A given name that does not occur in the template raises PromptError
    (an edited template that lost ``{{problem}}`` must not silently drop the problem).
    """
    if not values:
        return template
    for name, value in values.items():
        if not isinstance(value, str):
            raise PromptError(f"value of {{{{{name}}}}} must be a string, got {type(value).__name__}")
    missing = sorted(set(values) - placeholders(template))
    if missing:
        marks = ", ".join("{{" + m + "}}" for m in missing)
        raise PromptError(f"the template has no placeholder {marks}")
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)] if m.group(1) in values else m.group(0), template)


def prompt_dirs(prompts_dir: str | Path | None = None) -> list[Path]:
    """Folders searched for templates, first match wins: ``prompts_dir``, ``$SYNCO_PROMPTS_DIR``, the shipped folder.

    A user folder that is named but does not exist is an error, so a typo
    never silently falls back to the shipped templates.
    """
    dirs: list[Path] = []
    for source, raw in (("prompts_dir", prompts_dir), (PROMPTS_ENV, os.environ.get(PROMPTS_ENV) or None)):
        if raw is None:
            continue
        path = Path(raw).expanduser()
        if not path.is_dir():
            raise PromptError(f"prompt folder {path} (from {source}) does not exist")
        dirs.append(path)
    dirs.append(BUILTIN_DIR)
    return dirs


def load_prompt(name: str, prompts_dir: str | Path | None = None) -> str:
    """The text of template ``name`` (``<name>.txt``), trailing line breaks removed."""
    if not _NAME.match(name):
        raise PromptError(f"invalid template name {name!r} (letters, digits and _ only)")
    dirs = prompt_dirs(prompts_dir)
    for folder in dirs:
        path = folder / f"{name}.txt"
        if path.is_file():
            return path.read_text(encoding="utf-8").rstrip("\r\n")
    raise PromptError(f"no template {name}.txt in {', '.join(str(d) for d in dirs)}")


def reasoner_prompt(problem: str, prompts_dir: str | Path | None = None) -> str:
    """The Reasoner's user message for ``problem`` (template ``reasoner``)."""
    return render(load_prompt("reasoner", prompts_dir), problem=problem)


def build_prompt(tokenizer: Any, user_text: str, system: str | None = None, *,
                 use_chat_template: bool | None = None, enable_thinking: bool | None = None,
                 tools: Sequence[Mapping[str, Any]] | None = None) -> str:
    """The prompt text of one user message: the one builder training and evaluation share.

    With a chat template (``use_chat_template`` None: when the tokenizer has one;
    True: required; False: never) the system prompt is a system message and the
    assistant generation prompt is appended; ``enable_thinking`` is passed to the
    template when set (Qwen3-style templates read it). Without a template:
    ``system + blank line + user``.

    ``tools``: JSON schemas of the tools the agent may call (OpenAI function format). A template that
    renders tools itself (Qwen3, Llama 3.1, Hermes) gets them as ``tools=``; for one that ignores them
    (SmolLM2), or without a template, they are written into the system prompt (:func:`tools_system_text`).
    """
    has = bool(getattr(tokenizer, "chat_template", None))
    if use_chat_template is True and not has:
        raise ValueError("use_chat_template=True but the tokenizer has no chat_template")
    if has and use_chat_template is not False:
        extra: dict[str, Any] = {} if enable_thinking is None else {"enable_thinking": enable_thinking}

        def render_with(sys_text: str | None, **kw: Any) -> str:
            messages = ([{"role": "system", "content": sys_text}] if sys_text else []) \
                + [{"role": "user", "content": user_text}]
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **extra, **kw)
            if not isinstance(text, str):
                raise TypeError(f"apply_chat_template returned {type(text).__name__}, expected str")
            return text

        if not tools:
            return render_with(system)
        plain = render_with(system)
        native = render_with(system, tools=[dict(t) for t in tools])
        if native != plain:  # the template writes the tools in its own format
            return native
        return render_with(tools_system_text(system, tools))
    if tools:
        system = tools_system_text(system, tools)
    return f"{system}\n\n{user_text}" if system else user_text


TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
"""How an agent without a tool-calling template writes a call: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``."""


def tools_system_text(system: str | None, tools: Sequence[Mapping[str, Any]]) -> str:
    """``system`` followed by the tools' schemas and how to call one, for a template that does not render tools."""
    lines = "\n".join(json.dumps(dict(t), sort_keys=True, separators=(",", ":")) for t in tools)
    text = (f"# Tools\nYou can call one tool per turn. To call one, reply with only {TOOL_CALL_OPEN}"
            f'{{"name": <tool name>, "arguments": <arguments object>}}{TOOL_CALL_CLOSE}. '
            f"Any other reply is a message to the user.\n<tools>\n{lines}\n</tools>")
    return f"{system}\n\n{text}" if system else text


_CONTENT = "\u2063content\u2063"


def chat_turn_frame(tokenizer: Any, role: str, closed: bool) -> tuple[str, str] | None:
    """The text :func:`chat_turn_text` puts before and after a ``role`` message's content, rendered once (episodes
    ask for it at every environment turn); None when the template does not pass content through unchanged."""
    text = chat_turn_text(tokenizer, role, _CONTENT, closed)
    if text.count(_CONTENT) != 1:
        return None
    before, _, after = text.partition(_CONTENT)
    return before, after


def chat_turn_text(tokenizer: Any, role: str, content: str, closed: bool) -> str:
    """The text that follows an assistant turn in a chat transcript when the next message is ``role``'s ``content``,
    up to and including the next assistant header: what an episode appends (as environment ids) after the agent's
    sampled turn, so the ids it trains on are the ids a chat template would have produced, without re-rendering
    (and so without rewriting) the earlier turns.

    ``closed``: the sampled turn ended with the end-of-turn token (EOS) itself, so that token is not written again.
    Derived from the tokenizer's own template: the rendering of ``[user, assistant, role]`` + generation prompt
    minus that of ``[user, assistant]``. Without a template: ``\n<role>: <content>\n``.
    """
    if not getattr(tokenizer, "chat_template", None):
        return f"\n{role}: {content}\n"
    marker = "\u2063synco\u2063"  # a text no message contains
    head = [{"role": "user", "content": "u"}, {"role": "assistant", "content": marker}]
    before = tokenizer.apply_chat_template(head, tokenize=False)
    after = tokenizer.apply_chat_template(head + [{"role": role, "content": content}], tokenize=False,
                                          add_generation_prompt=True)
    if not (isinstance(before, str) and isinstance(after, str) and after.startswith(before) and marker in before):
        raise ValueError("the chat template does not render a conversation as a growing text; "
                         "an episode cannot append turns to it without re-rendering")
    end_of_turn = before[before.rindex(marker) + len(marker):]  # e.g. "<|im_end|>\n"
    eos = getattr(tokenizer, "eos_token", None) or ""
    if closed and eos and end_of_turn.startswith(eos):
        end_of_turn = end_of_turn[len(eos):]
    return end_of_turn + after[len(before):]
