"""reasoning-gym's card payload: a generator config, then synco's seed and the item it generated.

The Synthesizer writes ``{"family": ..., "config": {...}}`` in the card's ``problem``; the oracle
(``RgymDomain.oracle``) materialises the card: it draws the seed and generates the question and answer. In the card
layout a materialised payload reads as ``problem`` = the question, ``solution`` = the config with its seed,
``final_answer`` = the generated answer (docs/RGYM.md "A card").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from synco.core.records import TaskPayload
from synco.domains.rgym.catalog import config_text


def seeded_text(family: str, config: Mapping[str, Any], seed: int) -> str:
    """A materialised card's ``solution``: the config with synco's seed."""
    return json.dumps({"family": family, "config": dict(sorted(config.items())), "seed": seed}, separators=(",", ":"))


def split_seeded(text: str) -> tuple[str, int | None]:
    """``(config text, seed)`` of a materialised card's ``solution``; ``(text, None)`` for anything else."""
    if not isinstance(text, str) or len(text) > 800 or not text.startswith("{"):
        return text, None
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return text, None
    if not isinstance(obj, dict) or set(obj) != {"family", "config", "seed"} or type(obj["seed"]) is not int:
        return text, None
    return config_text(str(obj["family"]), obj["config"] if isinstance(obj["config"], dict) else {}), obj["seed"]


class RgymPayload(TaskPayload):
    """A generator config; once materialised, synco's seed and the generated question and answer."""

    kind: Literal["rgym"] = "rgym"
    config: str
    """The generator config ``{"family": ..., "config": {...}}``: as written, canonical once materialised."""
    seed: int | None = None
    """synco's generator seed (None: not materialised yet)."""
    question: str = ""
    """The generated question: what the Reasoner sees."""
    answer: str = ""
    """The generated answer: the oracle."""
    claim: str = ""
    """The answer the Synthesizer wrote (it cannot know the generated one; not materialised only)."""
    sketch: str = ""
    """The solution the Synthesizer wrote (not materialised only)."""
    wire_names: ClassVar[Mapping[str, str]] = {"config": "problem", "sketch": "solution", "claim": "final_answer"}

    def wire(self) -> dict[str, str]:
        if self.seed is None:
            return {"problem": self.config, "solution": self.sketch, "final_answer": self.claim}
        obj = json.loads(self.config)
        return {"problem": self.question, "solution": seeded_text(str(obj["family"]), obj["config"], self.seed),
                "final_answer": self.answer}

    def prompt_text(self) -> str:
        """The generated question once materialised; the config as written before (what the verifier checks)."""
        return self.question if self.seed is not None else self.config

    def solution_text(self) -> str:
        """The Synthesizer's sketch ("" once materialised: a generated item has no worked solution)."""
        return self.sketch

    def claimed_answer(self) -> str:
        """The generated answer once materialised, else the Synthesizer's claim."""
        return self.answer if self.seed is not None else self.claim

    def factor_subject(self) -> str:
        """The config (its canonical text once materialised, as written before): what the factors read."""
        return self.config if self.seed is not None else self.config.strip()

    @classmethod
    def from_wire(cls, fields: Mapping[str, str]) -> "RgymPayload":
        problem, solution, answer = (str(fields.get(k, "")) for k in ("problem", "solution", "final_answer"))
        config, seed = split_seeded(solution)
        if seed is not None:
            return cls(config=config, seed=seed, question=problem, answer=answer)
        return cls(config=problem, claim=answer, sketch=solution)
