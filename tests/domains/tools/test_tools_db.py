"""synco.domains.tools.db: the fixed database, its copies and the state hash."""

from __future__ import annotations

import subprocess
import sys

from synco.domains.tools.db import MAX_ORDERS_PER_USER, MAX_PENDING, PRODUCT_NAMES, USER_NAMES, build_db


def test_the_database_is_the_same_fixed_world_every_time() -> None:
    db = build_db()
    assert len(db.users) == len(USER_NAMES) == 24 and len(db.products) == len(PRODUCT_NAMES) == 16
    assert len(db.orders) == 64
    bob = db.user_by_name("bob")
    assert bob is not None and (bob.id, bob.balance) == ("u2", 24)
    lamp = db.product_by_name("lamp")
    assert lamp is not None and (lamp.id, lamp.price, lamp.stock) == ("p1", 26, 6)
    assert [(o.id, o.product, o.qty, o.paid, o.status) for o in db.orders_of("u2")] == [
        ("o22", "p6", 2, 66, "shipped"), ("o29", "p2", 1, 13, "shipped"),
        ("o58", "p11", 3, 36, "pending"), ("o61", "p12", 2, 62, "pending")]
    assert build_db().canonical() == db.canonical()


def test_the_initial_state_respects_the_policy_and_varies() -> None:
    db = build_db()
    pending = [len(db.pending_of(u)) for u in db.users]
    assert max(pending) == MAX_PENDING and {0, 1, 2, 3} <= set(pending)  # every count occurs (task families need it)
    assert all(len(db.orders_of(u)) <= MAX_ORDERS_PER_USER for u in db.users)
    for o in db.orders.values():
        price = db.products[o.product].price
        assert o.paid == (0 if o.status == "cancelled" else price * o.qty)
    assert {p.stock for p in db.products.values()} & {0}  # some product is out of stock (a policy case)


def test_a_copy_is_independent_of_its_source() -> None:
    db = build_db()
    before = db.state_hash()
    other = db.copy()
    other.users["u2"].balance = 0
    other.products["p1"].stock = 0
    other.orders["o58"].status = "cancelled"
    assert db.users["u2"].balance == 24 and db.products["p1"].stock == 6 and db.orders["o58"].status == "pending"
    assert db.state_hash() == before != other.state_hash()


def test_state_hash_is_stable_across_processes() -> None:
    pinned = "efe41cc7dbec47b0f4f5bd7000a04fda73b0bf887b5eae36a670b2b8aae7db5d"
    assert build_db().state_hash() == pinned
    code = "from synco.domains.tools.db import build_db; print(build_db().state_hash())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "12345", "PYTHONPATH": ":".join(sys.path)})
    assert out.stdout.strip() == pinned


def test_state_hash_sees_every_field() -> None:
    db = build_db()
    base = db.state_hash()
    for change in (lambda d: setattr(d.users["u1"], "balance", 165), lambda d: setattr(d.products["p3"], "stock", 4),
                   lambda d: setattr(d.orders["o1"], "qty", 9), lambda d: setattr(d.orders["o1"], "status", "shipped")):
        copy = db.copy()
        change(copy)
        assert copy.state_hash() != base
