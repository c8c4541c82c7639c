"""EvoSyn's LLM factor proposer: parsing hostile model text, keyword factors, promotion, state, config and a run."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from synco.config import ConfigError, load_config
from synco.evosyn.config import EvoSynConfig, ProposerConfig, ReflectorConfig
from synco.evosyn.proposed import ProposedFactor
from synco.evosyn.proposer import MAX_SCAN, parse_proposal, pick_examples, proposer_prompt, to_def
from synco.evosyn.reflector import reflect
from synco.evosyn.run import EvoState, build_evo_state, propose_and_log, reflect_and_log, with_proposed_values
from synco.evosyn.space import FactorChange, FactorSpace
from synco.core.prompts import PROMPTS_ENV
from synco.core.records import CARD_FIELDS, Attempt, TaskCard, TaskRecord, Verdict
from synco.domains.math import MathDomain

VALID = '{"name": "percent_use", "buckets": {"percent": ["percent", "%"], "money": ["$", "dollars"]}}'


@pytest.fixture(autouse=True)
def _no_user_prompt_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROMPTS_ENV, raising=False)


# ----------------------------------------------------------------- parse_proposal


def test_parses_strict_json() -> None:
    p = parse_proposal(VALID, ["topic"], step=7)
    assert p is not None
    assert (p.name, p.step) == ("percent_use", 7)
    assert p.buckets == {"percent": ["percent", "%"], "money": ["$", "dollars"]}
    assert p.bucket_names == ("percent", "money", "other")
    assert p.raw == VALID


@pytest.mark.parametrize("text", [
    "Here is my factor:\n```json\n" + VALID + "\n```\nIt separates percentages from money.",
    "<think>{maybe {nested} braces} and \\frac{1}{2}</think> " + VALID,
    '{"note": "an object without a name"} then ' + VALID,
    VALID.replace('"buckets"', '"why": "failures involve {percent}", "buckets"'),  # extra keys are ignored
])
def test_finds_the_proposal_inside_prose_fences_and_other_braces(text: str) -> None:
    p = parse_proposal(text, [], step=0)
    assert p is not None and p.name == "percent_use" and list(p.buckets) == ["percent", "money"]


def test_keywords_are_lower_cased_and_whitespace_collapsed() -> None:
    p = parse_proposal('{"name": "units", "buckets": {"metric": ["Kilo  Meters"], "imperial": ["MILES"]}}', [], 0)
    assert p is not None and p.buckets == {"metric": ["kilo meters"], "imperial": ["miles"]}


def bucket_json(n_buckets: int, n_keywords: int = 1) -> str:
    buckets = {f"b{i}": [f"kw{j}" for j in range(n_keywords)] for i in range(n_buckets)}
    return json.dumps({"name": "many", "buckets": buckets})


@pytest.mark.parametrize("text", [
    "",
    "no json here at all",
    "{" * 20000,  # unbalanced, huge
    "[" * 5000 + "]" * 5000,
    "{" * 50 + VALID + "}" * 50,  # nested beyond the depth bound
    " " * MAX_SCAN + VALID,  # past the characters read
    '{"name": "percent_use", "buckets": {"percent": ["percent"], "money": ["$"]}',  # never closed
    "{'name': 'percent_use', 'buckets': {'a': ['x'], 'b': ['y']}}",  # not JSON (Python literal)
    '{"name": __import__("os").system("true"), "buckets": {}}',
    '{"name": "Percent", "buckets": {"a": ["x"], "b": ["y"]}}',  # upper case
    '{"name": "p", "buckets": {"a": ["x"], "b": ["y"]}}',  # too short
    '{"name": "a_very_long_factor_name_indeed", "buckets": {"a": ["x"], "b": ["y"]}}',  # 30 chars
    '{"name": "9lives", "buckets": {"a": ["x"], "b": ["y"]}}',
    '{"name": 3, "buckets": {"a": ["x"], "b": ["y"]}}',
    '{"name": "ok_name", "buckets": ["a", "b"]}',
    '{"name": "ok_name", "buckets": {"aa": "x", "bb": ["y"]}}',  # keywords not a list
    '{"name": "ok_name", "buckets": {"aa": [1], "bb": ["y"]}}',
    '{"name": "ok_name", "buckets": {"aa": ["x"]}}',  # one bucket
    bucket_json(5),  # too many buckets
    bucket_json(2, 9),  # too many keywords
    '{"name": "ok_name", "buckets": {"aa": [], "bb": ["y"]}}',
    '{"name": "ok_name", "buckets": {"aa": ["' + "x" * 31 + '"], "bb": ["y"]}}',  # keyword too long
    '{"name": "ok_name", "buckets": {"aa": ["a.*b"], "bb": ["y"]}}',  # regex characters
    '{"name": "ok_name", "buckets": {"aa": ["-"], "bb": ["y"]}}',  # no word in it
    '{"name": "ok_name", "buckets": {"aa": ["x"], "other": ["y"]}}',  # the fallback bucket
    '{"name": "ok_name", "buckets": {"A b": ["x"], "bb": ["y"]}}',  # bad bucket name
    '{"name": "ok_name", "name": "again", "buckets": {"aa": ["x"], "bb": ["y"]}}',  # duplicate key
])
def test_hostile_or_invalid_text_gives_none(text: str) -> None:
    assert parse_proposal(text, [], step=0) is None


def test_a_name_in_use_is_refused() -> None:
    assert parse_proposal(VALID, ["topic", "percent_use"], step=0) is None
    assert parse_proposal(VALID.replace("percent_use", "other"), [], step=0) is None
    assert parse_proposal(VALID, ["topic"], step=0) is not None


def test_a_huge_text_is_read_only_up_to_the_bound() -> None:
    p = parse_proposal(VALID + "x" * 10_000_000, [], step=0)
    assert p is not None and len(p.raw) == 500


# ----------------------------------------------------------------- keyword extraction


@pytest.mark.parametrize("problem,bucket", [
    ("What is 15% of 80?", "percent"),
    ("What is 15 percent of 80?", "percent"),
    ("A PERCENT sign", "percent"),  # case-insensitive
    ("A shirt costs $20; how many dollars for 3?", "money"),
    ("She paid 5 dollars and 10% tax.", "percent"),  # the first bucket in order wins
    ("The percentage grew.", "other"),  # whole words only: percentage is not percent
    ("Solve 2x + 3 = 11.", "other"),
    ("", "other"),
])
def test_keyword_factor_buckets_hand_written_problems(problem: str, bucket: str) -> None:
    d = to_def(ProposedFactor(name="percent_use", buckets={"percent": ["percent", "%"], "money": ["$", "dollars"]},
                              step=0))
    assert d.buckets == ("percent", "money", "other")
    assert d.value(problem) == bucket


def test_a_keyword_phrase_matches_whole_consecutive_words() -> None:
    d = to_def(ProposedFactor(name="speed", buckets={"rate": ["km per hour", "x-intercept"], "none": ["zzz"]},
                              step=0))
    assert d.value("A car drives 60 km per hour.") == "rate"
    assert d.value("Find the x intercept of the line.") == "rate"  # - and space tokenise alike
    assert d.value("60 km, per hour") == "rate"  # punctuation between words does not matter
    assert d.value("60 km went per hour") == "other"
    assert d.value("60 skm per hours") == "other"


# ----------------------------------------------------------------- examples and the prompt


def record(i: int, problem: str, fails: int, k: int = 4, valid: bool = True, factors: dict | None = None) -> TaskRecord:
    fields = {name: "x" for name in CARD_FIELDS}
    fields["problem"] = problem
    return TaskRecord(step=0, slot=i, raw="r", card=TaskCard(**fields, factors=dict(factors or {})),
                      verdict=Verdict(valid=valid), rollouts=[Attempt(text="t", correct=j >= fails) for j in range(k)],
                      success_rate=1 - fails / k)


def test_pick_examples_takes_failed_and_solved_valid_tasks() -> None:
    records = [record(0, "zero A", 4), record(1, "zero B", 4), record(2, "low C", 3), record(3, "half D", 2),
               record(4, "solved E", 0), record(5, "solved E", 0), record(6, "invalid F", 4, valid=False)]
    ex = pick_examples(records, 3, random.Random(0))
    assert sorted(ex.failed[:2]) == ["zero A", "zero B"] and ex.failed[2] == "low C"  # success 0 first
    assert ex.solved == ["solved E"]  # distinct problems
    ex1 = pick_examples(records, 1, random.Random(0))
    assert len(ex1.failed) == 1 and ex1.failed[0].startswith("zero")
    assert pick_examples(records, 3, random.Random(5)) == pick_examples(records, 3, random.Random(5))


def test_prompt_shows_clipped_examples_names_in_use_and_the_format() -> None:
    prompt = proposer_prompt(["F" * 1000, "two\nlines"], ["solved one"], ["topic", "length"])
    assert "- " + "F" * 297 + "..." in prompt and "F" * 301 not in prompt
    assert "- two lines" in prompt and "- solved one" in prompt
    assert "length, topic" in prompt and '"buckets"' in prompt
    assert "{{" not in prompt


def test_prompt_template_can_be_overridden(tmp_path: Path) -> None:
    (tmp_path / "factor_proposer.txt").write_text("F={{failed}} S={{solved}} E={{existing}}")
    assert proposer_prompt(["a"], ["b"], [], prompts_dir=tmp_path) == "F=- a S=- b E=none"


# ----------------------------------------------------------------- promotion by the Reflector

PERCENT = ProposedFactor(name="percent_use", buckets={"percent": ["percent"], "plain": ["plus", "times"]}, step=3)
RANDOM = ProposedFactor(name="animals", buckets={"zebra": ["zebra"], "violin": ["violin"]}, step=3)
REFLECT = ReflectorConfig(min_tasks=100, min_bucket_tasks=20, permutations=100, alpha=0.01, min_excess_cmi=0.002)


def percent_window(n: int = 240, seed: int = 0) -> list[TaskRecord]:
    """Tasks that fail (4/4) exactly when the problem mentions "percent"; "zebra"/"violin" thrown in at random."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        op = rng.choice(["percent of", "plus", "times"])
        noise = rng.choice(["A zebra asks:", "A violin asks:", "Asked:"])
        out.append(record(i, f"{noise} what is {a} {op} {b}?", 4 if op == "percent of" else 0))
    return out


