"""Evaluation: ``synco eval`` on benchmark files, its metrics, ``synco data``, and the label harness."""

from __future__ import annotations

import argparse


def configure_eval_command(p: argparse.ArgumentParser) -> None:
    """Arguments of ``synco eval``: the math benchmarks' and τ²-bench's (``--tau2``)."""
    from synco.eval.evaluation import configure_eval
    from synco.eval.tau2 import add_tau2_arguments

    configure_eval(p)
    add_tau2_arguments(p)


def run_eval_command(args: argparse.Namespace) -> int:
    """``synco eval``: a τ²-bench domain with ``--tau2``, else the math benchmarks; first, one line naming an option
    it cannot use (a count below 1, a model it cannot load), before anything is written."""
    import sys

    from synco.eval.evaluation import EvalError, check_arguments

    try:
        check_arguments(args)
    except EvalError as err:
        print(f"synco eval: {err}", file=sys.stderr)
        return 2
    if getattr(args, "tau2", None):
        from synco.eval.tau2 import run_tau2_eval

        return run_tau2_eval(args)
    from synco.eval.evaluation import run_eval

    return run_eval(args)
