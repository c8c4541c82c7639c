import pytest

from synco.config import ConfigError, apply_overrides, describe_fields, dump_config, load_config, parse_override


def test_presets_validate():
    arith = load_config("arith")
    assert arith.domain == "arith" and arith.n_cards == 128 and arith.k == 8 and arith.report_refresh_every == 5
    paper = load_config("paper")
    assert paper.reasoner.grpo.lr == pytest.approx(1e-6)
    assert paper.steps == 100


def test_dotted_overrides_reach_nested_fields():
    cfg = load_config("arith", overrides=["reasoner.grpo.lr=3e-5", "steps=7", "mode=frozen", "tensorboard=false"])
    assert cfg.reasoner.grpo.lr == pytest.approx(3e-5)
    assert cfg.steps == 7 and cfg.mode == "frozen" and cfg.tensorboard is False


def test_yaml_file_on_top_of_preset(tmp_path):
    f = tmp_path / "my.yaml"
    f.write_text("steps: 11\nreasoner:\n  grpo:\n    clip_high: 0.3\n")
    cfg = load_config("arith", f, ["k=2"])
    assert cfg.steps == 11 and cfg.reasoner.grpo.clip_high == pytest.approx(0.3) and cfg.k == 2
    # the rest of the preset is kept
    assert cfg.reasoner.model_path == "builtin:arith/reasoner"


@pytest.mark.parametrize("override,field", [
    ("steps=-1", "steps"),
    ("reasoner.grpo.lr=abc", "reasoner.grpo.lr"),
    ("mode=sideways", "mode"),
    ("synthesizer.nope=1", "synthesizer.nope"),
])
def test_bad_values_name_the_field(override, field):
    with pytest.raises(ConfigError) as e:
        load_config("arith", overrides=[override])
    assert field in str(e.value)


def test_override_syntax_errors():
    with pytest.raises(ConfigError, match="key=value"):
        parse_override("steps")
    with pytest.raises(ConfigError, match="empty key"):
        parse_override("a..b=1")
    with pytest.raises(ConfigError, match="not a section"):
        apply_overrides({"steps": 3}, ["steps.x=1"])


def test_unknown_preset_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="unknown preset"):
        load_config("nope")
    with pytest.raises(ConfigError, match="not found"):
        load_config("arith", tmp_path / "missing.yaml")


def test_dump_round_trips(tmp_path):
    cfg = load_config("arith", overrides=["steps=9"])
    f = tmp_path / "c.yaml"
    f.write_text(dump_config(cfg))
    assert load_config(None, f) == cfg


def test_every_field_is_documented():
    rows = describe_fields()
    missing = [name for name, _, desc in rows if not desc]
    assert not missing, f"fields without a description: {missing}"
