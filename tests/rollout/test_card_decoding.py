"""Template-constrained card decoding: the grammar's rules, and sampling / GRPO log-probs on the masked distribution."""

from __future__ import annotations

import json

import pytest
import torch

from synco.rollout.card_decoding import ANSWER_CHARSET, CardGrammar, CardSlot, CardTemplate, constrain_synthesizer
from synco.grading.cards import parse_task_card
from synco.learn.hf_policy import HFPolicy
from synco.core.policy import PolicyConfig
from synco.core.sampling import SamplingParams
from synco.core.records import CARD_FIELDS
from synco.core.sampling import Experience
from synco.learn.charlm import char_tokenizer, tiny_llama
from synco.domains.math import MathDomain, card_template


@pytest.fixture(scope="module")
def tok():  # noqa: ANN201 - a fixture
    return char_tokenizer()


def small_template(answer_tokens: int = 4) -> CardTemplate:
    """Nine short slots in CARD_FIELDS order (answer digits only): every card is short on a char model."""
    return CardTemplate(tuple(CardSlot(name, answer_tokens if name == "final_answer" else 6,
                                       ANSWER_CHARSET if name == "final_answer" else None) for name in CARD_FIELDS))


def ids_of(tok, text: str) -> list[int]:  # noqa: ANN001
    return tok.encode(text, add_special_tokens=False)


def replay(grammar: CardGrammar, ids: list[int]):  # noqa: ANN201
    state = grammar.start()
    for i in ids:
        state = grammar.advance(state, i)
    return state


# ----------------------------------------------------------------- the template


def test_template_text_is_one_field_per_line_json() -> None:
    t = CardTemplate((CardSlot("problem", 5), CardSlot("final_answer", 3, ANSWER_CHARSET)))
    assert t.fixed_texts() == ['{"problem": "', '",\n"final_answer": "', '"}']
    text = t.render(["What is 2+3?", "5"])
    assert text == '{"problem": "What is 2+3?",\n"final_answer": "5"}'
    assert json.loads(text) == {"problem": "What is 2+3?", "final_answer": "5"}


@pytest.mark.parametrize("make, match", [
    (lambda: CardSlot("", 3), "non-empty"),
    (lambda: CardSlot('a"b', 3), "quotes"),
    (lambda: CardSlot("a", 0), "max_tokens"),
    (lambda: CardSlot("a", 3, charset='"1'), "charset"),
    (lambda: CardTemplate(()), "at least one slot"),
    (lambda: CardTemplate((CardSlot("a", 1), CardSlot("a", 2))), "repeat"),
    (lambda: CardSlot("a", 3, boxed=-1), "boxed"),
    (lambda: CardSlot("a", 3, charset="12", boxed=2), "charset"),
])
def test_bad_templates_name_the_problem(make, match: str) -> None:  # noqa: ANN001
    with pytest.raises(ValueError, match=match):
        make()


def test_the_math_template_is_the_example_cards_layout() -> None:
    """The prompt's example cards are exactly what the template writes, so the fixed text is what the model expects."""
    import random

    from synco.domains.math import WRITE_ORDER, example_card

    text = example_card(MathDomain().sample(random.Random(5)))
    card = json.loads(text)
    assert list(card) == list(WRITE_ORDER) and "\\boxed{" in card["solution"]
    assert card_template().render([json.dumps(card[f])[1:-1] for f in WRITE_ORDER]) == text
    assert [s.name for s in card_template().slots] == list(WRITE_ORDER) and set(WRITE_ORDER) == set(CARD_FIELDS)


# ----------------------------------------------------------------- the grammar's rules


def test_a_rendered_card_replays_to_the_end(tok) -> None:  # noqa: ANN001
    g = CardGrammar(small_template(), tok, [tok.eos_token_id])
    values = ["sums", "calc", "slip", "easy", "2+3?", "so 5", "5", "ok", "new"]  # CARD_FIELDS order
    ids = ids_of(tok, g.template.render(values)) + [tok.eos_token_id]
    assert replay(g, ids).done  # type: ignore[union-attr]
    card = parse_task_card(tok.decode(ids, skip_special_tokens=True))
    assert [card.wire()[f] for f in CARD_FIELDS] == values


