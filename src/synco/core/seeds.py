"""Seeds per generate request: how a request's rows are cut into chunks, and the seed each chunk samples from.

A seeded request (``Policy.generate(..., seed=s)``) lays out its rows prompt-major,
``n`` rows per prompt, cuts them into consecutive chunks of ``batch_size`` rows
(the policy's ``generation_batch_size``) and samples chunk ``j`` alone from
``chunk_seed(s, j)``, under a forked RNG so no global stream moves. A chunk's
completions therefore depend only on the weights, its rows and its seed, never on
which process samples it or what ran before: the in-process learner walks the
chunks in order, the Ray backend hands them to its rollout workers in parallel,
and both return the same completions. Torch-free.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

SEED_BITS = 63
"""Seeds are non-negative ints below ``2**63`` (what ``torch.manual_seed`` accepts everywhere)."""


def derive_seed(*parts: object) -> int:
    """A seed from ``parts`` (ints, strings): SHA-256 of their reprs, so it is the same in every process and
    Python run (``hash()`` of a string is salted per process)."""
    text = "\x1f".join(repr(p) for p in parts)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> (64 - SEED_BITS)


def chunk_seed(seed: int, index: int) -> int:
    """The seed chunk ``index`` of a request seeded with ``seed`` samples from."""
    return derive_seed(seed, "chunk", index)


def row_chunks(n_prompts: int, n: int, batch_size: int) -> list[list[int]]:
    """The prompt index of every row of a request (prompt-major, ``n`` rows per prompt), in chunks of
    ``batch_size`` consecutive rows (the last one may be shorter)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if batch_size < 1:
        raise ValueError(f"generation_batch_size must be >= 1, got {batch_size}")
    rows = [p for p in range(n_prompts) for _ in range(n)]
    return [rows[i : i + batch_size] for i in range(0, len(rows), batch_size)]


def regroup(n_prompts: int, chunks: Sequence[Sequence[int]], results: Sequence[Sequence[T]]) -> list[list[T]]:
    """Per-prompt lists of the chunks' results (one result per row, in row order), in prompt order."""
    if len(results) != len(chunks):
        raise ValueError(f"{len(results)} chunk results for {len(chunks)} chunks")
    out: list[list[T]] = [[] for _ in range(n_prompts)]
    for j, (rows, got) in enumerate(zip(chunks, results)):
        if len(got) != len(rows):
            raise ValueError(f"chunk {j}: {len(got)} completions for {len(rows)} rows")
        for p, item in zip(rows, got):
            out[p].append(item)
    return out


def agent_seed(run_seed: int, role: str) -> int:
    """The seed an agent is built from under ``seed_per_request`` (e.g. its fresh LoRA adapters): the same in
    the driver and in a Ray actor, and independent of the order the agents are built in."""
    return derive_seed(run_seed, "agent", role)
