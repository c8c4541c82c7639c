"""The ``synco`` command line: train, pretrain, config, verify, eval, analyze, compare, contamination, data, merge.

Heavy imports (torch, transformers) happen inside the subcommands, so
``synco --help`` is instant.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

OVERRIDES_HELP = ("dotted config overrides, e.g. steps=50 reasoner.grpo.lr=3e-5 mode=frozen "
                  "(see `synco config --reference` for every field)")


def _preset_names() -> list[str]:
    """Names of the preset YAML files shipped in ``synco/presets`` (read without importing synco.config)."""
    from importlib import resources

    return sorted(f.name[: -len(".yaml")] for f in (resources.files("synco") / "presets").iterdir()
                  if f.name.endswith(".yaml"))


class _Deferred:
    """A value of the parser that asks the registry only when it is used (help printed, an argument checked), so
    building the parser imports no domain code (``synco --help`` stays instant)."""

    def __init__(self, get: Callable[[], Any]) -> None:
        self._get = get

    def __str__(self) -> str:
        return str(self._get())

    def __iter__(self) -> Iterator[Any]:
        return iter(self._get())

    def __contains__(self, item: object) -> bool:
        return item in self._get()


def _default_preset() -> str:
    from synco.config import DEFAULT_PRESET

    return DEFAULT_PRESET


def _default_domain() -> str:
    from synco.domains.builtins import DEFAULT_DOMAIN

    return DEFAULT_DOMAIN


def _warm_start_worlds() -> list[str]:
    from synco.domains.registry import warm_start_worlds

    return warm_start_worlds()


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default=_Deferred(_default_preset),
                   help=f"built-in preset: {', '.join(_preset_names())} (default: %(default)s)")
    p.add_argument("--config", type=Path, default=None, help="YAML file applied on top of the preset")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help=OVERRIDES_HELP)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="synco",
        description="Agent-data co-training: a Synthesizer writes verifiable tasks for a Reasoner; "
                    "both are trained with GRPO in the same step.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("train", help="run co-training (default: the embedded arithmetic world on CPU)",
                       description="Run co-training. With no arguments: the embedded arithmetic world, "
                                   "tiny warm-started models, a few minutes on a laptop CPU.")
    _add_config_args(p)
    p.add_argument("--resume", type=Path, default=None, metavar="RUN_DIR",
                   help="continue a run from its latest checkpoint, or from step 0 when it has none "
                        "(config from RUN_DIR/config.yaml plus overrides)")

    p = sub.add_parser("pretrain", help="build an embedded world's warm-start checkpoints",
                       description="Supervised warm start of the tiny Synthesizer and Reasoner of a world that has one "
                                   "(a domain registered with a warm start), deterministic from the seed.")
    p.add_argument("--world", choices=_Deferred(_warm_start_worlds), default=_Deferred(_default_domain),
                   metavar="WORLD", help="which world's agents to train: %(choices)s (default: %(default)s)")
    p.add_argument("--out", type=Path, default=Path("runs/warm_start"), help="output folder (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    p.add_argument("--reasoner-steps", type=int, default=None, help="SFT steps for the Reasoner (default: the shipped recipe)")
    p.add_argument("--synthesizer-steps", type=int, default=None, help="SFT steps for the Synthesizer (default: the shipped recipe)")
    p.add_argument("overrides", nargs="*", metavar="WORLD.KEY=VALUE",
                   help="the world's own settings, as a run's dotted overrides of its section; its warm start reads "
                        "them as such a run would (default: the section's defaults)")

    p = sub.add_parser("config", help="print the resolved config, or the reference of every field",
                       description="Print the resolved configuration as YAML (preset + --config + overrides).")
    _add_config_args(p)
    p.add_argument("--reference", action="store_true", help="print every field with its default and description")

    p = sub.add_parser(
        "verify", help="screen a file of task cards as training does: one JSON verdict per line",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Verify a file of task cards exactly as a training step verifies the Synthesizer's cards "
                    "(the domain and verifier of the config, chosen as in `synco train`; no model is loaded).",
        epilog="Input: one card per line. A card's JSON object is taken as the card text as it stands; a run's own\n"
               "valid_tasks.jsonl row as the card it holds (final_answer the verified reference; a solution the\n"
               "export left null, on a row whose answer the oracle corrected, read as that reference); a line\n"
               "holding a JSON string literal is decoded first, so a raw model output with newlines fits on one\n"
               "line; blank lines are skipped.\n\n"
               "Output (stdout): one JSON object per non-blank input line, in order:\n"
               "  line       the input line number (1-based, blank lines counted)\n"
               "  valid      true when the card passes training's verification (in a domain without an\n"
               "             oracle, training then also asks consensus of a model's answers, not done here)\n"
               "  reasons    reason codes (missing_field, oracle_rejected, duplicate_in_step, heldout_problem, ...)\n"
               "  reference  the answer the Reasoner would be graded against (the domain oracle's, if any)\n"
               "  details    the reasons with their details (slot=N: the N-th card of the file, from 0)\n"
               "  quality    the verifier's quality score in [0, 1]\n"
               "  factors    the factors the domain computes for a card the verifier passed\n\n"
               "The file is one batch: a near-duplicate of an earlier line is rejected (duplicate_in_step), as\n"
               "within one step (a soft reason where verifier.reject_duplicates is false, rgym's default); the\n"
               "domain's own rejections (heldout_problem, ...) apply as in training.\n\n"
               "Exit status: 0 when every line got a verdict (valid or not); 2 when the file cannot be read or\n"
               "the configuration is invalid. A progress bar goes to stderr when stderr is a terminal.\n\n"
               "Examples: synco verify cards.jsonl\n"
               "          synco verify --preset paper runs/x/valid_tasks.jsonl verifier.novelty_threshold=0.9")
    p.add_argument("file", metavar="FILE", help="cards, one per line ('-' reads standard input)")
    _add_config_args(p)

    from synco.analysis import configure_analyze, configure_compare

    configure_analyze(sub.add_parser("analyze", help="plots, statistics and an HTML report of one or more runs"))
    configure_compare(sub.add_parser("compare", help="Learn/Retain comparison of a base and a trained eval directory"))

    from synco.grading.contamination import configure_contamination
    from synco.eval import configure_eval_command
    from synco.eval.data import configure_data

    configure_eval_command(sub.add_parser("eval", help="evaluate a model on the math benchmarks, or on a tau2-bench "
                                                       "domain (--tau2)"))
    configure_contamination(sub.add_parser("contamination", help="near-duplicates between a run's tasks and benchmark questions"))
    configure_data(sub.add_parser("data", help="download and convert the benchmarks from the Hugging Face hub (needs internet)"))

    from synco.learn.merge import configure_merge

    configure_merge(sub.add_parser("merge", help="merge a saved LoRA adapter into its base model (full HF model folder)"))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # KEY=VALUE overrides written after an option (`synco verify FILE --preset P KEY=VALUE`)
        if "overrides" not in vars(args) or any(x.startswith("-") or "=" not in x for x in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.overrides = [*args.overrides, *extra]
    if args.command is None:
        parser.print_help()
        return 0
    from synco.config import ConfigError

    try:
        return _COMMANDS[args.command](args)
    except BrokenPipeError:  # the reader of stdout went away (`synco config --reference | head -1`): stop quietly
        if not _stdout_closed():
            raise  # another pipe broke: a bug or a dead worker, not the reader
        _silence_stdout()
        return 141  # as a process killed by SIGPIPE
    except ConfigError as e:
        print(f"synco {args.command}: {e}", file=sys.stderr)
        return 2
    except (FileNotFoundError, FileExistsError) as e:
        print(f"synco {args.command}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # `synco train` says how to resume; any other command just stops, without a traceback
        print(f"synco {args.command}: interrupted", file=sys.stderr)
        return 130


def _stdout_closed() -> bool:
    """Whether standard output is a pipe whose reader has gone (its write end polls as an error)."""
    import select

    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
    except (AttributeError, OSError, ValueError):  # no descriptor (a test's capture), or no poll (Windows)
        return True
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def _silence_stdout() -> None:
    """Point stdout's descriptor at /dev/null, so flushing what is left in its buffer at exit does not raise again."""
    import os

    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (a test's capture): nothing is flushed at exit
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def _load(args: argparse.Namespace):
    from synco.config import load_config

    return load_config(str(args.preset), args.config, args.overrides)


def cmd_train(args: argparse.Namespace) -> int:
    from synco.config import apply_overrides, build_config, check_runnable, load_yaml

    if args.resume is not None:
        cfg = build_config(apply_overrides(load_yaml(args.resume / "config.yaml"), args.overrides))
    else:
        cfg = _load(args)
    check_runnable(cfg)  # missing benchmark files fail here, before torch is even imported (setup_run checks again)

    from synco.core.pool import PoolError
    from synco.run.loop import train
    from synco.run.stopping import RunError, RunInterrupted
    from synco.run.summary import format_summary

    try:
        summary = train(cfg, resume=args.resume)
    except RunInterrupted as e:  # one line, no traceback: where it stopped and the command that continues it
        # a fresh run's overrides are in its config.yaml; those given with --resume are not, so they are repeated
        command = e.resume_command(args.overrides if args.resume is not None else ())
        print(f"synco train: {e.message}; " + (f"continue with: {command}" if command else "nothing was saved"),
              file=sys.stderr)
        return e.exit_code
    except (RunError, PoolError) as e:
        print(f"synco train: {e}", file=sys.stderr)
        return 2
    print(format_summary(summary))
    return 0


def cmd_pretrain(args: argparse.Namespace) -> int:
    """The world's registered warm start (``WarmStart.pretrain``), given its settings when it declares a model."""
    from synco.config import domain_section, parse_override
    from synco.domains.registry import resolve, settings_model, warm_start
    from synco.domains.spec import DomainError

    world = str(args.world)
    try:
        recipe = warm_start(world)
        model = settings_model(world)
    except DomainError as e:
        print(f"synco pretrain: {e}", file=sys.stderr)
        return 2
    for item in args.overrides:
        key = ".".join(parse_override(item)[0])
        if model is None or not key.startswith(f"{world}."):
            takes = f"only its own settings, {world}.KEY=VALUE" if model is not None else "no settings"
            print(f"synco pretrain: {key}: --world {world} takes {takes}", file=sys.stderr)
            return 2
    for flag, steps in (("--reasoner-steps", args.reasoner_steps), ("--synthesizer-steps", args.synthesizer_steps)):
        if steps is not None and steps < 0:  # 0 keeps the agent as initialised; fewer is no setting
            print(f"synco pretrain: {flag} {steps}: must be at least 0", file=sys.stderr)
            return 2
    kwargs: dict[str, Any] = {}
    if args.reasoner_steps is not None:
        kwargs["reasoner_steps"] = args.reasoner_steps
    if args.synthesizer_steps is not None:
        kwargs["synthesizer_steps"] = args.synthesizer_steps
    if model is not None:
        kwargs["settings"] = domain_section(world, args.overrides)
    print(resolve(recipe.pretrain)(args.out, seed=args.seed, **kwargs))
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    """Print the resolved config (stdout stays pure YAML); what a run of it would lack on disk is a note on stderr."""
    from synco.config import describe_fields, dump_config, run_input_problems

    if args.reference:
        for name, default, desc in describe_fields():
            print(f"{name:<40} {default:<24} {desc}" if default else f"{name:<40} {'[section]':<24} {desc}")
        return 0
    cfg = _load(args)
    print(dump_config(cfg), end="")
    for problem in run_input_problems(cfg):
        print(f"synco config: note: `synco train` with this config fails until this is fixed: {problem}", file=sys.stderr)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """One JSON verdict per card line of ``args.file``; exit 2 only for an unreadable file or a bad config."""
    from synco.config import check_runnable

    cfg = _load(args)
    check_runnable(cfg)  # the verifier loads the contamination benchmarks: missing ones fail here, as in train
    try:
        if str(args.file) == "-":
            stdin = getattr(sys.stdin, "buffer", None)
            text = stdin.read().decode("utf-8", errors="replace") if stdin is not None else sys.stdin.read()
        else:
            text = Path(args.file).read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        print(f"synco verify: cannot read {str(args.file)!r}: {e.strerror or e}", file=sys.stderr)
        return 2
    from synco.run.verify import read_lines, verify_cards

    for verdict in verify_cards(cfg, read_lines(text.split("\n")), progress=sys.stderr.isatty()):
        print(verdict.model_dump_json())
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    from synco.analysis import run_analyze

    return run_analyze(args)


def cmd_compare(args: argparse.Namespace) -> int:
    from synco.analysis import run_compare

    return run_compare(args)


def cmd_eval(args: argparse.Namespace) -> int:
    from synco.eval import run_eval_command

    return run_eval_command(args)


def cmd_contamination(args: argparse.Namespace) -> int:
    from synco.grading.contamination import run_contamination

    return run_contamination(args)


def cmd_data(args: argparse.Namespace) -> int:
    from synco.eval.data import run_data

    return run_data(args)


def cmd_merge(args: argparse.Namespace) -> int:
    from synco.learn.merge import run_merge

    return run_merge(args)


_COMMANDS = {"train": cmd_train, "pretrain": cmd_pretrain, "config": cmd_config, "verify": cmd_verify,
             "analyze": cmd_analyze,
             "compare": cmd_compare, "eval": cmd_eval, "contamination": cmd_contamination, "data": cmd_data,
             "merge": cmd_merge}

if __name__ == "__main__":
    sys.exit(main())
