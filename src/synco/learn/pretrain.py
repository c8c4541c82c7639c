"""Deterministic warm start of the embedded ``arith`` world (the ``synco pretrain`` backend).

Two tiny char-level Llamas (``synco.learn.charlm.tiny_llama``: the Reasoner at
the default size, ~0.65M parameters; the Synthesizer 64 wide and 2 layers deep,
~0.11M) are trained from scratch by supervised next-token prediction on
generated data, with the loss on the completion only:

* the **Reasoner** on ``Q:<problem>\\nA:`` -> ``\\boxed{<answer>}</s>``, levels
  weighted toward the easy end and stopped early, so that before co-training it
  solves the easy levels, fails the hard ones and is *partially* competent
  (greedy held-out accuracy between ~0.2 and ~0.8) on several levels in between;
* the **Synthesizer** (char tokenizer plus the card's JSON keys and the target's
  factor names as whole tokens) on ``<report>\\nDO:<cell>\\nCARD:`` -> a compact
  nine-field JSON card of a problem *in* that cell, so it learns ``target cell ->
  card`` (the Designer's cell, e.g. ``level=L8,carries=0``: the level plus, with
  some probability, one or rarely two of the candidate factors the Reflector may
  promote; half of the cells drawn uniformly among the feasible ones so rare cells
  are trained too, see :class:`TargetMix`). The report prefix is random, so the
  card never depends on it; without a ``DO:`` line (15 % of prompts) the level is
  uniform, as in the untargeted warm start. How well the cards follow their
  targets is measured after training (:func:`measure_control`, ``control_*`` in
  ``meta.json``).

Everything is drawn from the seed: ``torch.manual_seed`` for initialisation,
a ``random.Random`` per model for the data, and a fixed ``torch`` thread count
set inside (and restored afterwards). Two runs with the same seed, thread count
and torch build on the same machine give bitwise-identical weights, whether the
two agents train in parallel worker processes (the default) or one after the
other; other machines, thread counts or torch versions may differ in the last
float bits.

Prompts are tokenized with the tokenizer's defaults (the char tokenizer adds no
BOS); the completion ends with EOS so generation stops by itself.

Unlike the ``rounds`` / ``rft`` updates (which train attempts on the ids they were
sampled as, see :class:`synco.learn.sft.SFTExample`), nothing here was sampled:
the warm start trains on ground-truth texts it writes itself, so tokenising them
*defines* the targets and there is no sampled tokenisation to preserve (and the
char-level tokenizers split every text one way only).
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from synco.evosyn.space import Cell, FactorSpace, factor_values, feasible_cells
from synco.learn.sft import completion_loss, shift_labels
from synco.core.records import CARD_FIELDS
from synco.domains.arith import ARITH_FACTORS, ArithDomain
from synco.learn.charlm import card_tokenizer, char_tokenizer, tiny_llama

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from synco.domains.base import HeldoutItem

ASSET_DIR = Path(__file__).resolve().parent.parent / "assets" / "arith"
"""Where the shipped warm start lives (packaged with synco)."""

REASONER_LEVEL_WEIGHTS: tuple[float, ...] = (6, 6, 5, 5, 4, 3, 3, 2, 1.5, 1, 1)
"""Relative share of each level (L1..L11) in the Reasoner's SFT data.

