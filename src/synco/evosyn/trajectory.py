"""EvoSyn on tool-use trajectories: factors of one gold action list, structural metrics of many.

Everything here reads the *gold* trajectory a verified card carries (its action list replayed by
the domain), never the card's claims about itself, and takes only ``ToolCall`` lists plus the
domain's ``kinds`` mapping (tool name -> ``"read"`` | ``"write"``), so any tool world can use it.

Factors of one trajectory (bucket labels as EvoSyn's, ``synco.evosyn.space.FactorDef`` buckets):

* ``num_write`` / ``num_read`` — state-changing / information-gathering calls, bucketed
  :data:`COUNT_BUCKETS` = ``0, 1, 2, 3-4, 5+`` (EvoSyn promoted both with these buckets).
* ``pattern`` — the coarse tool-use pattern, EvoSyn's initial interface: the read/write sequence
  with runs collapsed (``r r w r`` -> ``rwr``), up to three runs exactly, four or more runs as
  ``rw+`` / ``wr+`` (by the first kind); ``none`` for no call. :data:`PATTERN_BUCKETS`.
* ``distinct_tools`` — how many different tools the trajectory uses, :data:`DISTINCT_BUCKETS`.
* computation (a sum, a comparison, a condition) depends on what the values mean: the domain's.

Structural metrics of a collection of gold trajectories (one step's valid tasks, or a run):

* :func:`interaction_coverage` — share of the possible ordered transitions (start or a tool, then a
  tool) that occur as consecutive calls. Transitions rather than single tools: a world of 6-12
  tools has every tool used within a step or two, while the order in which tools follow each
  other (what EvoSyn calls interaction structure) keeps growing with the data. The start marker
  lets one-call trajectories count (their first call is a choice too). :func:`tool_coverage` is
  the single-tool share, for reference.
* :func:`trajectory_diversity` — evenness of the pattern distribution: Shannon entropy over the
  possible patterns, divided by its maximum, so 1 means every pattern equally often and 0 one
  pattern only (as ``synco.evosyn.metrics.balance`` does for factor cells).
* :func:`distinct_action_sequences` / :class:`DistinctSequences` — distinct tool-name sequences
  (EvoSyn's structural support); the class accumulates them over a run and saves them for resume.
* :func:`contrastive_support` — share of action compositions (multisets of tool names) seen in
  more than one order: order-level contrast, EvoSyn's tool-order contrastive support.

:func:`first_wrong_call` locates where an agent's calls first leave the gold ones, for failure
reports. Nothing here imports torch.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Literal

from synco.core.episodes import ToolCall
from synco.evosyn.space import FactorDef, HasFactorSpace

Kind = Literal["read", "write"]
NEUTRAL_KINDS: frozenset[str] = frozenset({"think", "generic"})
"""Tool tags that neither read nor change the state (τ²'s ``think`` and ``generic``, e.g.
``transfer_to_human_agents``): a trajectory's read/write shape leaves their calls out."""
Trajectory = Sequence[ToolCall]

COUNT_BUCKETS: tuple[str, ...] = ("0", "1", "2", "3-4", "5+")
"""Buckets of ``num_write`` and ``num_read`` (EvoSyn's)."""

DISTINCT_BUCKETS: tuple[str, ...] = ("0", "1", "2", "3", "4+")
"""Buckets of ``distinct_tools``."""

PATTERN_BUCKETS: tuple[str, ...] = ("none", "r", "w", "rw", "wr", "rwr", "wrw", "rw+", "wr+")
"""Coarse tool-use patterns: runs collapsed, exact up to three runs, ``rw+`` / ``wr+`` for four or more."""

START = "^"
"""The start of a trajectory in a transition (tool names are identifiers, so it cannot clash)."""


# ---------------------------------------------------------------- factors of one trajectory


def bucket(n: int, buckets: Sequence[str]) -> str:
    """The first label of ``buckets`` that holds ``n``: ``"k"`` (exactly k), ``"a-b"`` (a..b) or ``"a+"`` (>= a)."""
    for label in buckets:
        if label.endswith("+"):
            if n >= int(label[:-1]):
                return label
        elif "-" in label:
            lo, hi = label.split("-", 1)
            if int(lo) <= n <= int(hi):
                return label
        elif n == int(label):
            return label
    raise ValueError(f"n={n} is in none of the buckets {list(buckets)}")


def kind_sequence(calls: Trajectory, kinds: Mapping[str, Kind]) -> str:
    """The calls' kinds as a string, ``r`` per read and ``w`` per write, in order.

    Calls of a :data:`NEUTRAL_KINDS` tool are left out. A tool missing from ``kinds`` (or with another tag)
    raises: a gold trajectory is verified, so it names only known tools.
    """
    out = []
    for i, call in enumerate(calls):
        kind = kinds.get(call.name)
        if kind in NEUTRAL_KINDS:
            continue
        if kind not in ("read", "write"):
            raise ValueError(f"calls[{i}].name={call.name!r}: no read/write kind for this tool (got {kind!r})")
        out.append(kind[0])
    return "".join(out)


