"""The snapshot in a process of its own (``async_placement: process``): sampling beside the update without sharing
the interpreter's lock.

On a Python thread the update and the transformers engine's sampling share one interpreter lock; over small models
most of a step is Python (``generate``'s per-token loop, the optimizer's per-parameter calls), so the two overlap
poorly (docs/ASYNC.md). :class:`ProcessSampler` moves a :class:`~synco.learn.hf_policy.SnapshotSampler` into a child
process (``torch.multiprocessing``, spawned once at setup) and is itself a complete
:class:`~synco.core.policy.Sampler`: ``generate`` sends the prompt ids and returns the child's completions, ``load``
sends the learner's export (those parameters an update changes), copied in by the child before the reply. The
child samples from its own torch random stream, seeded from the parent's at spawn (:func:`child_seed`): a run
repeats itself, not the thread placement's numbers (with ``seed_per_request`` every call carries its seed, and the
two placements sample alike).
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

import torch
import torch.multiprocessing as mp

from synco.core.sampling import Completion, SamplingParams
from synco.learn.hf_policy import SnapshotSampler

JOIN_SECONDS = 30.0
"""How long :meth:`ProcessSampler.close` waits for the child to exit before it is terminated."""


class SamplerProcessError(RuntimeError):
    """The sampler's child process failed or died: one line naming what it was asked and why."""


def _serve(conn: Any, sampler: SnapshotSampler, threads: int, seed: int) -> None:
    """The child's loop: one request at a time, ``(method, args)`` -> ``("ok", result)`` or ``("error", line)``."""
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    while True:
        try:
            method, args = conn.recv()
        except EOFError:
            return
        if method == "close":
            conn.send(("ok", None))
            return
        try:
            if method == "generate":
                result: Any = sampler.generate(*args)
            elif method == "rng":
                result = torch.get_rng_state()
            elif method == "set_rng":
                torch.set_rng_state(args[0])
                result = None
            elif method == "load":
                weights, version = args
                params = dict(sampler.model.named_parameters())
                with torch.no_grad():
                    for name, tensor in weights.items():
                        params[name].copy_(tensor)
                sampler.version = version
                result = version
            else:
                raise ValueError(f"unknown request {method!r}")
            conn.send(("ok", result))
        except Exception as err:  # noqa: BLE001 - one line back to the parent, the child keeps serving
            conn.send(("error", f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"))


def child_seed() -> int:
    """The child's torch seed, drawn from the parent's global stream: each child its own, the same in every run."""
    return int(torch.randint(0, 2**62, (1,)).item())


class ProcessSampler:
    """A :class:`~synco.learn.hf_policy.SnapshotSampler` served by a child process; a complete Sampler.

    ``snapshot``: the copy to move (its model, tokenizer, constraint and settings travel once, at spawn); it is
    not used here afterwards. A ``ValueError`` saying why when it cannot travel (a shared base's adapter view).
    """

    recompute_proximal = False  # the same transformers numerics as the learner's: its log-probs are the proximal
    holds_copy = True

    def __init__(self, snapshot: SnapshotSampler) -> None:
        if snapshot.view is not None:
            raise ValueError("a shared base's adapter view cannot move to another process (async_placement=thread)")
        self.names = list(snapshot.names)
        self.version = snapshot.version
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        try:
            self._proc = ctx.Process(target=_serve, args=(child, snapshot, torch.get_num_threads(),
                                                          child_seed()),
                                     daemon=True, name="synco-sampler")
            self._proc.start()
        except (pickle.PicklingError, TypeError, AttributeError) as err:
            raise ValueError(f"its sampler cannot move to a process: {err}") from err
        finally:
            child.close()

    def _call(self, method: str, *args: Any) -> Any:
        try:
            self._conn.send((method, args))
            status, result = self._conn.recv()
        except (EOFError, OSError, BrokenPipeError) as err:
            raise SamplerProcessError(f"the sampler process ({method}) died: exit code {self._proc.exitcode}") from err
        if status != "ok":
            raise SamplerProcessError(f"the sampler process ({method}): {result}")
        return result

    def generate(self, prompt_ids: Sequence[Sequence[int]], n: int, params: SamplingParams,
                 seed: int | None = None) -> list[list[Completion]]:
        """The child's completions, each stamped with the version it holds."""
        return self._call("generate", [list(p) for p in prompt_ids], n, params, seed)

    def load(self, model: torch.nn.Module, version: int) -> None:
        """Send the export of ``model`` (detached copies: the learner's own storage never moves) as ``version``."""
        params = dict(model.named_parameters())
        self.version = self._call("load", {name: params[name].detach().clone() for name in self.names}, version)

    def random_state(self) -> torch.Tensor:
        """The child's torch random state (a checkpoint keeps it: a resumed run samples on from where it stood)."""
        return self._call("rng")

    def set_random_state(self, state: torch.Tensor) -> None:
        """Continue the child's sampling from :meth:`random_state`'s ``state``."""
        self._call("set_rng", state)

    def close(self) -> None:
        """Stop the child (idempotent)."""
        if self._proc.is_alive():
            try:
                self._call("close")
            except SamplerProcessError:
                pass
            self._proc.join(JOIN_SECONDS)
            if self._proc.is_alive():
                self._proc.terminate()
        self._conn.close()


__all__ = ["ProcessSampler", "SamplerProcessError"]
