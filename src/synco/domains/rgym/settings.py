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
    reasoner_template: str = Field("Q:{question}\nA:", max_length=200,
                                   description="The Reasoner's user prompt; {question} is the generated question. "
                                               "The tiny char models were trained on the default; a chat model "
                                               "reads '{question}' alone.")
    first_number: bool = Field(False, description="Read the first number after the prefix as the answer (a chat "
                                                  "model that goes on to explain: 'The answer is 18, because...'); "
                                                  "for numeric families only.")
    max_level: int | None = Field(None, ge=0, le=15,
                                  description="The highest curriculum global level a card may ask for (a config "
                                              "above it is rejected out_of_range; the Designer's cells, the uniform, "
                                              "static and Designer-only cards stop there); null: every level. Levels "
                                              "no Reasoner solves give no GRPO signal and take the Designer's slots.")
    heldout_levels: int = Field(3, ge=1, le=12, description="Curriculum levels per family in held-out (0 .. n-1).")
    transfer: bool = Field(True, description="Also hold out each family's default-difficulty items (the group "
                                             "'<family>/default'): the transfer set.")
    heldout_share: float | None = Field(0.25, gt=0, le=1,
                                        description="A held-out group keeps at most this share of its config's "
                                                    "distinct questions (estimated from its own draws), so cards of "
                                                    "a small cell (products at level 0: 100 questions) can reach the "
                                                    "rest; null: heldout_per_group items whatever the space.")
    redraws: int = Field(8, ge=0, le=64,
                         description="Further seeds the oracle may draw for a card whose question is held out or "
                                     "already generated in this run (a fresh one preferred, then a repeat); only "
                                     "when all are held out is the card rejected heldout_problem.")
    timeout_s: float = Field(5.0, gt=0, le=120, description="Deadline of one generation or scoring call (s); past "
                                                           "it the worker is killed and restarted.")
    memory_mb: int = Field(2048, ge=256, le=65536, description="Address-space cap of the worker process (MiB).")

    @field_validator("reasoner_template")
    @classmethod
    def _has_question(cls, template: str) -> str:
        if template.count("{question}") != 1 or template.replace("{question}", "").count("{") != template.replace(
                "{question}", "").count("}"):
            raise ValueError("must contain {question} exactly once (and no other {...} slot)")
        return template

    @field_validator("families")
    @classmethod
    def _audited(cls, names: list[str]) -> list[str]:
        unknown = [n for n in names if n not in AUDITED]
        if unknown:
            raise ValueError(f"not an audited family: {', '.join(unknown)}; audited: {', '.join(sorted(AUDITED))}")
        return list(dict.fromkeys(names))
