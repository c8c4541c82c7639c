"""The docs name the real things: every config key README.md and docs/*.md name in their tables is one `synco config
--reference` lists, and every file the README's run-directory block lists is one a short run writes (or writes under
the condition the block states), and the other way round."""

from __future__ import annotations

import itertools
import json
import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from synco.config import RunConfig, describe_fields, domain_settings_models
from synco.cotrain.protocols.registry import protocol_names

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
ROLES = ("synthesizer", "reasoner")  # what `<role>` stands for


def reference() -> set[str]:
    """Every dotted name `synco config --reference` prints."""
    return {name for name, _, _ in describe_fields()}


def table_rows(text: str) -> list[list[str]]:
    """The cells of every table row (``|``-separated, ``\\|`` kept inside a cell), separator rows left out."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not re.fullmatch(r"[|\s:-]+", line):
            rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))])
    return rows


def tables(text: str) -> list[list[list[str]]]:
    """The tables of a markdown text, each a list of rows (header first)."""
    out: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            if not re.fullmatch(r"[|\s:-]+", line):
                current.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))])
        elif current:
            out.append(current)
            current = []
    return out


def expand(token: str) -> list[str]:
    """`{a,b}.x` -> a.x, b.x; `<role>.x` -> each role's; a value after `=` dropped."""
    token = token.split("=", 1)[0].strip().replace("<role>", "{" + ",".join(ROLES) + "}")
    parts = re.split(r"(\{[^}]*\})", token)
    choices = [p[1:-1].split(",") if p.startswith("{") else [p] for p in parts]
    return ["".join(c).strip() for c in itertools.product(*choices)]


FILE_TYPES = {"py", "json", "jsonl", "html", "md", "yaml", "txt", "sqlite", "pt", "png", "csv"}
"""A backticked name ending so is a file (`report.html`, `health.py`), not a key."""

KEY = re.compile(r"[a-z_][a-z0-9_]*(\.([a-z0-9_]+|\*))*")


def key_cell(cell: str) -> list[str]:
    """The keys a table's key cell names: `evosyn.designer_settings.effect`, `effect_floor` names
    evosyn.designer_settings.effect_floor; `.device` after `synthesizer.model_path` names synthesizer.device."""
    keys: list[str] = []
    parents: list[str] = []
    for token in re.findall(r"`([^`]+)`", cell):
        names = expand(token)
        for key in names:
            for full in [p + key for p in parents] if key.startswith(".") else \
                    [p + "." + key for p in parents] if "." not in key and parents else [key]:
                if KEY.fullmatch(full):
                    keys.append(full)
        if "." in names[0] and not names[0].startswith("."):
            parents = [n.rsplit(".", 1)[0] for n in names]
    return keys


def values_under(prefix: str) -> set[str]:
    """The words a setting under ``prefix`` takes (its Literal choices) and the names of its fields."""
    model: typing.Any = RunConfig
    models = domain_settings_models()
    for part in prefix.split("."):
        fields = model.model_fields if isinstance(model, type) and issubclass(model, BaseModel) else {}
        if model is RunConfig and part in models:
            model = models[part]
            continue
        ann = fields[part].annotation
        inner = [a for a in (typing.get_args(ann) or (ann,)) if isinstance(a, type) and issubclass(a, BaseModel)]
        model = inner[0] if inner else ann
    words: set[str] = set()

    def walk(m: typing.Any) -> None:
        for f in m.model_fields.values():
            for a in typing.get_args(f.annotation) or (f.annotation,):
                if typing.get_origin(a) is typing.Literal:
                    words.update(str(v) for v in typing.get_args(a))
                if isinstance(a, type) and issubclass(a, BaseModel):
                    walk(a)
            if typing.get_origin(f.annotation) is typing.Literal:
                words.update(str(v) for v in typing.get_args(f.annotation))
        words.update(m.model_fields)

    if isinstance(model, type) and issubclass(model, BaseModel):
        walk(model)
    elif typing.get_origin(model) is typing.Literal:  # a plain setting: its choices
        words.update(str(v) for v in typing.get_args(model))
    elif prefix == "protocol":  # a name in the protocol registry
        words.update(protocol_names())
    return words


