"""Supervised warm start of two tiny agents on the data a world hands over (the ``synco pretrain`` trainer).

The learner knows no world. A world's warm-start data lives with the world (``synco.domains.arith_warm_start``,
``synco.domains.tools.warm_start``, ``synco.domains.rgym.warm_start``: endless example streams drawn from a seeded
``random.Random``); its recipe (steps, sizes, what is measured and written to ``meta.json``) is the run layer's
(:mod:`synco.run.pretrain`). Here: one agent's training as a :class:`TinyRole` (a char-level ``tiny_llama`` from
scratch, supervised next-token prediction with the loss on the completion only, :func:`train_sft`), both agents side
by side in spawned processes (:func:`train_roles`), batched generation to score them (:func:`generate_texts`), and the
shipped-or-cached folder of a world's warm start (:func:`warm_start_folder`).

Everything is drawn from the seed: ``torch.manual_seed`` for initialisation, a ``random.Random`` per agent for the
data, and a fixed ``torch`` thread count set inside (and restored afterwards). Two runs with the same seed, thread
count and torch build on the same machine give bitwise-identical weights, whether the two agents train in parallel
worker processes or one after the other; other machines, thread counts or torch versions may differ in the last
float bits.

Prompts are tokenized with the tokenizer's defaults (the char tokenizer adds no BOS); each target ends with EOS so
generation stops by itself. Unlike the ``rounds`` / ``rft`` updates (which train attempts on the ids they were sampled
as, see :class:`synco.core.sampling.SFTExample`), nothing here was sampled: the warm start trains on ground-truth texts
its world writes, so tokenising them *defines* the targets and there is no sampled tokenisation to preserve (and the
char-level tokenizers split every text one way only).
"""

from __future__ import annotations

import math
import os
import random
import shutil
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from synco.domains.warm_start import Pair, Segments
from synco.learn.charlm import card_tokenizer, char_tokenizer, tiny_llama
from synco.learn.sft import completion_loss, shift_labels

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

INIT_STD = 0.06
"""Normal init std of all linear and embedding weights (HF's default is 0.02). Measured on the
Reasoner: with 0.02 it sat on its loss plateau for ~900 steps, with 0.06 for ~450, with 0.1 longer."""


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



# ----------------------------------------------------------------- one agent, both agents


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """``torch``'s intra-op thread count set to ``n`` inside, restored after (a warm start's result depends on it)."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


@dataclass(frozen=True)
class TinyRole:
    """One tiny agent's warm start, as its world hands it over (picklable, so a spawned worker can train it).

    ``examples(rng)`` is the world's endless example stream (a module-level function or a ``functools.partial`` of
    one): ``(prompt, completion)`` pairs, or with ``segments`` rows of ``(text, is_target)`` pieces; ``rng`` is
    ``random.Random(f"{world}-{role}-{seed}")``. ``tokens``: None for the char tokenizer, else the card tokenizer plus
    these whole tokens. ``hidden`` x ``layers`` and ``max_positions`` size the ``tiny_llama``.
    """

    world: str
    role: str  # "reasoner" or "synthesizer": also the folder under out_dir
    out_dir: Path
    seed: int
    steps: int
    batch: int
    lr: float
    examples: Callable[[random.Random], Generator[Pair, None, None] | Generator[Segments, None, None]]
    tokens: tuple[str, ...] | None = None
    segments: bool = False
    hidden: int = 128
    layers: int = 3
    max_positions: int = 512
    init_std: float = INIT_STD
    num_threads: int = 1
    progress: bool = True


@dataclass(frozen=True)
class TrainedRole:
    """What :func:`train_tiny` made: the model and tokenizer (saved to ``out_dir/role``), the final loss, the size."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    final_loss: float
    n_params: int


def train_tiny(spec: TinyRole) -> TrainedRole:
    """Train one agent from scratch on its world's examples and save it (model + tokenizer) to ``out_dir/role``.

    Call it inside :func:`torch_threads` (``spec.num_threads``) for a bitwise-repeatable result;
    :func:`train_saved` does.
    """
    tokenizer = char_tokenizer() if spec.tokens is None else card_tokenizer(spec.tokens)
    model = tiny_llama(tokenizer, seed=spec.seed, hidden_size=spec.hidden, num_layers=spec.layers,
                       max_positions=spec.max_positions)
    init_weights(model, spec.init_std, spec.seed)
    with closing(spec.examples(random.Random(f"{spec.world}-{spec.role}-{spec.seed}"))) as stream:
        loss = train_sft(model, tokenizer, stream.__next__, spec.steps, spec.batch, spec.lr, spec.role, spec.progress,
                         encode=encode_segments if spec.segments else encode_pairs)
    model.save_pretrained(spec.out_dir / spec.role)
    tokenizer.save_pretrained(spec.out_dir / spec.role)
    return TrainedRole(model, tokenizer, loss, sum(p.numel() for p in model.parameters()))


def train_saved(spec: TinyRole) -> tuple[float, int]:
    """:func:`train_tiny` under ``spec.num_threads`` torch threads; ``(final loss, parameters)`` (what a worker
    process sends back: the weights are on disk)."""
    with torch_threads(spec.num_threads):
        trained = train_tiny(spec)
    return trained.final_loss, trained.n_params


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


# ----------------------------------------------------------------- where a world's warm start is


def _complete(folder: Path) -> bool:
    return all((folder / role / "config.json").is_file() for role in ("reasoner", "synthesizer"))


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
