import pytest

from synco.config import ConfigError, apply_overrides, describe_fields, dump_config, load_config, parse_override


def test_presets_validate():
    arith = load_config("arith")
    assert arith.domain == "arith" and arith.n_cards == 128 and arith.k == 8 and arith.report_refresh_every == 5
    paper = load_config("paper", overrides=["verifier.benchmark_paths=[]"])  # no `synco data` folder here
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
    ("tools.db_variants=-1", "tools.db_variants"),
    ("tools.db_variants=4097", "tools.db_variants"),
    ("tools.db_variants=many", "tools.db_variants"),
    ("tools.variants=8", "tools.variants"),
])
def test_bad_values_name_the_field(override, field):
    with pytest.raises(ConfigError) as e:
        load_config("arith", overrides=[override])
    assert field in str(e.value)


def test_gap_learnability_is_refused_where_it_would_do_nothing():
    """The additive Synthesizer reward has no learner term: ``learnability=gap`` there is an error naming both keys."""
    with pytest.raises(ConfigError, match=r"synth_rewards: .*learnability='gap'.*mode='additive'"):
        load_config("arith", overrides=["synth_rewards.mode=additive", "synth_rewards.learnability=gap"])
    assert load_config("arith", overrides=["synth_rewards.learnability=gap"]).synth_rewards.learnability == "gap"


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


@pytest.mark.parametrize("override,field", [
    ("reasoner.grpo.lr=inf", "reasoner.grpo.lr=inf"),
    ("synth_rewards.invalid_penalty=nan", "synth_rewards.invalid_penalty=nan"),
    ("synth_rewards.duplicate_penalty=-.inf", "synth_rewards.duplicate_penalty=-inf"),
])
def test_non_finite_numbers_are_refused_naming_the_field(override, field):
    with pytest.raises(ConfigError) as e:
        load_config("arith", overrides=[override])
    assert field in str(e.value) and "finite" in str(e.value)


def test_non_finite_numbers_in_a_yaml_file_are_refused(tmp_path):
    f = tmp_path / "my.yaml"
    f.write_text("reasoner:\n  grpo:\n    lr: .inf\n")
    with pytest.raises(ConfigError, match=r"reasoner\.grpo\.lr=inf"):
        load_config("arith", f)


