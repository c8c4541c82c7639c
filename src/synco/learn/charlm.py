"""Tiny character-level language models for the embedded world.

No downloads: the tokenizer is built here from a fixed character set (printable
ASCII plus newline), and the model is a small Llama-style transformer made from a
``transformers`` config. Both save and load with ``save_pretrained`` /
``from_pretrained`` like any Hugging Face checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence

from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)
CHARSET = "\n" + "".join(chr(c) for c in range(32, 127))
"""Every character the tiny models can read or write (98 tokens with the specials)."""


def char_tokenizer() -> PreTrainedTokenizerFast:
    """A character-level fast tokenizer over ``CHARSET`` (unknown characters map to ``<unk>``).

    Built as a BPE model without merges, so every character is one token and
    decoding is exact concatenation.
    """
    from tokenizers import Tokenizer, decoders, models

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in CHARSET:
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        pad_token=PAD,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    return fast


def card_structure_tokens() -> list[str]:
    """The JSON scaffolding of a compact task card as whole tokens: ``{"teaching_intent":"``,
    ``","target_reasoning_style":"``, ..., ``"}``.

    They play the role of BPE merges for text the Synthesizer writes in every card:
    a card then costs ~45 generated tokens instead of ~230 characters, while the
    decoded text is the same JSON that the card parser reads.
    """
    from synco.core.records import CARD_FIELDS

    first, *rest = CARD_FIELDS
    return ['{"' + first + '":"', *('","' + name + '":"' for name in rest), '"}']


def card_tokenizer(extra_tokens: Sequence[str] = ()) -> PreTrainedTokenizerFast:
    """The char tokenizer plus :func:`card_structure_tokens` (the Synthesizer's tokenizer).

    ``extra_tokens`` are further whole tokens after those, e.g. the factor names of
    a prompt's ``DO:level=L8,carries=0`` target (``DO:level=``, ``,carries=``), so a
    tiny model reads which factor a bucket belongs to from one token.
    Any text still encodes (characters are the fallback); decoding is exact concatenation.
    """
    fast = char_tokenizer()
    fast.add_tokens(card_structure_tokens() + list(extra_tokens))
    return fast


def tiny_llama_config(
    vocab_size: int,
    hidden_size: int = 128,
    num_layers: int = 3,
    num_heads: int = 4,
    intermediate_size: int | None = None,
    max_positions: int = 512,
    pad_token_id: int = 0,
    bos_token_id: int = 1,
    eos_token_id: int = 2,
) -> LlamaConfig:
    """A Llama-style config of well under a few million parameters (0.64M at the defaults)."""
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 3 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_positions,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        pad_token_id=pad_token_id,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
        attn_implementation="eager",
    )


def tiny_llama(tokenizer: PreTrainedTokenizerFast | None = None, seed: int = 0, **kwargs: int) -> LlamaForCausalLM:
    """A randomly initialised tiny Llama sized for ``tokenizer`` (the char tokenizer by default)."""
    import torch

    tokenizer = tokenizer or char_tokenizer()
    cfg = tiny_llama_config(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **kwargs,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg)
