"""One multi-turn GRPO step on the tools world: synco's ``cotrain_step`` against TRL's GRPOTrainer with tools.

    python bench/bench_tools_trl.py [--tasks 8] [--k 4] [--max-turns 8] [--turn-tokens 24]
        [--episode-tokens 400] [--steps 3] [--threads 1] [--trl-python /tmp/trlvenv/bin/python]

Run with the main venv's python (synco's side runs in this process); TRL's side runs as a subprocess
under ``--trl-python`` (a scratch venv with ``trl``; never installed into synco's venv), reading this
file again with ``--trl-side SPEC``.

Both sides use ONE model: a random (untrained) char-level tiny Llama (``synco.learn.charlm.tiny_llama``,
hidden 128, 3 layers, 768 positions: the tools warm start's architecture), or ``--model DIR`` (any char
checkpoint, e.g. a trained tools Reasoner). Same tasks, same settings:

* synco: ``cotrain_step`` with ``mode=static`` (the Synthesizer does not sample: the world's own task
  generator writes ``--tasks`` cards a step), ``k`` episodes per task, ``max_turns`` agent turns of at most
  ``turn-tokens`` ids, ``episode-tokens`` ids (agent + environment) per episode; one GRPO update.
* TRL: one ``GRPOTrainer`` step on exactly the tasks synco's step of the same index used (prompt
  ``T:<instruction>\\n``), ``num_generations=k``, batch ``tasks * k``, ``max_completion_length =
  episode-tokens``, each turn capped at ``turn-tokens`` new ids (``generation_kwargs``),
  ``max_tool_calling_iterations = max_turns - 1``, transformers generation on CPU (no vLLM), beta 0,
  clip 0.2 / 0.28, lr 5e-5 (synco's tools preset).

How the char model calls tools under TRL: an ``environment_factory`` whose instance holds one
``ToolsEnv`` (a fresh database copy per episode, reset per task) and exposes one tool, ``act(turn)``:
the agent's raw turn goes to the tools world's own parser and tools (``ToolsEnv.step``), and the
observation (``\\n=<result>\\n`` or ``\\n!<code>\\n``) is the tool message. A chat template renders the
user message as ``T:<content>\\n``, an ``act`` call as the turn text plus ``</s>``, a tool message as its
content, so TRL's ids (prompt + completion + tool suffix, concatenated) are synco's ids token for token.
A response template makes every turn an ``act`` call except a lone ``done(..)``, which is the final
message and ends the episode, as in synco. The reward function grades with ``ToolsEnv.grade`` (a last
turn TRL generated but did not execute, at the turn limit, is stepped first, as synco steps it).

Prints the load (``uptime``), versions, per-side median seconds per step (after one warm-up step), the
ratio synco / TRL, generated tokens per second, and what each side did (turns per episode, tool calls
that parsed and ran, finishes). A random model writes garbage: most turns are ``bad_call`` errors.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# ----------------------------------------------------------------------------- shared records


@dataclass
class StepWork:
    """What one step did: seconds (total, generation, the rest), agent tokens, episodes, turns, calls."""

    seconds: float
    t_generate: float
    t_train: float
    episodes: int
    agent_tokens: int
    agent_turns: int
    tool_calls: int  # turns that parsed into a known tool with typed arguments and ran (done excluded)
    failed_calls: int  # of those, calls the tool refused (not_found, policy_violation)
    finishes: dict[str, int] = field(default_factory=dict)
    reward_mean: float = 0.0


@dataclass
class SideResult:
    """One side's timed steps (the warm-up excluded) and its version string."""

    name: str
    version: str
    steps: list[StepWork]

    @property
    def median_seconds(self) -> float:
        return statistics.median(s.seconds for s in self.steps)

    def tokens_per_second(self) -> float:
        """Agent (generated) tokens per second of generation time, over the timed steps."""
        t = sum(s.t_generate for s in self.steps)
        return sum(s.agent_tokens for s in self.steps) / t if t > 0 else 0.0

    def per_episode(self, attr: str) -> float:
        return sum(getattr(s, attr) for s in self.steps) / max(1, sum(s.episodes for s in self.steps))


# ----------------------------------------------------------------------------- TRL side (trl venv)