Easy levels must dominate: they bootstrap the digit-alignment circuits every
level needs (with the weight shifted toward L4..L8 the model did not leave its
loss plateau within 700 steps; with this mix it leaves it after ~500)."""

INIT_STD = 0.06
"""Normal init std of all linear and embedding weights (HF's default is 0.02). Measured on the
Reasoner: with 0.02 it sat on its loss plateau for ~900 steps, with 0.06 for ~450, with 0.1 longer."""

HELDOUT_SEED = 12345
"""Seed of the held-out sample the warm start is scored on."""

Pair = tuple[str, str]


class TargetMix(BaseModel):
    """How the Synthesizer's training prompts name a target cell (``DO:level=L8,carries=0``).

    A target always names the level, plus candidate factors the Reflector may
    promote at run time (usually one, at most two). Half of the cells are drawn
    uniformly among the feasible cells of their factor set, so rare-but-feasible
    cells are trained as well as common ones; the rest come from the natural
    distribution (uniform level, then the realised cell of a sampled problem).

    ``carries`` is drawn 4x as often as each other candidate: it is the factor
    measured to explain failure beyond the level, and the slowest to learn (a
    cell depends on digit sums; measured on the 64 x 2 Synthesizer: with carries
    in ~35 % of 48k prompts its cards landed in the target cell barely above
    following the level alone, with 100 % of 38k clearly above).
    """

    model_config = ConfigDict(frozen=True)

    p_target: float = Field(0.85, description="Share of prompts with a DO: line (the rest: uniform level, no target).")
    p_one: float = Field(0.7, description="Of the targets: level plus one candidate factor.")
    p_two: float = Field(0.15, description="Of the targets: level plus two candidate factors (else level only).")
    p_uniform: float = Field(0.5, description="Cell uniform over the feasible cells of its factor set (else natural).")
    max_tries: int = Field(2000, description="Problems drawn per cell by rejection before falling back to natural.")
    factor_weights: dict[str, float] = Field(
        default_factory=lambda: {"carries": 4.0},
        description="Relative weight of each candidate factor in a target (missing: 1).")


class ControlStats(BaseModel):
    """How well Synthesizer cards follow their ``DO:`` target cells (one group of targets, one temperature)."""

    n_targets: int
    n: int = Field(description="Cards sampled (n_targets x cards per target).")
    wellformed_rate: float
    valid_rate: float = Field(description="Well-formed, in a level family and not held out.")
    distinct_rate: float = Field(description="Distinct well-formed problems / n.")
    hit_rate: float = Field(description="Share of the valid cards whose realised cell equals the target.")
    level_hit_rate: float = Field(description="Share of the valid cards with the target's level.")
    chance: float = Field(description="hit_rate of a Synthesizer that ignores the target (uniform level).")
    chance_given_level: float = Field(description="hit_rate of one that follows the level only.")


class PretrainMeta(BaseModel):
    """What ``meta.json`` records about one warm start."""

    seed: int
    reasoner_steps: int
    synthesizer_steps: int
    reasoner_batch: int
    synthesizer_batch: int
    lr: float
    synthesizer_lr: float
    init_std: float
    synthesizer_hidden: int
    synthesizer_layers: int
    num_threads: int
    parallel: bool
    torch_version: str
    reasoner_level_weights: list[float]
    n_params_reasoner: int
    n_params_synthesizer: int
    reasoner_final_loss: float
    synthesizer_final_loss: float
    heldout_per_level: int
    heldout_accuracy: dict[str, float]
    n_cards: int
    card_wellformed_rate: float
    card_valid_rate: float
    card_distinct_rate: float
    card_level_counts: dict[str, int]
    synthesizer_targets: TargetMix = TargetMix()
    control_per_target: int = 0
    control_level_t07: float | None = None  # hit rate (valid cards in the target cell) for level-only targets, T=0.7
    control_level_t10: float | None = None
    control_pair_t07: float | None = None  # ... for level x carries targets
    control_pair_t10: float | None = None
    control: dict[str, ControlStats] = Field(default_factory=dict)  # every group ("carries@t0.7", ...) in full
    seconds_reasoner: float
    seconds_synthesizer: float
    seconds_eval: float
    seconds_total: float


@dataclass(frozen=True)
class PretrainResult:
    """Paths of the saved checkpoints and the run's metadata."""

    out_dir: Path
    reasoner_dir: Path
    synthesizer_dir: Path
    meta: PretrainMeta


@dataclass(frozen=True)
class CardStats:
    """How well a batch of Synthesizer outputs works as task cards."""

    n: int
    wellformed_rate: float  # json.loads gives an object with all nine fields as non-empty strings
    valid_rate: float  # well-formed, in a level family (the oracle answers) and not held out
    distinct_rate: float  # distinct well-formed problems / n
    level_counts: dict[str, int]  # true level (from the problem) of the valid cards


# ----------------------------------------------------------------- data


def random_report(rng: random.Random, levels: Sequence[str]) -> str:
    """A capability-report-like one-liner (``weak:l5,l6|easy:l1|hard:l9|ok:0.41``) or a start marker.

    The Synthesizer's warm start sees these as prefixes with cards that ignore
    them, so co-training starts from a uniform level choice under any report.
    """
    roll = rng.random()
    if roll < 0.15:
        return ""
    if roll < 0.3:
        return "no data"
    names = [lv.lower() for lv in levels]
    rng.shuffle(names)
    parts = []
    for label in ("weak", "easy", "hard"):
        k = rng.randint(0, 3)
        if k:
            parts.append(label + ":" + ",".join(names[:k]))
            names = names[k:]
    parts.append("ok:" + format(rng.random(), ".2f"))
    if rng.random() < 0.2:
        parts.append("valid:" + format(rng.random() * 0.5, ".2f"))
    return "|".join(parts)


def reasoner_pair(domain: ArithDomain, rng: random.Random, weights: Sequence[float]) -> Pair:
    """One Reasoner SFT example: (prompt, completion) for a level drawn by ``weights``."""
    level = rng.choices(domain.levels, weights=weights)[0]
    problem = domain.sample_problem(rng, level)
    answer = domain.answer(problem)
    return domain.reasoner_prompt(problem), domain.format_reasoner_answer(answer or "")


CATALOG_SEED = 777
"""Seed of the fixed problem sample the cell catalog (feasible cells, P(cell | level)) is computed on."""


@dataclass(frozen=True)
class CellCatalog:
    """Which cells each target factor set can reach, and how often, under ``domain.sample_problem``.

    ``share`` is P(cell | its level) for every cell seen in the sample (all factor
    sets in one map: a cell names its factors); ``cells`` lists, per factor set,
    the cells seen at least ``min_count`` times (the ones trained uniformly).
    """

    candidates: tuple[str, ...]  # the non-built-in factors, in ARITH_FACTORS order
    cells: Mapping[tuple[str, ...], tuple[Cell, ...]]
    share: Mapping[Cell, float] = field(repr=False)


FACTOR_ORDER = {d.name: i for i, d in enumerate(ARITH_FACTORS)}
_FACTOR_DEFS = {d.name: d for d in ARITH_FACTORS}


def target_tokens() -> list[str]:
    """Whole tokens for the factor names of a ``DO:`` target (``DO:level=``, ``,carries=``, ...).

    Measured: with names split into characters, ``carries``, ``answer_digits``,
    ``zeros`` and ``ones`` all end in ``s=``, and a tiny model learned to read
    their buckets more slowly.
    """
    return ["DO:level=", *(f",{d.name}=" for d in ARITH_FACTORS if d.name != "level")]


def cell_of_problem(problem: str, names: Sequence[str]) -> Cell:
    """The problem's bucket of each factor in ``names`` (an in-family problem has them all)."""
    out = []
    for name in names:
        value = _FACTOR_DEFS[name].value(problem)
        if value is None:
            raise ValueError(f"problem {problem!r} has no {name!r} bucket (not an in-family problem?)")
        out.append((name, value))
    return tuple(out)


def target_factor_sets(candidates: Sequence[str], max_extra: int = 2) -> list[tuple[str, ...]]:
    """``("level",)`` and ``level`` plus every combination of up to ``max_extra`` candidates."""
    return [("level", *combo) for k in range(max_extra + 1) for combo in combinations(candidates, k)]


@lru_cache(maxsize=4)
def cell_catalog(n_per_level: int = 2000, min_count: int = 3, seed: int = CATALOG_SEED) -> CellCatalog:
    """The catalog of the arith world from ``n_per_level`` problems per level (seeded; cached per process).

    A cell seen ``min_count`` times has P(cell | level) >= ~0.0015, so rejection
    sampling with :attr:`TargetMix.max_tries` finds a problem in it almost always.
    """
    domain = ArithDomain()
    builtin = set(domain.builtin_factors)
    candidates = tuple(d.name for d in ARITH_FACTORS if d.name not in builtin)
    sets = target_factor_sets(candidates)
    rng = random.Random(seed)
    counts: Counter[Cell] = Counter()
    for level in domain.levels:
        for _ in range(n_per_level):
            values = factor_values(domain.sample_problem(rng, level), ARITH_FACTORS)
            for names in sets:
                counts[tuple((n, values[n]) for n in names)] += 1
    cells = {names: tuple(sorted((c for c, k in counts.items() if k >= min_count and tuple(n for n, _ in c) == names),
                                 key=cell_order))
             for names in sets}
    return CellCatalog(candidates=candidates, cells=cells, share={c: k / n_per_level for c, k in counts.items()})


def cell_order(cell: Cell) -> tuple[int, ...]:
    """Sort key of a cell: by level, then by each factor's bucket order."""
    return tuple(_FACTOR_DEFS[n].buckets.index(v) for n, v in cell)


def problem_in_cell(domain: ArithDomain, rng: random.Random, cell: Cell, max_tries: int) -> str | None:
    """A training problem whose realised cell is ``cell`` (rejection sampling in its level), or None."""
    level = dict(cell)["level"]
    names = [n for n, _ in cell]
    for _ in range(max_tries):
        problem = domain.sample_problem(rng, level)
        if cell_of_problem(problem, names) == cell:
            return problem
    return None


def draw_factors(rng: random.Random, candidates: Sequence[str], weights: Mapping[str, float], k: int) -> list[str]:
    """``k`` distinct candidates drawn one by one with probability proportional to their weight (default 1)."""
    pool, out = list(candidates), []
    for _ in range(k):
        pick = rng.choices(pool, weights=[weights.get(c, 1.0) for c in pool])[0]
        pool.remove(pick)
        out.append(pick)
    return out


def synthesizer_example(domain: ArithDomain, rng: random.Random, catalog: CellCatalog,
                        mix: TargetMix) -> tuple[Cell | None, str]:
    """``(target, problem)`` of one Synthesizer example; the problem is always in the target cell.

    No target (probability ``1 - p_target``): a uniform level, as in the untargeted warm start.
    """
    if rng.random() >= mix.p_target:
        return None, domain.sample_problem(rng, rng.choice(domain.levels))
    roll = rng.random()
    k = 2 if roll < mix.p_two else 1 if roll < mix.p_two + mix.p_one else 0
    names = ("level", *sorted(draw_factors(rng, catalog.candidates, mix.factor_weights, k),
                              key=FACTOR_ORDER.__getitem__))
    if rng.random() < mix.p_uniform:
        cell = rng.choice(catalog.cells[names])
        problem = problem_in_cell(domain, rng, cell, mix.max_tries)
        if problem is not None:
            return cell, problem
    problem = domain.sample_problem(rng, rng.choice(domain.levels))
    return cell_of_problem(problem, names), problem


def synthesizer_pair(domain: ArithDomain, rng: random.Random, catalog: CellCatalog | None = None,
                     mix: TargetMix | None = None) -> Pair:
    """One Synthesizer SFT example: a report-like prompt, mostly with a ``DO:`` target, and a correct card in it.

    The report is random (the card never depends on it); the card's level and
    problem follow the target cell when there is one, else the level is uniform.
    """
    report = random_report(rng, domain.levels)
    target, problem = synthesizer_example(domain, rng, catalog or cell_catalog(), mix or TargetMix())
    card = domain.format_card(problem, domain.level_of(problem) or "", domain.answer(problem) or "")
    return domain.synthesizer_prompt(report, target=target), card


def encode_pairs(tokenizer: PreTrainedTokenizerBase, pairs: Sequence[Pair]) -> tuple[torch.Tensor, ...]:
    """Right-padded ``input_ids, attention_mask, labels`` with labels only on completion + EOS.

    The pairs are generated ground truth, not sampled text, so tokenising them is the target itself.
    """
    import torch

    prompts = tokenizer([p for p, _ in pairs], add_special_tokens=False)["input_ids"]
    completions = tokenizer([c for _, c in pairs], add_special_tokens=False)["input_ids"]
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    rows = [(p, c + [eos]) for p, c in zip(prompts, completions)]
    width = max(len(p) + len(c) for p, c in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for i, (p, c) in enumerate(rows):
        n = len(p) + len(c)
        ids[i, :n] = torch.tensor(p + c)
        mask[i, :n] = 1
        labels[i, len(p):n] = torch.tensor(c)
    return ids, mask, labels


# ----------------------------------------------------------------- training


def init_weights(model: torch.nn.Module, std: float, seed: int) -> None:
    """Re-draw every linear and embedding weight from N(0, std²) (norms stay at 1), seeded."""
    import torch

    torch.manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
                module.weight.normal_(0.0, std)


def lr_at(step: int, steps: int, lr: float, warmup: int) -> float:
    """Linear warmup to ``lr`` over ``warmup`` steps, then cosine decay to ``lr / 10``."""
    if step < warmup:
        return lr * (step + 1) / warmup
    frac = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def train_sft(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    make_pair: Callable[[], Any],
    steps: int,
    batch_size: int,
    lr: float = 1e-3,
    name: str = "sft",
    progress: bool = True,
    on_step: Callable[[int], None] | None = None,
    encode: Callable[[PreTrainedTokenizerBase, Sequence[Any]], tuple[torch.Tensor, ...]] | None = None,
) -> float:
    """Supervised next-token training on ``steps`` fresh batches; returns the mean loss of the last 20 steps.

    The loss is :func:`synco.learn.sft.completion_loss` (the one SFT loss; ``encode_pairs`` puts labels
    on the completion and EOS only).

    ``on_step(step)`` (1-based) runs after every optimiser step, e.g. to probe a schedule. ``encode`` turns a
    batch of ``make_pair()`` examples into ``input_ids, attention_mask, labels`` (default :func:`encode_pairs`).
    """
    import torch

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    warmup = max(1, min(50, steps // 10))
    recent: list[float] = []
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr, warmup)
        ids, mask, labels = (encode or encode_pairs)(tokenizer, [make_pair() for _ in range(batch_size)])
        loss = completion_loss(model(input_ids=ids, attention_mask=mask).logits, shift_labels(labels))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        recent = (recent + [loss.item()])[-20:]
        if progress and (step + 1) % max(1, steps // 10) == 0:
            print(f"[pretrain] {name} step {step + 1}/{steps} loss {sum(recent) / len(recent):.4f}", flush=True)
        if on_step is not None:
            on_step(step + 1)
    model.eval()
    return sum(recent) / len(recent) if recent else float("nan")


# ----------------------------------------------------------------- evaluation


def generate_texts(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    max_new_tokens: int,
    temperature: float | None = None,
    batch_size: int = 256,
) -> list[str]:
    """Completions of ``prompts`` (greedy when ``temperature`` is None, else pure temperature sampling)."""
    import torch

    sampling = temperature is not None and temperature > 0
    out: list[str] = []
    for start in range(0, len(prompts), batch_size):
        enc = tokenizer(list(prompts[start:start + batch_size]), add_special_tokens=False, padding=True,
                        return_tensors="pt")
        kwargs = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0} if sampling else {
            "do_sample": False}
        with torch.no_grad():
            gen = model.generate(**enc, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                                 eos_token_id=tokenizer.eos_token_id, **kwargs)
        out += tokenizer.batch_decode(gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    return out


def boxed_int(text: str) -> str | None:
    """The integer inside the last ``\\boxed{...}`` of ``text``, or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    end = text.find("}", start)
    inner = text[start + 7:end] if end >= 0 else ""
    body = inner[1:] if inner.startswith("-") else inner
    return inner if body and all("0" <= ch <= "9" for ch in body) else None


def evaluate_reasoner(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    domain: ArithDomain,
    items: Sequence[HeldoutItem],
    max_new_tokens: int = 16,
) -> dict[str, float]:
    """Greedy accuracy per level (item group) in the domain's level order; batched."""
    texts = generate_texts(model, tokenizer, [domain.reasoner_prompt(it.problem) for it in items], max_new_tokens)
    hits: dict[str, list[bool]] = {}
    for it, text in zip(items, texts):
        hits.setdefault(it.group, []).append(boxed_int(text) == it.answer)
    return {lv: sum(hits[lv]) / len(hits[lv]) for lv in domain.levels if lv in hits}


def sample_cards(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    domain: ArithDomain,
    n: int,
    temperature: float = 1.0,
    report: str = "",
    max_new_tokens: int = 320,
) -> list[str]:
    """``n`` raw Synthesizer outputs for the prompt built from ``report`` (seed torch yourself)."""
    return generate_texts(model, tokenizer, [domain.synthesizer_prompt(report)] * n, max_new_tokens, temperature)


def wellformed_problem(text: str) -> str | None:
    """The stripped problem of a well-formed card text (a JSON object with all nine fields as non-empty
    strings), else None."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not all(isinstance(obj.get(k), str) and obj[k].strip() for k in CARD_FIELDS):
        return None
    return obj["problem"].strip()


def card_stats(domain: ArithDomain, texts: Sequence[str]) -> CardStats:
    """Well-formed, valid and distinct rates of raw card texts, and the true levels of the valid ones."""
    problems: list[str] = []
    levels: Counter[str] = Counter()
    valid = 0
    for text in texts:
        problem = wellformed_problem(text)
        if problem is None:
            continue
        problems.append(problem)
        level = domain.level_of(problem)
        if level is not None and not domain.is_heldout(problem):
            valid += 1
            levels[level] += 1
    n = max(1, len(texts))
    return CardStats(
        n=len(texts),
        wellformed_rate=len(problems) / n,
        valid_rate=valid / n,
        distinct_rate=len(set(problems)) / n,
        level_counts={lv: levels[lv] for lv in domain.levels},
    )


CONTROL_LEVELS = ("L2", "L6", "L8", "L10")
"""Levels of the level x other-factor targets measured (besides carries, which is measured on every level):
one subtraction, one addition and two multiplications."""


def control_targets(domain: ArithDomain, levels: Sequence[str] = CONTROL_LEVELS) -> dict[str, list[Cell]]:
    """Target cells to measure controllability on, by group, as the Designer would allocate them.

    ``level``: every feasible level cell; ``carries``: every feasible level x carries
    cell; each other candidate factor: its feasible cells on ``levels``. Feasible is
    :func:`synco.evosyn.space.feasible_cells` with ``domain.sample_any`` (the Designer's call).
    """
    out: dict[str, list[Cell]] = {}
    defs = domain.factor_defs()
    for d in defs:
        names = ("level",) if d.name == "level" else ("level", d.name)
        space = FactorSpace.from_defs(x for x in defs if x.name in names)
        cells = feasible_cells(space, defs, domain.sample_any)
        if d.name not in ("level", "carries"):
            cells = [c for c in cells if dict(c)["level"] in levels]
        out[d.name] = cells
    return out


def control_stats(domain: ArithDomain, targets: Sequence[Cell], texts: Sequence[str],
                  catalog: CellCatalog) -> ControlStats:
    """Rates of ``texts[i]`` sampled for ``targets[i]``; the realised cell is recomputed from the problem."""
    if len(targets) != len(texts):
        raise ValueError(f"targets ({len(targets)}) and texts ({len(texts)}) differ in length")
    problems: list[str] = []
    valid = hits = level_hits = 0
    for target, text in zip(targets, texts):
        problem = wellformed_problem(text)
        if problem is None:
            continue
        problems.append(problem)
        if domain.level_of(problem) is None or domain.is_heldout(problem):
            continue
        valid += 1
        realised = factor_values(problem, ARITH_FACTORS)
        hits += all(realised.get(k) == v for k, v in target)
        level_hits += realised.get("level") == dict(target).get("level")
    n, distinct_targets = max(1, len(texts)), list(dict.fromkeys(targets))
    share = [catalog.share.get(c, 0.0) for c in distinct_targets]
    return ControlStats(
        n_targets=len(distinct_targets), n=len(texts), wellformed_rate=len(problems) / n, valid_rate=valid / n,
        distinct_rate=len(set(problems)) / n, hit_rate=hits / max(1, valid), level_hit_rate=level_hits / max(1, valid),
        chance=sum(share) / max(1, len(share)) / len(domain.levels),
        chance_given_level=sum(share) / max(1, len(share)),
    )


def measure_control(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    domain: ArithDomain,
    targets: Mapping[str, Sequence[Cell]],
    temperature: float,
    per_target: int,
    seed: int = 0,
) -> dict[str, ControlStats]:
    """Sample ``per_target`` cards for each target cell (random report prefixes) and score each group.

    Seeds ``torch`` and the report draws from ``seed``; one batched generation for all groups.
    """
    import torch

    rng = random.Random(f"control-{seed}")
    rows = [(group, cell) for group, cells in targets.items() for cell in cells for _ in range(per_target)]
    prompts = [domain.synthesizer_prompt(random_report(rng, domain.levels), target=cell) for _, cell in rows]
    torch.manual_seed(seed)
    texts = generate_texts(model, tokenizer, prompts, max_new_tokens=96, temperature=temperature)
    catalog = cell_catalog()
    return {group: control_stats(domain, [c for g, c in rows if g == group],
                                 [t for (g, _), t in zip(rows, texts) if g == group], catalog)
            for group in targets}


# ----------------------------------------------------------------- the warm start


@dataclass(frozen=True)
class RoleSpec:
    """Everything one agent's warm start needs (picklable, so a worker process can run it)."""

    role: str  # "reasoner" or "synthesizer"
    out_dir: Path
    seed: int
    steps: int
    batch: int
    lr: float
    hidden: int
    layers: int
    num_threads: int
    progress: bool
    heldout_per_level: int  # reasoner: held-out items per level to score (0: skip)
    n_cards: int  # synthesizer: cards to sample at temperature 1 (0: skip)
    control_per_target: int = 0  # synthesizer: cards per target cell and temperature to measure control (0: skip)
    targets: TargetMix = TargetMix()  # synthesizer: how training prompts name target cells


@dataclass(frozen=True)
class RoleResult:
    """What one agent's warm start produced."""

    final_loss: float
    n_params: int
    seconds_train: float
    seconds_eval: float
    heldout_accuracy: dict[str, float]
    cards: CardStats | None
    control: dict[str, ControlStats] = field(default_factory=dict)  # "<group>@t<T>", e.g. "carries@t0.7"


CONTROL_TEMPERATURES = (0.7, 1.0)
"""Sampling temperatures controllability is measured at (0.7: the arith preset's)."""


def train_role(spec: RoleSpec) -> RoleResult:
    """Train one agent from scratch, save it (model + tokenizer) to ``out_dir/role`` and score it.

    Sets ``torch``'s thread count for its duration and restores it, so it can
    run in this process or in a worker with the same bitwise result.
    """
    import torch

    old_threads = torch.get_num_threads()
    torch.set_num_threads(spec.num_threads)
    try:
        t0 = time.perf_counter()
        domain = ArithDomain()
        tokenizer = char_tokenizer() if spec.role == "reasoner" else card_tokenizer(target_tokens())
        model = tiny_llama(tokenizer, seed=spec.seed, hidden_size=spec.hidden, num_layers=spec.layers)
        init_weights(model, INIT_STD, spec.seed)
        rng = random.Random(f"arith-{spec.role}-{spec.seed}")
        if spec.role == "reasoner":
            make_pair: Callable[[], Pair] = lambda: reasoner_pair(domain, rng, REASONER_LEVEL_WEIGHTS)  # noqa: E731
        else:
            catalog = cell_catalog()
            make_pair = lambda: synthesizer_pair(domain, rng, catalog, spec.targets)  # noqa: E731
        loss = train_sft(model, tokenizer, make_pair, spec.steps, spec.batch, spec.lr, spec.role, spec.progress)
        model.save_pretrained(spec.out_dir / spec.role)
        tokenizer.save_pretrained(spec.out_dir / spec.role)
        t1 = time.perf_counter()
        acc: dict[str, float] = {}
        cards = None
        if spec.role == "reasoner" and spec.heldout_per_level:
            acc = evaluate_reasoner(model, tokenizer, domain, domain.heldout(spec.heldout_per_level, HELDOUT_SEED))
        if spec.role == "synthesizer" and spec.n_cards:
            torch.manual_seed(spec.seed)
            cards = card_stats(domain, sample_cards(model, tokenizer, domain, spec.n_cards))
        control: dict[str, ControlStats] = {}
        if spec.role == "synthesizer" and spec.control_per_target:
            targets = control_targets(domain)
            for temp in CONTROL_TEMPERATURES:
                stats = measure_control(model, tokenizer, domain, targets, temp, spec.control_per_target, spec.seed)
                control |= {f"{group}@t{temp}": st for group, st in stats.items()}
        return RoleResult(
            final_loss=loss, n_params=sum(p.numel() for p in model.parameters()),
            seconds_train=t1 - t0, seconds_eval=time.perf_counter() - t1, heldout_accuracy=acc, cards=cards,
            control=control,
        )
    finally:
        torch.set_num_threads(old_threads)


def train_roles(train: Callable[[Any], Any], specs: Sequence[Any], parallel: bool) -> list[Any]:
    """``train(spec)`` for each role's spec, in spawned processes side by side (``parallel``; each exits if this
    process dies) or one after the other; the results in the specs' order. Every world's warm start uses it."""
    if not parallel:
        return [train(spec) for spec in specs]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=len(specs), mp_context=multiprocessing.get_context("spawn"),
                             initializer=exit_with_parent, initargs=(os.getpid(),)) as pool:
        return list(pool.map(train, specs))


def exit_with_parent(parent_pid: int, poll_seconds: float = 1.0) -> None:
    """Worker-process initializer: exit as soon as ``parent_pid`` is gone.

    A killed ``synco pretrain`` (or bench) would otherwise leave its spawn
    workers training on as orphans, re-parented to init.
    """
    import threading

    def watch() -> None:
        while True:
            time.sleep(poll_seconds)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def pretrain_arith(
    out_dir: str | Path,
    seed: int = 0,
    reasoner_steps: int = 1000,
    synthesizer_steps: int = 6000,
    progress: bool = True,
    reasoner_batch: int = 64,
    synthesizer_batch: int = 16,
    lr: float = 1e-3,
    synthesizer_lr: float = 3e-3,
    synthesizer_hidden: int = 64,
    synthesizer_layers: int = 2,
    heldout_per_level: int = 100,
    n_cards: int = 64,
    num_threads: int = 1,
    parallel: bool = True,
    synthesizer_targets: TargetMix | None = None,
    control_per_target: int = 16,
) -> PretrainResult:
    """Train and save the arith warm start into ``out_dir/{reasoner,synthesizer}`` plus ``meta.json``.

    ``lr`` is the Reasoner's peak learning rate. The Synthesizer is a narrower,
    shallower ``tiny_llama`` (``synthesizer_hidden`` x ``synthesizer_layers``)
    with the card tokenizer (``charlm.card_tokenizer``: the JSON keys are whole
    tokens, so a ~230-character card is ~45 tokens): its cards dominate the cost
    of its training and of every co-training step, while writing them needs
    little capacity. Following a target cell needs examples more than width:
    measured on the mix of :class:`TargetMix`, 128 x 2 and 96 x 3 followed no
    candidate factor better than 64 x 2 after 3,000 steps, and 64 x 3 after 6,000
    steps was mixed (better on two factors, worse on one); the ``level x
    carries`` circuit appeared only between 3,000 and 6,000 steps, hence
    ``synthesizer_steps`` (~5 ms per example on one idle core: ~8 minutes, in
    parallel with the Reasoner's ~5).

    With ``parallel`` the two agents train at the same time in two worker
    processes with ``num_threads`` torch threads each (two cores busy with one
    thread each beat one process with two threads, and a single thread degrades
    gracefully when other programs share the cores, where two spin-waiting
    threads slowed a run ~20x); otherwise one after the other here. Both give
    bitwise-identical weights for the same ``seed``, ``num_threads`` and torch
    build. The held-out score uses ``domain.heldout(heldout_per_level,
    HELDOUT_SEED)``; card rates use ``n_cards`` samples at temperature 1 with
    an empty report; controllability (``control_*`` in the meta) uses
    ``control_per_target`` cards per target cell of :func:`control_targets` at
    each of :data:`CONTROL_TEMPERATURES`. ``synthesizer_targets`` is the
    :class:`TargetMix` of the Synthesizer's training prompts (default: ``TargetMix()``).
    """
    import torch

    t0 = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    targets = synthesizer_targets or TargetMix()
    common: dict[str, Any] = dict(out_dir=out, num_threads=num_threads, progress=progress,
                                  heldout_per_level=heldout_per_level, n_cards=n_cards)
    specs = [
        RoleSpec(role="reasoner", seed=seed, steps=reasoner_steps, batch=reasoner_batch, lr=lr,
                 hidden=128, layers=3, **common),  # the tiny_llama defaults
        RoleSpec(role="synthesizer", seed=seed + 1, steps=synthesizer_steps, batch=synthesizer_batch,
                 lr=synthesizer_lr, hidden=synthesizer_hidden, layers=synthesizer_layers,
                 control_per_target=control_per_target, targets=targets, **common),
    ]
    reasoner, synthesizer = train_roles(train_role, specs, parallel)
    cards = synthesizer.cards or CardStats(0, 0.0, 0.0, 0.0, {})
    meta = PretrainMeta(
        seed=seed, reasoner_steps=reasoner_steps, synthesizer_steps=synthesizer_steps,
        reasoner_batch=reasoner_batch, synthesizer_batch=synthesizer_batch, lr=lr,
        synthesizer_lr=synthesizer_lr, init_std=INIT_STD, synthesizer_hidden=synthesizer_hidden,
        synthesizer_layers=synthesizer_layers, num_threads=num_threads, parallel=parallel,
        torch_version=torch.__version__, reasoner_level_weights=list(REASONER_LEVEL_WEIGHTS),
        n_params_reasoner=reasoner.n_params, n_params_synthesizer=synthesizer.n_params,
        reasoner_final_loss=round(reasoner.final_loss, 5), synthesizer_final_loss=round(synthesizer.final_loss, 5),
        heldout_per_level=heldout_per_level,
        heldout_accuracy={k: round(v, 4) for k, v in reasoner.heldout_accuracy.items()},
        n_cards=cards.n, card_wellformed_rate=cards.wellformed_rate, card_valid_rate=cards.valid_rate,
        card_distinct_rate=cards.distinct_rate, card_level_counts=cards.level_counts,
        synthesizer_targets=targets, control_per_target=control_per_target,
        control_level_t07=_hit(synthesizer.control, "level@t0.7"),
        control_level_t10=_hit(synthesizer.control, "level@t1.0"),
        control_pair_t07=_hit(synthesizer.control, "carries@t0.7"),
        control_pair_t10=_hit(synthesizer.control, "carries@t1.0"),
        control=synthesizer.control,
        seconds_reasoner=round(reasoner.seconds_train, 1), seconds_synthesizer=round(synthesizer.seconds_train, 1),
        seconds_eval=round(reasoner.seconds_eval + synthesizer.seconds_eval, 1),
        seconds_total=round(time.perf_counter() - t0, 1),
    )
    (out / "meta.json").write_text(meta.model_dump_json(indent=2) + "\n")
    if progress:
        print(f"[pretrain] saved to {out} in {meta.seconds_total:.0f}s; held-out accuracy "
              + " ".join(f"{k}={v:.2f}" for k, v in meta.heldout_accuracy.items())
              + f"; cards well-formed {meta.card_wellformed_rate:.2f} distinct {meta.card_distinct_rate:.2f}",
              flush=True)
        for key, st in meta.control.items():
            print(f"[pretrain] control {key:<20} valid {st.valid_rate:.2f} distinct {st.distinct_rate:.2f} "
                  f"in target cell {st.hit_rate:.2f} (chance {st.chance:.3f}, level followed only "
                  f"{st.chance_given_level:.2f})", flush=True)
    return PretrainResult(out_dir=out, reasoner_dir=out / "reasoner", synthesizer_dir=out / "synthesizer", meta=meta)


def _hit(control: Mapping[str, ControlStats], key: str) -> float | None:
    """The rounded hit rate of one control group, None when it was not measured."""
    st = control.get(key)
    return None if st is None else round(st.hit_rate, 4)


def _complete(folder: Path) -> bool:
    return all((folder / role / "config.json").is_file() for role in ("reasoner", "synthesizer"))


def load_arith_warm_start(seed: int = 0) -> Path:
    """The folder holding ``reasoner/`` and ``synthesizer/`` of the arith warm start.

    The shipped checkpoint (seed 0) when present; otherwise the cache
    ``~/.cache/synco/arith-<seed>`` (``$XDG_CACHE_HOME`` respected), pretraining
    into it first when it is missing (a few minutes on CPU).
    """
    return warm_start_folder("arith", seed, ASSET_DIR, lambda out: pretrain_arith(out, seed=seed))


def warm_start_folder(world: str, seed: int, shipped: Path, pretrain: Callable[[Path], object]) -> Path:
    """An embedded world's warm-start folder: ``shipped`` for seed 0 when it is complete, else the cache
    ``~/.cache/synco/<world>-<seed>`` (``$XDG_CACHE_HOME`` respected), filled by ``pretrain(folder)`` first when
    missing (into a temporary folder renamed at the end, so a killed pretraining leaves no half checkpoint)."""
    if seed == 0 and _complete(shipped):
        return shipped
    cache_root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "synco"
    target = cache_root / f"{world}-{seed}"
    if not _complete(target):
        tmp = cache_root / f".{world}-{seed}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        pretrain(tmp)
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
    return target
