"""`synco verify`'s core: input lines to card texts, and verdicts as one training step's verification gives them."""

from __future__ import annotations

import json
import random

from synco.config import load_config
from synco.domains.arith import ArithDomain
from synco.run.verify import card_text, read_lines, verify_cards

DOMAIN = ArithDomain()


def test_card_text_decodes_a_json_string_line_and_keeps_everything_else() -> None:
    raw = '<think>\nfine\n</think>\n{"problem": "1+1"}'
    assert card_text(json.dumps(raw)) == raw  # a raw output with newlines, one line in the file
    assert card_text('{"problem": "1+1"}') == '{"problem": "1+1"}'  # a card object: as it stands
    assert card_text('"unterminated') == '"unterminated'  # not a JSON string: as it stands
    assert card_text('"a" "b"') == '"a" "b"'
    assert card_text("free text") == "free text"


def test_read_lines_skips_blank_lines_but_counts_them() -> None:
    assert read_lines(["a\n", "\n", "   \r\n", '"b"\r\n', "c"]) == [(1, "a"), (4, "b"), (5, "c")]
    assert read_lines([]) == []


def test_verify_cards_gives_the_steps_verdicts_in_order() -> None:
    cards = DOMAIN.static_cards(random.Random(0), 3)
    held = DOMAIN.heldout(1, seed=1)[0]
    obj = json.loads(cards[0])
    held_card = json.dumps({**obj, "problem": held.problem, "final_answer": held.answer})
    wrong = json.dumps({**json.loads(cards[1]), "final_answer": "0"})  # the oracle corrects it, softly
    lines = [(1, cards[0]), (2, "not a card"), (4, cards[0]), (5, held_card), (6, wrong), (7, cards[2])]
    out = verify_cards(load_config("arith"), lines)
    assert [v.line for v in out] == [1, 2, 4, 5, 6, 7]
    assert [v.valid for v in out] == [True, False, False, False, True, True]
    assert out[0].reasons == [] and out[0].reference == json.loads(cards[0])["final_answer"]
    assert out[0].factors["level"] == DOMAIN.level_of(obj["problem"])  # computed by the domain
    assert out[1].reasons == ["no_json"] and out[1].factors == {} and out[1].reference is None
    assert out[2].reasons == ["duplicate_in_step"]  # the file is one batch
    assert out[3].reasons == ["heldout_problem"] and out[3].reference == held.answer  # the domain's rejection
    assert out[4].reasons == ["reference_corrected"] and out[4].reference == json.loads(cards[1])["final_answer"]
    assert verify_cards(load_config("arith"), []) == []
