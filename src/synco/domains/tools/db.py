"""The tools world's database: users, products and orders, built from a fixed seed in code.

One database, always the same: every value is drawn from sha256 of a fixed seed and a key (not from
``random``, whose methods may change between Python versions), so the world, its tasks and the hash of
its state are identical in every process and on every machine. An episode works on its own
:meth:`DB.copy` (a few dozen small records, copied in microseconds), so nothing leaks between episodes.

The initial state respects the policy (``synco.domains.tools.tools.POLICY``): no user holds more than
``MAX_PENDING`` pending orders, a cancelled order holds no money (``paid`` 0).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
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


def _draw(key: str, lo: int, hi: int) -> int:
    """A stable integer in ``[lo, hi]`` for ``key`` (sha256 of the seed and the key)."""
    digest = hashlib.sha256(f"{_SEED}:{key}".encode()).digest()
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


def build_db() -> DB:
    """The world's initial database (always the same; see the module docstring).

    Balances 10..200, prices 2..40, stocks 0..9. Each user holds 0..``MAX_PENDING`` pending orders
    (drawn uniformly, so every count is common) and up to two more, shipped or cancelled (2:1), at most
    ``MAX_ORDERS_PER_USER`` in all; each order is 1..3 of a product. Order ids ``o1``.. follow a hashed
    order of all orders, so one user's ids are scattered.
    """
    users = {f"u{i}": User(f"u{i}", name, _draw(f"balance:{i}", 10, 200)) for i, name in enumerate(USER_NAMES, 1)}
    products = {f"p{i}": Product(f"p{i}", name, _draw(f"price:{i}", 2, 40), _draw(f"stock:{i}", 0, 9))
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
        qty = _draw(f"order-qty:{key}", 1, 3)
        paid = 0 if status == "cancelled" else products[product].price * qty
        orders[f"o{n}"] = Order(f"o{n}", user, product, qty, paid, status)
    return DB(users, products, orders)