def proposer_evo() -> EvoState:
    evo = EvoState(space=FactorSpace(), defs=[], builtin=[], cells=[])
    evo.add_proposal(PERCENT, 4)
    evo.add_proposal(RANDOM, 4)
    return evo


def test_a_proposal_that_explains_failure_is_promoted_and_a_random_one_is_not() -> None:
    evo = proposer_evo()
    records = with_proposed_values(percent_window(), evo)
    r = reflect(records, evo.space, evo.defs, evo.builtin, REFLECT, step=9, seed=0)
    assert [(c.action, c.factor) for c in r.changes] == [("promote", "percent_use")]
    assert r.candidates["percent_use"].failure_by_bucket == {"percent": 1.0, "plain": 0.0}
    ev = r.candidates["animals"]
    assert min(ev.n_by_bucket.values()) >= 20 and ev.p_value > REFLECT.alpha  # enough evidence, no information
    # the random proposal alone is never promoted
    alone = EvoState(space=FactorSpace(), defs=[], builtin=[], cells=[])
    alone.add_proposal(RANDOM, 4)
    r2 = reflect(with_proposed_values(percent_window(), alone), alone.space, alone.defs, [], REFLECT, 9, 0)
    assert r2.changes == [] and alone.space.active_names() == []


def test_reflect_and_log_fills_in_values_for_cards_recorded_before_the_proposal(tmp_path: Path) -> None:
    evo = proposer_evo()
    records = percent_window()
    assert all("percent_use" not in r.card.factors for r in records)  # recorded before the proposal
    r = reflect_and_log(evo, records, EvoSynConfig(reflector_settings=REFLECT), 9, 0, tmp_path)
    assert [c.factor for c in r.changes] == ["percent_use"] and evo.space.active_names() == ["percent_use"]
    assert all("percent_use" not in r.card.factors for r in records)  # the caller's records are untouched
    # the promoted proposal places new problems in cells like any factor
    assert evo.space.cell_of({"percent_use": to_def(PERCENT).value("What is 5 percent of 20?")}) == (
        ("percent_use", "percent"),)