def test_a_missing_local_model_path_is_refused_when_the_config_loads(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config("arith", overrides=[f"reasoner.model_path={tmp_path / 'no-such-model'}"])
    assert "reasoner.model_path" in str(e.value) and "no-such-model" in str(e.value)
    assert "synthesizer.model_path" not in str(e.value)
    with pytest.raises(ConfigError, match="checker.model_path"):
        load_config("smollm2", overrides=["consensus_solver=checker", "checker.model_path=./models/gone"])
    with pytest.raises(ConfigError, match=r"reasoner\.lora\.adapter_path"):
        load_config("arith", overrides=["reasoner.lora.rank=4", f"reasoner.lora.adapter_path={tmp_path}/gone"])
    with pytest.raises(ConfigError, match="unknown built-in model"):
        load_config("arith", overrides=["reasoner.model_path=builtin:arith/teacher"])


def test_model_paths_that_may_exist_are_accepted(tmp_path):
    (tmp_path / "weights").mkdir()
    cfg = load_config("arith", overrides=[f"reasoner.model_path={tmp_path / 'weights'}",
                                          "synthesizer.model_path=Qwen/Qwen3-8B"])  # a hub id: only the hub can tell
    assert cfg.reasoner.model_path == str(tmp_path / "weights")
    assert load_config("smollm2").reasoner.model_path == "smollm2"  # a model preset
    assert load_config("arith").reasoner.model_path == "builtin:arith/reasoner"


@pytest.mark.parametrize("overrides,field", [
    (["evosyn.designer=maybe"], "evosyn.designer"),
    (["evosyn.designer_settings.floor=2"], "evosyn.designer_settings.floor"),
    (["evosyn.designer_settings.target=1"], "evosyn.designer_settings.target"),
    (["evosyn.designer_settings.min_group=0"], "evosyn.designer_settings.min_group"),
    (["evosyn.reflector_settings.alpha=1.5"], "evosyn.reflector_settings.alpha"),
    (["evosyn.reflector_settings.permutations=3"], "evosyn.reflector_settings.permutations"),
    (["evosyn.nope=1"], "evosyn.nope"),
    (["evosyn.designer_settings.nope=1"], "evosyn.designer_settings.nope"),
    (["evosyn.control_penalty=-1"], "evosyn.control_penalty"),
])
def test_bad_evosyn_values_name_the_field(overrides, field):
    with pytest.raises(ConfigError) as e:
        load_config("arith", overrides=overrides)
    assert field in str(e.value)


def test_floor_plus_retention_above_one_names_both():
    with pytest.raises(ConfigError) as e:
        load_config("arith", overrides=["evosyn.designer_settings.floor=0.6", "evosyn.designer_settings.retention=0.5"])
    msg = str(e.value)
    assert "evosyn.designer_settings" in msg and "floor + retention" in msg and "0.6 + 0.5" in msg
    ok = load_config("arith", overrides=["evosyn.designer_settings.floor=0.6", "evosyn.designer_settings.retention=0.4"])
    assert ok.evosyn.designer_settings.floor == pytest.approx(0.6)


def test_evosyn_section_from_yaml_and_build_config(tmp_path):
    from synco.config import build_config

    f = tmp_path / "evo.yaml"
    f.write_text("evosyn:\n  feedback: false\n  reflector_settings: {every: 3, min_tasks: 20}\n")
    cfg = load_config("arith", f)
    assert cfg.evosyn.feedback is False and cfg.evosyn.reflector_settings.every == 3
    assert cfg.evosyn.reflector_settings.window == 3000 and cfg.evosyn.designer is True  # the rest from the preset
    with pytest.raises(ConfigError, match="evosyn.reflector_settings.every"):
        build_config({"evosyn": {"reflector_settings": {"every": 0}}})


def test_card_decoding_needs_the_hf_rollout_engine() -> None:
    """The card grammar is a transformers logits processor: a vLLM Synthesizer could not apply it, so loading refuses."""
    with pytest.raises((ConfigError, ValueError), match="synthesizer.rollout_engine='vllm'"):
        load_config("smollm2", overrides=["synthesizer.rollout_engine=vllm"])
    assert load_config("smollm2", overrides=["reasoner.rollout_engine=vllm"]).reasoner.rollout_engine == "vllm"


# --------------------------------------------------------------------------- prompts_dir, checked at load


def test_a_missing_prompts_dir_fails_at_load_naming_the_field(tmp_path):
    gone = tmp_path / "no_such_prompts"
    for preset in ("arith", "smollm2"):  # a named folder must exist, whichever domain
        with pytest.raises(ConfigError) as e:
            load_config(preset, overrides=[f"prompts_dir={gone}"])
        assert f"prompts_dir={str(gone)!r}: does not exist" in str(e.value)
    a_file = tmp_path / "prompts.txt"
    a_file.write_text("not a folder\n")
    with pytest.raises(ConfigError, match="prompts_dir=.*is not a folder"):
        load_config("smollm2", overrides=[f"prompts_dir={a_file}"])


def test_a_math_prompts_dir_with_an_unusable_template_fails_at_load_naming_the_file(tmp_path):
    (tmp_path / "synthesizer.txt").write_text("no placeholders here\n")
    with pytest.raises(ConfigError) as e:
        load_config("smollm2", overrides=[f"prompts_dir={tmp_path}"])
    assert f"prompts_dir={str(tmp_path)!r}" in str(e.value) and "synthesizer.txt lacks {{report}}" in str(e.value)
    (tmp_path / "synthesizer.txt").unlink()
    (tmp_path / "reasoner.txt").write_text("Solve it.\n")
    with pytest.raises(ConfigError, match=r"reasoner.txt lacks \{\{problem\}\}"):
        load_config("smollm2", overrides=[f"prompts_dir={tmp_path}"])
    # the arith domain reads no prompts: the same folder is accepted there
    assert load_config("arith", overrides=[f"prompts_dir={tmp_path}"]).prompts_dir == str(tmp_path)


def test_a_usable_prompts_dir_and_none_load_unchanged(tmp_path):
    (tmp_path / "reasoner_system.txt").write_text("Answer briefly.\n")  # overrides one template, the rest are shipped
    assert load_config("smollm2", overrides=[f"prompts_dir={tmp_path}"]).prompts_dir == str(tmp_path)
    assert load_config("smollm2").prompts_dir is None


def test_the_tools_section_reaches_the_domain():
    from synco.config import domain_context
    from synco.run.build import build_domain

    cfg = load_config("tools")
    assert cfg.tools.db_variants == 0 and build_domain(cfg).settings.db_variants == 0  # off by default
    cfg = load_config("tools", overrides=["tools.db_variants=16"])
    assert domain_context(cfg).settings.db_variants == 16 and build_domain(cfg).settings.db_variants == 16
    assert "tools:\n  db_variants: 16\n" in dump_config(cfg)


def test_a_domain_section_is_validated_by_the_domains_own_settings_model(tmp_path):
    """``tools:`` / ``tau2:`` are the domains' own models: a run's domain gets its defaults, another registered
    domain's section is validated and kept (a run's config.yaml may carry one), anything else is refused."""
    from synco.domains.tau2.settings import Tau2Settings
    from synco.domains.tools.settings import ToolsSettings

    arith = load_config("arith")
    assert arith.domain_settings() is None and arith.domain_settings("tools") is None and "tools:" not in dump_config(arith)
    assert load_config("tools").domain_settings() == ToolsSettings()  # the run's domain: its defaults
    other = load_config("arith", overrides=["tau2.user_model=./user", "tools.db_variants=4"])
    assert other.domain_settings("tau2") == Tau2Settings(user_model="./user")
    assert other.domain_settings("tools").db_variants == 4
    f = tmp_path / "c.yaml"
    f.write_text(dump_config(other))
    assert load_config(None, f) == other  # round trip, sections included
    for override, message in [
        ("tau2.user_temperature=-1", "tau2.user_temperature: Input should be greater than or equal to 0 (got -1)"),
        ("tau2.domain=moon", "tau2.domain: Input should be 'airline', 'retail', 'telecom' or 'mock' (got 'moon')"),
        ("tau2.user_temperature=.inf", "tau2.user_temperature=inf"),
        ("tau2.tool_choice=required", "tau2: Value error, tau2.tool_choice=required needs a solo run"),
        ("arith.levels=3", "arith: domain 'arith' declares no settings"),
        ("nope.x=1", "nope: Extra inputs are not permitted (got {...})"),
    ]:
        with pytest.raises(ConfigError) as e:
            load_config("arith", overrides=[override])
        assert message in str(e.value), (override, str(e.value))


def test_the_config_reference_lists_the_domains_sections():
    rows = {name: desc for name, _, desc in describe_fields()}
    assert rows["tools"].startswith("domain=tools: ") and rows["tau2"].startswith("domain=tau2: ")
    assert {"tools.db_variants", "tools.heldout_groups", "tau2.user_model"} <= set(rows)


def test_served_roles_are_checked_when_the_config_loads() -> None:
    """rollout_engine: served needs its section; training through a server needs LoRA and token ids; a chat
    Reasoner cannot act; a frozen Synthesizer may be any chat endpoint (no local weights, model_path unread)."""
    from synco.config import ConfigError, load_config

    url = ["synthesizer.served.base_url=http://127.0.0.1:9/v1", "synthesizer.served.model=m"]
    with pytest.raises(ConfigError, match="synthesizer.rollout_engine=served needs a synthesizer.served section"):
        load_config("arith", overrides=["synthesizer.rollout_engine=served"])
    with pytest.raises(ConfigError, match="synthesizer.lora"):  # cotrain: the Synthesizer trains
        load_config("arith", overrides=["synthesizer.rollout_engine=served", *url])
    cfg = load_config("arith", overrides=["mode=frozen", "synthesizer.rollout_engine=served", *url,
                                          "synthesizer.served.endpoint=chat", "synthesizer.model_path=/no/such/dir"])
    assert cfg.frozen("synthesizer") and not cfg.loads_weights("synthesizer")
    chat = ["reasoner.rollout_engine=served", "reasoner.served.base_url=http://127.0.0.1:9/v1",
            "reasoner.served.model=m", "reasoner.served.endpoint=chat", "reasoner.trainable=false"]
    with pytest.raises(ConfigError, match="cannot act in domain='tools'"):
        load_config("tools", overrides=chat)
    with pytest.raises(ConfigError, match="endpoint=chat cannot train"):
        load_config("arith", overrides=[*chat[:-1], "reasoner.lora.rank=8"])


@pytest.mark.parametrize("check", ["synth_collapse", "valid_rate", "label_agreement", "rejection_code", "nan_skips",
                                   "reward_saturation"])
def test_a_health_check_given_only_its_action_takes_it_and_a_bad_one_names_the_action_key(check, tmp_path):
    """README: each check is `off` / `warn` / `stop`; `health.<check>=stop` is short for `health.<check>.action=stop`,
    in an override and in a YAML file, and a bad value names the key that takes it."""
    assert getattr(load_config("arith", overrides=[f"health.{check}=stop"]).health, check).action == "stop"
    assert getattr(load_config("arith", overrides=[f"health.{check}.action=off"]).health, check).action == "off"
    f = tmp_path / "h.yaml"
    f.write_text(f"health:\n  {check}: off\n")
    assert getattr(load_config("arith", f).health, check).action == "off"
    with pytest.raises(ConfigError) as e:
        load_config("arith", overrides=[f"health.{check}=loud"])
    assert f"health.{check}.action: Input should be 'off', 'warn' or 'stop' (got 'loud')" in str(e.value)


def test_a_yaml_error_names_the_file_and_the_place_in_one_line(tmp_path):
    f = tmp_path / "my.yaml"
    f.write_text("steps: 3\n  bad: [1\n")
    with pytest.raises(ConfigError) as e:
        load_config("arith", f)
    assert str(e.value) == f"config file {f} is not valid YAML: line 2, column 6: mapping values are not allowed here"
    with pytest.raises(ConfigError) as e:
        load_config("arith", overrides=["steps=[1"])
    assert "<unicode string>" not in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).startswith("override steps: cannot read value '[1': line 1, column 3: expected ',' or ']'")