def num_write(calls: Trajectory, kinds: Mapping[str, Kind]) -> str:
    """``num_write`` bucket: how many calls change the state (EvoSyn's failure-explaining factor)."""
    return bucket(kind_sequence(calls, kinds).count("w"), COUNT_BUCKETS)


def num_read(calls: Trajectory, kinds: Mapping[str, Kind]) -> str:
    """``num_read`` bucket: how many calls only gather information."""
    return bucket(kind_sequence(calls, kinds).count("r"), COUNT_BUCKETS)


def collapse_runs(seq: str) -> str:
    """``seq`` with each run of equal characters kept once: ``rrwwr`` -> ``rwr``."""
    return "".join(c for i, c in enumerate(seq) if i == 0 or seq[i - 1] != c)


def pattern(calls: Trajectory, kinds: Mapping[str, Kind]) -> str:
    """The coarse tool-use pattern (one of :data:`PATTERN_BUCKETS`): the shape, not the counts."""
    runs = collapse_runs(kind_sequence(calls, kinds))
    if not runs:
        return "none"
    return runs if len(runs) <= 3 else runs[:2] + "+"


def distinct_tools(calls: Trajectory) -> str:
    """``distinct_tools`` bucket: how many different tools the trajectory uses."""
    return bucket(len({c.name for c in calls}), DISTINCT_BUCKETS)


def trajectory_factors(calls: Trajectory, kinds: Mapping[str, Kind]) -> dict[str, str]:
    """Every factor this module computes for one gold trajectory, by name."""
    return {"num_write": num_write(calls, kinds), "num_read": num_read(calls, kinds),
            "pattern": pattern(calls, kinds), "distinct_tools": distinct_tools(calls)}


# ---------------------------------------------------------------- metrics of many trajectories


def read_write_factor_defs(actions_of: Callable[[str], Trajectory | None], kinds: Mapping[str, Kind],
                           patterns: Sequence[str] = PATTERN_BUCKETS) -> list[FactorDef]:
    """``pattern``, ``num_write`` and ``num_read`` as factor definitions of a tool world whose subjects
    ``actions_of`` turns into the gold trajectory (None: the subject does not parse, so no value)."""

    def on(fn: Callable[[Trajectory, Mapping[str, Kind]], str]) -> Callable[[str], str | None]:
        def extract(subject: str) -> str | None:
            calls = actions_of(subject)
            return None if calls is None else fn(calls, kinds)
        return extract

    return [
        FactorDef("pattern", tuple(patterns), on(pattern),
                  "coarse tool-use pattern: the read/write runs of the gold trajectory (r, rw, rwr, rw+, ...)"),
        FactorDef("num_write", COUNT_BUCKETS, on(num_write), "write calls in the gold trajectory"),
        FactorDef("num_read", COUNT_BUCKETS, on(num_read), "read calls in the gold trajectory"),
    ]


def names(calls: Trajectory) -> tuple[str, ...]:
    """The tool-name sequence of a trajectory (arguments dropped): its structure."""
    return tuple(c.name for c in calls)


def transitions(calls: Trajectory) -> list[tuple[str, str]]:
    """Consecutive (previous, next) tool pairs, the first from :data:`START`: ``a;b`` -> ``(^,a), (a,b)``."""
    seq = (START, *names(calls))
    return list(zip(seq[:-1], seq[1:]))


def tool_coverage(trajectories: Iterable[Trajectory], inventory: Iterable[str]) -> float:
    """Share of the inventory's tools called at least once (0.0 for an empty inventory)."""
    tools = set(inventory)
    if not tools:
        return 0.0
    used = {c.name for t in trajectories for c in t}
    return len(used & tools) / len(tools)


def interaction_coverage(trajectories: Iterable[Trajectory], inventory: Iterable[str]) -> float:
    """Share of the possible transitions (start or a tool, then a tool) that some trajectory makes.

    With n tools there are n * (n + 1) transitions; a tool outside ``inventory`` makes none of them.
    0.0 for an empty inventory.
    """
    tools = set(inventory)
    if not tools:
        return 0.0
    seen = {(a, b) for t in trajectories for a, b in transitions(t) if (a == START or a in tools) and b in tools}
    return len(seen) / (len(tools) * (len(tools) + 1))


def trajectory_diversity(patterns: Iterable[str], possible: Sequence[str] = PATTERN_BUCKETS) -> float:
    """Evenness of the patterns over the ``possible`` ones: Shannon entropy / ln(len(possible)).

    1.0 when every possible pattern occurs equally often, 0.0 when one pattern takes all (or there is
    no data, or fewer than two possible patterns). A pattern outside ``possible`` is not counted.
    A domain where some patterns cannot occur passes its feasible ones, so 1.0 stays reachable.
    """
    allowed = set(possible)
    counts = Counter(p for p in patterns if p in allowed)
    n = sum(counts.values())
    if n == 0 or len(allowed) < 2:
        return 0.0
    h = -sum(k / n * math.log(k / n) for k in counts.values())
    return h / math.log(len(allowed))


