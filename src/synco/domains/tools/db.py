"""The tools world's database: users, products and orders, built from a fixed seed in code.

One database, always the same: every value is drawn from sha256 of a fixed seed and a key (not from
``random``, whose methods may change between Python versions), so the world, its tasks and the hash of
its state are identical in every process and on every machine. An episode works on its own
:meth:`DB.copy` (a few dozen small records, copied in microseconds), so nothing leaks between episodes.

The initial state respects the policy (``synco.domains.tools.tools.POLICY``): no user holds more than
``MAX_PENDING`` pending orders, a cancelled order holds no money (``paid`` 0), every other order holds
``price * qty``.

*Variants* (``build_db(variant)``, ``variant >= 1``; the ``tools.db_variants`` setting): the same world with
other numbers. Users, products, names, ids and every order's id, owner, product and status are variant 0's (what
instructions and cards name); balances, prices, stocks and order quantities are drawn again from sha256 of the
seed, the variant and the key, in the same ranges, and each order's ``paid`` follows. Their purpose: an answer
recalled from the one fixed database is wrong on another variant, so only reading the observations pays.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Literal

Status = Literal["pending", "shipped", "cancelled"]
STATUSES: tuple[Status, ...] = ("pending", "shipped", "cancelled")

MAX_PENDING = 3
"""Most pending orders one user may hold (a policy rule; the initial state respects it)."""

USER_NAMES: tuple[str, ...] = (
    "ann", "bob", "cal", "dan", "eve", "fay", "gus", "hal", "ivy", "jon", "kim", "lea",
    "max", "ned", "oli", "pam", "rex", "sam", "tom", "uma", "val", "wes", "xan", "zoe",
)
"""One user per name, ids ``u1``.. in this order; short lowercase words that no instruction template uses."""

PRODUCT_NAMES: tuple[str, ...] = (
    "lamp", "mug", "pen", "cup", "hat", "bag", "fan", "map",
    "kit", "jar", "pad", "rug", "bell", "sock", "vase", "tray",
)
"""One product per name, ids ``p1``.. in this order; each takes a plain ``s`` plural."""

MAX_ORDERS_PER_USER = 4
"""Most orders one user holds in the initial database (keeps ``list_orders`` observations short)."""

_SEED = "synco-tools-db-v1"


BALANCES = (10, 200)
PRICES = (2, 40)
STOCKS = (0, 9)
ORDER_QTYS = (1, 3)
"""The ranges (inclusive) of the drawn values, in every variant."""


def _draw(key: str, lo: int, hi: int, variant: int = 0) -> int:
    """A stable integer in ``[lo, hi]`` for ``key`` (sha256 of the seed, the variant when it is not 0, and the key)."""
    salt = _SEED if variant == 0 else f"{_SEED}:variant:{variant}"
    digest = hashlib.sha256(f"{salt}:{key}".encode()).digest()
    return lo + int.from_bytes(digest[:8], "big") % (hi - lo + 1)


@dataclass
class User:
    id: str
    name: str
    balance: int


@dataclass
class Product:
    id: str
    name: str
    price: int
    stock: int


@dataclass
class Order:
    id: str
    user: str  # a user id
    product: str  # a product id
    qty: int
    paid: int  # money the order holds: price * qty when placed, 0 once cancelled (refunded)
    status: Status


def id_number(record_id: str) -> int:
    """The number of an id such as ``o12`` (for numeric, not lexical, order)."""
    return int(record_id[1:])


@dataclass
class DB:
    """The whole state: records by id. Mutated only by the write tools (``synco.domains.tools.tools``)."""

    users: dict[str, User]
    products: dict[str, Product]
    orders: dict[str, Order]

    def copy(self) -> DB:
        """An independent copy (new records): what one episode or one replay works on."""
        return DB(users={k: replace(v) for k, v in self.users.items()},
                  products={k: replace(v) for k, v in self.products.items()},
                  orders={k: replace(v) for k, v in self.orders.items()})

    def user_by_name(self, name: str) -> User | None:
        return next((u for u in self.users.values() if u.name == name), None)

    def product_by_name(self, name: str) -> Product | None:
        return next((p for p in self.products.values() if p.name == name), None)

    def orders_of(self, user_id: str) -> list[Order]:
        """The user's orders, oldest first."""
        return sorted((o for o in self.orders.values() if o.user == user_id), key=lambda o: id_number(o.id))

    def pending_of(self, user_id: str) -> list[Order]:
        return [o for o in self.orders_of(user_id) if o.status == "pending"]

    def next_order_id(self) -> str:
        return f"o{max((id_number(k) for k in self.orders), default=0) + 1}"

    def canonical(self) -> str:
        """The state as compact JSON: records sorted by id number, fields in a fixed order."""
        def rows(table: dict, fields: tuple[str, ...]) -> list[list]:
            return [[getattr(r, f) for f in fields] for r in sorted(table.values(), key=lambda r: id_number(r.id))]
        return json.dumps({
            "users": rows(self.users, ("id", "name", "balance")),
            "products": rows(self.products, ("id", "name", "price", "stock")),
            "orders": rows(self.orders, ("id", "user", "product", "qty", "paid", "status")),
        }, separators=(",", ":"))

    def state_hash(self) -> str:
        """sha256 (hex) of :meth:`canonical`: equal exactly when the two states are equal."""
        return hashlib.sha256(self.canonical().encode()).hexdigest()