# ----------------------------------------------------------------- state: the space keeps proposals


TWO = {"xx": ["x"], "yy": ["y"]}


def test_space_keeps_at_most_max_candidates_idle_proposals() -> None:
    evo = EvoState(space=FactorSpace(), defs=[], builtin=[], cells=[])
    names = ["aa", "bb", "cc", "dd"]
    for n in names[:2]:
        evo.add_proposal(ProposedFactor(name=n, buckets=TWO, step=0), 2)
    evo.space.promote(evo.defs[0], 5, None)  # type: ignore[arg-type]  # aa in use: never dropped
    dropped = evo.add_proposal(ProposedFactor(name="cc", buckets=TWO, step=1), 2)
    assert dropped == []
    dropped = evo.add_proposal(ProposedFactor(name="dd", buckets=TWO, step=2), 2)
    assert [q.name for q in dropped] == ["bb"]  # the oldest idle one
    assert [q.name for q in evo.space.proposed] == ["aa", "cc", "dd"]
    assert [d.name for d in evo.defs] == ["aa", "cc", "dd"]
    assert evo.space.version == 1  # proposals do not change the factors in use
    with pytest.raises(ValueError, match="'cc' is already in the space"):
        evo.add_proposal(ProposedFactor(name="cc", buckets=TWO, step=3), 2)


