"""Deterministic warm start of the reasoning-gym world's tiny agents (``synco pretrain --world rgym``).

The weights live with the world, in ``synco/domains/rgym/assets/{reasoner,synthesizer}`` (the domain layer holds
no training code, so the recipe is here, above it, like the other worlds'). Both agents are tiny char-level Llamas
(``synco.learn.charlm``) trained from scratch by supervised next-token prediction on items reasoning-gym generates
(training seeds; never a held-out one) for the default families (:data:`DEFAULT_FAMILIES`):

* the **Reasoner** on ``Q:<question>\\nA:<answer>`` -> ``<answer></answer>`` + EOS (the prefix prefilled as in the
  run), levels weighted toward the easy end (:data:`LEVEL_WEIGHTS`) and stopped early, so the run starts partially
  competent rather than solved;
* the **Synthesizer** (the card tokenizer plus the family and field names as whole tokens) on
  ``<report>\\nDO:family=F,level=L\\nCARD:`` -> a nine-field card whose problem is a config of that cell
  (:meth:`~synco.domains.rgym.domain.RgymDomain.format_card`); 15 % of prompts have no target (a uniform cell).

Held-out success per group (greedy) and the Synthesizer's card validity are measured after training and written to
``meta.json``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import synco.domains.rgym as rgym_package
from synco.core.records import CardRejected
from synco.domains.rgym import RgymDomain, RgymSettings
from synco.domains.rgym.catalog import config_text
from synco.domains.rgym.domain import derive_seed
from synco.domains.rgym.gym import GymFailure
from synco.grading.cards import CardError, parse_task_card
from synco.learn.charlm import card_tokenizer, char_tokenizer, tiny_llama
from synco.learn.pretrain import (INIT_STD, train_roles, generate_texts, init_weights, random_report, train_sft,
                                  warm_start_folder)

ASSET_DIR = Path(rgym_package.__file__).resolve().parent / "assets"
"""The shipped warm start (seed 0), with the world."""

DEFAULT_FAMILIES = ("basic_arithmetic", "chain_sum", "products", "count_bits", "gcd", "lcm", "spell_backward",
                    "letter_counting")
"""The ``rgym`` preset's families, chosen by measurement (20 items per level, levels 0-2): ASCII questions and
answers of at most ~130 characters (basic_arithmetic 26-39, chain_sum 67-83, products 85-101, count_bits 73-78,
gcd 106-124, lcm 63-81, spell_backward 51-55, letter_counting 103-130). Left out: number_sequence (its generator ran
past a 3 s deadline at level 2), aiw (582 characters at level 1), decimal_chain_sum and simple_equations (~195 at
level 2), count_primes (an answer no tiny model computes), the long-question families."""

LEVEL_WEIGHTS = (0.6, 0.3, 0.1)
"""The Reasoner's training items per level 0, 1, 2: easy first, so harder levels start partly learned."""

MAX_POSITIONS = 256
HELDOUT_PER_GROUP = 20


class RgymPretrainMeta(BaseModel):
    """What ``meta.json`` records of an rgym warm start."""

    seed: int
    families: list[str]
    reasoner_steps: int
    synthesizer_steps: int
    batch: int
    lr: float
    n_items: int
    n_params_reasoner: int
    n_params_synthesizer: int
    reasoner_final_loss: float
    synthesizer_final_loss: float
    heldout_success: dict[str, float]
    card_valid_rate: float
    card_distinct_rate: float
    seconds_total: float


Item = tuple[str, int, str, str, str]
"""``(family, level, config text, question, answer)``."""


def draw_items(domain: RgymDomain, per_level: int, seed: int) -> list[Item]:
    """``per_level`` generated items per family and level (levels 0..2), from training seeds."""
    rng = random.Random(f"rgym-items-{seed}")
    out: list[Item] = []
    for family in domain.families.values():
        for level in range(min(family.n_levels, len(LEVEL_WEIGHTS))):
            for i in range(per_level):
                config = domain.random_config(rng, family, level)
                try:
                    question, answer = domain.gym.generate(family.name, config, derive_seed("warm", seed, family.name,
                                                                                            level, i))
                except GymFailure:
                    continue
                if question.isascii() and answer.isascii() and len(question) + len(answer) < MAX_POSITIONS - 32:
                    out.append((family.name, level, config_text(family.name, config), question, answer))
    return out