CHAT_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'user' -%}{{ 'T:' + m['content'] + '\\n' }}"
    "{%- elif m['role'] == 'assistant' -%}"
    "{%- if m['content'] is string -%}{{ m['content'] }}{%- endif -%}"
    "{%- for tc in m['tool_calls'] or [] -%}{%- set f = tc['function'] -%}"
    "{%- if f['name'] == 'act' and f['arguments'] is mapping and 'turn' in f['arguments'] -%}"
    "{{ f['arguments']['turn'] }}"
    "{%- elif f['arguments'] is mapping -%}{{ f['name'] + '(' }}"
    "{%- for k, v in f['arguments'].items() -%}{{ k + '=' + v|string }}{%- if not loop.last -%},{%- endif -%}"
    "{%- endfor -%}{{ ')' }}"
    "{%- else -%}{{ f['name'] + '(' + f['arguments']|string + ')' }}{%- endif -%}"
    "{%- endfor -%}{{ eos_token }}"
    "{%- elif m['role'] == 'tool' -%}{{ m['content'] }}"
    "{%- endif -%}{%- endfor -%}"
)
"""The char agent's transcript as a chat: ``T:<instruction>\\n``, a turn + ``</s>``, an observation as is.
An ``act`` call renders as its raw turn; any other call as ``name(key=value,..)`` (so the template renders
a full tool exchange, which TRL checks before it accepts a template for tool use)."""

RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "start_anchor": "\n",  # every prefix (prompt, observation) ends with a newline: parse the new text only
    "fields": {
        "tool_calls": {
            "open_pattern": r"\A(?!\s*done\([^()]{0,200}\)\s*(?:</s>\s*)?\Z)",
            "close_pattern": r"</s>\s*\Z|\Z",
            "repeats": True,
            "content": "text",
            "content_args": {"strip": False},
            "transform": {"type": "function", "function": {"name": "act", "arguments": {"turn": "{content}"}}},
        },
        "content": {"close_pattern": r"</s>\s*", "content": "text"},
    },
}
"""Every turn is a call of ``act`` with the turn's text, except a turn that is one ``done(..)``: the final message."""


def _trl_stats(worlds: list[Any], completions: list[list[dict]], rewards: list[float]) -> dict[str, Any]:
    """Turns, executed tool calls and finishes of one TRL generation batch (from its environments)."""
    from synco.domains.tools.syntax import DONE

    calls = [c for w in worlds for c in w.env.calls if c.name != DONE]
    failed = sum(w.failed for w in worlds)
    finishes: dict[str, int] = {}
    for w in worlds:
        key = "done" if w.env.finished else "limit"
        finishes[key] = finishes.get(key, 0) + 1
    turns = sum(sum(m.get("role") == "assistant" for m in comp) for comp in completions)
    return {"episodes": len(worlds), "agent_turns": turns, "tool_calls": len(calls), "failed_calls": failed,
            "finishes": finishes, "reward_mean": sum(rewards) / max(1, len(rewards))}


