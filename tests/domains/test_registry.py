"""synco.domains.registry: names -> domains (built-ins, register_domain, the ``synco.domains`` entry points),
and docs/ADDING_A_DOMAIN.md's example, copied from the page, registered and trained on without editing synco."""

from __future__ import annotations

import dataclasses
import json
import random
import re
import runpy
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, Field

import synco.cli
import synco.domains.base as base
from synco.config import ConfigError, describe_fields, load_config
from synco.domains import registry
from synco.domains.arith import ArithDomain
from synco.domains.arith_chat import ArithChatDomain
from synco.domains.base import Domain, DomainNeeds, HasCardTemplate, HasEnvironment, HasFactorSpace
from synco.domains.math import MathDomain
from synco.domains.tools import ToolsDomain
from synco.domains.registry import available_domains, get_domain, register_domain, unregister_domain
from synco.domains.spec import DomainContext, DomainError, WarmStart

DOC = Path(__file__).resolve().parents[2] / "docs" / "ADDING_A_DOMAIN.md"


@pytest.fixture(autouse=True)
def clean_registry(monkeypatch: pytest.MonkeyPatch) -> list[EntryPoint]:
    """A private copy of the registry and no installed entry points; append to the list to fake one."""
    fake: list[EntryPoint] = []
    monkeypatch.setattr(registry, "_SPECS", dict(registry._SPECS))
    monkeypatch.setattr(registry, "_LOADED", {})
    monkeypatch.setattr(registry, "_ENTRY_POINTS", None)
    monkeypatch.setattr(registry, "entry_points", lambda group: [ep for ep in fake if ep.group == group])
    return fake


class Toy:
    """The smallest object with every Domain member (a plain stand-in built through the registry)."""

    name = "toy"
    needs = DomainNeeds(chat_model=True)
    has_oracle = True

    def __init__(self, prompts_dir: str | None = None) -> None:
        self.prompts_dir = prompts_dir

    def synthesizer_prompt(self, report, target=None) -> str:  # noqa: ANN001
        return "CARD:"

    def reasoner_prompt(self, problem: str) -> str:
        return problem

    def synthesizer_system_prompt(self) -> None:
        return None

    def reasoner_system_prompt(self) -> None:
        return None

    def oracle(self, card) -> None:  # noqa: ANN001
        return None

    def card_factors(self, card) -> dict[str, str]:  # noqa: ANN001
        return {}

    def reject_reason(self, card) -> None:  # noqa: ANN001
        return None

    def static_cards(self, rng, n: int) -> list[str]:  # noqa: ANN001
        return []

    def heldout(self, n_per_group: int, seed: int) -> list:
        return []


def make_toy(context: DomainContext) -> Toy:
    return Toy(context.prompts_dir)


# ----------------------------------------------------------------- built-ins and register_domain


def test_the_builtins_are_registered_and_build_with_the_context() -> None:
    assert available_domains() == ["arith", "arith-chat", "math", "rgym", "tau2", "tools"]
    assert isinstance(get_domain("arith"), ArithDomain)
    chat = get_domain("arith-chat")
    assert isinstance(chat, ArithChatDomain) and chat.name == "arith-chat" and chat.needs == DomainNeeds(chat_model=False)
    tools = get_domain("tools")
    assert isinstance(tools, ToolsDomain) and isinstance(tools, HasEnvironment) and isinstance(tools, HasFactorSpace)
    assert tools.needs == DomainNeeds(chat_model=False)
    math = get_domain("math", DomainContext(prompts_dir=None))
    assert isinstance(math, MathDomain) and isinstance(math, Domain)
    assert get_domain("arith").needs == DomainNeeds(chat_model=False) and math.needs == DomainNeeds(chat_model=True)


def test_an_unknown_name_is_one_error_listing_the_available_names() -> None:
    register_domain("toy", make_toy)
    with pytest.raises(DomainError, match=r"unknown domain 'nope'; available: arith, arith-chat, math, rgym, tau2, tools, toy \("):
        get_domain("nope")
    with pytest.raises(ConfigError) as e:
        load_config("arith", overrides=["domain=nope"])
    assert "domain: " in str(e.value) and "unknown domain 'nope'; available: arith, arith-chat, math, rgym, tau2, tools, toy" in str(e.value)
    assert "(got 'nope')" in str(e.value)