def extra_tokens(domain: RgymDomain) -> list[str]:
    """The Synthesizer's whole tokens beyond the card's keys: the target's factor names, the families, the fields."""
    names = {f"\\\"{field}\\\":" for family in domain.families.values() for field in family.defaults}
    return ["DO:family=", ",level=", '{\\"family\\":\\"', '\\",\\"config\\":{', *sorted(domain.families),
            *sorted(names)]


@dataclass(frozen=True)
class _Role:
    role: str
    seed: int
    steps: int
    batch: int
    lr: float
    out_dir: Path
    items: tuple[Item, ...]
    families: tuple[str, ...]
    progress: bool


def _domain(families: Sequence[str]) -> RgymDomain:
    return RgymDomain(RgymSettings(families=list(families)))


def _train_role(spec: _Role) -> tuple[float, int]:
    """Train one agent from scratch and save it; one torch thread (bitwise repeatable)."""
    import torch

    torch.set_num_threads(1)
    domain = _domain(spec.families)
    rng = random.Random(f"rgym-{spec.role}-{spec.seed}")
    by_level: dict[int, list[Item]] = {}
    for item in spec.items:
        by_level.setdefault(item[1], []).append(item)
    levels = sorted(by_level)
    if spec.role == "reasoner":
        tokenizer = char_tokenizer()
        prefix = domain.settings.answer_prefix

        def make() -> tuple[str, str]:
            _, _, _, question, answer = rng.choice(by_level[rng.choices(levels, LEVEL_WEIGHTS[:len(levels)])[0]])
            return domain.reasoner_prompt(question) + prefix, domain.format_reasoner_answer(answer)
    else:
        tokenizer = card_tokenizer(extra_tokens(domain))
        families = list(domain.families)
        names = sorted(families)

        def make() -> tuple[str, str]:
            family = domain.families[rng.choice(families)]
            level = rng.randrange(family.n_levels)
            config = domain.random_config(rng, family, level)
            target = (("family", family.name), ("level", str(family.level(config))))
            prompt = domain.synthesizer_prompt(random_report(rng, names), target if rng.random() > 0.15 else None)
            return prompt, domain.format_card(family.name, config, family.level(config))
    model = tiny_llama(tokenizer, seed=spec.seed, max_positions=MAX_POSITIONS)
    init_weights(model, INIT_STD, spec.seed)
    loss = train_sft(model, tokenizer, make, spec.steps, spec.batch, spec.lr, spec.role, spec.progress)
    model.save_pretrained(spec.out_dir / spec.role)
    tokenizer.save_pretrained(spec.out_dir / spec.role)
    domain.gym.close()
    return loss, sum(p.numel() for p in model.parameters())


def heldout_success(folder: Path, domain: RgymDomain, per_group: int, seed: int = 0) -> dict[str, float]:
    """Greedy held-out success per group (the family's scorer, full score), as the run's held-out measures it."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tokenizer = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    items = domain.heldout(per_group, seed)
    prefix = domain.settings.answer_prefix
    texts = generate_texts(model, tokenizer, [domain.reasoner_prompt(it.problem) + prefix for it in items], 24)
    solved: dict[str, list[bool]] = {}
    for item, text in zip(items, texts):
        env = domain.environment(domain.heldout_card(item), item.answer)
        env.step(prefix + text)
        solved.setdefault(item.group, []).append(env.grade().correct)
    return {group: sum(v) / len(v) for group, v in solved.items()}


def card_validity(folder: Path, domain: RgymDomain, n: int, seed: int) -> tuple[float, float]:
    """``(valid, distinct)`` shares of ``n`` sampled cards (T = 0.7), one per feasible cell in turn: parsed, config
    accepted and generated by the oracle."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tokenizer = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    rng = random.Random(seed)
    cells = [(f.name, str(level)) for f in domain.families.values() for level in range(f.n_levels)]
    prompts = [domain.synthesizer_prompt("", (("family", fam), ("level", lv))) for fam, lv in
               (cells[i % len(cells)] for i in range(n))]
    import torch

    torch.manual_seed(rng.randrange(1 << 30))
    valid, problems = 0, set()
    for text in generate_texts(model, tokenizer, prompts, 96, temperature=0.7):
        try:
            card = parse_task_card(text)
            domain.oracle(card)
        except (CardError, CardRejected):
            continue
        valid += 1
        problems.add(card.solution)
    return valid / n, len(problems) / max(valid, 1)


