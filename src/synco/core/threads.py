"""torch CPU thread settings that keep a run fast when other programs share the cores.

torch's intra-op thread pool on Linux is GNU OpenMP (libgomp, bundled with the
wheel). Every parallel region ends at a barrier, and by default a thread that
gets there first spin-waits. When the team has as many threads as there are
cores and another program is busy, one thread shares its core with that program
and is descheduled for whole time slices while its partners spin; the tiny arith
models run thousands of short regions per step, so steps took ~20x longer.

Measured on 2 shared cores (``bench/bench_busy.py``, the arith preset, 64-128
cards; other programs kept the load at 1-10, so the numbers are rough):

- 1 thread was ~5-25 % slower than 2 spinning threads when the machine was
  quiet, but has no barrier, so a busy program costs it at most its share of
  one core; with the load at 6-10, 2 spinning threads took 32-68 s/step and
  1 thread 2-8 s/step;
- ``OMP_WAIT_POLICY=PASSIVE`` (sleep instead of spin; honoured when set in
  ``os.environ`` before ``import torch``) avoided the collapse (2-8 s/step under
  that load) but made 2 threads ~10-60 % slower than spinning ones when quiet,
  no faster than 1 thread; ``GOMP_SPINCOUNT=10000`` did worse under load
  (6-14 s/step). ``KMP_BLOCKTIME`` is for Intel's OpenMP, which this build does
  not use. ``set_num_interop_threads`` is left alone: eager ops run on the
  intra-op pool (the inter-op pool serves ``torch.jit.fork``-style work);
- the load at start cannot foresee programs started later: a 2-thread run's
  steps went 6.6, 10.2, 32.8 s as other work started.

So ``auto`` (the ``threads`` default) uses at most half of the usable CPUs (on
SMT machines about the physical cores), fewer when the load at start already
takes more than the other half. Idle cores stay free for other
programs, so a team that spins is not oversubscribed by them. On 2 CPUs that is
one thread. Nothing here imports torch or pydantic at module level.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Setting = int | Literal["auto"] | None


def parse_threads(value: Any) -> Setting:
    """Validate the ``threads`` setting: a positive int, ``"auto"`` or None (torch's own choice).

    Digit strings (a quoted YAML value) count as ints; booleans, zero,
    negatives, fractions and other words are rejected; the config error that
    wraps this names ``threads`` and shows the value.
    """
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "auto":
            return "auto"
        if text in ("null", "none"):
            return None
        if text.isdigit():
            value = int(text)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ValueError("threads must be a positive integer, 'auto' or null")


def __getattr__(name: str) -> Any:
    """``ThreadsSetting``, the ``threads`` config field's type, built on first use (keeps pydantic unimported)."""
    if name == "ThreadsSetting":
        from typing import Annotated

        from pydantic import BeforeValidator

        return Annotated[int | Literal["auto"] | None, BeforeValidator(parse_threads)]
    raise AttributeError(f"module 'synco.core.threads' has no attribute {name!r}")


def auto_threads(cpu_count: int, loadavg: float) -> int:
    """Threads for ``auto``: half the usable CPUs, fewer if the load leaves less idle; at least one.

    ``loadavg`` is the 1-minute load average taken before the run starts, so it
    counts other programs only; each runnable one claims a CPU (0.3 rounds to
    none, 0.6 to one). The half left over is room for programs started later:
    a spinning OpenMP team collapses only when its cores are oversubscribed.
    A ``cpu_count`` below 1 is read as 1 and a NaN load as 0.
    """
    cpus = max(1, int(cpu_count))
    busy = 0 if math.isnan(loadavg) else max(0, round(loadavg))
    return max(1, min(cpus // 2, cpus - busy))


def cgroup_cpu_quota(cpu_max: str) -> float | None:
    """CPUs granted by a cgroup v2 ``cpu.max`` line (``"200000 100000"`` -> 2.0); None when unlimited or unreadable."""
    parts = cpu_max.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity mask, capped by a cgroup v2 CPU quota (containers)."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        n = os.cpu_count() or 1
    try:
        quota = cgroup_cpu_quota(Path("/sys/fs/cgroup/cpu.max").read_text())
    except OSError:
        quota = None
    if quota is not None:
        n = min(n, max(1, math.ceil(quota)))
    return max(1, n)


def current_load() -> float:
    """The 1-minute load average, or 0 where the platform has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def resolve_threads(setting: Setting, cpu_count: int, loadavg: float) -> int | None:
    """The torch thread count for ``setting`` (None: leave torch's own choice)."""
    if setting == "auto":
        return auto_threads(cpu_count, loadavg)
    return setting


@dataclass(frozen=True)
class ThreadChoice:
    """What ``apply_threads`` did: the setting, the resulting torch thread count and what it was based on."""

    setting: Setting
    threads: int
    cpus: int
    loadavg: float

    def describe(self) -> str:
        """One line for the run log."""
        return (f"torch threads: {self.threads} (threads: {self.setting or 'null'}; "
                f"{self.cpus} usable CPUs, load {self.loadavg:.2f})")


def apply_threads(setting: Setting) -> ThreadChoice:
    """Set torch's intra-op thread count from the ``threads`` config value and report the choice."""
    import torch

    cpus, load = usable_cpus(), current_load()
    n = resolve_threads(setting, cpus, load)
    if n is not None:
        torch.set_num_threads(n)
    return ThreadChoice(setting=setting, threads=torch.get_num_threads(), cpus=cpus, loadavg=load)