def test_a_registered_domain_is_built_with_the_run_settings(tmp_path: Path) -> None:
    register_domain("toy", make_toy)
    assert "toy" in available_domains()
    toy = get_domain("toy", DomainContext(prompts_dir=str(tmp_path)))
    assert isinstance(toy, Toy) and toy.prompts_dir == str(tmp_path)
    assert load_config("arith", overrides=["domain=toy"]).domain == "toy"
    unregister_domain("toy")
    assert "toy" not in available_domains()


def test_a_taken_or_malformed_name_and_a_non_callable_factory_are_refused() -> None:
    register_domain("toy", make_toy)
    with pytest.raises(DomainError, match="'toy' is already registered; pass replace=True"):
        register_domain("toy", make_toy)
    with pytest.raises(DomainError, match="'arith' is already registered"):
        register_domain("arith", make_toy)
    register_domain("arith", make_toy, replace=True)
    assert isinstance(get_domain("arith"), Toy)
    for bad in ("", "a b", "../x", "-x", "x" * 65):
        with pytest.raises(DomainError, match="domain name"):
            register_domain(bad, make_toy)
    with pytest.raises(DomainError, match="'toy2': the factory must be callable"):
        register_domain("toy2", Toy())  # type: ignore[arg-type]


def test_a_factory_that_returns_no_domain_names_the_missing_members() -> None:
    class Half:
        name = "half"

        def oracle(self, card) -> None:  # noqa: ANN001
            return None

    register_domain("half", lambda context: Half())  # type: ignore[arg-type,return-value]
    with pytest.raises(DomainError) as e:
        get_domain("half")
    assert str(e.value) == ("domain 'half': the factory returned a Half without card_factors, has_oracle, heldout, "
                            "needs, reasoner_prompt, reasoner_system_prompt, reject_reason, static_cards, "
                            "synthesizer_prompt, synthesizer_system_prompt (the Domain contract, synco.domains.base)")


# ----------------------------------------------------------------- a domain's own settings and warm start


class ToySettings(BaseModel):
    """The toy domain's own settings."""

    model_config = ConfigDict(extra="forbid")

    level: int = Field(1, ge=1, le=9, description="How hard the toy's tasks are.")
    words: list[str] = Field(default_factory=list, description="Words the toy knows.")


class SetToy(Toy):
    def __init__(self, settings: ToySettings) -> None:
        super().__init__()
        self.settings = settings


def make_set_toy(context: DomainContext) -> SetToy:
    assert isinstance(context.settings, ToySettings)  # validated by the registry, defaults filled in
    return SetToy(context.settings)


def test_a_registered_domain_gets_its_own_validated_settings(tmp_path: Path) -> None:
    from synco.run.build import build_domain

    register_domain("toy", make_set_toy, settings=ToySettings)
    assert registry.settings_model("toy") is ToySettings
    assert get_domain("toy").settings == ToySettings()  # no context: the model's defaults
    assert get_domain("toy", DomainContext(settings={"level": 4})).settings.level == 4  # a dict is validated
    cfg = load_config("arith", overrides=["domain=toy", "toy.level=3", "toy.words=[a, b]"])
    assert cfg.domain_settings() == ToySettings(level=3, words=["a", "b"])
    assert build_domain(cfg).settings == ToySettings(level=3, words=["a", "b"])
    assert load_config("arith", overrides=["domain=toy"]).domain_settings() == ToySettings()  # defaults
    f = tmp_path / "toy.yaml"
    f.write_text("domain: toy\ntoy:\n  level: 7\n")
    assert build_domain(load_config("arith", f)).settings.level == 7
    for override, message in [("toy.level=0", "toy.level: Input should be greater than or equal to 1 (got 0)"),
                              ("toy.level=high", "toy.level: Input should be a valid integer"),
                              ("toy.colour=red", "toy.colour: Extra inputs are not permitted (got 'red')")]:
        with pytest.raises(ConfigError) as e:
            load_config("arith", overrides=["domain=toy", override])
        assert message in str(e.value), str(e.value)
    assert "toy.level" in {name for name, _, _ in describe_fields()}  # `synco config --reference`