def test_fixed_text_is_forced_and_other_tokens_are_refused(tok) -> None:  # noqa: ANN001
    g = CardGrammar(small_template(), tok, [tok.eos_token_id])
    mask = g.allowed_mask([ids_of(tok, '{"')], 2)[0]
    assert mask.sum(-1).tolist() == [1, 1]  # '{' then '"' forced
    assert mask[0, ids_of(tok, "{")[0]] and mask[1, ids_of(tok, '"')[0]]
    with pytest.raises(ValueError, match="not allowed"):
        replay(g, ids_of(tok, "x"))


def test_slot_rules_no_empty_value_no_escaped_quote_answer_digits_and_a_full_slot_must_close(tok) -> None:  # noqa: ANN001
    g = CardGrammar(small_template(answer_tokens=3), tok, [tok.eos_token_id])
    quote, eos = ids_of(tok, '"')[0], tok.eos_token_id
    opening = ids_of(tok, '{"teaching_intent": "')
    at_start = g._allowed(replay(g, opening))
    assert not at_start[quote]  # an empty value cannot be closed
    assert not at_start[eos] and at_start[ids_of(tok, "\n")[0]]  # no EOS inside a value; newlines are text
    assert g._allowed(replay(g, opening + ids_of(tok, "a")))[quote]
    assert not g._allowed(replay(g, opening + ids_of(tok, "a\\")))[quote]  # '\"' would escape the quote
    assert g._allowed(replay(g, opening + ids_of(tok, "a\\\\")))[quote]  # an escaped backslash may end the value
    assert not g._allowed(replay(g, opening + ids_of(tok, "  ")))[quote]  # whitespace only is still empty
    full = replay(g, opening + ids_of(tok, "abcdef"))  # 6 tokens: the slot is full
    assert g._allowed(full).nonzero().flatten().tolist() == [quote]
    # the answer slot holds digits, '-', '.', '/', ' ' only
    to_answer = g.template.render(["a"] * 9).split('"final_answer": "')[0] + '"final_answer": "'
    allowed = g._allowed(replay(g, ids_of(tok, to_answer)))
    chars = {tok.decode([i]) for i in allowed.nonzero().flatten().tolist()}
    assert chars == set(ANSWER_CHARSET)  # the quote only once the answer has a character
    with pytest.raises(ValueError, match="not allowed"):
        replay(g, ids_of(tok, to_answer + "x"))


def test_the_math_grammar_fits_the_smollm2_budget() -> None:
    from synco.config import load_config

    cfg = load_config("smollm2")
    assert cfg.synth_decoding == "card"
    tok = char_tokenizer()  # the worst case on a char tokenizer is an upper bound of a BPE one's fixed text
    g = CardGrammar(card_template(), tok, [tok.eos_token_id])
    fixed_chars = sum(len(t) for t in card_template().fixed_texts())
    assert g.max_tokens() == fixed_chars + sum(p.max_tokens for p in card_template().parts()) + 1
    assert sum(p.max_tokens for p in card_template().parts()) + 1 < cfg.synthesizer.sampling.max_new_tokens


# ----------------------------------------------------------------- sampling and GRPO on the masked distribution


def tiny_policy(tok, seed: int = 0) -> HFPolicy:  # noqa: ANN001
    model = tiny_llama(tok, seed=seed, hidden_size=32, num_layers=2)
    cfg = PolicyConfig(model_path="tiny", device="cpu", use_chat_template=False, add_bos=False,
                       sampling=SamplingParams(temperature=1.3, top_p=0.9, max_new_tokens=300))
    return HFPolicy(model, tok, cfg)


