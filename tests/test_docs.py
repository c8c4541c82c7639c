"""The docs name the real things: every config key README.md and docs/*.md name in their tables is one `synco config
--reference` lists, and every file the README's run-directory block lists is one a short run writes (or writes under
the condition the block states), and the other way round."""

from __future__ import annotations

import itertools
import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from synco.config import RunConfig, describe_fields, domain_settings_models

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
    elif typing.get_origin(model) is typing.Literal:  # a plain setting (`protocol`): its choices
        words.update(str(v) for v in typing.get_args(model))
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