def test_settings_and_warm_starts_are_checked_when_registered() -> None:
    with pytest.raises(DomainError, match=r"'toy': settings must be a pydantic model class"):
        register_domain("toy", make_set_toy, settings=dict)  # type: ignore[arg-type]
    with pytest.raises(DomainError, match=r"'toy.v2': a domain with settings needs a name without '\.'"):
        register_domain("toy.v2", make_set_toy, settings=ToySettings)
    with pytest.raises(DomainError, match=r"'toy': warm_start must be a synco.domains.spec.WarmStart"):
        register_domain("toy", make_toy, warm_start="mymod:pretrain")  # type: ignore[arg-type]
    with pytest.raises(DomainError, match=r"'toy': config_defaults: 'verifier\.' is not a dotted config key"):
        register_domain("toy", make_toy, config_defaults={"verifier.": 3})
    with pytest.raises(DomainError, match=r"'toy' has no warm start; worlds with one: arith, rgym, tools"):
        register_domain("toy", make_toy)
        registry.warm_start("toy")


def test_a_registered_warm_start_is_a_pretrain_world_and_a_builtin_model(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``synco pretrain --world`` and ``builtin:<domain>/<role>`` come from the registry, not from a list in synco."""
    from synco.learn.build import resolve_model_path

    calls: list[tuple[Path, dict]] = []

    def pretrain(out: Path, **kwargs: object) -> str:
        calls.append((out, kwargs))
        return "toy warm start"

    register_domain("toy", make_set_toy, settings=ToySettings,
                    warm_start=WarmStart(pretrain=pretrain, folder=lambda: tmp_path, roles=("reasoner",)))
    assert registry.warm_start_worlds() == ["arith", "rgym", "tools", "toy"]
    with pytest.raises(SystemExit):
        synco.cli.main(["pretrain", "--help"])
    assert "which world's agents to train: arith, rgym, tools, toy (default: arith)" in " ".join(capsys.readouterr().out.split())
    assert synco.cli.main(["pretrain", "--world", "toy", "--out", str(tmp_path), "--seed", "3", "toy.level=2"]) == 0
    assert calls == [(tmp_path, {"seed": 3, "settings": ToySettings(level=2)})]
    assert "toy warm start" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        synco.cli.main(["pretrain", "--world", "math"])  # a domain without a warm start
    assert "invalid choice: 'math' (choose from 'arith', 'rgym', 'tools', 'toy')" in capsys.readouterr().err
    assert "builtin:toy/reasoner" in registry.builtin_models()
    assert load_config("arith", overrides=["reasoner.model_path=builtin:toy/reasoner"]).domain == "arith"
    assert resolve_model_path("builtin:toy/reasoner") == str(tmp_path / "reasoner")
    with pytest.raises(ConfigError, match=r"unknown built-in model 'builtin:toy/synthesizer'; known: .*builtin:toy/reasoner"):
        load_config("arith", overrides=["synthesizer.model_path=builtin:toy/synthesizer"])


SYNCO = Path(synco.cli.__file__).resolve().parent


def test_no_builtin_domain_is_named_by_the_config_the_registry_the_run_or_the_cli() -> None:
    """The built-ins are registrations like any other (synco.domains.builtins): the code that serves every domain
    names none of them, neither as a string nor by importing its module."""
    import ast

    from synco.domains.builtins import BUILTIN_DOMAINS

    names = set(BUILTIN_DOMAINS)
    modules = {f"synco.domains.{n.replace('-', '_')}" for n in names}
    files = [SYNCO / "cli.py", SYNCO / "domains" / "registry.py", *sorted((SYNCO / "config").glob("*.py")),
             *sorted((SYNCO / "run").glob("*.py"))]
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                    node.value in names or any(f"builtin:{n}/" in node.value for n in names)):
                found.append(f"{path.name}:{node.lineno}: {node.value!r}")
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(tuple(modules)):
                found.append(f"{path.name}:{node.lineno}: from {node.module}")
    assert found == []


# ----------------------------------------------------------------- the entry-point group


def _module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, text: str) -> None:
    (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)


def test_an_entry_point_is_listed_without_import_and_loaded_on_first_use(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_registry: list[EntryPoint]) -> None:
    _module(tmp_path, monkeypatch, "toy_plugin", "from synco.domains.arith import ArithDomain\n\n\n"
                                                 "def make_toy(context):\n    return ArithDomain()\n")
    clean_registry.append(EntryPoint(name="toy", value="toy_plugin:make_toy", group="synco.domains"))
    clean_registry.append(EntryPoint(name="other", value="toy_plugin:make_toy", group="some.other.group"))
    assert available_domains() == ["arith", "arith-chat", "math", "rgym", "tau2", "tools", "toy"]
    assert "toy_plugin" not in sys.modules  # listed, not imported
    assert load_config("arith").domain == "arith" and "toy_plugin" not in sys.modules
    assert load_config("arith", overrides=["domain=toy"]).domain == "toy"  # its registration says: no settings
    assert "toy_plugin" in sys.modules and registry.settings_model("toy") is None
    assert isinstance(get_domain("toy"), ArithDomain)
    with pytest.raises(DomainError, match=r"'toy' is already provided by entry point toy = 'toy_plugin:make_toy'"):
        register_domain("toy", make_toy)


def test_a_broken_or_clashing_entry_point_is_an_error_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_registry: list[EntryPoint]) -> None:
    _module(tmp_path, monkeypatch, "broken_plugin", "raise ImportError('no numpy here')\n")
    _module(tmp_path, monkeypatch, "value_plugin", "FACTORY = 3\n")
    clean_registry += [EntryPoint(name="broken", value="broken_plugin:make", group="synco.domains"),
                       EntryPoint(name="three", value="value_plugin:FACTORY", group="synco.domains"),
                       EntryPoint(name="arith", value="value_plugin:FACTORY", group="synco.domains")]
    with pytest.raises(DomainError, match=r"'broken': cannot load entry point broken = 'broken_plugin:make' "
                                          r"\(group synco.domains\): ImportError: no numpy here"):
        get_domain("broken")
    with pytest.raises(DomainError, match=r"'three': entry point three = 'value_plugin:FACTORY' .* is a int, "
                                          r"not a factory"):
        get_domain("three")
    with pytest.raises(DomainError, match=r"'arith' is provided more than once: .*entry point arith = "):
        get_domain("arith")


# ----------------------------------------------------------------- what the config asks of a domain


def test_the_config_asks_the_domain_for_a_card_template_and_a_chat_model() -> None:
    register_domain("toy", make_toy)
    with pytest.raises(ConfigError, match="synth_decoding=card needs a domain with a card template .* "
                                          "domain='arith' has none"):
        load_config("arith", overrides=["synth_decoding=card"])
    with pytest.raises(ConfigError, match="domain='toy' has none"):
        load_config("smollm2", overrides=["domain=toy"])  # the preset decodes cards
    assert isinstance(get_domain("math"), HasCardTemplate) and load_config("smollm2").synth_decoding == "card"
    # the proposer asks the domain whether its Synthesizer is a chat model: toy says so, arith does not
    assert load_config("smollm2", overrides=["domain=toy", "synth_decoding=free", "evosyn.proposer=true"]).domain == "toy"
    with pytest.raises(ConfigError, match="needs a domain whose Synthesizer is a chat model .*got domain='arith'"):
        load_config("smollm2", overrides=["domain=arith", "synth_decoding=free", "evosyn.proposer=true"])


# ----------------------------------------------------------------- docs/ADDING_A_DOMAIN.md


def doc_blocks(lang: str) -> list[str]:
    """The page's fenced code blocks of language ``lang``, in order."""
    return re.findall(rf"^```{lang}\n(.*?)^```", DOC.read_text(), flags=re.S | re.M)


@pytest.fixture
def digitsum(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201 - the example module
    """The page's ``digitsum.py`` (its first python block), written to ``tmp_path`` and importable."""
    _module(tmp_path, monkeypatch, "digitsum", doc_blocks("python")[0])
    import digitsum as module

    return module


def test_the_doc_example_computes_the_digit_sum(digitsum) -> None:  # noqa: ANN001
    assert digitsum.digit_sum("4721") == "14" and digitsum.digit_sum(" 99999999 ") == "72"
    assert [digitsum.digit_sum(p) for p in ("0472", "12", "123456789", "1e5", "१२३", "")] == [None] * 6
    domain = digitsum.make_domain(DomainContext(settings=digitsum.DigitSumSettings()))
    assert isinstance(domain, Domain) and isinstance(domain, base.HasResponsePrefix)
    assert isinstance(domain, base.HasEnvironment) and domain.settings.guesses == 2
    assert not isinstance(domain, (base.HasFactorSpace, base.HasCardTemplate, base.HasAnswerFormat))
    items = domain.heldout(3, seed=1)
    assert [i.group for i in items] == ["short"] * 3 + ["long"] * 3
    assert all(digitsum.is_heldout(i.problem) and i.answer == digitsum.digit_sum(i.problem) for i in items)
    assert all(3 <= len(i.problem) <= 5 for i in items[:3]) and all(6 <= len(i.problem) <= 8 for i in items[3:])
    for text in domain.static_cards(random.Random(0), 50):
        card = json.loads(text)
        assert not digitsum.is_heldout(card["problem"]) and card["final_answer"] == digitsum.digit_sum(card["problem"])
    assert domain.heldout_card(items[0]).payload.claimed_answer() == items[0].answer


def test_the_doc_example_environment_hints_until_its_guesses_run_out(digitsum) -> None:  # noqa: ANN001
    """The page's environment: an answer per turn, a hint after a wrong one while ``digitsum.guesses`` remain."""
    register_domain("digitsum", digitsum.make_domain, settings=digitsum.DigitSumSettings)
    domain = get_domain("digitsum", DomainContext(settings={"guesses": 3}))
    card = domain.heldout_card(domain.heldout(1, seed=0)[0])
    env = domain.environment(card, card.payload.claimed_answer())
    low, high = str(int(card.payload.claimed_answer()) - 1), str(int(card.payload.claimed_answer()) + 1)
    assert [env.step(t).observation for t in (f"\\boxed{{{low}}}", "\\boxed{}")] == ["\nhigher\nA:", "\nhigher\nA:"]
    assert env.step(f"\\boxed{{{card.payload.claimed_answer()}}}").done and env.grade().correct and env.grade().reward == 1.0
    env = domain.environment(card, card.payload.claimed_answer())
    assert env.step(high).observation == "\nlower\nA:" and not env.step(high).done and env.step("x" * 10**6).done
    assert not env.grade().correct and env.grade().reward == 0.0
    with pytest.raises(ConfigError, match=r"digitsum.guesses: Input should be less than or equal to 5 \(got 9\)"):
        load_config("arith", overrides=["domain=digitsum", "digitsum.guesses=9"])


@pytest.mark.slow
def test_the_doc_example_registers_and_trains_end_to_end(digitsum, tmp_path: Path, one_thread,  # noqa: ANN001
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The page's script, as written: register in code, ``synco config``, then a two-step ``synco train``."""
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "run_digitsum.py"
    script.write_text(doc_blocks("python")[1])
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert re.search(r"^domain: digitsum$", out, flags=re.M)
    run = tmp_path / "runs" / "digitsum-demo"
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [0, 1]
    assert all(m["n_valid"] == 8 for m in lines)  # every static card passes the domain's oracle
    tasks = [json.loads(line) for line in (run / "valid_tasks.jsonl").read_text().splitlines()]
    assert len(tasks) == 16 and all(t["factors"] == {"digits": str(len(t["problem"]))} for t in tasks)
    assert all(t["final_answer"] == digitsum.digit_sum(t["problem"]) for t in tasks)
    summary = json.loads((run / "summary.json").read_text())
    assert set(summary["heldout_before"]) == set(summary["heldout_after"]) == {"short", "long"}
    assert all(1 <= m["mean_turns"] <= 3 for m in lines)  # episodes, at most digitsum.guesses=3 answers each
    assert re.search(r"^digitsum:\n  guesses: 3$", out, flags=re.M)
    assert "domain: digitsum" in (run / "config.yaml").read_text()
    assert "digitsum:\n  guesses: 3\n" in (run / "config.yaml").read_text()


def test_the_doc_entry_point_makes_the_example_a_domain_without_registering(
        digitsum, clean_registry: list[EntryPoint], capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    tomllib = pytest.importorskip("tomllib")
    (block,) = doc_blocks("toml")
    group = tomllib.loads(block)["project"]["entry-points"][registry.ENTRY_POINT_GROUP]
    clean_registry += [EntryPoint(name=k, value=v, group=registry.ENTRY_POINT_GROUP) for k, v in group.items()]
    assert "digitsum" in available_domains()
    assert isinstance(get_domain("digitsum"), digitsum.DigitSumDomain)
    assert synco.cli.main(["config", "domain=digitsum"]) == 0
    assert re.search(r"^domain: digitsum$", capsys.readouterr().out, flags=re.M)


def test_the_doc_lists_every_member_and_capability() -> None:
    text = DOC.read_text()
    members = set(Domain.__annotations__) | {k for k in vars(Domain) if not k.startswith("_")}
    assert {m for m in members if f"`{m}" not in text} == set()
    capabilities = {n for n in base.__all__ if n.startswith("Has")} | {"HasPayloadType"}  # beside the payloads
    assert capabilities == set(re.findall(r"`(Has\w+)`", text))
    assert {f.name for f in dataclasses.fields(DomainNeeds)} <= set(re.findall(r"`(\w+)`", text))