def trl_side(spec_path: Path, out_path: Path) -> None:
    """Run ``warmup + steps`` GRPOTrainer steps on the tasks in the spec; write per-step work to ``out_path``."""
    spec = json.loads(spec_path.read_text())
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch

    torch.set_num_threads(spec["threads"])
    import transformers
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from synco.core.records import TaskCard
    from synco.domains.tools.domain import ToolsDomain

    domain = ToolsDomain()

    class ToolsWorld:
        """One episode's tools world for TRL: ``reset`` builds a fresh ``ToolsEnv`` for the row's task."""

        def __init__(self) -> None:
            self.env: Any = None
            self.acts = 0
            self.failed = 0

        def reset(self, prompt: Any = None, instruction: str = "", solution: str = "", reference: str = "",
                  **_: Any) -> None:
            card = TaskCard(teaching_intent="tools", target_reasoning_style="act", expected_reasoner_weakness="x",
                            difficulty_estimate="x", problem=instruction, solution=solution,
                            final_answer=reference, verification_notes="x", novelty_notes="x")
            self.env = domain.environment(card, reference)
            self.acts = 0
            self.failed = 0

        def act(self, turn: str) -> str:
            """Send one agent turn (one tool call such as find_user(bob)) to the tools world.

            Args:
                turn: The agent's turn text.
            """
            self.acts += 1
            step = self.env.step(turn)
            self.failed += int(step.tool_call is not None and step.error is not None)
            return step.observation

    log: list[dict[str, Any]] = []

    def tools_reward(completions: list[list[dict]], environments: list[ToolsWorld], **_: Any) -> list[float]:
        """``ToolsEnv.grade`` of each episode; a last turn generated but not executed is stepped first."""
        rewards = []
        for comp, world in zip(completions, environments):
            turns = [m for m in comp if m.get("role") == "assistant"]
            if len(turns) > world.acts and not world.env.over:
                last = turns[-1]
                calls = last.get("tool_calls") or []
                text = calls[0]["function"]["arguments"].get("turn", "") if calls else last.get("content", "")
                world.env.step(text if isinstance(text, str) else "")
            rewards.append(world.env.grade().reward)
        log.append(_trl_stats(environments, completions, rewards))
        return rewards

    tok = AutoTokenizer.from_pretrained(spec["model"])
    tok.chat_template = CHAT_TEMPLATE
    tok.response_template = RESPONSE_TEMPLATE
    model = AutoModelForCausalLM.from_pretrained(spec["model"])
    rows = [{"prompt": [{"role": "user", "content": t["instruction"]}], **t} for step in spec["tasks"] for t in step]
    n, k = spec["n_tasks"], spec["k"]
    args = GRPOConfig(
        output_dir=str(spec_path.parent / "trl_out"), use_cpu=True, bf16=False, fp16=False, seed=spec["seed"],
        per_device_train_batch_size=n * k, gradient_accumulation_steps=1, num_generations=k,
        steps_per_generation=1, num_iterations=1, max_steps=len(spec["tasks"]), shuffle_dataset=False,
        max_completion_length=spec["episode_tokens"], max_tool_calling_iterations=spec["max_turns"] - 1,
        generation_kwargs={"max_new_tokens": spec["turn_tokens"]}, temperature=1.0, top_p=1.0,
        learning_rate=5e-5, beta=0.0, epsilon=0.2, epsilon_high=0.28, loss_type="dapo", scale_rewards="group",
        logging_steps=1, save_strategy="no", report_to=[], disable_tqdm=True, dataloader_num_workers=0,
        log_completions=False,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=[tools_reward], args=args, train_dataset=Dataset.from_list(rows),
                          processing_class=tok, environment_factory=ToolsWorld)
    gen_seconds: list[float] = []
    inner = trainer._generate_and_score_completions

    def timed_generate(inputs: Any) -> Any:
        t = time.perf_counter()
        out = inner(inputs)
        gen_seconds.append(time.perf_counter() - t)
        return out

    trainer._generate_and_score_completions = timed_generate  # type: ignore[method-assign]
    step_seconds: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *a: Any, **kw: Any) -> None:
            self.t = time.perf_counter()

        def on_step_end(self, *a: Any, **kw: Any) -> None:
            step_seconds.append(time.perf_counter() - self.t)

    trainer.add_callback(Clock())
    trainer.train()
    lengths = trainer.state.log_history
    mean_len = [h["completions/mean_length"] for h in lengths if "completions/mean_length" in h]
    steps = []
    for i, (sec, gen, stats) in enumerate(zip(step_seconds, gen_seconds, log)):
        tokens = round(mean_len[i] * stats["episodes"]) if i < len(mean_len) else 0
        steps.append(asdict(StepWork(seconds=sec, t_generate=gen, t_train=sec - gen, agent_tokens=tokens, **stats)))
    out_path.write_text(json.dumps({"version": f"trl {trl.__version__}, transformers {transformers.__version__}, "
                                               f"torch {torch.__version__}", "steps": steps}))


# ----------------------------------------------------------------------------- synco side (main venv)


