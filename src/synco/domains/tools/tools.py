"""The tools world's tools: typed, tagged read or write, validated, with short ASCII results.

=============  =====  ===================================  =====================================
tool           kind   arguments                            result (``ok`` text of an observation)
=============  =====  ===================================  =====================================
find_user      read   name                                 ``u3,120``: id, balance
find_product   read   name                                 ``p2,12,5``: id, price, stock
list_orders    read   user_id                              ``o3:pending,o7:shipped`` or ``none``
get_order      read   order_id                             ``u3,p2,2,24,pending``: user, product,
                                                           qty, paid, status
place_order    write  user_id, product_id, qty             ``o65``: the new order's id
cancel_order   write  order_id                             ``ok``
ship_order     write  order_id                             ``ok``
transfer       write  from_id, to_id, amount               ``ok``
=============  =====  ===================================  =====================================

Argument types: ``name`` (a lowercase word, looked up case-insensitively), ``id`` (``u3``, ``p2``, ``o12``),
``int`` (1..99999). A failed call is a :class:`ToolError` with a code: ``bad_arguments`` (missing,
extra or ill-typed arguments), ``not_found`` (no such record), ``policy_violation`` (a rule of
:data:`POLICY`; its detail is one fixed word). A failed write changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from synco.core.episodes import ToolCall
from synco.domains.tools.db import DB, MAX_PENDING, Order

MAX_QTY = 5
"""Most items of one product in one order (a policy rule)."""

MAX_INT = 99999
"""Largest integer argument; larger (or below 1) is ``bad_arguments``."""

MAX_RESULT_CHARS = 64
"""Longest result text; longer results (a long order list) are cut and end with ``..``."""

POLICY = f"""Rules every write must respect (a violation is an error and changes nothing):
1. Only a pending order can be cancelled or shipped.
2. place_order needs 1 <= qty <= {MAX_QTY}, stock >= qty and balance >= price*qty;
   then stock and balance decrease and the order holds paid = price*qty.
3. A user holds at most {MAX_PENDING} pending orders.
4. cancel_order refunds paid to the user and returns the items to stock (paid becomes 0).
5. transfer needs two different users and amount <= the sender's balance."""
"""The policy the write tools enforce (each rule is a ``policy_violation`` with a one-word detail)."""

Kind = Literal["read", "write"]
ParamType = Literal["name", "id", "int"]

_TOKEN = re.compile(r"[A-Za-z0-9_.-]{1,16}")
_INT = re.compile(r"[0-9]{1,6}")
_ID = re.compile(r"[upo][1-9][0-9]{0,4}")


class ToolError(Exception):
    """A tool call that failed: ``code`` (``bad_arguments``, ``not_found``, ``policy_violation``) and a detail."""

    def __init__(self, code: str, detail: str = "") -> None:
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code = code
        self.detail = detail


@dataclass(frozen=True)
class Param:
    """One positional parameter: its name and type (``name``, ``id`` or ``int``)."""

    name: str
    type: ParamType


@dataclass(frozen=True)
class Tool:
    """A tool: name, read/write tag, positional parameters, and ``run(db, typed_args) -> result text``."""

    name: str
    kind: Kind
    params: tuple[Param, ...]
    run: Callable[[DB, Mapping[str, object]], str]
    doc: str


def _user(db: DB, user_id: object) -> tuple[str, int]:
    user = db.users.get(str(user_id))
    if user is None:
        raise ToolError("not_found", "user")
    return user.id, user.balance


def _order(db: DB, order_id: object) -> Order:
    order = db.orders.get(str(order_id))
    if order is None:
        raise ToolError("not_found", "order")
    return order


def _find_user(db: DB, a: Mapping[str, object]) -> str:
    user = db.user_by_name(str(a["name"]).lower())
    if user is None:
        raise ToolError("not_found", "user")
    return f"{user.id},{user.balance}"


def _find_product(db: DB, a: Mapping[str, object]) -> str:
    product = db.product_by_name(str(a["name"]).lower())
    if product is None:
        raise ToolError("not_found", "product")
    return f"{product.id},{product.price},{product.stock}"


def _list_orders(db: DB, a: Mapping[str, object]) -> str:
    user_id, _ = _user(db, a["user_id"])
    return ",".join(f"{o.id}:{o.status}" for o in db.orders_of(user_id)) or "none"


def _get_order(db: DB, a: Mapping[str, object]) -> str:
    o = _order(db, a["order_id"])
    return f"{o.user},{o.product},{o.qty},{o.paid},{o.status}"


def _place_order(db: DB, a: Mapping[str, object]) -> str:
    user_id, balance = _user(db, a["user_id"])
    product = db.products.get(str(a["product_id"]))
    if product is None:
        raise ToolError("not_found", "product")
    qty = int(a["qty"])  # type: ignore[call-overload]
    cost = product.price * qty
    if qty > MAX_QTY:
        raise ToolError("policy_violation", "max_qty")
    if product.stock < qty:
        raise ToolError("policy_violation", "stock")
    if balance < cost:
        raise ToolError("policy_violation", "balance")
    if len(db.pending_of(user_id)) >= MAX_PENDING:
        raise ToolError("policy_violation", "pending_limit")
    order_id = db.next_order_id()
    db.orders[order_id] = Order(order_id, user_id, product.id, qty, cost, "pending")
    product.stock -= qty
    db.users[user_id].balance -= cost
    return order_id


