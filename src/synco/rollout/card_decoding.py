"""Template-constrained decoding of task cards: a small model fills in values, the JSON around them is fixed.

A 135M chat model rarely writes a nine-field JSON card on its own (it drops fields,
forgets commas, rambles past the object). With ``synth_decoding: card`` the
Synthesizer samples under a :class:`CardTemplate`: the text between the values
(``{"problem": "``, ``",\\n"solution": "``, ... ``"}``) is fixed and the model
writes only the values, each in its own slot:

* a slot holds any text without ``"`` (so no value can end early or break the
  JSON), at most ``max_tokens`` tokens; a slot with a ``charset`` (the answer)
  holds only those characters;
* the model ends a slot itself with a token that contains the closing quote,
  optionally followed by the start of the next fixed text (``."``, ``",``,
  ``"}``); not before the slot holds a non-space character, and not right
  after a backslash (``\\"`` would escape the quote). A slot's last token
  must leave it closable (not blank, no trailing backslash); when the slot is
  full, only closing tokens remain;
* the fixed text after a slot is forced in its canonical tokenization (one
  allowed token per step), and after the last ``}`` only end-of-sequence;
* with ``CardTemplate.max_copy = m`` a ``no_copy`` slot (the problem, the
  solution) cannot repeat more than ``m`` consecutive tokens of the *prompt*:
  a text token that would make the slot's last ``m + 1`` tokens a run of the
  prompt's tokens is masked. A small model otherwise copies a few-shot example
  card word for word; this rules out the copy, not the example's style. The
  mask then depends on the prompt too, so every caller passes the prompts
  (a replay without them raises).

Every step is a *mask*: the model's logits with the disallowed tokens set to
``-inf``, then temperature and top-p as usual. Log-probabilities, both those
reported at sampling time (the GRPO old log-probs) and those the trainer
recomputes, are taken from the same masked distribution at temperature 1:
``log_softmax(logits + mask)``. The mask at each position is a pure function
of the prompt and the completion's earlier tokens (:meth:`CardGrammar.allowed_mask` replays
it), so the two always agree; a forced token has log-prob 0 and no gradient,
and a slot token's probability is renormalised over the allowed tokens. The
card texts therefore always parse (nine non-empty fields) unless the token
budget runs out first; :meth:`CardGrammar.max_tokens` is the most a card can take.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from synco.domains.base import Domain, HasCardTemplate
from synco.domains.card_template import ANSWER_CHARSET, BOXED_CLOSE, BOXED_OPEN, CardSlot, CardTemplate  # noqa: F401


# ----------------------------------------------------------------- the grammar on one tokenizer


@dataclass(frozen=True)
class _Fixed:
    segment: int  # index into fixed_texts()
    offset: int  # characters of it already written
    k: int  # tokens of its canonical tokenization from ``offset`` already forced


@dataclass(frozen=True)
class _Slot:
    index: int
    n_tokens: int
    has_text: bool
    backslash: bool  # the slot's text ends with a backslash


@dataclass(frozen=True)
class _End:
    done: bool  # False: end-of-sequence is next; True: the card is complete (anything after is padding)


_State = _Fixed | _Slot | _End


class CardGrammar:
    """A :class:`CardTemplate` compiled for one tokenizer: the allowed tokens at every step of a card.

    Built once per policy (decodes every vocabulary entry once, ~1 s for 49k tokens).
    ``eos_ids``: the tokens that end a sequence (the policy's); the first is the one forced at the end.
    """

    def __init__(self, template: CardTemplate, tokenizer: Any, eos_ids: Sequence[int], vocab_size: int | None = None) -> None:
        import torch

        if not eos_ids:
            raise ValueError("CardGrammar needs at least one end-of-sequence id")
        self.template = template
        self.eos_ids = [int(e) for e in eos_ids]
        self.vocab_size = int(vocab_size or len(tokenizer))
        self.fixed = template.fixed_texts()
        special = {int(i) for i in getattr(tokenizer, "all_special_ids", []) or []}
        special |= {int(i) for i in (getattr(tokenizer, "added_tokens_decoder", None) or {})}
        n_tok = len(tokenizer)
        texts = [tokenizer.decode([i]) if i not in special else "" for i in range(n_tok)]
        texts += [""] * (self.vocab_size - n_tok)  # padded embedding rows: never allowed
        self._texts = texts
        # Forced canonical tokenization of every remainder of every fixed text.
        self._forced: dict[tuple[int, int], list[int]] = {}
        for j, text in enumerate(self.fixed):
            for o in range(len(text)):
                ids = [int(i) for i in tokenizer.encode(text[o:], add_special_tokens=False)]
                if "".join(texts[i] for i in ids) != text[o:] or any(i in special for i in ids):
                    raise ValueError(f"the tokenizer does not round-trip the card template's text {text[o:]!r}")
                self._forced[(j, o)] = ids
        # Token classes per part: text tokens, and closing tokens s + r where r is a prefix of the next fixed
        # text that starts with its first character (the part's terminator: '"', or '\\' / '}' around a boxed answer).
        self.parts = template.parts()
        self._text_mask: list[Any] = []
        self._close: list[dict[int, int]] = []  # per part: token -> characters of the next fixed text it writes
        self._close_kind: list[dict[str, Any]] = []  # per part: "strong" / "space" / "bare" closer masks
        for i, slot in enumerate(self.parts):
            nxt = self.fixed[i + 1]
            end = nxt[0]
            allowed_chars = set(slot.charset) if slot.charset is not None else None
            text_mask = torch.zeros(self.vocab_size, dtype=torch.bool)
            kinds = {k: torch.zeros(self.vocab_size, dtype=torch.bool) for k in ("strong", "space", "bare")}
            close: dict[int, int] = {}
            for tid, t in enumerate(texts):
                if not t:
                    continue
                q = t.find(end)
                if q < 0:
                    if '"' not in t and (allowed_chars is None or set(t) <= allowed_chars):
                        text_mask[tid] = True
                    continue
                s, r = t[:q], t[q:]
                if not nxt.startswith(r) or '"' in s or s.endswith("\\"):
                    continue
                if allowed_chars is not None and not set(s) <= allowed_chars:
                    continue
                close[tid] = len(r)
                kinds["bare" if not s else "space" if not s.strip() else "strong"][tid] = True
            if not kinds["bare"].any():
                raise ValueError(f"slot {slot.name!r}: no token closes it (the tokenizer has no '\"' token?)")
            if not text_mask.any():
                raise ValueError(f"slot {slot.name!r}: no token can write its text")
            self._text_mask.append(text_mask)
            self._close.append(close)
            self._close_kind.append(kinds)
        self._backslash_end = torch.tensor([t.endswith("\\") for t in texts], dtype=torch.bool)
        self._blank = torch.tensor([not t.strip() for t in texts], dtype=torch.bool)
        self.max_copy = template.max_copy if any(p.no_copy for p in self.parts) else 0
        self._copy_indexes: dict[tuple[int, ...], dict[tuple[int, ...], frozenset[int]]] = {}
        self._eos_mask = torch.zeros(self.vocab_size, dtype=torch.bool)
        self._eos_mask[self.eos_ids] = True
        self._all = torch.ones(self.vocab_size, dtype=torch.bool)
        self._cache: dict[Any, Any] = {}

    # --- states

    def start(self) -> _State:
        """The state before the first completion token."""
        return self._enter_fixed(0, 0)

    def _enter_fixed(self, segment: int, offset: int) -> _State:
        """At ``offset`` of fixed text ``segment``; past its end: the next slot, or end-of-sequence."""
        if offset < len(self.fixed[segment]):
            return _Fixed(segment, offset, 0)
        if segment < len(self.parts):
            return _Slot(segment, 0, False, False)
        return _End(False)

    def advance(self, state: _State, token: int) -> _State:
        """The state after ``token``; a token the state does not allow raises ValueError (a replay mismatch)."""
        if isinstance(state, _End):
            if state.done:
                return state
            if token in self.eos_ids:
                return _End(True)
        elif isinstance(state, _Fixed):
            forced = self._forced[(state.segment, state.offset)]
            if token == forced[state.k]:
                if state.k + 1 < len(forced):
                    return _Fixed(state.segment, state.offset, state.k + 1)
                return self._enter_fixed(state.segment, len(self.fixed[state.segment]))
        else:
            if 0 <= token < self.vocab_size and bool(self._allowed(state)[token]):
                written = self._close[state.index].get(token)
                if written is not None:
                    return self._enter_fixed(state.index + 1, written)
                text = self._texts[token]
                return _Slot(state.index, state.n_tokens + 1, state.has_text or bool(text.strip()),
                             _odd_backslash_run(text, state.backslash))
        raise ValueError(f"token {token} ({self._texts[token]!r}) is not allowed in card state {state}")

    def _mask_key(self, state: _State) -> tuple[Any, ...]:
        if isinstance(state, _End):
            return ("done",) if state.done else ("eos",)
        if isinstance(state, _Fixed):
            return ("tok", self._forced[(state.segment, state.offset)][state.k])
        left = self.parts[state.index].max_tokens - state.n_tokens
        phase = "full" if left <= 0 else "last" if left == 1 else "open"
        return ("slot", state.index, phase, state.has_text, state.backslash)

    def _allowed(self, state: _State) -> Any:
        """The bool mask ``(V,)`` of tokens allowed in ``state`` (cached per distinct mask)."""
        key = self._mask_key(state)
        mask = self._cache.get(key)
        if mask is not None:
            return mask
        if key[0] == "done":
            mask = self._all
        elif key[0] == "eos":
            mask = self._eos_mask
        elif key[0] == "tok":
            mask = self._all.new_zeros(self.vocab_size)
            mask[key[1]] = True
        else:
            _, i, phase, has_text, backslash = key
            kinds = self._close_kind[i]
            mask = kinds["strong"].clone()
            if has_text:
                mask |= kinds["space"]
                if not backslash:
                    mask |= kinds["bare"]
            if phase == "open":
                mask |= self._text_mask[i]
            elif phase == "last":  # the last text token must leave a closable value: text, no trailing backslash
                last = self._text_mask[i] & ~self._backslash_end
                mask |= last if has_text else last & ~self._blank
            if not mask.any():  # cannot happen after a "last" step; kept so sampling never sees an all -inf row
                mask = kinds["strong"] | kinds["space"] | kinds["bare"]
        self._cache[key] = mask
        return mask

    # --- what generation and training use

    def allowed_mask(self, completions: Sequence[Sequence[int]], length: int, device: Any = None,
                     prompts: Sequence[Sequence[int]] | None = None) -> Any:
        """Bool ``(B, length, V)``: the tokens allowed at each position of each completion (replayed from its tokens).

        ``prompts``: each completion's prompt token ids; required when the template limits copying
        (``max_copy``), since the mask then depends on the prompt. Positions past a completion's end,
        or after the card is complete, allow everything.
        """
        import torch

        prompts = self._check_prompts(prompts, len(completions))
        table: dict[tuple[Any, ...], int] = {("done",): 0}
        masks = [self._all]
        index = torch.zeros((len(completions), length), dtype=torch.long)
        for r, ids in enumerate(completions):
            cursor = _Cursor(self, None if prompts is None else prompts[r])
            for t in range(min(length, len(ids))):
                key, banned = cursor.key()
                full = key if not banned else (*key, banned)
                if full not in table:
                    table[full] = len(masks)
                    masks.append(self._with_banned(self._allowed(cursor.state), banned))
                index[r, t] = table[full]
                cursor.advance(int(ids[t]))
        stacked = torch.stack(masks)
        if device is not None:
            stacked, index = stacked.to(device), index.to(device)
        return stacked[index]

    def processor(self, prompt_width: int, prompts: Sequence[Sequence[int]] | None = None) -> Any:
        """A ``transformers`` logits processor for one ``generate`` call whose prompts are ``prompt_width`` wide.

        ``prompts``: the unpadded prompt token ids of the call's rows (required with ``max_copy``).
        """
        return _CardProcessor(self, prompt_width, self._check_prompts(prompts, None))

    def _check_prompts(self, prompts: Sequence[Sequence[int]] | None, rows: int | None) -> Sequence[Sequence[int]] | None:
        if not self.max_copy:
            return None
        if prompts is None:
            raise ValueError(f"this card grammar limits copies of the prompt (max_copy={self.max_copy}): "
                             "pass each row's prompt token ids")
        if rows is not None and len(prompts) != rows:
            raise ValueError(f"{len(prompts)} prompts for {rows} completions")
        return prompts

    def copy_index(self, prompt: Sequence[int]) -> dict[tuple[int, ...], frozenset[int]]:
        """Every run of ``max_copy`` prompt tokens -> the tokens that follow it somewhere in the prompt (cached)."""
        key = tuple(int(t) for t in prompt)
        found = self._copy_indexes.get(key)
        if found is None:
            m, runs = self.max_copy, {}
            for i in range(len(key) - m):
                runs.setdefault(key[i:i + m], set()).add(key[i + m])
            found = {k: frozenset(v) for k, v in runs.items()}
            if len(self._copy_indexes) >= 64:  # a step's prompts; older ones are not asked for again
                self._copy_indexes.clear()
            self._copy_indexes[key] = found
        return found

    def _banned(self, state: _State, history: Sequence[int], index: dict[tuple[int, ...], frozenset[int]] | None) -> tuple[int, ...]:
        """The text tokens a ``no_copy`` slot may not write next: each would extend a run of the prompt past ``max_copy``."""
        if index is None or not isinstance(state, _Slot) or len(history) < self.max_copy:
            return ()
        if not self.parts[state.index].no_copy:
            return ()
        nxt = index.get(tuple(history[-self.max_copy:]))
        if not nxt:
            return ()
        closers = self._close[state.index]
        return tuple(sorted(t for t in nxt if t not in closers))  # closing the value is never a copy to forbid

    def _with_banned(self, mask: Any, banned: tuple[int, ...]) -> Any:
        if not banned:
            return mask
        out = mask.clone()
        out[list(banned)] = False
        return out if out.any() else mask

    def max_tokens(self) -> int:
        """The most tokens a card can take: every slot full, the fixed texts forced, end-of-sequence."""
        fixed = sum(len(self._forced[(j, 0)]) for j in range(len(self.fixed)))
        return fixed + sum(p.max_tokens for p in self.parts) + 1


def _odd_backslash_run(text: str, before: bool) -> bool:
    """Whether a text ends with an odd run of backslashes, given whether the text before it did."""
    run = len(text) - len(text.rstrip("\\"))
    odd = run % 2 == 1
    return before != odd if run == len(text) else odd


class _Cursor:
    """One row's place in a card: the grammar state and, for the copy limit, the current slot's tokens so far."""

    def __init__(self, grammar: CardGrammar, prompt: Sequence[int] | None) -> None:
        self.grammar = grammar
        self.state = grammar.start()
        self.index = grammar.copy_index(prompt) if prompt is not None and grammar.max_copy else None
        self.history: list[int] = []

    def key(self) -> tuple[tuple[Any, ...], tuple[int, ...]]:
        """The state's mask key and the tokens the copy limit bans here."""
        return self.grammar._mask_key(self.state), self.grammar._banned(self.state, self.history, self.index)

    def mask(self) -> Any:
        _, banned = self.key()
        return self.grammar._with_banned(self.grammar._allowed(self.state), banned)

    def advance(self, token: int) -> None:
        before = self.state
        self.state = self.grammar.advance(before, token)
        if self.index is None:
            return
        if isinstance(before, _Slot) and isinstance(self.state, _Slot) and self.state.index == before.index:
            self.history.append(token)
        else:
            self.history = []


class _CardProcessor:
    """Masks each row's next-token scores to what the grammar allows after the row's tokens so far."""

    def __init__(self, grammar: CardGrammar, prompt_width: int, prompts: Sequence[Sequence[int]] | None) -> None:
        self.grammar = grammar
        self.width = prompt_width
        self.prompts = prompts
        self.cursors: list[_Cursor] | None = None
        self.seen = 0

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        g = self.grammar
        if self.cursors is None:
            rows = input_ids.shape[0]
            if self.prompts is not None and len(self.prompts) != rows:
                raise ValueError(f"card processor got {len(self.prompts)} prompts for {rows} rows")
            self.cursors = [_Cursor(g, None if self.prompts is None else self.prompts[r]) for r in range(rows)]
        new = input_ids[:, self.width + self.seen :].tolist()
        for r, toks in enumerate(new):
            for tok in toks:
                self.cursors[r].advance(int(tok))
        self.seen += len(new[0]) if new else 0
        masks = torch.stack([c.mask() for c in self.cursors]).to(scores.device)
        if masks.shape[1] != scores.shape[1]:
            raise ValueError(f"card grammar has {masks.shape[1]} tokens, the model's scores {scores.shape[1]}")
        return scores.masked_fill(~masks, float("-inf"))


def card_grammar_for(policy: Any, template: CardTemplate) -> CardGrammar:
    """The grammar of ``template`` on ``policy``'s tokenizer, EOS ids and output size."""
    out = policy.model.get_output_embeddings()
    vocab = int(out.weight.shape[0]) if out is not None else None
    return CardGrammar(template, policy.tokenizer, policy.eos_ids, vocab_size=vocab)


def constrain_synthesizer(policy: Any, domain: Domain, max_new_tokens: int) -> CardGrammar:
    """Make ``policy`` sample cards under ``domain.card_template()`` (``synth_decoding: card``); returns the grammar.

    Raises ValueError when the domain has no card template, or when ``max_new_tokens`` is below
    the longest card the template allows (a card cut off by the budget would not parse).
    """
    if not isinstance(domain, HasCardTemplate):
        raise ValueError(f"synth_decoding: card needs a domain with a card template (HasCardTemplate, e.g. math); "
                         f"domain {domain.name!r} has none")
    grammar = card_grammar_for(policy, domain.card_template())
    if max_new_tokens < grammar.max_tokens():
        raise ValueError(f"synth_decoding: card needs synthesizer.sampling.max_new_tokens >= {grammar.max_tokens()} "
                         f"(the longest card of the template), got {max_new_tokens}")
    policy.set_token_constraint(grammar)
    return grammar
