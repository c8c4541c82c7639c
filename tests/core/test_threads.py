import math

import pytest

from synco.config import ConfigError, load_config
from synco.core.threads import apply_threads, auto_threads, cgroup_cpu_quota, parse_threads, resolve_threads, usable_cpus


@pytest.mark.parametrize("cpus,load,expected", [
    (2, 0.0, 1),    # 2 CPUs: one thread, which never waits at a barrier, leaves a core for the laptop
    (2, 1.0, 1),
    (2, 5.0, 1),    # overloaded: never below one
    (4, 0.0, 2),    # half the CPUs on an idle machine
    (4, 2.4, 2),    # a busy program per spare CPU still leaves half
    (4, 2.6, 1),    # three busy programs leave one CPU
    (8, 0.0, 4),
    (8, 0.3, 4),    # background noise is not a busy program
    (8, 4.0, 4),
    (8, 5.5, 2),    # 0.5 rounds to even: 6 busy -> 2 idle
    (8, 6.6, 1),
    (16, 0.0, 8),
    (3, 0.0, 1),
    (1, 0.0, 1),
    (0, 0.0, 1),    # a platform that reports no CPUs
    (4, math.nan, 2),
])
def test_auto_threads_leaves_busy_cpus_alone(cpus, load, expected):
    assert auto_threads(cpus, load) == expected


def test_auto_threads_never_increases_with_load_and_never_exceeds_half():
    counts = [auto_threads(8, load / 10) for load in range(0, 120)]
    assert counts == sorted(counts, reverse=True) and counts[0] == 4 and counts[-1] == 1
    assert all(auto_threads(n, 0.0) <= max(1, n // 2) for n in range(1, 65))


@pytest.mark.parametrize("setting,expected", [("auto", 3), (3, 3), (8, 8), (None, None)])
def test_resolve_threads(setting, expected):
    assert resolve_threads(setting, cpu_count=8, loadavg=5.0) == expected


def test_apply_threads_sets_torch_and_reports(one_thread):
    import torch

    choice = apply_threads(3)
    assert torch.get_num_threads() == 3 and choice.threads == 3 and "torch threads: 3" in choice.describe()
    choice = apply_threads(None)  # torch's choice: left as it is
    assert torch.get_num_threads() == 3 and choice.threads == 3
    choice = apply_threads("auto")
    assert choice.threads == torch.get_num_threads() == auto_threads(choice.cpus, choice.loadavg)


@pytest.mark.parametrize("text,expected", [
    ("200000 100000", 2.0),
    ("150000 100000", 1.5),
    ("max 100000", None),
    ("garbage", None),
    ("0 100000", None),
    ("", None),
])
def test_cgroup_cpu_quota(text, expected):
    assert cgroup_cpu_quota(text) == expected


def test_usable_cpus_is_positive():
    assert usable_cpus() >= 1


@pytest.mark.parametrize("value,expected", [
    (1, 1), (4, 4), ("auto", "auto"), ("AUTO", "auto"), (None, None), ("3", 3), ("null", None),
])
def test_parse_threads_accepts(value, expected):
    assert parse_threads(value) == expected


@pytest.mark.parametrize("value", [0, -2, True, False, 2.5, "fast", "", [2]])
def test_parse_threads_rejects(value):
    with pytest.raises(ValueError, match="threads"):
        parse_threads(value)


@pytest.mark.parametrize("override,expected", [
    ("threads=auto", "auto"), ("threads=3", 3), ("threads=null", None), ("threads=1", 1),
])
def test_config_accepts_threads(override, expected):
    assert load_config("arith", overrides=[override]).threads == expected


def test_config_default_threads_is_auto():
    assert load_config("arith").threads == "auto"
    assert load_config(None).threads == "auto"


@pytest.mark.parametrize("override", ["threads=0", "threads=-1", "threads=lots", "threads=1.5", "threads=true"])
def test_config_rejects_bad_threads_naming_the_field(override):
    with pytest.raises(ConfigError) as e:
        load_config("arith", overrides=[override])
    assert "threads" in str(e.value) and override.split("=")[1] in str(e.value).lower()