def pretrain_rgym(out_dir: str | Path, seed: int = 0, reasoner_steps: int = 1500, synthesizer_steps: int = 2500,
                  batch: int = 32, lr: float = 2e-3, per_level: int = 400, families: Sequence[str] = DEFAULT_FAMILIES,
                  parallel: bool = True, progress: bool = True) -> RgymPretrainMeta:
    """Train and save the rgym warm start into ``out_dir/{reasoner,synthesizer}`` plus ``meta.json``."""
    t0 = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    domain = _domain(families)
    items = tuple(draw_items(domain, per_level, seed))
    specs = [_Role("reasoner", seed, reasoner_steps, batch, lr, out, items, tuple(families), progress),
             _Role("synthesizer", seed + 1, synthesizer_steps, batch, lr, out, (), tuple(families), progress)]
    (r_loss, r_params), (s_loss, s_params) = train_roles(_train_role, specs, parallel)
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        success = heldout_success(out / "reasoner", domain, HELDOUT_PER_GROUP)
        valid, distinct = card_validity(out / "synthesizer", domain, 64, seed)
    finally:
        torch.set_num_threads(old)
        domain.gym.close()
    meta = RgymPretrainMeta(
        seed=seed, families=list(families), reasoner_steps=reasoner_steps, synthesizer_steps=synthesizer_steps,
        batch=batch, lr=lr, n_items=len(items), n_params_reasoner=r_params, n_params_synthesizer=s_params,
        reasoner_final_loss=round(r_loss, 5), synthesizer_final_loss=round(s_loss, 5),
        heldout_success={k: round(v, 3) for k, v in sorted(success.items())}, card_valid_rate=round(valid, 3),
        card_distinct_rate=round(distinct, 3), seconds_total=round(time.perf_counter() - t0, 1))
    (out / "meta.json").write_text(meta.model_dump_json(indent=2) + "\n")
    if progress:
        print(f"[pretrain] rgym warm start saved to {out} in {meta.seconds_total:.0f}s; held-out success "
              + " ".join(f"{k}={v:.2f}" for k, v in meta.heldout_success.items())
              + f"; cards valid {valid:.2f} distinct {distinct:.2f}", flush=True)
    return meta


def load_rgym_warm_start(seed: int = 0) -> Path:
    """The folder holding the rgym world's ``reasoner/`` and ``synthesizer/``: the shipped one (seed 0), else the
    cache ``~/.cache/synco/rgym-<seed>``, pretrained into first when missing (minutes on CPU)."""
    return warm_start_folder("rgym", seed, ASSET_DIR, lambda out: pretrain_rgym(out, seed=seed))


def warm_start(out_dir: str | Path, *, seed: int = 0, **kwargs: Any) -> RgymPretrainMeta:
    """The rgym world's registered warm start (``synco pretrain --world rgym``): the default families' recipe."""
    kwargs.pop("settings", None)  # the shipped recipe trains on DEFAULT_FAMILIES whatever the rgym: section says
    return pretrain_rgym(out_dir, seed=seed, **kwargs)


__all__ = ["ASSET_DIR", "DEFAULT_FAMILIES", "RgymPretrainMeta", "load_rgym_warm_start", "pretrain_rgym",
           "warm_start"]
