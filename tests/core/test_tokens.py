"""Prompt ids and stop ids every generator shares (synco.core.tokens), on a hand-made tokenizer."""

from __future__ import annotations

import types

import pytest

from synco.core.tokens import encode_prompt, eos_token_ids


class LetterTokenizer:
    """a -> 10, b -> 11, ...; ``<s>`` (the BOS, id 1) is one token; EOS 2 unless told otherwise."""

    def __init__(self, bos: int | None = 1, eos: int | None = 2) -> None:
        self.bos_token_id, self.eos_token_id = bos, eos

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        assert add_special_tokens is False  # the prompt's own text decides its special tokens
        ids, rest = [], text
        while rest:
            if rest.startswith("<s>"):
                ids, rest = ids + [1], rest[3:]
            else:
                ids, rest = ids + [10 + ord(rest[0]) - ord("a")], rest[1:]
        return {"input_ids": ids}


def test_bos_is_prepended_once() -> None:
    tok = LetterTokenizer()
    assert encode_prompt(tok, "abc") == [1, 10, 11, 12]
    assert encode_prompt(tok, "<s>abc") == [1, 10, 11, 12]  # a chat template that writes its own BOS
    assert encode_prompt(tok, "") == [1]
    assert encode_prompt(tok, "abc", add_bos=False) == [10, 11, 12]
    assert encode_prompt(LetterTokenizer(bos=None), "ab") == [10, 11]  # no BOS to add
    assert encode_prompt(LetterTokenizer(bos=None), "ab", add_bos=True) == [10, 11]


def test_long_prompts_keep_their_end() -> None:
    tok = LetterTokenizer()
    assert encode_prompt(tok, "abcde", max_tokens=3) == [12, 13, 14]  # BOS and the start dropped
    assert encode_prompt(tok, "ab", max_tokens=3) == [1, 10, 11]


def test_eos_ids_are_the_tokenizers_then_the_generation_configs() -> None:
    tok = LetterTokenizer(eos=2)
    assert eos_token_ids(tok) == [2]
    assert eos_token_ids(tok, types.SimpleNamespace(eos_token_id=7)) == [2, 7]
    assert eos_token_ids(tok, types.SimpleNamespace(eos_token_id=[7, 2, 8, 7])) == [2, 7, 8]
    assert eos_token_ids(LetterTokenizer(eos=None), types.SimpleNamespace(eos_token_id=[5])) == [5]
    assert eos_token_ids(tok, types.SimpleNamespace(eos_token_id=None)) == [2]
    with pytest.raises(ValueError, match="no EOS token"):
        eos_token_ids(LetterTokenizer(eos=None), types.SimpleNamespace(eos_token_id=None))