def doc_keys() -> list[tuple[str, str, str]]:
    """(doc, key, what named it) for every config key the docs' tables name: the key column of a config table (one
    whose key cells name config keys), the keys a `section.*` row lists in its meaning, and every backticked dotted
    name that starts with a config section, in any cell."""
    ref = reference()
    top = {n.split(".")[0] for n in ref}
    prefixes = {n[: i + 1] for n in ref for i, c in enumerate(n) if c == "."}  # `lora.`: a section's
    found: list[tuple[str, str, str]] = []
    for doc in DOCS:
        name = doc.relative_to(ROOT).as_posix()
        for table in tables(doc.read_text(encoding="utf-8")):
            body = table[1:]
            firsts = [k for row in body for k in key_cell(row[0])]
            config_table = table[0][0].lower() in ("field", "key", "setting") and bool(firsts) and \
                sum(known(k, ref) for k in firsts) * 2 >= len(firsts)
            for row in body:
                if config_table:
                    keys = key_cell(row[0])
                    found += [(name, k, row[0]) for k in keys]
                    sections = [k.removesuffix(".*") for k in keys if k.endswith(".*") or f"{k}." in prefixes]
                    if sections:  # `health.*`: the bare names its meaning gives are the row's keys or their values
                        words = set().union(*(values_under(k.removesuffix(".*")) for k in keys if known(k, ref)))
                        named = [t for cell in row[1:] for t in re.findall(r"`([a-z_][a-z0-9_]*)`", cell)]
                        if len(row) > 2:  # the default column's `window 5, patience 3`: a name, then its default
                            named += re.findall(r"(?<![\w.])([a-z_]+) (?:-?\d[\w.+-]*|true|false)\b", row[1])
                        found += [(name, f"{sections[0]}.{t}", row[0]) for t in named if t not in words]
                for cell in row:
                    for token in re.findall(r"`([^`\s]+)`", cell):
                        for key in expand(token):
                            if "." in key and key.split(".")[0] in top and KEY.fullmatch(key) and \
                                    key.rsplit(".", 1)[-1] not in FILE_TYPES:
                                found.append((name, key, cell[:60]))
    return found


def known(key: str, ref: set[str]) -> bool:
    if key.endswith(".*"):
        return any(n.startswith(key[:-1]) for n in ref)
    return key in ref


def test_every_config_key_the_docs_name_is_in_the_reference() -> None:
    ref = reference()
    keys = doc_keys()
    assert len({k for _, k, _ in keys}) > 60  # the README's table alone names this many: the reader found them
    unknown = sorted({f"{doc}: {key}  (in: {where})" for doc, key, where in keys if not known(key, ref)})
    assert unknown == [], "\n".join(unknown)


def test_every_default_the_docs_state_is_the_references() -> None:
    """`tau2.max_actions` (12 by default): a default the docs give for a key is the one the config has."""
    defaults = {name: default for name, default, _ in describe_fields()}
    stated = [(doc.relative_to(ROOT).as_posix(), key, value) for doc in DOCS
              for key, value in re.findall(r"`([a-z0-9_.]+)` \(([^()]+?) by default\)", doc.read_text(encoding="utf-8"))]
    assert stated  # TAU2.md states one
    wrong = [f"{doc}: {key} ({value} by default), the reference says {defaults.get(key)}"
             for doc, key, value in stated if defaults.get(key, "").strip("'") != value]
    assert wrong == [], "\n".join(wrong)


@pytest.mark.parametrize("cell,keys", [
    ("`evosyn.designer_settings.effect`, `effect_floor`; `evosyn.effect_every`",
     ["evosyn.designer_settings.effect", "evosyn.designer_settings.effect_floor", "evosyn.effect_every"]),
    ("`{synthesizer,reasoner}.model_path`, `.device`",
     ["synthesizer.model_path", "reasoner.model_path", "synthesizer.device", "reasoner.device"]),
    ("`<role>.served.{base_url,model}`", ["synthesizer.served.base_url", "synthesizer.served.model",
                                          "reasoner.served.base_url", "reasoner.served.model"]),
    ("`steps`, `n_cards`", ["steps", "n_cards"]),
])
def test_the_reader_of_key_cells(cell: str, keys: list[str]) -> None:
    assert key_cell(cell) == keys


# ----------------------------------------------------------------- the run directory


