"""Shared test settings: one torch thread per test process (the suite runs in two xdist workers on 2 cores)."""

import os

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

try:
    import torch

    torch.set_num_threads(1)
except ImportError:  # pragma: no cover - torch is a hard dependency
    pass