def build_model(folder: Path, seed: int, warm_steps: int = 0) -> None:
    """The char tiny Llama of the tools warm start's shape, random or after ``warm_steps`` supervised steps on
    gold episodes (the warm start's own data and loss, ``synco.domains.tools.warm_start``), so that its turns are
    real calls and its rewards vary; and a tiny card-token Synthesizer beside it."""
    import random

    from synco.learn.charlm import card_tokenizer, char_tokenizer, tiny_llama

    tok = char_tokenizer()
    model = tiny_llama(tok, seed=seed, hidden_size=128, num_layers=3, max_positions=768)
    if warm_steps > 0:
        from synco.domains.tools.domain import ToolsDomain
        from synco.domains.tools.warm_start import reasoner_row
        from synco.learn.pretrain import INIT_STD, encode_segments, init_weights, train_sft

        init_weights(model, INIT_STD, seed)
        domain, rng = ToolsDomain(), random.Random(f"bench-tools-trl-{seed}")
        train_sft(model, tok, lambda: reasoner_row(domain, rng), warm_steps, 32, 1e-3, "warm", progress=False,
                  encode=encode_segments)
    model.save_pretrained(folder / "reasoner")
    tok.save_pretrained(folder / "reasoner")
    ctok = card_tokenizer()  # static mode never samples the Synthesizer; it still loads one
    tiny_llama(ctok, seed=seed, hidden_size=32, num_layers=1, max_positions=768).save_pretrained(folder / "synthesizer")
    ctok.save_pretrained(folder / "synthesizer")


def _synco_work(stats: Any, records: list[Any], seconds: float) -> StepWork:
    """One synco step's work, from its stats and its pool records (transcripts)."""
    rollouts = [ro for rec in records for ro in rec.rollouts]
    agent = [t for ro in rollouts for t in ro.turns or [] if t.role == "agent"]
    calls = [t for t in agent if t.tool_call is not None and t.tool_call.name != "done"]
    env_after_call = [(a, b) for ro in rollouts for a, b in zip(ro.turns or [], (ro.turns or [])[1:])
                      if a.role == "agent" and a.tool_call is not None and a.tool_call.name != "done"
                      and b.role == "env"]
    return StepWork(seconds=seconds, t_generate=stats.t_generate, t_train=stats.t_train, episodes=len(rollouts),
                    agent_tokens=sum(ro.n_tokens for ro in rollouts), agent_turns=len(agent), tool_calls=len(calls),
                    failed_calls=sum(b.error is not None for _, b in env_after_call),
                    finishes=dict(stats.model_dump().get("finishes") or {}), reward_mean=stats.reasoner_reward)


def synco_side(model_dir: Path, synth_dir: Path, work: Path, a: argparse.Namespace) -> tuple[SideResult, list]:
    """Warm-up + timed ``cotrain_step`` calls; returns the timed steps and every step's tasks (for TRL)."""
    import torch

    torch.set_num_threads(a.threads)
    import transformers

    from synco.config import load_config
    from synco.cotrain.engine import cotrain_step
    from synco.run.setup import setup_run

    overrides = ["mode=static", f"n_cards={a.tasks}", f"k={a.k}", f"seed={a.seed}", f"runs_dir={work}", "run_id=bench",
                 "heldout_per_group=0", "tensorboard=false", "progress=false", f"threads={a.threads}",
                 f"synthesizer.model_path={synth_dir}", f"reasoner.model_path={model_dir}",
                 f"reasoner.sampling.max_new_tokens={a.turn_tokens}", f"max_turns={a.max_turns}",
                 f"max_episode_tokens={a.episode_tokens}", f"reasoner.generation_batch_size={a.tasks * a.k}"]
    run = setup_run(load_config("tools", overrides=overrides), log=lambda _: None)
    torch.set_num_threads(a.threads)
    steps, tasks = [], []
    for step in range(a.steps + 1):
        t = time.perf_counter()
        stats = cotrain_step(run.state, step)
        seconds = time.perf_counter() - t
        records = run.state.pool.by_step(step)
        tasks.append([{"instruction": r.card.payload.prompt_text(), "solution": r.card.payload.solution_text(), "reference": r.verdict.reference}
                      for r in records if r.card is not None and r.verdict.valid])
        if len(tasks[-1]) != a.tasks:
            raise RuntimeError(f"step {step}: {len(tasks[-1])} valid static tasks, expected {a.tasks}")
        if step > 0:  # step 0 is the warm-up
            steps.append(_synco_work(stats, records, seconds))
    version = f"synco (this tree), transformers {transformers.__version__}, torch {torch.__version__}"
    return SideResult("synco", version, steps), tasks


