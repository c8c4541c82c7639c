"""Seeding and the random states a checkpoint saves, so a resumed run draws what the uninterrupted one would."""

from __future__ import annotations

import random
import warnings
from typing import Any


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state(rng: random.Random) -> dict[str, Any]:
    import numpy as np
    import torch

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
             "run_rng": rng.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()  # GPU sampling draws from these: an exact resume needs them
    return state


def set_rng_state(state: dict[str, Any], rng: random.Random) -> None:
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    rng.setstate(state["run_rng"])
    cuda = state.get("cuda")
    if cuda is not None:
        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if visible == len(cuda):
            torch.cuda.set_rng_state_all(cuda)
        else:
            warnings.warn(f"the checkpoint holds the RNG states of {len(cuda)} GPUs and {visible} are visible now: "
                          "the run continues, but GPU sampling will not repeat the uninterrupted run", stacklevel=2)