def build_db(variant: int = 0) -> DB:
    """The world's initial database: variant 0 (the default) is the world, always the same; ``variant >= 1`` the
    same records with other numbers (see the module docstring). A fresh copy each call (built variants are cached).

    Balances 10..200, prices 2..40, stocks 0..9. Each user holds 0..``MAX_PENDING`` pending orders
    (drawn uniformly, so every count is common) and up to two more, shipped or cancelled (2:1), at most
    ``MAX_ORDERS_PER_USER`` in all; each order is 1..3 of a product. Order ids ``o1``.. follow a hashed
    order of all orders, so one user's ids are scattered.
    """
    if isinstance(variant, bool) or not isinstance(variant, int) or variant < 0:
        raise ValueError(f"variant must be an int >= 0, got {variant!r}")
    return _built(variant).copy()


@lru_cache(maxsize=1024)
def _built(variant: int) -> DB:
    """The database of ``variant``, built once per process (callers copy it)."""
    return _world() if variant == 0 else revalue(_built(0), variant)


def revalue(db: DB, variant: int) -> DB:
    """``db``'s records with the numbers of ``variant`` (>= 1): balances, prices, stocks and order quantities drawn
    from ``variant``'s keys, ``paid`` recomputed (``price * qty``, 0 for a cancelled order); ids, names, owners,
    products and statuses kept."""
    users = {k: replace(u, balance=_draw(f"balance:{k}", *BALANCES, variant)) for k, u in db.users.items()}
    products = {k: replace(p, price=_draw(f"price:{k}", *PRICES, variant), stock=_draw(f"stock:{k}", *STOCKS, variant))
                for k, p in db.products.items()}
    orders = {}
    for k, o in db.orders.items():
        qty = _draw(f"order-qty:{k}", *ORDER_QTYS, variant)
        paid = 0 if o.status == "cancelled" else products[o.product].price * qty
        orders[k] = replace(o, qty=qty, paid=paid)
    return DB(users, products, orders)


def _world() -> DB:
    """Variant 0: the world every process builds the same (its values and its hash are pinned by the tests)."""
    users = {f"u{i}": User(f"u{i}", name, _draw(f"balance:{i}", *BALANCES)) for i, name in enumerate(USER_NAMES, 1)}
    products = {f"p{i}": Product(f"p{i}", name, _draw(f"price:{i}", *PRICES), _draw(f"stock:{i}", *STOCKS))
                for i, name in enumerate(PRODUCT_NAMES, 1)}
    drafts: list[tuple[str, str, Status]] = []  # (hash key, user id, status)
    for i in range(1, len(users) + 1):
        n_pending = _draw(f"pending:{i}", 0, MAX_PENDING)
        n_other = min(_draw(f"other:{i}", 0, 2), MAX_ORDERS_PER_USER - n_pending)
        statuses: list[Status] = ["pending"] * n_pending
        statuses += ["cancelled" if _draw(f"other-status:{i}:{j}", 0, 2) == 2 else "shipped" for j in range(n_other)]
        drafts += [(hashlib.sha256(f"{_SEED}:order:{i}:{j}".encode()).hexdigest(), f"u{i}", st)
                   for j, st in enumerate(statuses)]
    orders: dict[str, Order] = {}
    for n, (key, user, status) in enumerate(sorted(drafts), 1):
        product = f"p{_draw(f'order-product:{key}', 1, len(products))}"
        qty = _draw(f"order-qty:{key}", *ORDER_QTYS)
        paid = 0 if status == "cancelled" else products[product].price * qty
        orders[f"o{n}"] = Order(f"o{n}", user, product, qty, paid, status)
    return DB(users, products, orders)


def episode_variant(key: str, attempt: int, n_variants: int) -> int:
    """The database variant an episode runs on: 0 when ``n_variants`` is 0 (variants off), else one of 1..``n_variants``.

    ``key`` names the task (the tools domain passes the normalised instruction) and ``attempt`` is the episode's index
    among the task's attempts: attempt ``a`` takes variant ``1 + (offset + a) % n_variants``, with ``offset`` hashed
    from ``key``. So the attempts at one task run on different databases (all different while there are no more of
    them than variants), different tasks start at different variants, and every process picks the same one.
    """
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 0:
        raise ValueError(f"attempt must be an int >= 0, got {attempt!r}")
    if isinstance(n_variants, bool) or not isinstance(n_variants, int) or n_variants < 0:
        raise ValueError(f"n_variants must be an int >= 0, got {n_variants!r}")
    if n_variants == 0:
        return 0
    digest = hashlib.sha256(f"{_SEED}:variant-of:{key}".encode()).digest()
    return 1 + (int.from_bytes(digest[:8], "big") + attempt) % n_variants