def test_a_domain_switched_from_the_preset_gets_its_own_values_of_run_settings(tmp_path):
    """`synco verify FILE domain=rgym` on the default (arith) preset: rgym's problem length bounds, not arith's 40;
    nothing else of another preset (rgym.families stays every audited family); the user's own settings win."""
    from synco.domains.rgym.catalog import AUDITED

    arith = load_config()
    assert arith.verifier.max_problem_chars == 40
    cfg = load_config(overrides=["domain=rgym"])
    assert (cfg.verifier.min_problem_chars, cfg.verifier.max_problem_chars, cfg.verifier.novelty_threshold) == (3, 600, 1.0)
    assert not cfg.verifier.reject_duplicates and arith.verifier.reject_duplicates  # rgym's items are synco's draws
    assert not load_config("rgym").verifier.reject_duplicates  # a preset carries the domain's values itself
    assert cfg.domain_settings().families == sorted(AUDITED) and cfg.steps == arith.steps  # the preset's other keys
    assert load_config(overrides=["domain=rgym", "verifier.max_problem_chars=100"]).verifier.max_problem_chars == 100
    f = tmp_path / "user.yaml"
    f.write_text("domain: rgym\nverifier: {max_problem_chars: 90}\n")
    assert load_config(path=f).verifier.max_problem_chars == 90
    f.write_text("domain: rgym\n")
    assert load_config(path=f).verifier.max_problem_chars == 600
    assert load_config("rgym", overrides=["verifier.max_problem_chars=700"]).verifier.max_problem_chars == 700
    assert load_config("tools", overrides=["domain=arith"]).verifier.max_problem_chars == 40  # and back
