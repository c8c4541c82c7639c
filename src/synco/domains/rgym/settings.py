"""The reasoning-gym world's settings: its ``rgym:`` config section."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from synco.domains.rgym.catalog import AUDITED


class RgymSettings(BaseModel):
    """``rgym:``: which families, how the Reasoner answers, and the bounds of reasoning-gym's worker process."""

    model_config = ConfigDict(extra="forbid")

    families: list[str] = Field(default_factory=lambda: sorted(AUDITED), min_length=1,
                                description="The families cards may name and held-out covers; each must be an "
                                            "audited one (synco.domains.rgym.catalog.AUDITED; `synco verify --help` "
                                            "lists them with their fields and levels).")
    answer_prefix: str = Field("<answer>", max_length=40,
                               description="Prefilled at the start of every Reasoner answer (training and held-out "
                                           "alike); the answer is what follows it, up to </answer> or a newline. "
                                           "'<answer>' is reasoning-gym's own convention; 'The answer is ' suits "
                                           "chat models.")
    heldout_levels: int = Field(3, ge=1, le=12, description="Curriculum levels per family in held-out (0 .. n-1).")
    transfer: bool = Field(True, description="Also hold out each family's default-difficulty items (the group "
                                             "'<family>/default'): the transfer set.")
    timeout_s: float = Field(5.0, gt=0, le=120, description="Deadline of one generation or scoring call (s); past "
                                                           "it the worker is killed and restarted.")
    memory_mb: int = Field(2048, ge=256, le=65536, description="Address-space cap of the worker process (MiB).")

    @field_validator("families")
    @classmethod
    def _audited(cls, names: list[str]) -> list[str]:
        unknown = [n for n in names if n not in AUDITED]
        if unknown:
            raise ValueError(f"not an audited family: {', '.join(unknown)}; audited: {', '.join(sorted(AUDITED))}")
        return list(dict.fromkeys(names))
