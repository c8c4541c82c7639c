"""What a card may ask of reasoning-gym, and what level it asks for: pure functions over the families' description.

A card's problem is a generator config, ``{"family": NAME, "config": {FIELD: VALUE, ...}}``. It is checked here,
before anything runs it: the family must be an audited one (:data:`AUDITED`), every field a field of the family's
config, never ``seed`` or ``size`` (synco owns them), and every value inside the curriculum's level range (a range
attribute bounds both its fields, lower <= upper) or, for a field outside the curriculum, inside synco's own table
(:data:`EXTRA_FIELDS`). reasoning-gym's own ``validate()`` uses ``assert`` (gone under ``-O``) and accepts values far
past any level, so it is never relied on. A rejection is a :class:`ConfigRejected` with a stable code.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_CARD_CHARS = 600
"""Longest config text parsed."""

SYNCO_FIELDS = frozenset({"seed", "size"})
"""Fields synco owns: a card naming one is rejected (``synco_owned_field``)."""

AUDITED: dict[str, bool] = {
    "aiw": True,
    "base_conversion": True,
    "basic_arithmetic": False,
    "calendar_arithmetic": False,
    "chain_sum": False,
    "count_bits": False,
    "count_primes": False,
    "decimal_chain_sum": True,
    "family_relationships": True,
    "fraction_simplification": False,
    "gcd": False,
    "lcm": True,
    "leg_counting": False,
    "letter_counting": False,
    "number_sequence": False,
    "products": False,
    "simple_equations": False,
    "spell_backward": False,
}
"""The families a card may name, each allowed only after ``tests/domains/rgym/test_audit.py`` showed that empty and
garbage answers score 0 and a constant answer scores only on the items whose answer it is; the flag says whether the
family's partial scores passed the same audit (True: the score is the reward; False: reward 1.0 on an exact answer
only). Seen failing, so not here: ``game_of_life_halting`` (1.0 for any non-empty answer), ``coin_flip`` (1.0 for
"0" against 0.234375), ``propositional_logic`` (0.25 for "xyz")."""

EXTRA_FIELDS: dict[str, dict[str, tuple[Any, ...]]] = {
    "basic_arithmetic": {"allow_parentheses": (False, True), "allow_negation": (False, True)},
    "chain_sum": {"allow_negation": (False, True)},
    "products": {"allow_negation": (False, True)},
    "decimal_chain_sum": {"allow_negation": (False, True)},
}
"""Fields outside a family's curriculum a card may set, with their allowed values (synco's table); any other field
outside the curriculum is refused (``field_not_steerable``)."""


class ConfigRejected(ValueError):
    """A card's config refused before it runs: ``code`` (``unknown_family``, ``out_of_range``, ...) and detail."""

    def __init__(self, code: str, detail: str = "") -> None:
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code, self.detail = code, detail


@dataclass(frozen=True)
class Attribute:
    """One curriculum attribute: the config field(s) it sets (two for a range: lower, upper) and its levels."""

    name: str
    fields: tuple[str, ...]
    levels: tuple[Any, ...]
    description: str = ""
    interval: bool = False
    """A range whose generator needs lower < upper (reasoning-gym's ``ensure_interval``): its level ``i`` spans
    ``levels[i]`` to ``levels[i + 1]``, so it has one level fewer than values."""

    @property
    def n_levels(self) -> int:
        return max(len(self.levels) - 1, 1) if self.interval else len(self.levels)

    @property
    def numeric(self) -> bool:
        return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.levels)

    @property
    def bounds(self) -> tuple[float, float]:
        return min(self.levels), max(self.levels)

    def level_of(self, value: Any) -> int | None:
        """The first level whose value reaches ``value`` (levels may rise or fall); None outside the levels. For an
        interval attribute ``value`` is its upper field's, which first reaches ``levels[i + 1]`` at level ``i``."""
        if self.interval:
            found = self.value_index(value)
            return None if found is None else max(found - 1, 0)
        return self.value_index(value)

    def value_index(self, value: Any) -> int | None:
        if not self.numeric:
            return next((i for i, v in enumerate(self.levels) if v == value), None)
        rising = self.levels[-1] >= self.levels[0]
        for i, v in enumerate(self.levels):
            if (value <= v) if rising else (value >= v):
                return i
        return None

    def values_at(self, level: int) -> dict[str, Any]:
        """This attribute's fields at ``level`` (clipped to its last): a range spans the level below to it."""
        if self.interval:
            low = min(level, self.n_levels - 1)
            return {self.fields[0]: self.levels[low], self.fields[1]: self.levels[low + 1]}
        top = min(level, len(self.levels) - 1)
        if len(self.fields) == 2:
            return {self.fields[0]: self.levels[max(top - 1, 0)], self.fields[1]: self.levels[top]}
        return {self.fields[0]: self.levels[top]}


