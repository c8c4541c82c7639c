"""The ``tools:`` section of a run's config (``domain: tools``; other domains ignore it)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

MAX_DB_VARIANTS = 4096
"""Most database variants a run may draw from (each is built once per process, in well under a millisecond)."""


class ToolsSettings(BaseModel):
    """Settings of ``domain: tools``."""

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