def distinct_action_sequences(trajectories: Iterable[Trajectory]) -> int:
    """How many distinct tool-name sequences the trajectories have (arguments ignored)."""
    return len({names(t) for t in trajectories})


def composition(calls: Trajectory) -> tuple[tuple[str, int], ...]:
    """The multiset of tool names, as sorted (name, count) pairs: what is done, regardless of order."""
    return tuple(sorted(Counter(names(calls)).items()))


def contrastive_support(trajectories: Iterable[Trajectory]) -> float:
    """Share of the action compositions seen in more than one order (EvoSyn's tool-order contrastive support).

    Counted over the compositions that *have* more than one order, i.e. at least two different tool
    names: ``[a]`` or ``[a, a]`` can only be done one way and would otherwise count as missing contrast.
    Compositions are exact multisets of names. 0.0 when no such composition occurs.
    """
    orders: dict[tuple[tuple[str, int], ...], set[tuple[str, ...]]] = defaultdict(set)
    for t in trajectories:
        comp = composition(t)
        if len(comp) >= 2:
            orders[comp].add(names(t))
    if not orders:
        return 0.0
    return sum(len(seqs) > 1 for seqs in orders.values()) / len(orders)


class DistinctSequences:
    """The distinct gold tool-name sequences a run has produced so far (EvoSyn's cumulative structural support).

    The run calls :meth:`update` with each step's valid trajectories and records ``len()``; the state
    saves to JSON with the run's checkpoints (:meth:`to_json`) and comes back on resume (:meth:`from_json`).
    """

    def __init__(self, sequences: Iterable[Sequence[str]] = ()) -> None:
        self._seen: set[tuple[str, ...]] = {tuple(s) for s in sequences}

    def update(self, trajectories: Iterable[Trajectory]) -> int:
        """Add the trajectories' sequences; returns how many were new."""
        before = len(self._seen)
        self._seen.update(names(t) for t in trajectories)
        return len(self._seen) - before

    def __len__(self) -> int:
        return len(self._seen)

    def to_json(self) -> str:
        """``{"sequences": [[name, ...], ...]}``, sorted so equal states write equal text."""
        return json.dumps({"sequences": [list(s) for s in sorted(self._seen)]})

    @classmethod
    def from_json(cls, text: str) -> "DistinctSequences":
        """The state :meth:`to_json` wrote; a malformed one raises ``ValueError`` naming what is wrong."""
        data = json.loads(text)
        seqs = data.get("sequences") if isinstance(data, dict) else None
        if not isinstance(seqs, list):
            raise ValueError(f"sequences: expected a list of lists of tool names, got {type(seqs).__name__}")
        for i, s in enumerate(seqs):
            if not isinstance(s, list) or not all(isinstance(x, str) for x in s):
                raise ValueError(f"sequences[{i}]={s!r}: expected a list of tool names")
        return cls(seqs)


# ---------------------------------------------------------------- failures


def first_wrong_call(agent_calls: Sequence[ToolCall | None], gold: Trajectory) -> tuple[int, str] | None:
    """Where the agent's calls first differ from the gold ones: ``(index, "code:tool")``, or None if they match.

    ``agent_calls`` are the agent's call turns in order, None for a turn meant as a call that did not
    parse (malformed, unknown tool, bad arguments: the environment answered with an error). Codes (a
    stable code, then the tool, as verdict reasons are written): ``wrong_tool:<gold tool>`` (another tool
    at that position), ``wrong_arguments:<gold tool>`` (the right tool, other arguments as parsed),
    ``malformed_call:<gold tool>`` (a call that did not parse), ``missing_call:<gold tool>`` (the agent
    stopped before it), ``extra_call:<agent tool>`` (the agent went on after the gold list ended; ``?``
    when that call did not parse). A diagnostic for failed episodes: grading compares end states, so a
    passing agent may well take another path than the gold one.
    """
    for i, (mine, ref) in enumerate(zip(agent_calls, gold)):
        if mine is None:
            return i, f"malformed_call:{ref.name}"
        if mine.name != ref.name:
            return i, f"wrong_tool:{ref.name}"
        if mine.arguments != ref.arguments:
            return i, f"wrong_arguments:{ref.name}"
    n = min(len(agent_calls), len(gold))
    if len(agent_calls) < len(gold):
        return n, f"missing_call:{gold[n].name}"
    if len(agent_calls) > len(gold):
        extra = agent_calls[n]
        return n, f"extra_call:{extra.name if extra is not None else '?'}"
    return None


def possible_patterns(domain: object) -> tuple[str, ...]:
    """The patterns ``domain`` can produce: the buckets of its ``pattern`` factor when it has one, else all of
    :data:`PATTERN_BUCKETS` (what :func:`trajectory_diversity` normalises by)."""
    if isinstance(domain, HasFactorSpace):
        for d in domain.factor_defs():
            if d.name == "pattern":
                return d.buckets
    return PATTERN_BUCKETS
