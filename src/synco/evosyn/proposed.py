"""A factor the Synthesizer model proposed (EvoSyn's LLM proposer), as the factor space stores it.

Its own module so that :mod:`synco.evosyn.space` (which saves proposals for resume) and
:mod:`synco.evosyn.proposer` (which parses and computes them) both import it, without a cycle.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

NAME_PATTERN = r"^[a-z][a-z0-9_]{1,23}$"
"""Factor and bucket names: short snake_case identifiers (they appear in cell keys and prompts)."""

KEYWORD_PATTERN = r"^[A-Za-z0-9 $%\-]{1,30}$"
"""A keyword: 1-30 ASCII letters, digits, spaces and ``$ % -``."""

FALLBACK = "other"
"""The bucket of a problem that mentions no keyword of any bucket."""

MAX_PROBLEM_CHARS = 4000
"""Characters of a problem the keyword extractor reads (bounded work per problem)."""

RAW_CHARS = 500
"""Characters of the model's text kept with a proposal (for the log)."""

_TOKEN = re.compile(r"[a-z0-9]+|[$%]")
"""Word tokens of lower-cased text: runs of ASCII letters/digits; ``$`` and ``%`` are tokens of their own."""

def tokens(text: str) -> tuple[str, ...]:
    """The word tokens of ``text`` lower-cased: ``"15% off!"`` -> ``("15", "%", "off")``."""
    return tuple(_TOKEN.findall(text.lower()))

class ProposedFactor(BaseModel):
    """One factor the Synthesizer model proposed: keyword buckets (``other`` is added as the fallback)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN, description="Factor name (snake_case, 2-24 chars).")
    buckets: dict[str, list[str]] = Field(description="Bucket name -> 1..8 keywords, 2..4 buckets, in match order.")
    step: int = Field(ge=0, description="Step the factor was proposed at.")
    raw: str = Field("", max_length=RAW_CHARS, description="The model's text (clipped), for the log.")

    @field_validator("buckets")
    @classmethod
    def _check_buckets(cls, buckets: dict[str, list[str]]) -> dict[str, list[str]]:
        if not 2 <= len(buckets) <= 4:
            raise ValueError(f"buckets: need 2 to 4 buckets, got {len(buckets)}")
        out: dict[str, list[str]] = {}
        for bucket, keywords in buckets.items():
            if not re.match(NAME_PATTERN, bucket):
                raise ValueError(f"buckets: bucket name {bucket[:40]!r} does not match {NAME_PATTERN}")
            if bucket == FALLBACK:
                raise ValueError(f"buckets: {FALLBACK!r} is the automatic fallback bucket, not a proposable one")
            if not 1 <= len(keywords) <= 8:
                raise ValueError(f"buckets.{bucket}: need 1 to 8 keywords, got {len(keywords)}")
            clean = []
            for kw in keywords:
                if not re.match(KEYWORD_PATTERN, kw) or not tokens(kw):
                    raise ValueError(f"buckets.{bucket}: keyword {kw[:40]!r} is not 1-30 letters, digits, "
                                     f"spaces or $%- with at least one word")
                clean.append(" ".join(kw.lower().split()))
            out[bucket] = clean
        return out

    @property
    def bucket_names(self) -> tuple[str, ...]:
        """The proposed buckets in match order, then ``other``."""
        return (*self.buckets, FALLBACK)


