"""The arith world's warm-start recipe (``synco pretrain``, ``builtin:arith/<role>``): its data handed to the learner.

Two tiny char-level Llamas (``synco.learn.charlm.tiny_llama``: the Reasoner at the default size, ~0.65M parameters;
the Synthesizer 64 wide and 2 layers deep, ~0.11M) are trained from scratch (:func:`synco.learn.pretrain.train_tiny`)
on the world's example streams (:mod:`synco.domains.arith_warm_start`: the Reasoner's level-weighted ``Q:...`` ->
``\\boxed{...}`` pairs, stopped early so that it is *partially* competent, greedy held-out accuracy between ~0.2 and
~0.8 on several levels; the Synthesizer's ``<report>\\nDO:<cell>\\nCARD:`` -> card pairs). How well the cards follow
their targets is measured after training (:func:`measure_control`, ``control_*`` in ``meta.json``).

Each agent trains, and is scored, in its own spawned worker (``parallel``, the default) or one after the other here,
with bitwise-identical weights for the same seed, thread count and torch build.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from synco.domains.arith import ArithDomain
from synco.domains.arith_warm_start import (
    CONTROL_TEMPERATURES,
    HELDOUT_SEED,
    REASONER_LEVEL_WEIGHTS,
    CardStats,
    ControlStats,
    TargetMix,
    card_stats,
    control_by_group,
    control_prompts,
    control_targets,
    reasoner_accuracy,
    reasoner_examples,
    reasoner_prompts,
    synthesizer_examples,
    target_tokens,
)
from synco.evosyn.space import Cell
from synco.learn.pretrain import (
    INIT_STD,
    TinyRole,
    generate_texts,
    torch_threads,
    train_roles,
    train_tiny,
    warm_start_folder,
)

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from synco.domains.base import HeldoutItem

ASSET_DIR = Path(__file__).resolve().parents[2] / "assets" / "arith"
"""Where the shipped warm start lives (packaged with synco)."""


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


# ----------------------------------------------------------------- scoring a trained agent


def evaluate_reasoner(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    domain: ArithDomain,
    items: Sequence[HeldoutItem],
    max_new_tokens: int = 16,
) -> dict[str, float]:
    """Greedy accuracy per level (item group) in the domain's level order; batched."""
    texts = generate_texts(model, tokenizer, reasoner_prompts(domain, items), max_new_tokens)
    return reasoner_accuracy(domain, items, texts)


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

    rows, prompts = control_prompts(domain, targets, per_target, seed)
    torch.manual_seed(seed)
    texts = generate_texts(model, tokenizer, prompts, max_new_tokens=96, temperature=temperature)
    return control_by_group(domain, list(targets), rows, texts)


# ----------------------------------------------------------------- the warm start


@dataclass(frozen=True)
class RoleSpec:
    """One agent's warm start (``training``, what the learner is handed) and what to measure of it after."""

    training: TinyRole
    heldout_per_level: int  # reasoner: held-out items per level to score (0: skip)
    n_cards: int  # synthesizer: cards to sample at temperature 1 (0: skip)
    control_per_target: int = 0  # synthesizer: cards per target cell and temperature to measure control (0: skip)


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


def train_role(spec: RoleSpec) -> RoleResult:
    """Train one agent (:func:`~synco.learn.pretrain.train_tiny`, saved to ``out_dir/role``) and score it.

    Sets ``torch``'s thread count for its duration and restores it, so it can
    run in this process or in a worker with the same bitwise result.
    """
    import torch

    role, seed = spec.training.role, spec.training.seed
    with torch_threads(spec.training.num_threads):
        t0 = time.perf_counter()
        trained = train_tiny(spec.training)
        model, tokenizer = trained.model, trained.tokenizer
        t1 = time.perf_counter()
        domain = ArithDomain()
        acc: dict[str, float] = {}
        cards = None
        if role == "reasoner" and spec.heldout_per_level:
            acc = evaluate_reasoner(model, tokenizer, domain, domain.heldout(spec.heldout_per_level, HELDOUT_SEED))
        if role == "synthesizer" and spec.n_cards:
            torch.manual_seed(seed)
            cards = card_stats(domain, sample_cards(model, tokenizer, domain, spec.n_cards))
        control: dict[str, ControlStats] = {}
        if role == "synthesizer" and spec.control_per_target:
            targets = control_targets(domain)
            for temp in CONTROL_TEMPERATURES:
                stats = measure_control(model, tokenizer, domain, targets, temp, spec.control_per_target, seed)
                control |= {f"{group}@t{temp}": st for group, st in stats.items()}
        return RoleResult(
            final_loss=trained.final_loss, n_params=trained.n_params, seconds_train=t1 - t0,
            seconds_eval=time.perf_counter() - t1, heldout_accuracy=acc, cards=cards, control=control,
        )


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
    common: dict[str, Any] = dict(world="arith", out_dir=out, num_threads=num_threads, progress=progress)
    specs = [
        RoleSpec(TinyRole(role="reasoner", seed=seed, steps=reasoner_steps, batch=reasoner_batch, lr=lr,
                          examples=reasoner_examples, **common),  # the tiny_llama defaults, the char tokenizer
                 heldout_per_level=heldout_per_level, n_cards=n_cards),
        RoleSpec(TinyRole(role="synthesizer", seed=seed + 1, steps=synthesizer_steps, batch=synthesizer_batch,
                          lr=synthesizer_lr, examples=partial(synthesizer_examples, targets=targets),
                          tokens=tuple(target_tokens()), hidden=synthesizer_hidden, layers=synthesizer_layers,
                          **common),
                 heldout_per_level=heldout_per_level, n_cards=n_cards, control_per_target=control_per_target),
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


def load_arith_warm_start(seed: int = 0) -> Path:
    """The folder holding ``reasoner/`` and ``synthesizer/`` of the arith warm start.

    The shipped checkpoint (seed 0) when present; otherwise the cache
    ``~/.cache/synco/arith-<seed>`` (``$XDG_CACHE_HOME`` respected), pretraining
    into it first when it is missing (a few minutes on CPU).
    """
    return warm_start_folder("arith", seed, ASSET_DIR, lambda out: pretrain_arith(out, seed=seed))
