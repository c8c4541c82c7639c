"""Token ids every generator agrees on: a formatted prompt's ids, and the ids that end a completion.

The HF learner (:class:`~synco.learn.hf_policy.HFPolicy`) and the vLLM generator on a bare model
folder (``synco eval --backend vllm``) both tokenize prompts and stop completions with these, so the
same prompt text gives the same ids and the same stops in either engine. Torch-free: a tokenizer and
a generation config are read through their attributes only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def encode_prompt(tokenizer: Any, text: str, *, add_bos: bool | None = None, max_tokens: int | None = None) -> list[int]:
    """Token ids of a formatted prompt: no special tokens added by the tokenizer, BOS prepended once, left-truncated.

    ``add_bos`` None: BOS when the tokenizer has one; it is never doubled (a chat template that writes
    its own BOS keeps just that one). ``max_tokens``: keep only the last that many ids.
    """
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    bos = tokenizer.bos_token_id
    if add_bos is None:
        add_bos = bos is not None
    if add_bos and bos is not None and (not ids or ids[0] != bos):
        ids = [int(bos)] + ids
    if max_tokens is not None and len(ids) > max_tokens:
        ids = ids[-max_tokens:]
    return ids


def eos_token_ids(tokenizer: Any, generation_config: Any = None) -> list[int]:
    """Every token id that ends a completion: the tokenizer's EOS, then the generation config's EOS ids (no repeats).

    ``generation_config``: a ``transformers.GenerationConfig`` (or anything with ``eos_token_id``: an int,
    a list, or None). Neither defining one raises ``ValueError``.
    """
    ids: list[int] = []
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    extra = getattr(generation_config, "eos_token_id", None) if generation_config is not None else None
    if isinstance(extra, int):
        extra = [extra]
    for i in extra or []:
        if int(i) not in ids:
            ids.append(int(i))
    if not ids:
        raise ValueError("the tokenizer and the model define no EOS token")
    return ids


class TokenText:
    """The text side of a policy that an episode needs (:class:`synco.rollout.episodes.TokenPolicy`), from its
    tokenizer alone: a prompt's ids, an observation's ids, a turn's text, and an environment message on a chat model.

    Shared by the learner on a HF model and the Ray backend's driver-side policy (which holds the learner's
    tokenizer), so both encode an episode's text to the same ids. Needs ``self.tokenizer`` and ``self.config``
    (``add_bos``, ``max_prompt_tokens``: a :class:`~synco.core.policy.PolicyConfig`).
    """

    tokenizer: Any
    config: Any

    def encode_prompt(self, text: str) -> list[int]:
        """Token ids of a formatted prompt: no special tokens added by the tokenizer, BOS per ``config.add_bos``, left-truncated to ``max_prompt_tokens``."""
        return encode_prompt(self.tokenizer, text, add_bos=self.config.add_bos, max_tokens=self.config.max_prompt_tokens)

    def encode_text(self, text: str) -> list[int]:
        """Token ids of a piece of text inside a sequence (an environment's observation): no BOS, no truncation;
        special tokens written in the text (a chat template's markers) are read as such."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        """The text of sampled ids, as a completion's ``text`` is decoded (special tokens skipped)."""
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))

    def format_message(self, role: str, content: str, closed: bool) -> str:
        """The text after an agent's turn when ``role`` says ``content`` next, through the next assistant header
        (:func:`synco.core.prompts.chat_turn_text`): an episode's environment turn on a chat model."""
        from synco.core.prompts import chat_turn_frame, chat_turn_text

        frames: dict[tuple[str, bool], tuple[str, str] | None] = self.__dict__.setdefault("_turn_frames", {})
        key = (role, closed)
        if key not in frames:  # the template rendered once per role, not at every turn
            frames[key] = chat_turn_frame(self.tokenizer, role, closed)
        frame = frames[key]
        return chat_turn_text(self.tokenizer, role, content, closed) if frame is None else frame[0] + content + frame[1]
