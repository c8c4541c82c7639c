import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synco.grading.cards import MAX_DEPTH, MAX_INPUT_CHARS, CardError, parse_task_card, render_card_json
from synco.core.records import CARD_FIELDS, TaskCard, TaskCardError


def fields(**over: object) -> dict[str, object]:
    base: dict[str, object] = {name: f"the {name.replace('_', ' ')}" for name in CARD_FIELDS}
    base.update(over)
    return base


def card_json(**over: object) -> str:
    return json.dumps(fields(**over))


def test_plain_json_card():
    card = parse_task_card(card_json(problem="What is 2+3?", final_answer="5"))
    assert card.payload.prompt_text() == "What is 2+3?"
    assert card.payload.claimed_answer() == "5"
    assert card.factors == {} and card.extra == {}


def test_card_error_is_task_card_error_and_value_error():
    with pytest.raises(TaskCardError):
        parse_task_card("nothing here")
    assert issubclass(CardError, ValueError)


def test_think_block_uses_text_after_last_close():
    decoy = card_json(problem="decoy inside think")
    real = card_json(problem="the real one")
    text = f"<think>let me draft {decoy}</think> hmm <think>more</think>\n{real}"
    assert parse_task_card(text).payload.prompt_text() == "the real one"


def test_close_tag_without_open_tag():
    assert parse_task_card("reasoning...</think>" + card_json(problem="P")).payload.prompt_text() == "P"


def test_unclosed_think_is_an_error():
    with pytest.raises(CardError, match=r"unclosed <think> block") as info:
        parse_task_card("<think>I will write " + card_json())
    assert info.value.code == "unclosed_think"


def test_json_only_inside_think_is_not_a_card():
    with pytest.raises(CardError, match="no JSON object found"):
        parse_task_card("<think>" + card_json() + "</think>\nSorry, no card.")


def test_code_fence_and_prose_around():
    text = "Sure! Here is the task card:\n```json\n" + json.dumps(fields(problem="Fenced"), indent=2) + "\n```\nHope it helps {not json}."
    assert parse_task_card(text).payload.prompt_text() == "Fenced"


def test_first_balanced_object_without_fields_skips_to_next():
    text = 'Example format: {"key": "value"}. Now the card: ' + card_json(problem="Second")
    assert parse_task_card(text).payload.prompt_text() == "Second"


def test_latex_braces_in_prose_are_not_candidates():
    text = r"We want $\frac{1}{2}$ and {x | x > 0}. " + card_json(problem="After prose")
    assert parse_task_card(text).payload.prompt_text() == "After prose"


def test_braces_inside_strings_do_not_end_the_object():
    card = parse_task_card(card_json(problem="Let S = {1, 2, }} and T = {{3}}. Find |S|.", solution='Quote " and { brace'))
    assert card.payload.prompt_text() == "Let S = {1, 2, }} and T = {{3}}. Find |S|."
    assert card.payload.solution_text() == 'Quote " and { brace'


def test_missing_comma_between_members_is_repaired():
    """Small models drop the comma at a line end: '"value"\n"key":' can only mean a new member."""
    lines = [json.dumps(k) + ": " + json.dumps(v) for k, v in fields(final_answer="5").items()]
    text = "{" + ",\n".join(lines[:5]) + "\n" + ",\n".join(lines[5:]) + "}"
    assert parse_task_card(text).payload.claimed_answer() == "5"
    assert parse_task_card(text.replace('"\n"', '" "')).payload.prompt_text() == "the problem"  # same line, one space


@pytest.mark.parametrize("text", [
    '{"problem": "p" "solution"}',  # the next string is not a key: no comma is invented
    '{"problem" "p"}',  # a missing colon stays an error
    '{"problem": "a "b" c"}',  # an unescaped quote inside a value is not a missing comma
])
def test_other_broken_json_is_still_rejected(text):
    with pytest.raises(CardError) as info:
        parse_task_card(text)
    assert info.value.code == "invalid_json"


def test_trailing_commas():
    text = '{"teaching_intent": "a", "target_reasoning_style": "b", "expected_reasoner_weakness": "c", ' \
           '"difficulty_estimate": "d", "problem": "p, q,", "solution": "s", "final_answer": "f", ' \
           '"verification_notes": "v", "novelty_notes": "n", "tags": ["x", "y",],}'
    card = parse_task_card(text)
    assert card.payload.prompt_text() == "p, q,"  # commas inside strings are untouched
    assert card.extra == {"tags": ["x", "y"]}


