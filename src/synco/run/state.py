"""The live run: its config, directory, the state the step works on, and where it starts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from datetime import datetime, timezone
from pathlib import Path

from synco.config import RunConfig
from synco.cotrain.engine import CoTrainState
from synco.cotrain.protocols.base import TrainingProtocol
from synco.cotrain.protocols.registry import build_protocol
from synco.cotrain.settings import StepSettings
from synco.domains.base import HeldoutItem

if TYPE_CHECKING:
    from synco.cotrain.pipeline import Pipeline


@dataclass
class Run:
    """A live run: its directory, config and the state the step function works on."""

    cfg: RunConfig
    dir: Path
    state: CoTrainState
    start_step: int
    heldout: list[HeldoutItem]
    pipeline: "Pipeline | None" = None  # max_staleness >= 1: the asynchronous step loop
    protocol: TrainingProtocol = field(default=None)  # type: ignore[assignment]  # None: built from cfg

    def __post_init__(self) -> None:
        if self.protocol is None:
            self.protocol = build_protocol(self.cfg)

    @property
    def settings(self) -> StepSettings:
        """The run's per-step settings (its mode as the protocol runs it)."""
        return self.state.settings

    @property
    def ckpt_dir(self) -> Path:
        return self.dir / "checkpoints"


def new_run_id(cfg: RunConfig) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{cfg.domain}-{build_protocol(cfg).run_label(cfg.mode)}-s{cfg.seed}-{stamp}"
