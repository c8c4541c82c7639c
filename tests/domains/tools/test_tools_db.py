"""synco.domains.tools.db: the fixed database, its copies and the state hash; its numeric variants."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest

from synco.domains.tools.db import MAX_ORDERS_PER_USER, MAX_PENDING, PRODUCT_NAMES, USER_NAMES, build_db, episode_variant


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


@pytest.mark.parametrize("variant, pinned", [
    (0, "efe41cc7dbec47b0f4f5bd7000a04fda73b0bf887b5eae36a670b2b8aae7db5d"),  # the world
    (1, "a5f5f176a4b68cba2b4abddb06702ca6c26e3a7af9b94cf3418c2b5c1cabe264"),  # a variant
])
def test_state_hash_is_stable_across_processes(variant: int, pinned: str) -> None:
    assert build_db(variant).state_hash() == pinned
    code = f"from synco.domains.tools.db import build_db; print(build_db({variant}).state_hash())"
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


# ----------------------------------------------------------------- variants (tools.db_variants)


def _structure(db) -> tuple:  # noqa: ANN001 - a DB
    """What a variant keeps: ids, names, and every order's owner, product and status."""
    return ([(u.id, u.name) for u in db.users.values()], [(p.id, p.name) for p in db.products.values()],
            [(o.id, o.user, o.product, o.status) for o in db.orders.values()])


def test_variant_zero_is_the_world() -> None:
    assert build_db(0).canonical() == build_db().canonical()
    assert build_db(0).state_hash() == "efe41cc7dbec47b0f4f5bd7000a04fda73b0bf887b5eae36a670b2b8aae7db5d"


def test_a_variant_keeps_the_records_and_draws_new_numbers() -> None:
    world, v1 = build_db(), build_db(1)
    assert _structure(v1) == _structure(world)
    bob, lamp = v1.user_by_name("bob"), v1.product_by_name("lamp")
    assert bob is not None and lamp is not None
    assert (bob.id, bob.balance) == ("u2", 48) and (lamp.id, lamp.price, lamp.stock) == ("p1", 24, 9)  # world: 24; 26, 6
    # bob's orders: the same ids, products and statuses; new quantities, paid = the variant's price x qty
    # (prices in variant 1: bag p6 13, mug p2 38, pad p11 2, rug p12 28)
    assert [(o.id, o.product, o.qty, o.paid, o.status) for o in v1.orders_of("u2")] == [
        ("o22", "p6", 3, 39, "shipped"), ("o29", "p2", 1, 38, "shipped"),
        ("o58", "p11", 2, 4, "pending"), ("o61", "p12", 1, 28, "pending")]
    assert v1.state_hash() != world.state_hash() != build_db(2).state_hash() != v1.state_hash()
    assert build_db(1).canonical() == v1.canonical()  # the same every call


def test_every_variant_respects_the_policy_and_the_ranges() -> None:
    world = build_db()
    balances = set()
    for v in range(1, 201):
        db = build_db(v)
        assert _structure(db) == _structure(world), v
        assert all(10 <= u.balance <= 200 for u in db.users.values()), v
        assert all(2 <= p.price <= 40 and 0 <= p.stock <= 9 for p in db.products.values()), v
        for o in db.orders.values():
            assert 1 <= o.qty <= 3, (v, o)
            assert o.paid == (0 if o.status == "cancelled" else db.products[o.product].price * o.qty), (v, o)
        assert all(len(db.pending_of(u)) <= MAX_PENDING for u in db.users), v
        balances.add(db.users["u2"].balance)
    assert len(balances) > 100  # bob's balance really is drawn again (191 values possible)


def test_a_built_variant_is_a_fresh_copy() -> None:
    first = build_db(3)
    first.users["u2"].balance = 0
    first.orders["o58"].status = "cancelled"
    again = build_db(3)
    assert again.users["u2"].balance != 0 and again.orders["o58"].status == "pending"


def test_a_bad_variant_is_an_error_naming_it() -> None:
    for bad in (-1, True, "2", 1.5):
        with pytest.raises(ValueError, match=f"variant must be an int >= 0, got {bad!r}"):
            build_db(bad)  # type: ignore[arg-type]


def _offset(key: str, n: int) -> int:
    """The definition, by hand: sha256 of the seed, ``variant-of`` and the key, first 8 bytes big-endian, mod n."""
    return int.from_bytes(hashlib.sha256(f"synco-tools-db-v1:variant-of:{key}".encode()).digest()[:8], "big") % n


def test_episode_variant_gives_the_attempts_of_one_task_different_variants() -> None:
    key = "what does the lamp cost?"
    assert [episode_variant(key, a, 0) for a in range(4)] == [0, 0, 0, 0]  # off
    got = [episode_variant(key, a, 8) for a in range(8)]
    assert got == [1 + (_offset(key, 8) + a) % 8 for a in range(8)]
    assert sorted(got) == list(range(1, 9))  # 8 attempts, 8 variants: each once
    assert episode_variant(key, 8, 8) == got[0]  # attempt 8 wraps to attempt 0's
    assert [episode_variant(key, a, 1) for a in range(3)] == [1, 1, 1]
    starts = {episode_variant(f"buy a lamp for {name}", 0, 16) for name in ("ann", "bob", "cal", "dan", "eve", "fay")}
    assert len(starts) > 1  # tasks start at different variants


@pytest.mark.parametrize("attempt, n", [(-1, 4), (True, 4), (0, -1), (0, "4")])
def test_episode_variant_refuses_bad_numbers(attempt: object, n: object) -> None:
    with pytest.raises(ValueError, match="must be an int >= 0"):
        episode_variant("x", attempt, n)  # type: ignore[arg-type]
