"""The tiny models' tokenizers: exact round trips, and the card tokenizer's whole-key tokens."""

import json

from hypothesis import given
from hypothesis import strategies as st

from synco.core.records import CARD_FIELDS
from synco.domains.arith import ArithDomain
from synco.learn.charlm import CHARSET, card_structure_tokens, card_tokenizer, char_tokenizer, tiny_llama

CARD = ArithDomain().format_card("347*6", "L8", 2082)


def encode(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def test_char_tokenizer_is_one_token_per_character():
    tok = char_tokenizer()
    assert len(tok) == len(CHARSET) + 4
    assert len(encode(tok, CARD)) == len(CARD)
    assert tok.decode(encode(tok, CARD)) == CARD


def test_card_structure_tokens_cover_every_field_once_in_order():
    toks = card_structure_tokens()
    assert toks[0] == '{"teaching_intent":"' and toks[-1] == '"}'
    assert [t.split('"')[-3] for t in toks[:-1]] == list(CARD_FIELDS)


def test_card_tokenizer_writes_a_card_in_few_tokens_and_decodes_it_exactly():
    tok = card_tokenizer()
    ids = encode(tok, CARD)
    assert len(tok) == len(CHARSET) + 4 + len(CARD_FIELDS) + 1
    # 10 structure tokens + the 34 value characters of this card
    values = sum(len(v) for v in json.loads(CARD).values())
    assert len(ids) == len(CARD_FIELDS) + 1 + values
    assert tok.decode(ids) == CARD
    assert tok.convert_ids_to_tokens(ids)[0] == '{"teaching_intent":"'


@given(st.text(alphabet=CHARSET, max_size=80))
def test_card_tokenizer_round_trips_any_text(text):
    tok = card_tokenizer()
    assert tok.decode(encode(tok, text)) == text


def test_card_tokenizer_survives_save_and_load(tmp_path):
    from transformers import AutoTokenizer

    tok = card_tokenizer()
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert encode(again, CARD) == encode(tok, CARD)
    model = tiny_llama(again, hidden_size=32, num_layers=1, num_heads=2)
    assert model.config.vocab_size == len(again)
