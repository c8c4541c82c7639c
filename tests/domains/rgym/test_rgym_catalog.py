"""synco.domains.rgym.catalog: what a card may ask (hand-built families; no worker)."""

from __future__ import annotations

import pytest

from synco.domains.rgym.catalog import (Attribute, ConfigRejected, Family, config_text, families_from,
                                        parse_config)

SUM = Family("chain_sum", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1, "allow_negation": False,
                           "seed": None, "size": 500},
             (Attribute("num_terms", ("min_terms", "max_terms"), (2, 3, 4, 5)),
              Attribute("num_digits", ("min_digits", "max_digits"), (1, 2, 3))),
             {"allow_negation": (False, True)})
SEQ = Family("number_sequence", {"min_value": -100, "max_complexity": 2, "seed": None, "size": 500},
             (Attribute("min_value", ("min_value",), (-100, -500, -1000)),
              Attribute("max_complexity", ("max_complexity",), (2, 3, 4))))
GCD = Family("gcd", {"min_value": 1, "max_value": 1000},
             (Attribute("value", ("min_value", "max_value"), (100, 1000, 10000), interval=True),))
FAMILIES = {f.name: f for f in (SUM, SEQ, GCD)}


def code_of(text: str) -> str:
    with pytest.raises(ConfigRejected) as err:
        parse_config(text, FAMILIES)
    return err.value.code


def test_a_valid_config_is_canonical_and_leveled() -> None:
    family, config = parse_config('{"family":"chain_sum","config":{"max_terms":4,"min_terms":3}}', FAMILIES)
    assert family is SUM and config == {"max_terms": 4, "min_terms": 3}
    assert SUM.levels(config) == {"num_terms": 2, "num_digits": 0} and SUM.level(config) == 2
    assert config_text("chain_sum", {"min_terms": 3, "max_terms": 4}) == \
        '{"family":"chain_sum","config":{"max_terms":4,"min_terms":3}}'


@pytest.mark.parametrize(("text", "code"), [
    ('{"family":"chain_sum","config":{"seed":3}}', "synco_owned_field"),
    ('{"family":"chain_sum","config":{"size":3}}', "synco_owned_field"),
    ('{"family":"chain_sum","seed":3,"config":{}}', "synco_owned_field"),
    ('{"family":"game_of_life_halting","config":{}}', "unknown_family"),
    ('{"family":"chain_sum","config":{"nope":1}}', "unknown_field"),
    ('{"family":"chain_sum","config":{"max_terms":6}}', "out_of_range"),
    ('{"family":"chain_sum","config":{"max_terms":1}}', "out_of_range"),
    ('{"family":"chain_sum","config":{"max_terms":1e300}}', "bad_value"),
    ('{"family":"chain_sum","config":{"max_terms":3.5}}', "bad_value"),
    ('{"family":"chain_sum","config":{"max_terms":true}}', "bad_value"),
    ('{"family":"chain_sum","config":{"max_terms":"3"}}', "bad_value"),
    ('{"family":"chain_sum","config":{"min_terms":4,"max_terms":3}}', "bad_range"),
    ('{"family":"chain_sum","config":{"allow_negation":1}}', "out_of_range"),
    ('{"family":"number_sequence","config":{"size":1}}', "synco_owned_field"),
    ('{"family":"gcd","config":{"min_value":1000,"max_value":1000}}', "bad_range"),
    ('{"family":"chain_sum"', "bad_config"),
    ('["chain_sum"]', "bad_config"),
    ('{"family":"chain_sum","config":[]}', "bad_config"),
    ('{"family":"chain_sum","config":{}}' + " " * 700, "bad_config"),
])
def test_hostile_configs_are_rejected_with_a_code(text: str, code: str) -> None:
    assert code_of(text) == code


def test_a_falling_attribute_and_a_default_past_the_levels() -> None:
    assert SEQ.levels({"min_value": -400}) == {"min_value": 1, "max_complexity": 0}
    assert SEQ.level({"max_complexity": 4}) == 2
    family, _ = parse_config('{"family":"number_sequence","config":{"min_value":-1000}}', FAMILIES)
    assert family.level({"min_value": -1000}) == 2
    assert code_of('{"family":"number_sequence","config":{"min_value":-1001}}') == "out_of_range"
    # a default outside every level counts as the last level
    wide = Family("x", {"n": 99}, (Attribute("n", ("n",), (1, 2, 3)),))
    assert wide.level({}) == 2


def test_configs_at_a_level_round_trip() -> None:
    for level in range(4):
        config = SUM.config_at(level)
        assert SUM.check(config) == config and SUM.level(config) == level
    assert SUM.config_at(9) == {"max_digits": 3, "max_terms": 5, "min_digits": 2, "min_terms": 4}
    assert GCD.n_levels == 2 and GCD.config_at(1) == {"max_value": 10000, "min_value": 1000}
    assert GCD.level(GCD.config_at(0)) == 0 and GCD.level(GCD.config_at(1)) == 1


def test_only_audited_families_come_from_a_description() -> None:
    description = {"chain_sum": {"fields": {"min_terms": 2, "max_terms": 2, "seed": None},
                                 "attributes": {"num_terms": {"fields": ["min_terms", "max_terms"], "levels": [2, 3]}}},
                   "coin_flip": {"fields": {}, "attributes": {}}}
    found = families_from(description)
    assert list(found) == ["chain_sum"] and found["chain_sum"].attributes[0].levels == (2, 3)


def test_settings_refuse_unaudited_families_and_bad_templates() -> None:
    from pydantic import ValidationError

    from synco.domains.rgym import RgymSettings

    assert RgymSettings(families=["chain_sum", "chain_sum"]).families == ["chain_sum"]
    with pytest.raises(ValidationError, match="coin_flip"):
        RgymSettings(families=["coin_flip"])
    with pytest.raises(ValidationError, match="question"):
        RgymSettings(reasoner_template="Q:\nA:")