def test_space_round_trip_keeps_proposals_and_resume_rebuilds_their_defs() -> None:
    evo = build_evo_state(MathDomain())
    assert evo is not None
    n_domain = len(evo.defs)
    evo.add_proposal(PERCENT, 4)
    back = FactorSpace.model_validate_json(evo.space.model_dump_json())
    assert back == evo.space and back.proposed == [PERCENT]
    resumed = build_evo_state(MathDomain(), back)
    assert resumed is not None and [d.name for d in resumed.defs][n_domain:] == ["percent_use"]
    assert resumed.defs[-1].value("What is 5 percent of 20?") == "percent"
    # a space saved before the proposer existed still loads, with no proposals
    old = json.loads(FactorSpace.from_defs(evo.defs[:1]).model_dump_json())
    del old["proposed"]
    assert FactorSpace.model_validate(old).proposed == []


# ----------------------------------------------------------------- propose_and_log


def test_propose_and_log_adds_a_candidate_and_logs_it(tmp_path: Path) -> None:
    evo = build_evo_state(MathDomain())
    assert evo is not None
    seen: list[str] = []

    def generate(prompt: str) -> str:
        seen.append(prompt)
        return "Sure.\n```json\n" + VALID + "\n```"

    p = propose_and_log(evo, percent_window(40), EvoSynConfig(), 19, 0, tmp_path, generate, MathDomain())
    assert p is not None and p.name == "percent_use" and evo.defs[-1].name == "percent_use"
    assert "percent of" in seen[0] and "difficulty" in seen[0]  # examples and the reserved card factor names
    [line] = (tmp_path / "factors.jsonl").read_text().splitlines()
    ch = FactorChange.model_validate_json(line)
    assert (ch.step, ch.action, ch.factor, ch.version) == (19, "propose", "percent_use", 0)
    saved = json.loads((tmp_path / "factor_space.json").read_text())
    assert [q["name"] for q in saved["proposed"]] == ["percent_use"]


@pytest.mark.parametrize("generate,why", [
    (lambda prompt: "I cannot think of one. " * 100, "no valid proposal"),
    (lambda prompt: '{"name": "topic", "buckets": {"a": ["x"], "b": ["y"]}}', "no valid proposal"),  # in use
    (lambda prompt: '{"name": "difficulty", "buckets": {"a": ["x"], "b": ["y"]}}', "no valid proposal"),
    (lambda prompt: 1 / 0, "generation failed: ZeroDivisionError"),
])
def test_a_bad_proposal_is_a_reject_line_not_an_error(tmp_path: Path, generate, why: str) -> None:
    evo = build_evo_state(MathDomain())
    assert evo is not None
    n_defs = len(evo.defs)
    assert propose_and_log(evo, percent_window(40), EvoSynConfig(), 19, 0, tmp_path, generate, MathDomain()) is None
    [line] = (tmp_path / "factors.jsonl").read_text().splitlines()
    ch = FactorChange.model_validate_json(line)
    assert (ch.action, ch.factor) == ("reject", "proposal") and ch.note.startswith(why)
    assert len(ch.note) < 700 and evo.space.proposed == [] and len(evo.defs) == n_defs