def test_scalar_values_coerced_to_text():
    text = '{"teaching_intent": "a", "target_reasoning_style": "b", "expected_reasoner_weakness": "c", ' \
           '"difficulty_estimate": 0.50, "problem": "p", "solution": "s", "final_answer": 3, ' \
           '"verification_notes": true, "novelty_notes": false}'
    card = parse_task_card(text)
    assert (card.difficulty_estimate, card.payload.claimed_answer(), card.wire()["verification_notes"], card.novelty_notes) == ("0.50", "3", "true", "false")


def test_list_and_object_values():
    card = parse_task_card(card_json(solution=["Step 1: add.", "Step 2: done."], final_answer=["2", "3"],
                                     verification_notes={"check": "plug in"}))
    assert card.payload.solution_text() == "Step 1: add.\nStep 2: done."
    assert card.payload.claimed_answer() == "2, 3"
    assert card.wire()["verification_notes"] == '{"check":"plug in"}'


def test_null_field_counts_as_empty():
    with pytest.raises(CardError, match="empty field 'final_answer'"):
        parse_task_card(card_json(final_answer=None))


def test_extra_keys_and_factors():
    card = parse_task_card(card_json(factors={"topic": "algebra", "level": 3, "nested": {"a": "b"}}, source="me", notes=[1]))
    assert card.factors == {"topic": "algebra", "level": "3"}
    assert card.extra == {"source": "me", "notes": ["1"]}


def test_non_object_factors_kept_in_extra():
    card = parse_task_card(card_json(factors="algebra"))
    assert card.factors == {} and card.extra == {"factors": "algebra"}


def test_field_name_variants():
    data = fields()
    data["Final Answer"] = data.pop("final_answer")
    data["teaching-intent"] = data.pop("teaching_intent")
    card = parse_task_card(json.dumps(data))
    assert card.payload.claimed_answer() == "the final answer" and card.teaching_intent == "the teaching intent"
    assert card.extra == {}


def test_wrapped_card_is_unwrapped():
    assert parse_task_card(json.dumps({"task_card": fields(problem="inner")})).payload.prompt_text() == "inner"


def test_values_are_stripped():
    assert parse_task_card(card_json(final_answer="  42 \n")).payload.claimed_answer() == "42"


@pytest.mark.parametrize("field", ["problem", "final_answer", "novelty_notes"])
def test_missing_field_named(field):
    data = fields()
    del data[field]
    with pytest.raises(CardError, match=f"missing field '{field}'") as info:
        parse_task_card(json.dumps(data))
    assert info.value.code == "missing_field"
    assert info.value.json_loaded and info.value.fields_present == 8


def test_several_missing_fields_counted():
    with pytest.raises(CardError, match=r"missing field 'teaching_intent' \(\+7 more") as info:
        parse_task_card('{"problem": "p"}')
    assert info.value.fields_present == 1


@pytest.mark.parametrize("value", ["", "   ", "\n\t"])
def test_empty_field_named(value):
    with pytest.raises(CardError, match="empty field 'final_answer'") as info:
        parse_task_card(card_json(final_answer=value))
    assert info.value.code == "empty_field" and info.value.fields_present == 8


def test_best_error_is_the_object_with_most_fields():
    text = '{"problem": "p"} and then ' + json.dumps({k: v for k, v in fields().items() if k != "solution"})
    with pytest.raises(CardError, match="missing field 'solution'$"):
        parse_task_card(text)


@pytest.mark.parametrize(
    "text,code",
    [
        ("", "no_json"),
        ("just words", "no_json"),
        ("{{{{{{", "no_json"),
        ('{"problem": "cut off', "truncated_json"),
        ('{"problem": "p", "solution" "s"}', "invalid_json"),
        ('{"a":' * (MAX_DEPTH + 5) + "1" + "}" * (MAX_DEPTH + 5), "too_deep"),
        ('{"a": ' + "[" * 5000 + "]" * 5000 + "}", "too_deep"),
        ("x" * (MAX_INPUT_CHARS + 1), "input_too_long"),
    ],
)
def test_error_codes(text, code):
    with pytest.raises(CardError) as info:
        parse_task_card(text)
    assert info.value.code == code


def test_non_string_input_is_a_type_error():
    with pytest.raises(TypeError):
        parse_task_card(None)  # type: ignore[arg-type]


# --- LaTeX backslashes -------------------------------------------------------------------

RAW_TEMPLATE = (
    '{{"teaching_intent": "a", "target_reasoning_style": "b", "expected_reasoner_weakness": "c", '
    '"difficulty_estimate": "d", "problem": "{problem}", "solution": "s", "final_answer": "f", '
    '"verification_notes": "v", "novelty_notes": "n"}}'
)


