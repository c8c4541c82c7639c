"""The tools world's task generator: instruction templates per family, solved on the database.

A task is an instruction (names entities by name, never by id), the gold action list and the outputs
the agent must state. A *family* is a set of instruction templates with a solver that plans the gold
actions on the initial database; the same templates read back (:func:`task_of_instruction`), so an
instruction of the generator's own is enough to rebuild its task (held-out items carry only that).

==============  =====  ======  ==============================================  ========================
family          reads  writes  example instruction                              computed
==============  =====  ======  ==============================================  ========================
lookup          1      0       what does the lamp cost?                        --
cost_n          1      0       how much do 3 lamps cost?                       price * n
sum2            2      0       what do a lamp and a mug cost together?         sum
diff            2      0       how much more does a lamp cost than a mug?      difference
richer          2      0       who has more money, bob or ann?                 comparison (a name)
afford          2      0       how many lamps can bob afford?                  balance // price
left            2      0       how much would bob have left after buying a     difference
                               lamp?
total           3-5    0       how much has bob paid for orders in total?      sum (skips cancelled)
cancel          2      1       cancel bob's pending order                      --
cancel_all      2      2-3     cancel all of bob's pending orders              filter (pending)
ship            2      1-3     ship all of bob's pending orders                filter (pending)
buy             2      1       buy 2 lamps for bob                             --
buy_cheaper     3      1       buy bob a lamp or a mug, whichever is cheaper   comparison
buy_else        2-3    1       buy bob a lamp if affordable, else a mug        condition
transfer        2      1       send 20 from bob to ann                         --
transfer_all    2      1       give all of bob's money to ann                  --
gift            3-4    2-3     send 5 each from bob to ann, cal and dan        --
cancel_balance  3      1       cancel bob's pending order and say bob's new    read after the write
                               balance
cancel_buy      3      2       cancel bob's pending order, then buy bob a mug  write, read, write
==============  =====  ======  ==============================================  ========================

Patterns (``synco.evosyn.trajectory.pattern``): the read-only families ``r``; ``cancel_balance`` ``rwr``;
``cancel_buy`` ``rw+``; the others ``rw``. Every write needs reads first (its ids come from lookups). A stable 10 % hash bucket of tasks is held
out (:func:`is_heldout_task`): :func:`sample_task` never returns one.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from synco.core.episodes import ToolCall
from synco.domains.tools.db import DB, MAX_PENDING, PRODUCT_NAMES, USER_NAMES, build_db
from synco.domains.tools.syntax import format_call, format_outputs, make_call
from synco.domains.tools.tools import MAX_QTY, TOOL_KINDS


class Task(NamedTuple):
    """One task: the instruction, the gold actions (no ``done``) and the outputs the agent must state."""

    instruction: str
    actions: tuple[ToolCall, ...]
    outputs: tuple[str, ...]


Slots = dict[str, str]
Plan = tuple[list[ToolCall], list[str]]  # (gold actions, outputs)


@dataclass(frozen=True)
class Family:
    """A task family: templates (``str.format`` with slots ``user``, ``user2``.., ``product``, ``product2``,
    ``n``), a slot sampler, and a solver that plans the gold actions (None when the slots make no valid task)."""

    name: str
    templates: tuple[str, ...]
    sample: Callable[[random.Random], tuple[int, Slots]]
    solve: Callable[[DB, int, Slots], Plan | None]


# ----------------------------------------------------------------- helpers


def _users(rng: random.Random, k: int) -> list[str]:
    return rng.sample(USER_NAMES, k)


def _products(rng: random.Random, k: int) -> list[str]:
    return rng.sample(PRODUCT_NAMES, k)


def _call(name: str, *args: object) -> ToolCall:
    return make_call(name, *args)


def _can_buy(db: DB, user_id: str, product_id: str, qty: int, refund: int = 0) -> bool:
    """Whether ``place_order`` would pass the policy (``refund``: money returned by an earlier cancel)."""
    user, product = db.users[user_id], db.products[product_id]
    return (1 <= qty <= MAX_QTY and product.stock >= qty and user.balance + refund >= product.price * qty
            and len(db.pending_of(user_id)) < MAX_PENDING)


# ----------------------------------------------------------------- solvers (db, template index, slots) -> plan


def _lookup(db: DB, t: int, s: Slots) -> Plan | None:
    if t == 2:
        user = db.user_by_name(s["user"])
        return None if user is None else ([_call("find_user", user.name)], [str(user.balance)])
    product = db.product_by_name(s["product"])
    if product is None:
        return None
    return [_call("find_product", product.name)], [str(product.price if t == 0 else product.stock)]


def _cost_n(db: DB, t: int, s: Slots) -> Plan | None:
    product, n = db.product_by_name(s["product"]), int(s["n"])
    if product is None or not 2 <= n <= 12:
        return None
    return [_call("find_product", product.name)], [str(product.price * n)]


def _diff(db: DB, t: int, s: Slots) -> Plan | None:
    a, b = db.product_by_name(s["product"]), db.product_by_name(s["product2"])
    if a is None or b is None or a.price <= b.price:
        return None
    return [_call("find_product", a.name), _call("find_product", b.name)], [str(a.price - b.price)]


def _sum2(db: DB, t: int, s: Slots) -> Plan | None:
    a, b = db.product_by_name(s["product"]), db.product_by_name(s["product2"])
    if a is None or b is None or a.id == b.id:
        return None
    return [_call("find_product", a.name), _call("find_product", b.name)], [str(a.price + b.price)]


def _richer(db: DB, t: int, s: Slots) -> Plan | None:
    a, b = db.user_by_name(s["user"]), db.user_by_name(s["user2"])
    if a is None or b is None or a.balance == b.balance:
        return None
    return [_call("find_user", a.name), _call("find_user", b.name)], [a.name if a.balance > b.balance else b.name]


def _afford(db: DB, t: int, s: Slots) -> Plan | None:
    user, product = db.user_by_name(s["user"]), db.product_by_name(s["product"])
    if user is None or product is None:
        return None
    return [_call("find_user", user.name), _call("find_product", product.name)], [str(user.balance // product.price)]


def _left(db: DB, t: int, s: Slots) -> Plan | None:
    user, product = db.user_by_name(s["user"]), db.product_by_name(s["product"])
    if user is None or product is None or user.balance < product.price:
        return None
    return [_call("find_user", user.name), _call("find_product", product.name)], [str(user.balance - product.price)]


def _total(db: DB, t: int, s: Slots) -> Plan | None:
    user = db.user_by_name(s["user"])
    if user is None:
        return None
    held = [o for o in db.orders_of(user.id) if o.status != "cancelled"]
    if not 1 <= len(held) <= 3:
        return None
    actions = [_call("find_user", user.name), _call("list_orders", user.id)] + [_call("get_order", o.id) for o in held]
    return actions, [str(sum(o.paid for o in held))]


def _pending_writes(tool: str, lo: int, hi: int) -> Callable[[DB, int, Slots], Plan | None]:
    """Solver of ``<tool> every pending order of a user`` for users with ``lo..hi`` pending orders."""
    def solve(db: DB, t: int, s: Slots) -> Plan | None:
        user = db.user_by_name(s["user"])
        if user is None:
            return None
        pending = db.pending_of(user.id)
        if not lo <= len(pending) <= hi:
            return None
        return [_call("find_user", user.name), _call("list_orders", user.id)] + [_call(tool, o.id) for o in pending], []
    return solve


def _buy(db: DB, t: int, s: Slots) -> Plan | None:
    user, product = db.user_by_name(s["user"]), db.product_by_name(s["product"])
    n = 1 if t == 1 else int(s["n"])
    if user is None or product is None or (t == 0 and n < 2) or not _can_buy(db, user.id, product.id, n):
        return None
    return [_call("find_user", user.name), _call("find_product", product.name),
            _call("place_order", user.id, product.id, n)], []


def _buy_cheaper(db: DB, t: int, s: Slots) -> Plan | None:
    user, a, b = db.user_by_name(s["user"]), db.product_by_name(s["product"]), db.product_by_name(s["product2"])
    if user is None or a is None or b is None or a.price == b.price:
        return None
    cheaper = a if a.price < b.price else b
    if not _can_buy(db, user.id, cheaper.id, 1):
        return None
    return [_call("find_user", user.name), _call("find_product", a.name), _call("find_product", b.name),
            _call("place_order", user.id, cheaper.id, 1)], []


def _buy_else(db: DB, t: int, s: Slots) -> Plan | None:
    user, a, b = db.user_by_name(s["user"]), db.product_by_name(s["product"]), db.product_by_name(s["product2"])
    if user is None or a is None or b is None or a.id == b.id:
        return None
    reads = [_call("find_user", user.name), _call("find_product", a.name)]
    if user.balance >= a.price:  # affordable: buy the first (it must be in stock)
        return (reads + [_call("place_order", user.id, a.id, 1)], []) if _can_buy(db, user.id, a.id, 1) else None
    if not _can_buy(db, user.id, b.id, 1):
        return None
    return reads + [_call("find_product", b.name), _call("place_order", user.id, b.id, 1)], []


def _transfer(db: DB, t: int, s: Slots) -> Plan | None:
    a, b, n = db.user_by_name(s["user"]), db.user_by_name(s["user2"]), int(s["n"])
    if a is None or b is None or a.id == b.id or not 1 <= n <= a.balance:
        return None
    return [_call("find_user", a.name), _call("find_user", b.name), _call("transfer", a.id, b.id, n)], []


def _transfer_all(db: DB, t: int, s: Slots) -> Plan | None:
    a, b = db.user_by_name(s["user"]), db.user_by_name(s["user2"])
    if a is None or b is None or a.id == b.id or a.balance < 1:
        return None
    return [_call("find_user", a.name), _call("find_user", b.name), _call("transfer", a.id, b.id, a.balance)], []


def _gift(db: DB, t: int, s: Slots) -> Plan | None:
    names = [s["user"], s["user2"], s["user3"]] + ([s["user4"]] if t == 1 else [])
    users = [db.user_by_name(n) for n in names]
    n = int(s["n"])
    if any(u is None for u in users) or len(set(names)) != len(names):
        return None
    src, dsts = users[0], users[1:]
    if not 1 <= n or src.balance < n * len(dsts):  # type: ignore[union-attr]
        return None
    reads = [_call("find_user", name) for name in names]
    return reads + [_call("transfer", src.id, d.id, n) for d in dsts], []  # type: ignore[union-attr]


def _cancel_balance(db: DB, t: int, s: Slots) -> Plan | None:
    user = db.user_by_name(s["user"])
    if user is None:
        return None
    pending = db.pending_of(user.id)
    if len(pending) != 1:
        return None
    return [_call("find_user", user.name), _call("list_orders", user.id), _call("cancel_order", pending[0].id),
            _call("find_user", user.name)], [str(user.balance + pending[0].paid)]


def _cancel_buy(db: DB, t: int, s: Slots) -> Plan | None:
    user, product = db.user_by_name(s["user"]), db.product_by_name(s["product"])
    if user is None or product is None:
        return None
    pending = db.pending_of(user.id)
    if len(pending) != 1:
        return None
    order = pending[0]
    stock = product.stock + (order.qty if order.product == product.id else 0)
    if stock < 1 or user.balance + order.paid < product.price:  # the pending limit is freed by the cancel
        return None
    return [_call("find_user", user.name), _call("list_orders", user.id), _call("cancel_order", order.id),
            _call("find_product", product.name), _call("place_order", user.id, product.id, 1)], []


# ----------------------------------------------------------------- samplers


def _one(keys: str, **fixed: Callable[[random.Random], str]) -> Callable[[random.Random], tuple[int, Slots]]:
    """A sampler of template 0 filling ``keys`` (``u``: users, ``p``: products, ``n`` via ``fixed``)."""
    def sample(rng: random.Random) -> tuple[int, Slots]:
        slots: Slots = {}
        users, products = _users(rng, keys.count("u")), _products(rng, keys.count("p"))
        for i, u in enumerate(users):
            slots["user" if i == 0 else f"user{i + 1}"] = u
        for i, p in enumerate(products):
            slots["product" if i == 0 else f"product{i + 1}"] = p
        for k, draw in fixed.items():
            slots[k] = draw(rng)
        return 0, slots
    return sample


def _sample_lookup(rng: random.Random) -> tuple[int, Slots]:
    t = rng.randrange(3)
    return t, ({"user": rng.choice(USER_NAMES)} if t == 2 else {"product": rng.choice(PRODUCT_NAMES)})


def _sample_buy(rng: random.Random) -> tuple[int, Slots]:
    t = rng.randrange(2)
    slots = {"user": rng.choice(USER_NAMES), "product": rng.choice(PRODUCT_NAMES)}
    if t == 0:
        slots["n"] = str(rng.randint(2, MAX_QTY))
    return t, slots


def _sample_gift(rng: random.Random) -> tuple[int, Slots]:
    t = rng.randrange(2)
    names = _users(rng, 3 + t)
    slots = {"user" if i == 0 else f"user{i + 1}": u for i, u in enumerate(names)}
    slots["n"] = str(5 * rng.randint(1, 6))
    return t, slots


FAMILIES: tuple[Family, ...] = (
    Family("lookup", ("what does the {product} cost?", "how many {product}s are in stock?",
                      "how much money does {user} have?"), _sample_lookup, _lookup),
    Family("cost_n", ("how much do {n} {product}s cost?",), _one("p", n=lambda r: str(r.randint(2, 12))), _cost_n),
    Family("sum2", ("what do a {product} and a {product2} cost together?",), _one("pp"), _sum2),
    Family("diff", ("how much more does a {product} cost than a {product2}?",), _one("pp"), _diff),
    Family("richer", ("who has more money, {user} or {user2}?",), _one("uu"), _richer),
    Family("afford", ("how many {product}s can {user} afford?",), _one("up"), _afford),
    Family("left", ("how much would {user} have left after buying a {product}?",), _one("up"), _left),
    Family("total", ("how much has {user} paid for orders in total?",), _one("u"), _total),
    Family("cancel", ("cancel {user}'s pending order",), _one("u"), _pending_writes("cancel_order", 1, 1)),
    Family("cancel_all", ("cancel all of {user}'s pending orders",), _one("u"),
           _pending_writes("cancel_order", 2, MAX_PENDING)),
    Family("ship", ("ship all of {user}'s pending orders",), _one("u"), _pending_writes("ship_order", 1, MAX_PENDING)),
    Family("buy", ("buy {n} {product}s for {user}", "buy a {product} for {user}"), _sample_buy, _buy),
    Family("buy_cheaper", ("buy {user} a {product} or a {product2}, whichever is cheaper",), _one("upp"), _buy_cheaper),
    Family("buy_else", ("buy {user} a {product} if affordable, else a {product2}",), _one("upp"), _buy_else),
    Family("transfer", ("send {n} from {user} to {user2}",), _one("uu", n=lambda r: str(5 * r.randint(1, 10))),
           _transfer),
    Family("transfer_all", ("give all of {user}'s money to {user2}",), _one("uu"), _transfer_all),
    Family("gift", ("send {n} each from {user} to {user2} and {user3}",
                    "send {n} each from {user} to {user2}, {user3} and {user4}"), _sample_gift, _gift),
    Family("cancel_balance", ("cancel {user}'s pending order and say {user}'s new balance",), _one("u"),
           _cancel_balance),
    Family("cancel_buy", ("cancel {user}'s pending order, then buy {user} a {product}",), _one("up"), _cancel_buy),
)
"""The task families (see the module docstring's table)."""

FAMILY_NAMES: tuple[str, ...] = tuple(f.name for f in FAMILIES)
_FAMILY_BY_NAME = {f.name: f for f in FAMILIES}


# ----------------------------------------------------------------- templates read back


def _template_regex(template: str) -> re.Pattern[str]:
    """The regex of a template: slots become named groups (a repeated slot a back-reference)."""
    out, seen, pos = [], set(), 0
    for m in re.finditer(r"\{(\w+)\}", template):
        out.append(re.escape(template[pos:m.start()]))
        slot = m.group(1)
        if slot in seen:
            out.append(f"(?P={slot})")
        else:
            seen.add(slot)
            out.append(f"(?P<{slot}>[0-9]{{1,3}})" if slot == "n" else f"(?P<{slot}>[a-z]{{1,8}})")
        pos = m.end()
    out.append(re.escape(template[pos:]))
    return re.compile("".join(out))


_REGEXES: tuple[tuple[Family, int, re.Pattern[str]], ...] = tuple(
    (f, i, _template_regex(t)) for f in FAMILIES for i, t in enumerate(f.templates))

MAX_INSTRUCTION_CHARS = 80
"""Longest instruction (the generator's longest is under this)."""


def task_of_instruction(db: DB, instruction: str) -> tuple[str, Task] | None:
    """``(family, task)`` of an instruction written by a family template, solved on ``db``; else None."""
    if not isinstance(instruction, str) or len(instruction) > MAX_INSTRUCTION_CHARS:
        return None
    text = instruction.strip().lower()
    for family, t, regex in _REGEXES:
        m = regex.fullmatch(text)
        if m is None:
            continue
        plan = family.solve(db, t, m.groupdict())
        if plan is not None:
            return family.name, Task(text, tuple(plan[0]), tuple(plan[1]))
    return None


def task_on_variant(instruction: str, variant: int) -> tuple[DB, Task] | None:
    """An instruction of the world's templates solved on database variant ``variant``: that variant's database (a
    fresh copy) and the task there (its branch may differ from variant 0's); None when it is no template instruction
    or the variant cannot pose it (an episode, and the warm start, then fall back to the fixed database)."""
    db = build_db(variant)
    solved = task_of_instruction(db, instruction)
    return None if solved is None else (db, solved[1])


def family_of_instruction(instruction: str) -> str | None:
    """The family whose template the instruction follows (slots not checked on a database), or None."""
    if not isinstance(instruction, str) or len(instruction) > MAX_INSTRUCTION_CHARS:
        return None
    text = instruction.strip().lower()
    return next((f.name for f, _, regex in _REGEXES if regex.fullmatch(text)), None)


# ----------------------------------------------------------------- held-out bucket

HELDOUT_PERCENT = 10
"""Share of tasks (by the hash of :func:`task_key`) reserved for held-out evaluation."""

_HELDOUT_SALT = b"synco-tools-heldout-v1:"


def task_key(actions: Sequence[ToolCall], outputs: Sequence[str]) -> str:
    """The canonical form of a task's gold trajectory, for the held-out bucket.

    What the task changes and states: its write calls (sorted: the order of independent writes does not
    make a new task), its outputs (sorted) and, for a task that writes nothing, its distinct reads (sorted).
    So an extra read, a reordering or a reworded instruction does not move a task out of the bucket.
    """
    writes = sorted(format_call(a) for a in actions if TOOL_KINDS.get(a.name) == "write")
    reads = sorted({format_call(a) for a in actions if TOOL_KINDS.get(a.name) == "read"}) if not writes else []
    return f"W:{';'.join(writes)}|R:{';'.join(reads)}|O:{format_outputs(sorted(outputs))}"


def is_heldout_task(actions: Sequence[ToolCall], outputs: Sequence[str]) -> bool:
    """Whether the task falls in the held-out hash bucket (sha256 of a salt and :func:`task_key`)."""
    digest = hashlib.sha256(_HELDOUT_SALT + task_key(actions, outputs).encode()).digest()
    return int.from_bytes(digest[:8], "big") % 100 < HELDOUT_PERCENT


def n_writes(actions: Sequence[ToolCall]) -> int:
    return sum(TOOL_KINDS.get(a.name) == "write" for a in actions)


def writes_group(actions: Sequence[ToolCall]) -> str:
    """The held-out group: the number of writes, ``w0``, ``w1``, ``w2`` or ``w3+``."""
    n = n_writes(actions)
    return f"w{n}" if n < 3 else "w3+"


HELDOUT_GROUPS: tuple[str, ...] = ("w0", "w1", "w2", "w3+")


# ----------------------------------------------------------------- sampling

_MAX_DRAWS = 500
"""Draws of slots before :func:`raw_task` gives up on a family (a family's slots fail at most ~80 % of the time)."""


def raw_task(db: DB, rng: random.Random, family: str) -> Task:
    """A random valid task of ``family`` (the held-out bucket included)."""
    fam = _FAMILY_BY_NAME.get(family)
    if fam is None:
        raise ValueError(f"unknown family {family!r}; known: {', '.join(FAMILY_NAMES)}")
    for _ in range(_MAX_DRAWS):
        t, slots = fam.sample(rng)
        plan = fam.solve(db, t, slots)
        if plan is not None:
            return Task(fam.templates[t].format(**slots), tuple(plan[0]), tuple(plan[1]))
    raise ValueError(f"family {family!r}: no valid task in {_MAX_DRAWS} draws")


def sample_task(db: DB, rng: random.Random, family: str) -> Task:
    """A random training task of ``family``; never a held-out one."""
    for _ in range(_MAX_DRAWS):
        task = raw_task(db, rng, family)
        if not is_heldout_task(task.actions, task.outputs):
            return task
    raise ValueError(f"family {family!r}: every task drawn is held out")
