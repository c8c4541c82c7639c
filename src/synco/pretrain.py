"""Deterministic warm start of the embedded ``arith`` world (the ``synco pretrain`` backend).

Two tiny char-level Llamas (``synco.worlds.charlm.tiny_llama``: the Reasoner at
the default size, ~0.65M parameters; the Synthesizer 64 wide and 2 layers deep,
~0.11M) are trained from scratch by supervised next-token prediction on
generated data, with the loss on the completion only:

* the **Reasoner** on ``Q:<problem>\\nA:`` -> ``\\boxed{<answer>}</s>``, levels
  weighted toward the easy end and stopped early, so that before co-training it
  solves the easy levels, fails the hard ones and is *partially* competent
  (greedy held-out accuracy between ~0.2 and ~0.8) on several levels in between;
* the **Synthesizer** (char tokenizer plus the card's JSON keys as whole tokens)
  on ``<report>\\nCARD:`` -> a compact nine-field JSON card
  with the level drawn uniformly and a random capability-report-like prefix (so
  it writes well-formed, diverse cards over all levels whatever the report says).

Everything is drawn from the seed: ``torch.manual_seed`` for initialisation,
a ``random.Random`` per model for the data, and a fixed ``torch`` thread count
set inside (and restored afterwards). Two runs with the same seed, thread count
and torch build on the same machine give bitwise-identical weights, whether the
two agents train in parallel worker processes (the default) or one after the
other; other machines, thread counts or torch versions may differ in the last
float bits.

Prompts are tokenized with the tokenizer's defaults (the char tokenizer adds no
BOS); the completion ends with EOS so generation stops by itself.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from synco.records import CARD_FIELDS
from synco.worlds.arith import ArithDomain
from synco.worlds.charlm import card_tokenizer, char_tokenizer, tiny_llama

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from synco.domain import HeldoutItem

ASSET_DIR = Path(__file__).resolve().parent / "assets" / "arith"
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


def synthesizer_pair(domain: ArithDomain, rng: random.Random) -> Pair:
    """One Synthesizer SFT example: a report-like prompt and a correct card of a uniform level."""
    prompt = domain.synthesizer_prompt(random_report(rng, domain.levels))
    level = rng.choice(domain.levels)
    problem = domain.sample_problem(rng, level)
    return prompt, domain.format_card(problem, level, domain.answer(problem) or "")


def encode_pairs(tokenizer: PreTrainedTokenizerBase, pairs: Sequence[Pair]) -> tuple[torch.Tensor, ...]:
    """Right-padded ``input_ids, attention_mask, labels`` with labels only on completion + EOS."""
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
    make_pair: Callable[[], Pair],
    steps: int,
    batch_size: int,
    lr: float = 1e-3,
    name: str = "sft",
    progress: bool = True,
    on_step: Callable[[int], None] | None = None,
) -> float:
    """Supervised next-token training on ``steps`` fresh batches; returns the mean loss of the last 20 steps.

    ``on_step(step)`` (1-based) runs after every optimiser step, e.g. to probe a schedule.
    """
    import torch

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    warmup = max(1, min(50, steps // 10))
    recent: list[float] = []
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr, warmup)
        ids, mask, labels = encode_pairs(tokenizer, [make_pair() for _ in range(batch_size)])
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
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


def card_stats(domain: ArithDomain, texts: Sequence[str]) -> CardStats:
    """Well-formed, valid and distinct rates of raw card texts, and the true levels of the valid ones."""
    problems: list[str] = []
    levels: Counter[str] = Counter()
    valid = 0
    for text in texts:
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            continue
        if not isinstance(obj, dict) or not all(isinstance(obj.get(k), str) and obj[k].strip() for k in CARD_FIELDS):
            continue
        problem = obj["problem"].strip()
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


@dataclass(frozen=True)
class RoleResult:
    """What one agent's warm start produced."""

    final_loss: float
    n_params: int
    seconds_train: float
    seconds_eval: float
    heldout_accuracy: dict[str, float]
    cards: CardStats | None


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
        tokenizer = char_tokenizer() if spec.role == "reasoner" else card_tokenizer()
        model = tiny_llama(tokenizer, seed=spec.seed, hidden_size=spec.hidden, num_layers=spec.layers)
        init_weights(model, INIT_STD, spec.seed)
        rng = random.Random(f"arith-{spec.role}-{spec.seed}")
        if spec.role == "reasoner":
            make_pair: Callable[[], Pair] = lambda: reasoner_pair(domain, rng, REASONER_LEVEL_WEIGHTS)  # noqa: E731
        else:
            make_pair = lambda: synthesizer_pair(domain, rng)  # noqa: E731
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
        return RoleResult(
            final_loss=loss, n_params=sum(p.numel() for p in model.parameters()),
            seconds_train=t1 - t0, seconds_eval=time.perf_counter() - t1, heldout_accuracy=acc, cards=cards,
        )
    finally:
        torch.set_num_threads(old_threads)


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
    synthesizer_steps: int = 800,
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
) -> PretrainResult:
    """Train and save the arith warm start into ``out_dir/{reasoner,synthesizer}`` plus ``meta.json``.

    ``lr`` is the Reasoner's peak learning rate. The Synthesizer is a narrower,
    shallower ``tiny_llama`` (``synthesizer_hidden`` x ``synthesizer_layers``)
    with the card tokenizer (``charlm.card_tokenizer``: the JSON keys are whole
    tokens, so a ~230-character card is ~45 tokens): its cards dominate the cost
    of its training and of every co-training step, while writing them needs
    little capacity.

    With ``parallel`` the two agents train at the same time in two worker
    processes with ``num_threads`` torch threads each (two cores busy with one
    thread each beat one process with two threads, and a single thread degrades
    gracefully when other programs share the cores, where two spin-waiting
    threads slowed a run ~20x); otherwise one after the other here. Both give
    bitwise-identical weights for the same ``seed``, ``num_threads`` and torch
    build. The held-out score uses ``domain.heldout(heldout_per_level,
    HELDOUT_SEED)``; card rates use ``n_cards`` samples at temperature 1 with
    an empty report.
    """
    import torch

    t0 = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    common: dict[str, Any] = dict(out_dir=out, num_threads=num_threads, progress=progress,
                                  heldout_per_level=heldout_per_level, n_cards=n_cards)
    specs = [
        RoleSpec(role="reasoner", seed=seed, steps=reasoner_steps, batch=reasoner_batch, lr=lr,
                 hidden=128, layers=3, **common),  # the tiny_llama defaults
        RoleSpec(role="synthesizer", seed=seed + 1, steps=synthesizer_steps, batch=synthesizer_batch,
                 lr=synthesizer_lr, hidden=synthesizer_hidden, layers=synthesizer_layers, **common),
    ]
    if parallel:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=exit_with_parent, initargs=(os.getpid(),)) as pool:
            reasoner, synthesizer = pool.map(train_role, specs)
    else:
        reasoner, synthesizer = (train_role(spec) for spec in specs)
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
    return PretrainResult(out_dir=out, reasoner_dir=out / "reasoner", synthesizer_dir=out / "synthesizer", meta=meta)


def _complete(folder: Path) -> bool:
    return all((folder / role / "config.json").is_file() for role in ("reasoner", "synthesizer"))


def load_arith_warm_start(seed: int = 0) -> Path:
    """The folder holding ``reasoner/`` and ``synthesizer/`` of the arith warm start.

    The shipped checkpoint (seed 0) when present; otherwise the cache
    ``~/.cache/synco/arith-<seed>`` (``$XDG_CACHE_HOME`` respected), pretraining
    into it first when it is missing (a few minutes on CPU).
    """
    if seed == 0 and _complete(ASSET_DIR):
        return ASSET_DIR
    cache_root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "synco"
    target = cache_root / f"arith-{seed}"
    if not _complete(target):
        tmp = cache_root / f".arith-{seed}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        pretrain_arith(tmp, seed=seed)
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
    return target