@pytest.mark.parametrize(
    "written,expected",
    [
        (r"\sqrt{2}", "\\sqrt{2}"),
        (r"\(x\) and \[y\]", "\\(x\\) and \\[y\\]"),
        (r"\frac{1}{2}", "\\frac{1}{2}"),
        (r"\beta + \binom{5}{2} + \boxed{3}", "\\beta + \\binom{5}{2} + \\boxed{3}"),
        (r"x \neq 0, \nu, \nabla f", "x \\neq 0, \\nu, \\nabla f"),
        (r"\theta \times \tan x \text{m} \tfrac12", "\\theta \\times \\tan x \\text{m} \\tfrac12"),
        (r"\left( x \right) \rho \rangle", "\\left( x \\right) \\rho \\rangle"),
        (r"\textsc{abc}", "\\textsc{abc}"),  # unknown command followed by a brace is LaTeX
        (r"\Delta \Rightarrow \$5 \, \% \underline{u}", "\\Delta \\Rightarrow \\$5 \\, \\% \\underline{u}"),
        (r"line1\nline2", "line1\nline2"),
        (r"Step 1.\nStep 2.\tdone", "Step 1.\nStep 2.\tdone"),
        (r"a\n b", "a\n b"),
        (r"say \"hi\"", 'say "hi"'),
        (r"a \\ b \\frac", "a \\ b \\frac"),
        (r"caf\u00e9", "café"),
        (r"\b and \f alone", "\\b and \\f alone"),
        ("ends with backslash \\\\", "ends with backslash \\"),
    ],
)
def test_latex_backslashes(written, expected):
    card = parse_task_card(RAW_TEMPLATE.format(problem=written))
    assert card.payload.prompt_text() == expected


def test_raw_newline_inside_string_is_accepted():
    assert parse_task_card(RAW_TEMPLATE.format(problem="two\nlines")).payload.prompt_text() == "two\nlines"


def test_lone_surrogate_escape_is_replaced():
    card = parse_task_card(RAW_TEMPLATE.format(problem=r"bad \ud800 char"))
    assert card.payload.prompt_text() == "bad \ufffd char"
    card.to_json()  # must serialise


# --- render / round trip --------------------------------------------------------------------


def test_render_is_compact_nine_fields_in_order():
    card = TaskCard(**fields(), factors={"a": "b"}, extra={"x": 1})
    out = render_card_json(card)
    assert out == json.dumps(fields(), separators=(",", ":"))  # factors and extra are not rendered
    assert list(json.loads(out)) == list(CARD_FIELDS)


def test_render_escapes_ambiguous_controls():
    card = TaskCard(**fields(problem="a\neq\x08b\x0cc <think> </think>"))
    out = render_card_json(card)
    assert "\\u000aeq" in out and "\\u0008" in out and "\\u000c" in out and "<think>" not in out
    assert json.loads(out)["problem"] == card.payload.prompt_text()
    assert parse_task_card(out) == card


field_text = st.text(min_size=1, max_size=40).map(str.strip).filter(bool)


@settings(max_examples=150, deadline=None)
@given(st.fixed_dictionaries({name: field_text for name in CARD_FIELDS}))
def test_round_trip(values):
    card = TaskCard(**values)
    assert parse_task_card(render_card_json(card)) == card


latexish = st.text(alphabet=st.sampled_from(list("\\abnrtfu{}\"' \n0123456789x=+")), min_size=1, max_size=30)


@settings(max_examples=150, deadline=None)
@given(latexish.map(str.strip).filter(bool))
def test_round_trip_backslash_heavy(problem):
    card = TaskCard(**fields(problem=problem))
    assert parse_task_card(render_card_json(card)) == card


# --- hostile input ----------------------------------------------------------------------------

pieces = st.sampled_from(['{', '}', '[', ']', '"', '\\', ',', ':', '\n', '<think>', '</think>', '```', 'null',
                          '"problem"', '"final_answer": ', '\\frac', '\\u12', '\\ud83d', '1e999', 'NaN'])


@st.composite
def hostile(draw: st.DrawFn) -> str:
    """Random text with random braces/quotes/backslashes spliced into (maybe) a real card."""
    base = draw(st.one_of(st.text(max_size=200), st.just(card_json()), st.just(render_card_json(TaskCard(**fields())))))
    chars = list(base)
    for _ in range(draw(st.integers(0, 12))):
        at = draw(st.integers(0, len(chars)))
        chars.insert(at, draw(pieces))
    depth = draw(st.integers(0, 3000))
    return draw(st.sampled_from(["{", "[", '{"a":'])) * depth + "".join(chars) if depth > 2000 else "".join(chars)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile())
def test_hostile_text_gives_card_or_card_error(text):
    try:
        card = parse_task_card(text)
    except CardError as err:
        assert err.code and str(err)
    else:
        assert isinstance(card, TaskCard)
        assert all(card.wire()[name].strip() for name in CARD_FIELDS)
        card.to_json()
