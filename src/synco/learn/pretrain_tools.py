"""Deterministic warm start of the tools world's tiny agents (``synco pretrain --world tools``).

* **Reasoner**: a ``tiny_llama`` (characters, plus each tool name with its parenthesis as one token) trained on gold episodes: the task's prompt, then each gold
  call as an agent turn (``find_user(bob)`` + EOS), the observation the environment really answers, and
  finally ``done(<outputs>)`` + EOS. Loss on the agent's ids only (:func:`encode_segments`), the same
  split an episode's GRPO row has, so nothing the environment writes is ever a target.
* **Synthesizer**: the card tokenizer (JSON keys and tool names as whole tokens) trained on
  ``(prompt, card)`` pairs: a capability-report-like line, a ``DO:`` target on most prompts naming the
  drawn task's own cell -- its ``pattern`` and up to two candidate factors (``family``, ``computation``, ...), so
  the card follows whichever factor the Reflector promotes -- then the compact card.

Family weights make the Reasoner's start uneven on purpose: families that need a computed value
(``cost_n``, ``afford``, ``total``...) or several writes are trained less, so the run starts with a
teachable band instead of a solved world. Held-out success (greedy episodes on ``domain.heldout``)
and the Synthesizer's card validity are measured and written to ``meta.json``.

``db_variants`` N > 0 (``synco pretrain --world tools tools.db_variants=N``; off by default, the shipped recipe): each Reasoner gold episode runs on a
database variant drawn uniformly from 1..N (``synco.domains.tools.db``), the task re-solved there as a run with
``tools.db_variants`` grades it (the fixed world when the variant cannot pose it), so the warm start learns to
read values from observations rather than recall one database. Held-out success is then also measured on
variants (``heldout_success_on_variants``).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from synco.core.episodes import EpisodeLimits
from synco.core.records import CardRejected, TaskCard
from synco.domains.tools.db import DB
from synco.domains.tools.domain import TOOLS_PATTERNS, ToolsDomain
from synco.domains.tools.env import ToolsEnv
from synco.domains.tools.settings import ToolsSettings
from synco.domains.tools.syntax import DONE, format_call, format_outputs
from synco.domains.tools.tasks import FAMILY_NAMES, Task, task_on_variant
from synco.domains.tools.tools import TOOL_KINDS
from synco.evosyn.space import Cell
from synco.learn.charlm import card_tokenizer, tiny_llama
from synco.learn.pretrain import (
    INIT_STD,
    draw_factors,
    train_roles,
    init_weights,
    random_report,
    train_sft,
    warm_start_folder,
)

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

ASSET_DIR = Path(__file__).resolve().parent.parent / "assets" / "tools"
"""Where the shipped tools warm start lives (packaged with synco)."""

HELDOUT_SEED = 12345

FAMILY_WEIGHTS: dict[str, float] = {
    "lookup": 4, "cancel": 4, "buy": 4, "transfer": 4, "richer": 3, "sum2": 2, "diff": 2, "ship": 2,
    "cancel_all": 2, "transfer_all": 2, "left": 1.5, "buy_cheaper": 1.5, "cancel_buy": 1.5, "cost_n": 1,
    "afford": 1, "total": 1, "buy_else": 1, "gift": 1,
}
"""Relative share of each family in the Reasoner's SFT data: plain look-ups and one-write tasks first,
computed values and long write chains least (the run's teachable band)."""

P_TARGET = 0.8
"""Share of the Synthesizer's training prompts with a ``DO:`` target."""

EXTRA_FACTORS = (0.3, 0.5, 0.2)
"""Chances that a target names 0, 1 or 2 candidate factors besides ``pattern``."""

TARGET_WEIGHTS: dict[str, float] = {"family": 3.0}
"""Relative chance of each candidate factor in a target (default 1): ``family`` has the most buckets (19), so its
targets get more examples to be learned from."""

MAX_POSITIONS = 768
"""Context of both tiny agents: a prompt plus the longest gold episode fits with room to spare."""

Segments = list[tuple[str, bool]]
"""A training row as ``(text, is_target)`` pieces: targets are the agent's turns (each followed by EOS)."""


def gold_segments(domain: ToolsDomain, task: Task, db: DB | None = None) -> Segments:
    """The gold episode of ``task`` as segments: prompt, then (call, observation)..., then ``done(outputs)``.

    The observations come from a real :class:`ToolsEnv` stepping the gold calls on ``db`` (default: the world's
    database; ``task`` must be solved on the one given), so they are exactly what the agent will see in training.
    """
    env = ToolsEnv(domain.db if db is None else db, "", task.outputs)
    rows: Segments = [(domain.reasoner_prompt(task.instruction), False)]
    for call in task.actions:
        text = format_call(call)
        step = env.step(text)
        if step.error is not None:
            raise ValueError(f"gold call {text!r} of {task.instruction!r} failed: {step.error}")
        rows += [(text, True), (step.observation, False)]
    rows.append((f"{DONE}({format_outputs(task.outputs) if task.outputs else ''})", True))
    return rows


def segment_ids(tokenizer: PreTrainedTokenizerBase, row: Segments) -> tuple[list[int], list[int]]:
    """The ids of a row of segments and a 0/1 mask over them: 1 on each target segment and the EOS after it."""
    eos = tokenizer.eos_token_id
    ids: list[int] = []
    mask: list[int] = []
    for text, target in row:
        piece = list(tokenizer(text, add_special_tokens=False)["input_ids"]) + ([eos] if target else [])
        ids += piece
        mask += [int(target)] * len(piece)
    return ids, mask


def encode_segments(tokenizer: PreTrainedTokenizerBase, rows: Sequence[Segments]) -> tuple[torch.Tensor, ...]:
    """Right-padded ``input_ids, attention_mask, labels``: labels on target segments and the EOS after each."""
    import torch

    pad = tokenizer.pad_token_id
    encoded: list[tuple[list[int], list[int]]] = []
    for row in rows:
        ids, mask = segment_ids(tokenizer, row)
        encoded.append((ids, [i if m else -100 for i, m in zip(ids, mask)]))
    width = max(len(i) for i, _ in encoded)
    out_ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    out_labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for r, (ids, labels) in enumerate(encoded):
        out_ids[r, :len(ids)] = torch.tensor(ids)
        mask[r, :len(ids)] = 1
        out_labels[r, :len(ids)] = torch.tensor(labels)
    return out_ids, mask, out_labels


def weighted_family(rng: random.Random, weights: dict[str, float] = FAMILY_WEIGHTS) -> str:
    return rng.choices(list(FAMILY_NAMES), weights=[weights.get(f, 1.0) for f in FAMILY_NAMES])[0]


def reasoner_row(domain: ToolsDomain, rng: random.Random, db_variants: int = 0) -> Segments:
    """One gold episode of a training task of a weighted family; with ``db_variants`` N > 0 on a variant drawn from
    1..N (the task re-solved there; the fixed world when the variant cannot pose it, as a run's environment does)."""
    task = domain.sample_task(rng, weighted_family(rng))
    if db_variants <= 0:
        return gold_segments(domain, task)
    on_variant = task_on_variant(task.instruction, rng.randint(1, db_variants))
    return gold_segments(domain, task) if on_variant is None else gold_segments(domain, on_variant[1], on_variant[0])


def target_cell(domain: ToolsDomain, rng: random.Random, values: dict[str, str]) -> Cell | None:
    """A ``DO:`` target naming the task's own buckets: ``None`` on ``1 - P_TARGET`` of prompts, else the built-in
    ``pattern`` plus 0, 1 or 2 candidate factors (drawn by :data:`TARGET_WEIGHTS`), as the space's cells name them
    once the Reflector promotes a candidate (so the warm start can follow whichever it promotes)."""
    if values.get("pattern") not in TOOLS_PATTERNS or rng.random() >= P_TARGET:
        return None
    candidates = [n for n in values if n not in domain.builtin_factors]
    k = min(len(candidates), rng.choices((0, 1, 2), weights=EXTRA_FACTORS)[0])
    extra = draw_factors(rng, candidates, TARGET_WEIGHTS, k)
    return (("pattern", values["pattern"]), *((n, values[n]) for n in extra))


def synthesizer_pair(domain: ToolsDomain, rng: random.Random) -> tuple[str, str]:
    """``(prompt, card)``: a random report line, a ``DO:`` target naming the drawn task's own cell
    (:func:`target_cell`, from its factors computed off the gold actions), then the task's card."""
    family = rng.choice(FAMILY_NAMES)
    task = domain.sample_task(rng, family)
    card = domain.format_card(task.instruction, task.actions, task.outputs, family)
    values = domain.card_factors(TaskCard(**json.loads(card)))
    report = random_report(rng, list(FAMILY_NAMES))
    return domain.synthesizer_prompt(report, target=target_cell(domain, rng, values)), card


def tool_tokens() -> list[str]:
    """Tool names with their opening parenthesis (``find_user(``) as whole tokens of both agents' tokenizers: a call
    costs a few generated tokens instead of ~15 characters (every turn of every episode samples one)."""
    return [f"{name}(" for name in [*TOOL_KINDS, DONE]]


# ----------------------------------------------------------------- evaluation


def heldout_success(model_dir: Path, domain: ToolsDomain, n_per_group: int, limits: EpisodeLimits) -> dict[str, float]:
    """Greedy held-out success per held-out group of the Reasoner saved in ``model_dir`` (synco's own episode path; on
    database variants when ``domain`` has them on)."""
    from synco.core.policy import PolicyConfig
    from synco.core.sampling import SamplingParams
    from synco.learn.hf_policy import HFPolicy
    from synco.rollout.attempts import heldout_successes

    policy = HFPolicy.from_config(PolicyConfig(model_path=str(model_dir), device="cpu", add_bos=False, trainable=False))
    items = domain.heldout(n_per_group, HELDOUT_SEED)
    wins: dict[str, list[bool]] = {}
    for it, [won] in zip(items, heldout_successes(policy, domain, items, 1, SamplingParams(greedy=True, max_new_tokens=24),
                                                  limits, group_size=256)):
        wins.setdefault(it.group, []).append(won)
    return {g: sum(v) / len(v) for g, v in wins.items()}


def sample_cards(model: Any, tokenizer: Any, prompts: list[str], seed: int, temperature: float) -> list[str]:
    """One sampled completion (up to 160 tokens) per prompt, seeded; prompts are left-padded to one batch."""
    import torch

    torch.manual_seed(seed)
    enc = tokenizer(prompts, add_special_tokens=False, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**enc, do_sample=True, temperature=temperature, max_new_tokens=160,
                             pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    return tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)


def card_validity(model: Any, tokenizer: Any, domain: ToolsDomain, n: int, seed: int) -> dict[str, float]:
    """Well-formed, valid (the task replays, not held out) and distinct rates of ``n`` cards sampled at T=1."""
    from synco.grading.cards import CardError, parse_task_card

    texts = sample_cards(model, tokenizer, [domain.synthesizer_prompt("")] * n, seed, temperature=1.0)
    wellformed, valid, problems = 0, 0, set()
    for text in texts:
        try:
            card: TaskCard = parse_task_card(text)
        except (CardError, ValueError):
            continue
        wellformed += 1
        try:
            domain.oracle(card)
        except CardRejected:
            continue
        if domain.reject_reason(card) is None:
            valid += 1
            problems.add(card.problem + "|" + card.solution)
    return {"wellformed": wellformed / n, "valid": valid / n, "distinct": len(problems) / n}


def target_control(model: Any, tokenizer: Any, domain: ToolsDomain, n: int, seed: int,
                   temperature: float = 0.7) -> dict[str, float]:
    """Per candidate factor: the share of valid cards that realise the requested cell, for ``n`` prompts asking for
    ``pattern`` plus that factor, each cell that of a generator task (families uniform); what a run's control check
    (``synco.evosyn.control``) will find once the Reflector promotes the factor. ``pattern`` alone for the built-in."""
    from synco.grading.cards import CardError, parse_task_card

    rng = random.Random(f"control-{seed}")
    names = [d.name for d in domain.factor_defs()]
    out: dict[str, float] = {}
    for name in names:
        prompts, cells = [], []
        for _ in range(n):
            family = rng.choice(FAMILY_NAMES)
            task = domain.sample_task(rng, family)
            card = TaskCard(**json.loads(domain.format_card(task.instruction, task.actions, task.outputs, family)))
            values = domain.card_factors(card)
            cell = tuple((k, values[k]) for k in dict.fromkeys(("pattern", name)))
            cells.append(cell)
            prompts.append(domain.synthesizer_prompt(random_report(rng, list(FAMILY_NAMES)), target=cell))
        texts = sample_cards(model, tokenizer, prompts, seed, temperature)
        hits = valid = 0
        for text, cell in zip(texts, cells):
            try:
                card = parse_task_card(text)
                domain.oracle(card)
            except (CardError, CardRejected, ValueError):
                continue
            valid += 1
            realised = domain.card_factors(card)
            hits += all(realised.get(k) == v for k, v in cell)
        out[name] = hits / valid if valid else 0.0
    return out


# ----------------------------------------------------------------- training


class ToolsPretrainMeta(BaseModel):
    """What ``meta.json`` records about one tools warm start."""

    seed: int
    reasoner_steps: int
    synthesizer_steps: int
    batch: int
    lr: float
    n_params_reasoner: int
    n_params_synthesizer: int
    reasoner_final_loss: float
    synthesizer_final_loss: float
    family_weights: dict[str, float]
    heldout_per_group: int
    heldout_success: dict[str, float]
    cards: dict[str, float]
    seconds_total: float
    control: dict[str, float] | None = None
    """Per factor, the share of the Synthesizer's valid targeted cards that realise the requested cell
    (:func:`target_control`; None in warm starts made before it was measured)."""
    db_variants: int = 0
    """The Reasoner's gold episodes ran on database variants 1..N (0: the fixed world only)."""
    heldout_success_on_variants: dict[str, float] | None = None
    """With ``db_variants`` N > 0: held-out success with each item on its variant (as ``tools.db_variants=N`` scores
    it); ``heldout_success`` is the fixed world's."""


@dataclass(frozen=True)
class _Role:
    role: str
    seed: int
    steps: int
    batch: int
    lr: float
    out_dir: Path
    progress: bool
    db_variants: int = 0


def _train_role(spec: _Role) -> tuple[float, int]:
    """Train one agent from scratch and save it (model + tokenizer); one torch thread (bitwise repeatable)."""
    import torch

    torch.set_num_threads(1)
    domain = ToolsDomain()
    tokenizer = card_tokenizer(tool_tokens())
    model = tiny_llama(tokenizer, seed=spec.seed, max_positions=MAX_POSITIONS)
    init_weights(model, INIT_STD, spec.seed)
    rng = random.Random(f"tools-{spec.role}-{spec.seed}")
    if spec.role == "reasoner":
        def make() -> Segments:
            return reasoner_row(domain, rng, spec.db_variants)
    else:
        def make() -> Segments:
            prompt, card = synthesizer_pair(domain, rng)
            return [(prompt, False), (card, True)]
    loss = train_sft(model, tokenizer, make, spec.steps, spec.batch, spec.lr, spec.role, spec.progress, encode=encode_segments)
    model.save_pretrained(spec.out_dir / spec.role)
    tokenizer.save_pretrained(spec.out_dir / spec.role)
    return loss, sum(p.numel() for p in model.parameters())


def pretrain_tools(out_dir: str | Path, seed: int = 0, reasoner_steps: int = 400, synthesizer_steps: int = 1500,
                   batch: int = 16, lr: float = 1e-3, heldout_per_group: int = 20, n_cards: int = 64,
                   parallel: bool = True, progress: bool = True, db_variants: int = 0) -> ToolsPretrainMeta:
    """Train and save the tools warm start into ``out_dir/{reasoner,synthesizer}`` plus ``meta.json``.

    With ``parallel`` the two agents train at once in two spawned workers (one torch thread each), with the
    same weights as one after the other. ``db_variants`` N > 0: the Reasoner's gold episodes on database variants
    drawn from 1..N (the module docstring); the Synthesizer's cards are the fixed world's either way.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ToolsSettings(db_variants=db_variants)  # the run setting's bounds: a ValidationError naming db_variants
    t0 = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    specs = [_Role("reasoner", seed, reasoner_steps, batch, lr, out, progress, db_variants),
             _Role("synthesizer", seed + 1, synthesizer_steps, batch, lr, out, progress)]
    (r_loss, r_params), (s_loss, s_params) = train_roles(_train_role, specs, parallel)
    domain = ToolsDomain()
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        success = heldout_success(out / "reasoner", domain, heldout_per_group, EpisodeLimits(8, 400))
        on_variants = None if db_variants <= 0 else heldout_success(
            out / "reasoner", ToolsDomain(ToolsSettings(db_variants=db_variants)), heldout_per_group, EpisodeLimits(8, 400))
        synth = AutoModelForCausalLM.from_pretrained(out / "synthesizer")
        synth_tok = AutoTokenizer.from_pretrained(out / "synthesizer")
        cards = card_validity(synth, synth_tok, domain, n_cards, seed)
        control = target_control(synth, synth_tok, domain, n_cards, seed)
    finally:
        torch.set_num_threads(old)
    meta = ToolsPretrainMeta(
        seed=seed, reasoner_steps=reasoner_steps, synthesizer_steps=synthesizer_steps, batch=batch, lr=lr,
        n_params_reasoner=r_params, n_params_synthesizer=s_params, reasoner_final_loss=round(r_loss, 5),
        synthesizer_final_loss=round(s_loss, 5), family_weights=FAMILY_WEIGHTS, heldout_per_group=heldout_per_group,
        heldout_success={k: round(v, 4) for k, v in success.items()}, cards={k: round(v, 4) for k, v in cards.items()},
        seconds_total=round(time.perf_counter() - t0, 1), db_variants=db_variants,
        control={k: round(v, 4) for k, v in control.items()},
        heldout_success_on_variants=None if on_variants is None else {k: round(v, 4) for k, v in on_variants.items()})
    (out / "meta.json").write_text(meta.model_dump_json(indent=2) + "\n")
    if progress:
        print(f"[pretrain] tools warm start saved to {out} in {meta.seconds_total:.0f}s; held-out success "
              + " ".join(f"{k}={v:.2f}" for k, v in meta.heldout_success.items())
              + ("" if on_variants is None else " (on variants: "
                 + " ".join(f"{k}={v:.2f}" for k, v in on_variants.items()) + ")")
              + f"; cards valid {cards['valid']:.2f} distinct {cards['distinct']:.2f}; control "
              + " ".join(f"{k}={v:.2f}" for k, v in control.items()), flush=True)
    return meta


def load_tools_warm_start(seed: int = 0) -> Path:
    """The folder holding the tools world's ``reasoner/`` and ``synthesizer/``: the shipped one (seed 0), else
    the cache ``~/.cache/synco/tools-<seed>``, pretrained into first when missing (minutes on CPU)."""
    return warm_start_folder("tools", seed, ASSET_DIR, lambda out: pretrain_tools(out, seed=seed))


def warm_start(out_dir: str | Path, *, settings: ToolsSettings, seed: int = 0, **kwargs: Any) -> ToolsPretrainMeta:
    """The tools world's registered warm start (``synco pretrain --world tools [tools.KEY=VALUE ...]``): the run's
    ``tools:`` section decides the database variants (``tools.db_variants``) of the Reasoner's gold episodes."""
    return pretrain_tools(out_dir, seed=seed, db_variants=settings.db_variants, **kwargs)
