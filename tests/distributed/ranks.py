"""Local gloo process groups for the multi-rank tests: start the ranks, rendezvous without a TCP port, and end
them cleanly even when a rank fails, hangs or the test is interrupted.

Why not ``MASTER_PORT`` from a probed free port: the port is free only until the probe closes it; rank 0 binds it
seconds later (two fresh interpreters import torch first), and in that window any other process on the machine
(the other xdist worker's gloo ranks, Ray's servers, ...) may take it. A ``FileStore`` in the test's own tmp
folder has no port and cannot meet another test's ranks.

Why ranks leave with ``os._exit`` once their work is done: FSDP2's DTensor caches keep the device mesh and with it
the gloo process group alive after ``destroy_process_group`` (its worker and I/O threads keep running, measured on
torch 2.13), so a spawned rank that returns normally tears those C++ threads down during interpreter
finalization. That is where gloo ranks abort with "terminate called without an active exception" (SIGABRT; the
same crash pytorch/pytorch#65231 traced to a gloo group destroyed only at interpreter exit). A rank whose group
is destroyed and whose results are written has nothing left to finalize, so it exits without finalization.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch


def spawn_ranks(fn: Callable[..., None], *args: Any, world: int, folder: Path, timeout_s: float = 900) -> None:
    """Run ``fn(rank, world, init_method, *args)`` in ``world`` spawned processes and wait for all of them.

    ``init_method`` is a fresh ``file://`` store under ``folder`` for :func:`rank_group`. A failed rank raises
    here with its traceback (the others are stopped); past ``timeout_s`` a ``TimeoutError`` names the ranks
    still running. Whatever happens, no rank outlives this call.
    """
    store = Path(tempfile.mkdtemp(prefix="rendezvous-", dir=folder)) / "store"
    ctx = torch.multiprocessing.start_processes(fn, args=(world, f"file://{store}", *args), nprocs=world,
                                                join=False, start_method="spawn")
    try:
        deadline = time.monotonic() + timeout_s
        while not ctx.join(timeout=max(0.1, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                running = [rank for rank, p in enumerate(ctx.processes) if p.is_alive()]
                raise TimeoutError(f"{fn.__name__}: ranks {running} of {world} still running after {timeout_s:g} s")
    finally:
        stop_processes(ctx.processes)


def stop_processes(processes: list[Any], grace_s: float = 10.0) -> None:
    """SIGTERM every process still alive, SIGKILL those still there after ``grace_s``, and reap them all."""
    for p in processes:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + grace_s
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()


@contextmanager
def rank_group(rank: int, world: int, init_method: str) -> Iterator[None]:
    """This rank's part of the group: join it, run the body, and (body done on every rank) leave.

    On success: a barrier (no rank leaves while another still needs it), ``destroy_process_group``, then the
    process exits without interpreter finalization (see the module docstring). On an error the group is
    destroyed and the error propagates, so the spawning test reports its traceback.
    """
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world)
    try:
        yield
        dist.barrier()
    finally:
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
