"""The tools world's settings model, its ``tools:`` config section (``domain: tools``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_DB_VARIANTS = 4096
"""Most database variants a run may draw from (each is built once per process, in well under a millisecond)."""


class ToolsSettings(BaseModel):
    """The embedded tool world's settings (database variants per episode, held-out groups)."""

    model_config = ConfigDict(extra="forbid")

    db_variants: int = Field(
        0, ge=0, le=MAX_DB_VARIANTS,
        description="Database variants per episode (0: off, every episode runs on the one fixed database). N > 0: an "
                    "episode whose instruction is one of the world's templates runs on one of variants 1..N (the same "
                    "records, other balances, prices, stocks and quantities), chosen from its instruction and its "
                    "index among the task's K attempts (held-out: the sample index), and is graded against the task "
                    "solved on that variant; other instructions, and tasks a variant cannot solve, run on the fixed "
                    "database. Verification stays on the fixed database. Takes away recalling values instead of "
                    "reading them.")
    heldout_groups: Literal["family", "writes"] = Field(
        "family",
        description="How the held-out set is grouped (``heldout_per_group`` tasks per group): family -- one group per "
                    "task family whose hash bucket holds that many, plus `other` pooling the families that hold "
                    "fewer (a few hold only 1-4), so every family is measured and every group's mean rests on about "
                    "N tasks; writes -- w0, w1, w2, w3+ by the number of writes, "
                    "each drawn from the families that produce it (w2 and w3+ are then ~95 % `gift`, whose task space "
                    "dwarfs the others').")