def test_no_proposal_without_both_failed_and_solved_problems(tmp_path: Path) -> None:
    evo = build_evo_state(MathDomain())
    assert evo is not None
    solved_only = [record(i, f"What is {i} plus 1?", 0) for i in range(20)]
    called = []
    assert propose_and_log(evo, solved_only, EvoSynConfig(), 19, 0, tmp_path,
                           lambda p: called.append(p) or VALID, MathDomain()) is None
    assert called == [] and not (tmp_path / "factors.jsonl").exists()


# ----------------------------------------------------------------- config


def test_proposer_is_off_by_default_and_has_its_settings() -> None:
    cfg = load_config("smollm2")
    assert cfg.evosyn.proposer is False
    assert cfg.evosyn.proposer_settings == ProposerConfig(every=20, examples=6, max_new_tokens=160, max_candidates=4)
    assert load_config("smollm2", overrides=["evosyn.proposer=true"]).evosyn.proposer is True


@pytest.mark.parametrize("overrides,field", [
    (["evosyn.proposer_settings.every=0"], "evosyn.proposer_settings.every"),
    (["evosyn.proposer_settings.examples=0"], "evosyn.proposer_settings.examples"),
    (["evosyn.proposer_settings.max_new_tokens=2"], "evosyn.proposer_settings.max_new_tokens"),
    (["evosyn.proposer_settings.max_candidates=0"], "evosyn.proposer_settings.max_candidates"),
    (["evosyn.proposer_settings.nope=1"], "evosyn.proposer_settings.nope"),
    (["evosyn.proposer=maybe"], "evosyn.proposer"),
    (["evosyn.proposer=true", "evosyn.reflector=false"], "evosyn.reflector=true"),
    (["evosyn.proposer=true", "evosyn.feedback=false"], "evosyn.feedback=true"),
    (["evosyn.proposer=true", "domain=arith"], "domain='arith'"),
    (["evosyn.proposer=true", "mode=static"], "mode='static'"),
])
def test_bad_proposer_settings_name_the_field(overrides: list[str], field: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_config("smollm2", overrides=overrides)
    assert field in str(e.value)
    if "=" in field:  # a cross-check: the message names the switch too
        assert "evosyn.proposer=true" in str(e.value)


def test_arith_preset_refuses_the_proposer() -> None:
    with pytest.raises(ConfigError, match="evosyn.proposer=true needs a domain whose Synthesizer is a chat model"):
        load_config("arith", overrides=["evosyn.proposer=true"])


# ----------------------------------------------------------------- a run: the trainer proposes


class ScriptedPolicy:
    """A policy without a model: proposals and cards from scripts; records the token constraint it sampled under."""

    policy_version = 0  # a test double never steps its optimizer

    def __init__(self, respond) -> None:  # noqa: ANN001 - a callable (prompt, j) -> text
        self.respond = respond
        self.token_constraint: object = None
        self.constraints_seen: list[tuple[str, object]] = []

    def set_token_constraint(self, constraint: object) -> None:
        self.token_constraint = constraint

    def format_prompt(self, user_text: str, system: str | None = None) -> str:
        return f"<sys>{system}</sys><user>{user_text}</user>"

    def generate(self, prompts, n, params=None, seed=None):  # noqa: ANN001, ANN201
        from synco.core.sampling import Completion

        out = []
        for p in prompts:
            self.constraints_seen.append(("proposal" if "Propose ONE new factor" in p else "other",
                                          self.token_constraint))
            out.append([Completion(text=self.respond(p, j), prompt_ids=[1, 2], completion_ids=[3, 4],
                                   logprobs=[-0.5, -0.5], truncated=False, finish_reason="stop") for j in range(n)])
        return out

    def update(self, batch):  # noqa: ANN001, ANN201
        from synco.core.policy import UpdateStats

        return UpdateStats(loss=0.0, n_sequences=len(batch), n_tokens=2 * len(batch), n_skipped_zero_adv=0,
                           grad_norm=0.0, clip_frac=0.0, kl=0.0, lr=1e-6, nan_skipped=False, stepped=True)

    def save(self, path) -> None:  # noqa: ANN001
        Path(path).mkdir(parents=True, exist_ok=True)

    def save_state(self, path) -> None:  # noqa: ANN001
        Path(path).mkdir(parents=True, exist_ok=True)

    def load_state(self, path) -> None:  # noqa: ANN001
        pass

    def trainable_parameters(self):  # noqa: ANN201
        return []


def card_text(problem: str, answer: str) -> str:
    values = {f: "x" for f in CARD_FIELDS}
    values.update(problem=problem, solution="Work it out: \\boxed{" + answer + "}", final_answer=answer,
                  difficulty_estimate="medium", teaching_intent="practice")
    return json.dumps(values)


def test_a_math_run_with_the_proposer_logs_a_proposal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      one_thread) -> None:
    import synco.rollout.card_decoding
    import synco.run.build
    from synco.run.loop import train

    counter = iter(range(10_000))

    def synth(prompt: str, j: int) -> str:
        if "Propose ONE new factor" in prompt:
            return "Here you go: " + VALID.replace("percent_use", "percent_talk")
        i = next(counter)
        if i % 2:
            return card_text(f"A shop gives {i + 10} percent off a coat priced {i * 7 + 50} units; what is the discount "
                             f"in units, number {i}?", "1")
        return card_text(f"Tom has {i + 3} apples and buys {i + 11} more at the market; how many apples does he have, "
                         f"case {i}?", str(2 * i + 14))

    def reason(prompt: str, j: int) -> str:
        for i in range(10_000):
            if f"case {i}?" in prompt:
                return "\\boxed{" + str(2 * i + 14) + "}"
        return "\\boxed{999}"  # every percent problem fails

    synthesizer, reasoner = ScriptedPolicy(synth), ScriptedPolicy(reason)
    monkeypatch.setattr(synco.run.build, "build_policies", lambda cfg, ckpt=None: (synthesizer, reasoner))
    monkeypatch.setattr(synco.rollout.card_decoding, "constrain_synthesizer",
                        lambda policy, domain, n: policy.set_token_constraint("card-grammar"))
    cfg = load_config("smollm2", overrides=[
        f"runs_dir={tmp_path}", "run_id=prop", "steps=2", "n_cards=4", "k=2", "heldout_per_group=0",
        "progress=false", "tensorboard=false", "consensus=false", "save_every_minutes=0",
        "verifier.novelty_threshold=1.0",
        "evosyn.proposer=true", "evosyn.proposer_settings.every=1", "evosyn.reflector_settings.every=1"])
    train(cfg, log=lambda _: None)

    run = tmp_path / "prop"
    changes = [FactorChange.model_validate_json(ln) for ln in (run / "factors.jsonl").read_text().splitlines()]
    proposals = [c for c in changes if c.action == "propose"]
    assert [(c.step, c.factor) for c in proposals] == [(0, "percent_talk")]
    # step 1's proposal reuses the same name: refused and logged, the run goes on
    assert [(c.step, c.action) for c in changes if c.action == "reject"] == [(1, "reject")]
    assert json.loads((run / "factor_space.json").read_text())["proposed"][0]["name"] == "percent_talk"
    # the proposal was sampled without the card grammar, and the grammar was put back for the cards
    kinds = synthesizer.constraints_seen
    assert ("proposal", None) in kinds and all(c == "card-grammar" for k, c in kinds if k == "other")
    assert synthesizer.token_constraint == "card-grammar"
    # the summary (and synco analyze's reader) accept the new action
    from synco.analysis.rundata import read_evosyn

    files = read_evosyn(run)
    assert files is not None and [c.action for c in files.changes][:1] == ["propose"]
    assert files.space is not None and files.space.proposed[0].name == "percent_talk"
