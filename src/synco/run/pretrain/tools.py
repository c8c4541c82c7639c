"""The tools world's warm-start recipe (``synco pretrain --world tools [tools.db_variants=N]``, ``builtin:tools/<role>``).

Both agents are ``tiny_llama``\\ s (characters, plus each tool name with its parenthesis as one token) trained from
scratch (:func:`synco.learn.pretrain.train_saved`) on the world's example streams
(:mod:`synco.domains.tools.warm_start`): the Reasoner on gold episodes with the loss on the agent's turns only, the
Synthesizer on targeted cards. Held-out success (greedy episodes on ``domain.heldout``, synco's own episode path), the
Synthesizer's card validity and how well its cards follow a ``DO:`` target are measured and written to ``meta.json``.

``db_variants`` N > 0 (off by default, the shipped recipe): the Reasoner's gold episodes run on database variants
drawn from 1..N, and held-out success is also measured on variants (``heldout_success_on_variants``).
"""

from __future__ import annotations

import random
import time
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from synco.core.episodes import EpisodeLimits
from synco.domains.tools.domain import ToolsDomain
from synco.domains.tools.settings import ToolsSettings
from synco.domains.tools.warm_start import (
    FAMILY_WEIGHTS,
    HELDOUT_SEED,
    MAX_POSITIONS,
    card_validity,
    control_hit_rate,
    control_prompts,
    reasoner_examples,
    synthesizer_examples,
    tool_tokens,
)
from synco.learn.pretrain import TinyRole, torch_threads, train_roles, train_saved, warm_start_folder

ASSET_DIR = Path(__file__).resolve().parents[2] / "assets" / "tools"
"""Where the shipped tools warm start lives (packaged with synco)."""


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


def target_control(model: Any, tokenizer: Any, domain: ToolsDomain, n: int, seed: int,
                   temperature: float = 0.7) -> dict[str, float]:
    """Per candidate factor: the share of valid cards that realise the requested cell, for ``n`` prompts asking for
    ``pattern`` plus that factor, each cell that of a generator task (families uniform); what a run's control check
    (``synco.evosyn.control``) will find once the Reflector promotes the factor. ``pattern`` alone for the built-in."""
    rng = random.Random(f"control-{seed}")
    out: dict[str, float] = {}
    for name in [d.name for d in domain.factor_defs()]:
        prompts, cells = control_prompts(domain, name, n, rng)
        out[name] = control_hit_rate(domain, sample_cards(model, tokenizer, prompts, seed, temperature), cells)
    return out


# ----------------------------------------------------------------- training


def role_spec(role: str, seed: int, steps: int, batch: int, lr: float, out_dir: Path, progress: bool = True,
              db_variants: int = 0) -> TinyRole:
    """What the learner is handed for one agent: the world's example stream, the tokens, the context; one torch
    thread (bitwise repeatable). ``db_variants`` (the Reasoner's): gold episodes on database variants 1..N."""
    examples = partial(reasoner_examples, db_variants=db_variants) if role == "reasoner" else synthesizer_examples
    return TinyRole(world="tools", role=role, out_dir=out_dir, seed=seed, steps=steps, batch=batch, lr=lr,
                    examples=examples, tokens=tuple(tool_tokens()), segments=True, max_positions=MAX_POSITIONS,
                    progress=progress)


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


def pretrain_tools(out_dir: str | Path, seed: int = 0, reasoner_steps: int = 400, synthesizer_steps: int = 1500,
                   batch: int = 16, lr: float = 1e-3, heldout_per_group: int = 20, n_cards: int = 64,
                   parallel: bool = True, progress: bool = True, db_variants: int = 0) -> ToolsPretrainMeta:
    """Train and save the tools warm start into ``out_dir/{reasoner,synthesizer}`` plus ``meta.json``.

    With ``parallel`` the two agents train at once in two spawned workers (one torch thread each), with the
    same weights as one after the other. ``db_variants`` N > 0: the Reasoner's gold episodes on database variants
    drawn from 1..N (the module docstring); the Synthesizer's cards are the fixed world's either way.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ToolsSettings(db_variants=db_variants)  # the run setting's bounds: a ValidationError naming db_variants
    t0 = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    specs = [role_spec("reasoner", seed, reasoner_steps, batch, lr, out, progress, db_variants),
             role_spec("synthesizer", seed + 1, synthesizer_steps, batch, lr, out, progress)]
    (r_loss, r_params), (s_loss, s_params) = train_roles(train_saved, specs, parallel)
    domain = ToolsDomain()
    with torch_threads(1):
        success = heldout_success(out / "reasoner", domain, heldout_per_group, EpisodeLimits(8, 400))
        on_variants = None if db_variants <= 0 else heldout_success(
            out / "reasoner", ToolsDomain(ToolsSettings(db_variants=db_variants)), heldout_per_group, EpisodeLimits(8, 400))
        synth = AutoModelForCausalLM.from_pretrained(out / "synthesizer")
        synth_tok = AutoTokenizer.from_pretrained(out / "synthesizer")
        texts = sample_cards(synth, synth_tok, [domain.synthesizer_prompt("")] * n_cards, seed, temperature=1.0)
        cards = card_validity(domain, texts)
        control = target_control(synth, synth_tok, domain, n_cards, seed)
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