def test_constrained_samples_always_parse_and_logprobs_match_the_update(tok, one_thread) -> None:  # noqa: ANN001
    torch.manual_seed(0)
    policy = tiny_policy(tok)
    grammar = CardGrammar(small_template(), tok, policy.eos_ids)
    assert grammar.max_tokens() <= 300
    policy.set_token_constraint(grammar)
    groups = policy.generate(["Card:"], 6)
    comps = groups[0]
    for c in comps:  # a random model writes nonsense values, but always a nine-field card that parses
        card = parse_task_card(c.text)
        assert all(card.wire()[f] for f in CARD_FIELDS) and c.finish_reason == "stop"
        assert set(card.payload.claimed_answer()) <= set(ANSWER_CHARSET)
    rows = [Experience(c.prompt_ids, c.completion_ids, advantage=1.0 if i % 2 else -1.0, old_logprobs=c.logprobs)
            for i, c in enumerate(comps)]
    logp, mask = policy._completion_logprobs(policy.model, rows)
    for r, c in enumerate(comps):
        n = len(c.completion_ids)
        assert torch.allclose(logp[r, :n], torch.tensor(c.logprobs), atol=1e-4)  # sampling == update
        assert all(torch.isfinite(logp[r, :n]))
    forced = grammar.allowed_mask([c.completion_ids for c in comps], logp.shape[1]).sum(-1) == 1
    assert bool((logp[forced & (mask > 0)] == 0).all())  # forced tokens: probability 1 under the mask
    # without the constraint the same tokens score differently: the update really uses the masked distribution
    policy.token_constraint = None
    raw, _ = policy._completion_logprobs(policy.model, rows)
    assert not torch.allclose(raw[0, : len(comps[0].completion_ids)], logp[0, : len(comps[0].completion_ids)])
    policy.set_token_constraint(grammar)
    stats = policy.compute_gradients(rows)
    grads = [p.grad for _, p in policy.trainable_parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert stats.ratio_mean == pytest.approx(1.0, abs=1e-4)  # on-policy: old and new log-probs agree


def test_constrain_synthesizer_checks_domain_and_budget(tok) -> None:  # noqa: ANN001
    from synco.domains.arith import ArithDomain

    policy = tiny_policy(tok)
    with pytest.raises(ValueError, match="card template"):
        constrain_synthesizer(policy, ArithDomain(), 10_000)
    with pytest.raises(ValueError, match="max_new_tokens >= "):
        constrain_synthesizer(policy, MathDomain(), 50)
    grammar = constrain_synthesizer(policy, MathDomain(), 10_000)
    assert policy.token_constraint is grammar and policy.generator.constraint is grammar  # type: ignore[attr-defined]


# ----------------------------------------------------------------- the copy limit (max_copy)


def copy_template(max_copy: int = 3) -> CardTemplate:
    return CardTemplate((CardSlot("problem", 12, no_copy=True), CardSlot("notes", 12),
                         CardSlot("final_answer", 3, ANSWER_CHARSET)), max_copy=max_copy)


def test_bad_max_copy_is_named() -> None:
    with pytest.raises(ValueError, match="max_copy"):
        CardTemplate((CardSlot("a", 3),), max_copy=-1)


def test_a_no_copy_slot_cannot_extend_a_run_of_the_prompt(tok) -> None:  # noqa: ANN001
    """After 3 tokens that occur in the prompt, the token that follows them there is masked (and only in no_copy slots)."""
    g = CardGrammar(copy_template(3), tok, [tok.eos_token_id])
    prompt = ids_of(tok, "Example: abcdefg. Also abx.")
    opening = ids_of(tok, '{"problem": "')
    comp = opening + ids_of(tok, "abc")
    mask = g.allowed_mask([comp + ids_of(tok, "z")], len(comp) + 1, prompts=[prompt])[0]
    at = len(comp)
    assert not mask[at, ids_of(tok, "d")[0]]  # "abcd" would be a 4-token run of the prompt
    assert mask[at, ids_of(tok, "z")[0]] and mask[at, ids_of(tok, '"')[0]]  # other text, and closing, stay allowed
    # "ab" + "x" is a 3-token run: allowed (runs up to max_copy are fine), and both followers of "ab" count
    assert mask[len(opening) + 2, ids_of(tok, "x")[0]]
    # the same tokens in a slot without no_copy are not limited
    to_notes = ids_of(tok, '{"problem": "q",\n"notes": "abc')
    m2 = g.allowed_mask([to_notes + ids_of(tok, "z")], len(to_notes) + 1, prompts=[prompt])[0]
    assert m2[len(to_notes), ids_of(tok, "d")[0]]
    # another prompt, another mask: the limit is a function of the prompt
    m3 = g.allowed_mask([comp + ids_of(tok, "z")], len(comp) + 1, prompts=[ids_of(tok, "nothing alike")])[0]
    assert m3[at, ids_of(tok, "d")[0]]


def test_the_copy_limit_needs_the_prompts(tok) -> None:  # noqa: ANN001
    g = CardGrammar(copy_template(3), tok, [tok.eos_token_id])
    with pytest.raises(ValueError, match="max_copy=3"):
        g.allowed_mask([ids_of(tok, '{"')], 2)
    with pytest.raises(ValueError, match="max_copy=3"):
        g.processor(5)
    # without a no_copy slot (or with max_copy=0) prompts are not needed
    plain = CardGrammar(small_template(), tok, [tok.eos_token_id])
    assert plain.allowed_mask([ids_of(tok, '{"')], 2).shape[:2] == (1, 2)


def test_copy_limited_samples_do_not_copy_and_logprobs_match_the_update(tok, one_thread) -> None:  # noqa: ANN001
    """A model that copies (it strongly prefers 'a', and the prompt's problem is 'aaaa...') writes no 4-token run of the
    prompt in the problem under max_copy=3, but does without the limit; GRPO log-probs agree with sampling's."""
    a = ids_of(tok, "a")[0]
    prompt_text = '{"problem": "aaaaaaaaaaaa",\n"notes": "bb",\n"final_answer": "1"} '

    def problems(max_copy: int) -> tuple[list[list[int]], list, HFPolicy]:
        torch.manual_seed(1)
        policy = tiny_policy(tok)
        head = policy.model.lm_head
        biased = torch.nn.Linear(head.in_features, head.out_features, bias=True)
        with torch.no_grad():
            biased.weight.zero_()
            biased.bias.zero_()
            biased.bias[a] = 8.0  # a copier: 'a' is ~3000x likelier than any other token
        policy.model.lm_head = biased
        policy.set_token_constraint(CardGrammar(copy_template(max_copy), tok, policy.eos_ids))
        comps = policy.generate([prompt_text], 4, SamplingParams(temperature=1.0, max_new_tokens=80))[0]
        # the raw problem text (a random model's value need not be valid JSON)
        return [ids_of(tok, c.text.split('",\n"notes": "')[0].removeprefix('{"problem": "')) for c in comps], comps, policy

    def copies(problem: list[int], prompt_ids: list[int]) -> bool:
        runs = {tuple(prompt_ids[i:i + 4]) for i in range(len(prompt_ids) - 3)}
        return any(tuple(problem[i:i + 4]) in runs for i in range(len(problem) - 3))

    free, comps, _ = problems(0)
    assert all(copies(p, comps[0].prompt_ids) for p in free)  # the control: without the limit it copies
    limited, comps, policy = problems(3)
    assert not any(copies(p, comps[0].prompt_ids) for p in limited)
    assert all(p.count(a) >= 3 for p in limited)  # it still writes its preferred token, in runs of at most 3
    rows = [Experience(c.prompt_ids, c.completion_ids, advantage=1.0, old_logprobs=c.logprobs) for c in comps]
    logp, _ = policy._completion_logprobs(policy.model, rows)
    for r, c in enumerate(comps):
        assert torch.allclose(logp[r, : len(c.completion_ids)], torch.tensor(c.logprobs), atol=1e-4)


# ----------------------------------------------------------------- boxed values (the solution ends with its answer)


def boxed_template() -> CardTemplate:
    return CardTemplate((CardSlot("solution", 10, boxed=3), CardSlot("final_answer", 3, ANSWER_CHARSET)))


def test_a_boxed_value_is_text_then_a_boxed_answer() -> None:
    t = boxed_template()
    assert [p.name for p in t.parts()] == ["solution", "solution.boxed", "final_answer"]
    assert t.fixed_texts() == ['{"solution": "', "\\\\boxed{", '}.",\n"final_answer": "', '"}']
    text = t.render(["So 2+3 = 5. The answer is \\\\boxed{5}.", "5"])
    assert json.loads(text) == {"solution": "So 2+3 = 5. The answer is \\boxed{5}.", "final_answer": "5"}
    with pytest.raises(ValueError, match="boxed"):
        t.render(["no box here", "5"])


def test_boxed_rules_no_backslash_in_the_text_a_backslash_opens_the_box_answer_characters_inside(tok) -> None:  # noqa: ANN001
    g = CardGrammar(boxed_template(), tok, [tok.eos_token_id])
    quote, backslash = ids_of(tok, '"')[0], ids_of(tok, "\\")[0]
    opening = ids_of(tok, '{"solution": "')
    in_text = g._allowed(replay(g, opening + ids_of(tok, "so 5")))
    assert not in_text[quote]  # the solution cannot end without its box
    assert in_text[backslash]  # a backslash ends the text: the rest of \\boxed{ is forced
    state = replay(g, opening + ids_of(tok, "so 5\\"))
    forced = [int(g._allowed(state).nonzero()[0])]
    assert tok.decode(forced) == "\\"  # the escaped backslash's second character, then "boxed{"
    to_box = opening + ids_of(tok, "so 5\\\\boxed{")
    in_box = g._allowed(replay(g, to_box))
    assert {tok.decode([i]) for i in in_box.nonzero().flatten().tolist()} == set(ANSWER_CHARSET)  # no '}' before a digit
    assert g._allowed(replay(g, to_box + ids_of(tok, "5")))[ids_of(tok, "}")[0]]
    card = '{"solution": "so 5\\\\boxed{5}.",\n"final_answer": "5"}'
    assert replay(g, ids_of(tok, card) + [tok.eos_token_id]).done  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="not allowed"):
        replay(g, opening + ids_of(tok, 'so 5"'))


def test_boxed_samples_always_state_their_answer_and_logprobs_match(tok, one_thread) -> None:  # noqa: ANN001
    """Every sampled card's solution ends with a boxed answer the verifier can read; GRPO log-probs agree with sampling's."""
    from synco.grading.extract import extract_answer

    torch.manual_seed(2)
    policy = tiny_policy(tok)
    policy.set_token_constraint(CardGrammar(boxed_template(), tok, policy.eos_ids))
    comps = policy.generate(["Card:"], 6, SamplingParams(temperature=1.3, max_new_tokens=80))[0]
    for c in comps:
        value = c.text.split('"solution": "', 1)[1].split('",\n"final_answer"', 1)[0]
        assert "\\\\boxed{" in value and value.endswith("}.")
        assert extract_answer(json.loads(c.text, strict=False)["solution"]) is not None  # raw control chars: as the parser
    rows = [Experience(c.prompt_ids, c.completion_ids, advantage=1.0, old_logprobs=c.logprobs) for c in comps]
    logp, _ = policy._completion_logprobs(policy.model, rows)
    for r, c in enumerate(comps):
        assert torch.allclose(logp[r, : len(c.completion_ids)], torch.tensor(c.logprobs), atol=1e-4)