def run_trl(trl_python: str, spec: dict[str, Any], work: Path, threads: int) -> SideResult:
    """TRL's side in its own venv (a subprocess), on the same model, tasks and settings."""
    spec_path, out_path = work / "trl_spec.json", work / "trl_result.json"
    spec_path.write_text(json.dumps(spec))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": str(threads),
           "MKL_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false", "TRL_EXPERIMENTAL_SILENCE": "1"}
    proc = subprocess.run([trl_python, __file__, "--trl-side", str(spec_path), "--trl-out", str(out_path)],
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"TRL side failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    res = json.loads(out_path.read_text())
    steps = [StepWork(**s) for s in res["steps"]][1:]  # the first is the warm-up
    return SideResult("TRL GRPOTrainer", res["version"], steps)


def describe(side: SideResult) -> list[str]:
    """Human-readable lines for one side."""
    s = side.steps
    finishes: dict[str, int] = {}
    for st in s:
        for key, v in st.finishes.items():
            finishes[key] = finishes.get(key, 0) + v
    return [
        f"{side.name}: {side.version}",
        f"  s/step median {side.median_seconds:.2f} (steps: {', '.join(f'{x.seconds:.2f}' for x in s)}); "
        f"generation {statistics.median(x.t_generate for x in s):.2f} s, the rest {statistics.median(x.t_train for x in s):.2f} s",
        f"  per episode: {side.per_episode('agent_turns'):.2f} agent turns, {side.per_episode('agent_tokens'):.1f} agent "
        f"tokens, {side.per_episode('tool_calls'):.2f} tool calls run ({sum(x.failed_calls for x in s)} refused by "
        f"the tool); finishes {finishes}; mean reward {statistics.mean(x.reward_mean for x in s):.3f}",
        f"  generated tokens / s of generation: {side.tokens_per_second():.0f}",
    ]


def _model_name(warm_steps: int) -> str:
    base = "char tiny Llama (hidden 128, 3 layers, 768 positions)"
    return f"{base}, {warm_steps} supervised steps on gold episodes" if warm_steps else f"random {base}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-turns", type=int, default=8)
    ap.add_argument("--turn-tokens", type=int, default=24)
    ap.add_argument("--episode-tokens", type=int, default=400)
    ap.add_argument("--steps", type=int, default=3, help="timed steps per side (after one warm-up step)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", type=Path, default=None, help="a char checkpoint folder (default: a random one)")
    ap.add_argument("--warm-steps", type=int, default=0,
                    help="supervised steps on gold episodes before timing (0: the random model)")
    ap.add_argument("--keep-model", type=Path, default=None, help="also save the built model here (reuse: --model)")
    ap.add_argument("--trl-python", default="/tmp/trlvenv/bin/python")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument("--trl-side", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--trl-out", type=Path, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.trl_side is not None:
        trl_side(a.trl_side, a.trl_out)
        return
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        build_model(work / "models", a.seed, 0 if a.model else a.warm_steps)
        model_dir = a.model or work / "models" / "reasoner"
        if a.keep_model is not None and a.model is None:
            shutil.copytree(model_dir, a.keep_model, dirs_exist_ok=True)
        load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        print(f"load before timing: {load}")
        synco, tasks = synco_side(model_dir, work / "models" / "synthesizer", work / "runs", a)
        spec = {"model": str(model_dir), "tasks": tasks, "n_tasks": a.tasks, "k": a.k, "max_turns": a.max_turns,
                "turn_tokens": a.turn_tokens, "episode_tokens": a.episode_tokens, "threads": a.threads, "seed": a.seed}
        trl = run_trl(a.trl_python, spec, work, a.threads)
    load_after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"{a.tasks} tasks x {a.k} episodes, max_turns {a.max_turns}, {a.turn_tokens} new tokens a turn, "
          f"{a.episode_tokens} ids an episode, {a.threads} torch thread(s), model "
          f"{a.model or _model_name(a.warm_steps)}")
    for side in (synco, trl):
        print("\n".join(describe(side)))
    ratio = synco.median_seconds / trl.median_seconds
    print(f"ratio synco / TRL (median s/step): {ratio:.3f}  ({1 / ratio:.2f}x {'faster' if ratio < 1 else 'slower'})")
    print(f"load after: {load_after}")
    if a.json:
        a.json.write_text(json.dumps({"load_before": load, "load_after": load_after, "args": {
            k: str(v) for k, v in vars(a).items()}, "ratio": ratio, "sides": [
            {"name": s.name, "version": s.version, "median_seconds": s.median_seconds,
             "tokens_per_second": s.tokens_per_second(), "steps": [asdict(x) for x in s.steps]}
            for s in (synco, trl)]}, indent=1))


if __name__ == "__main__":
    main()