@dataclass(frozen=True)
class Family:
    """A family as a card sees it: its config fields' defaults, its curriculum and synco's extra fields."""

    name: str
    defaults: Mapping[str, Any]
    attributes: tuple[Attribute, ...]
    extra: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    partial_credit: bool = False

    @property
    def n_levels(self) -> int:
        return max((a.n_levels for a in self.attributes), default=1)

    def attribute_of(self, name: str) -> Attribute | None:
        return next((a for a in self.attributes if name in a.fields), None)

    def check(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The config with keys sorted, after every field and value passed; raises :class:`ConfigRejected`."""
        for key, value in config.items():
            if key in SYNCO_FIELDS:
                raise ConfigRejected("synco_owned_field", f"{key!r} is chosen by synco, not by the card")
            if key not in self.defaults:
                raise ConfigRejected("unknown_field", f"{self.name} has no field {key!r}")
            attr = self.attribute_of(key)
            if attr is None:
                allowed = self.extra.get(key)
                if allowed is None:
                    raise ConfigRejected("field_not_steerable", f"{self.name}.{key} is outside its curriculum")
                if not any(value is v or (type(value) is type(v) and value == v) for v in allowed):
                    raise ConfigRejected("out_of_range", f"{self.name}.{key}={_short(value)} not in {list(allowed)}")
                continue
            if attr.numeric:
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    raise ConfigRejected("bad_value", f"{self.name}.{key}={_short(value)} is not a number")
                if isinstance(value, float) and all(isinstance(v, int) for v in attr.levels):
                    raise ConfigRejected("bad_value", f"{self.name}.{key}={_short(value)} is not an integer")
                lo, hi = attr.bounds
                if not lo <= value <= hi:
                    raise ConfigRejected("out_of_range", f"{self.name}.{key}={_short(value)} outside [{lo}, {hi}]")
            elif attr.level_of(value) is None:
                raise ConfigRejected("out_of_range", f"{self.name}.{key}={_short(value)} is not one of its levels")
        merged = self.effective(config)
        for attr in self.attributes:
            if len(attr.fields) == 2 and attr.numeric:
                lo, hi = merged.get(attr.fields[0]), merged.get(attr.fields[1])
                if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and (lo >= hi if attr.interval else lo > hi):
                    raise ConfigRejected("bad_range", f"{self.name}.{attr.fields[0]}={lo} must be "
                                         f"{'<' if attr.interval else '<='} {attr.fields[1]}={hi}")
        return dict(sorted(config.items()))

    def effective(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The generator's config: the family's defaults overlaid with the card's fields."""
        return {**{k: v for k, v in self.defaults.items() if k not in SYNCO_FIELDS}, **config}

    def levels(self, config: Mapping[str, Any]) -> dict[str, int]:
        """Each attribute's level under ``config`` (its upper field for a range; a default past the levels counts as
        the last level)."""
        merged, out = self.effective(config), {}
        for attr in self.attributes:
            level = attr.level_of(merged.get(attr.fields[-1]))
            out[attr.name] = attr.n_levels - 1 if level is None else level
        return out

    def level(self, config: Mapping[str, Any]) -> int:
        """The curriculum's global level of ``config``: the highest of its attributes' levels."""
        return max(self.levels(config).values(), default=0)

    def config_at(self, level: int) -> dict[str, Any]:
        """A config of global level ``level``: every attribute at it (clipped to its own last level)."""
        out: dict[str, Any] = {}
        for attr in self.attributes:
            out.update(attr.values_at(level))
        return dict(sorted(out.items()))


def families_from(description: Mapping[str, Any], names: Any = None) -> dict[str, Family]:
    """The audited families (those of ``names`` when given) from the worker's description."""
    out = {}
    for name, partial in AUDITED.items():
        if (names is not None and name not in names) or name not in description:
            continue
        desc = description[name]
        attrs = tuple(Attribute(key, tuple(a["fields"]), tuple(_hashable(v) for v in a["levels"]),
                                str(a.get("description", "")), bool(a.get("interval", False)))
                      for key, a in desc["attributes"].items())
        out[name] = Family(name, dict(desc["fields"]), attrs, EXTRA_FIELDS.get(name, {}), partial)
    return out


def parse_config(text: str, families: Mapping[str, Family]) -> tuple[Family, dict[str, Any]]:
    """The family and checked config of a card's problem text; raises :class:`ConfigRejected` saying why not."""
    if not isinstance(text, str) or len(text) > MAX_CARD_CHARS:
        raise ConfigRejected("bad_config", f"not a config of at most {MAX_CARD_CHARS} chars")
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise ConfigRejected("bad_config", "not JSON") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("family"), str):
        raise ConfigRejected("bad_config", 'expected {"family": NAME, "config": {...}}')
    extra = sorted(set(obj) - {"family", "config"})
    if extra:
        code = "synco_owned_field" if set(extra) & SYNCO_FIELDS else "bad_config"
        raise ConfigRejected(code, f"unexpected key(s) {extra} beside family and config")
    config = obj.get("config", {})
    if not isinstance(config, dict):
        raise ConfigRejected("bad_config", "config is not an object")
    family = families.get(obj["family"])
    if family is None:
        raise ConfigRejected("unknown_family", f"{_short(obj['family'])} is not an allowed family")
    return family, family.check({k: _hashable(v) for k, v in config.items()})


def config_text(family: str, config: Mapping[str, Any]) -> str:
    """The canonical config text of a card (keys sorted, compact)."""
    return json.dumps({"family": family, "config": dict(sorted(config.items()))}, separators=(",", ":"))


def _hashable(value: Any) -> Any:
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