def run_dir_entries() -> dict[str, str]:
    """The README's run-directory block: each listed path (as written) and its description (continuations joined)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text[text.index("## The run directory"):]
    block = block[block.index("```") + 3:]
    block = block[:block.index("```")]
    entries: dict[str, str] = {}
    last = None
    for line in block.splitlines():
        m = re.match(r"^(?:runs/<run_id>/| {14})(\S+(?:, \S+)*)(?: +(.*))?$", line)
        if m and not line.startswith(" " * 20):
            last = m.group(1).strip()
            entries[last] = m.group(2) or ""
        elif line.strip() and last is not None:
            entries[last] += " " + line.strip()
    return entries


def listed_globs(name: str) -> list[str]:
    """The run-directory globs a listed path stands for: `checkpoints/step_N/{synthesizer,reasoner}/` -> two,
    `checkpoints/step_N/*_state/, trainer_state.pt` -> the state folders and the file beside them."""
    first, *more = [p.strip() for p in name.split(",") if "{" not in p] if "{" not in name else [name]
    paths = expand(first) if "{" in first else [first]
    folder = first.rsplit("/", 1)[0] + "/" if "/" in first.rstrip("/") else ""
    paths += [folder + p for p in more]
    return [p.replace("step_N", "step_*").rstrip("/") for p in paths]


def fired(cfg, run: Path) -> bool:  # noqa: ANN001 - a RunConfig
    """Whether the health check this test sets up fires: valid_rate with min_rate 1 (window 1, patience 1) on a step
    whose valid rate is below 1; the test turns every other check off."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    check = cfg.health.valid_rate
    return check.action != "off" and check.min_rate == 1.0 and any(r["n_valid"] < r["n_cards"] for r in rows)


WHEN = {  # listed path -> (the condition the README states, that condition evaluated on a run)
    "tb/": ("with tensorboard: true", lambda cfg, run: cfg.tensorboard),
    "reports/step_N.txt": ("every report_refresh_every steps", lambda cfg, run: cfg.steps >= cfg.report_refresh_every),
    "heldout_before.json": ("unless heldout_per_group=0", lambda cfg, run: cfg.heldout_per_group > 0),
    "heldout_after.json": ("the same", lambda cfg, run: cfg.heldout_per_group > 0),
    "heldout.jsonl": ("every heldout_every steps",
                      lambda cfg, run: cfg.heldout_per_group > 0 and 0 < cfg.heldout_every <= cfg.steps),
    "alerts.jsonl": ("written when a check fires", fired),
    "factors.jsonl": ("written when the factor space changes",
                      lambda cfg, run: json.loads((run / "factor_space.json").read_text())["version"] > 0),
    "reflector.jsonl": ("every evosyn.reflector_settings.every steps",
                        lambda cfg, run: cfg.evosyn.reflector and cfg.steps >= cfg.evosyn.reflector_settings.every),
    "learning_effect.jsonl": ("from the second learning-effect period's end on",
                              lambda cfg, run: cfg.steps > cfg.evosyn.effect_every),
}

HEALTH_OFF = [f"health.{c}=off" for c in ("synth_collapse", "label_agreement", "rejection_code", "nan_skips",
                                          "reward_saturation")]
RUNS = {  # every conditional file written, and none of them
    "all": ["steps=3", "heldout_per_group=1", "heldout_every=2", "report_refresh_every=2", "evosyn.effect_every=1",
            "evosyn.reflector_settings.every=2", "tensorboard=true", "health.valid_rate.min_rate=1",
            "health.valid_rate.window=1", "health.valid_rate.patience=1", "health.baseline_steps=1", *HEALTH_OFF],
    "none": ["steps=1", "heldout_per_group=0", "heldout_every=0", "tensorboard=false", "health.valid_rate=off",
             *HEALTH_OFF],
}


@pytest.mark.parametrize("run_id", sorted(RUNS))
def test_the_run_directory_holds_what_the_readme_lists(run_id: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Every path the README lists is in a short run's directory, or is absent exactly when its stated condition
    does not hold; every path the run wrote is listed."""
    from synco.cli import main
    from synco.config import build_config, load_yaml

    assert main(["train", "n_cards=8", "k=2", "heldout_samples=0", "progress=false", "threads=1",
                 f"runs_dir={tmp_path}", f"run_id={run_id}", *RUNS[run_id]]) == 0
    capsys.readouterr()
    run = tmp_path / run_id
    cfg = build_config(load_yaml(run / "config.yaml"))
    entries = run_dir_entries()
    assert "heldout_after.json" in entries and len(entries) >= 18
    for name, description in entries.items():
        present = any(any(run.glob(g)) for g in listed_globs(name))
        if name in WHEN:
            phrase, holds = WHEN[name]
            assert phrase in description, f"README: {name} should say when it is written ({phrase!r})"
            assert present == holds(cfg, run), f"{name}: present={present}, but its condition holds={holds(cfg, run)}"
        else:
            assert present, f"{name}: listed without a condition, not in the run"
    covered = {g.split("/")[0] for name in entries for g in listed_globs(name)}
    unlisted = sorted(p.name for p in run.iterdir() if p.name not in covered)
    assert unlisted == [], f"written but not in the README's run-directory block: {unlisted}"
    for step in run.glob("checkpoints/step_*"):
        inside = {p.name for p in step.iterdir()}
        assert inside <= {"synthesizer", "reasoner", "synthesizer_state", "reasoner_state", "trainer_state.pt"}, inside
