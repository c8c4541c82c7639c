"""Token ids every generator agrees on: a formatted prompt's ids, and the ids that end a completion.

The HF learner (:class:`~synco.learn.hf_policy.HFPolicy`) and the vLLM generator on a bare model
folder (``synco eval --backend vllm``) both tokenize prompts and stop completions with these, so the
same prompt text gives the same ids and the same stops in either engine. Torch-free: a tokenizer and
a generation config are read through their attributes only.
"""

from __future__ import annotations

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