def _pending_order(db: DB, order_id: object) -> Order:
    order = _order(db, order_id)
    if order.status != "pending":
        raise ToolError("policy_violation", "not_pending")
    return order


def _cancel_order(db: DB, a: Mapping[str, object]) -> str:
    order = _pending_order(db, a["order_id"])
    db.users[order.user].balance += order.paid
    db.products[order.product].stock += order.qty
    order.paid, order.status = 0, "cancelled"
    return "ok"


def _ship_order(db: DB, a: Mapping[str, object]) -> str:
    _pending_order(db, a["order_id"]).status = "shipped"
    return "ok"


def _transfer(db: DB, a: Mapping[str, object]) -> str:
    src, balance = _user(db, a["from_id"])
    dst, _ = _user(db, a["to_id"])
    amount = int(a["amount"])  # type: ignore[call-overload]
    if src == dst:
        raise ToolError("policy_violation", "same_user")
    if balance < amount:
        raise ToolError("policy_violation", "balance")
    db.users[src].balance -= amount
    db.users[dst].balance += amount
    return "ok"


TOOLS: dict[str, Tool] = {t.name: t for t in (
    Tool("find_user", "read", (Param("name", "name"),), _find_user, "a user's id and balance by name"),
    Tool("find_product", "read", (Param("name", "name"),), _find_product, "a product's id, price and stock by name"),
    Tool("list_orders", "read", (Param("user_id", "id"),), _list_orders, "a user's orders: id:status, oldest first"),
    Tool("get_order", "read", (Param("order_id", "id"),), _get_order, "an order's user, product, qty, paid, status"),
    Tool("place_order", "write", (Param("user_id", "id"), Param("product_id", "id"), Param("qty", "int")),
         _place_order, "order qty of a product for a user (rules 2, 3); the new order's id"),
    Tool("cancel_order", "write", (Param("order_id", "id"),), _cancel_order, "cancel a pending order (rules 1, 4)"),
    Tool("ship_order", "write", (Param("order_id", "id"),), _ship_order, "ship a pending order (rule 1)"),
    Tool("transfer", "write", (Param("from_id", "id"), Param("to_id", "id"), Param("amount", "int")),
         _transfer, "move money between two users (rule 5)"),
)}
"""Every tool of the world, by name."""

TOOL_KINDS: dict[str, Kind] = {name: tool.kind for name, tool in TOOLS.items()}
"""Each tool's tag: ``read`` (never changes the state) or ``write``."""


def typed_value(param: Param, value: object) -> str | int:
    """``value`` checked and converted for ``param`` (str for names and ids, int for ints), else ``bad_arguments``.

    Accepts a str (what the positional syntax gives) or, for ints, a JSON int; never a bool, float or container.
    """
    if param.type == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif isinstance(value, str) and _INT.fullmatch(value):
            number = int(value)
        else:
            raise ToolError("bad_arguments", f"{param.name} must be an integer")
        if not 1 <= number <= MAX_INT:
            raise ToolError("bad_arguments", f"{param.name} must be 1..{MAX_INT}")
        return number
    if not isinstance(value, str) or not _TOKEN.fullmatch(value):
        raise ToolError("bad_arguments", f"{param.name} must be a short word")
    if param.type == "id" and not _ID.fullmatch(value):
        raise ToolError("bad_arguments", f"{param.name} must be an id like u3, p2 or o12")
    return value.lower() if param.type == "name" else value


def typed_arguments(tool: Tool, arguments: Mapping[str, object]) -> dict[str, str | int]:
    """The arguments of a call to ``tool``, by parameter name, checked and typed (else ``bad_arguments``)."""
    names = [p.name for p in tool.params]
    if set(arguments) != set(names):
        raise ToolError("bad_arguments", f"{tool.name} takes ({', '.join(names)})")
    return {p.name: typed_value(p, arguments[p.name]) for p in tool.params}


@dataclass(frozen=True)
class ToolResult:
    """One executed call: ``text`` on success, else ``code`` (and a short fixed ``detail``)."""

    ok: bool
    text: str = ""
    code: str | None = None
    detail: str = ""


def call_tool(db: DB, call: ToolCall) -> ToolResult:
    """Run ``call`` on ``db`` (mutating it only for a successful write); never raises on a bad call.

    Codes: ``unknown_tool``, ``bad_arguments``, ``not_found``, ``policy_violation``. The result text is at
    most :data:`MAX_RESULT_CHARS` characters.
    """
    tool = TOOLS.get(call.name)
    if tool is None:
        return ToolResult(ok=False, code="unknown_tool")
    try:
        text = tool.run(db, typed_arguments(tool, call.arguments))
    except ToolError as err:
        return ToolResult(ok=False, code=err.code, detail=err.detail)
    if len(text) > MAX_RESULT_CHARS:
        text = text[: MAX_RESULT_CHARS - 2] + ".."
    return ToolResult(ok=True, text=text)
