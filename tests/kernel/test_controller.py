"""get_or_spawn_controller(): one named singleton actor per process (Monarch's controllers)."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

import tetrarch
from tetrarch import Actor, ArgumentError, Future, endpoint, get_or_spawn_controller
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(60))

#: How many Registry actors ran __init__ (controllers run in this process, so a global counts).
_inits = 0
_inits_lock = threading.Lock()


class Registry(Actor):
    def __init__(self, label: str = "") -> None:
        global _inits
        with _inits_lock:
            _inits += 1
        self.label = label
        self.items: list[str] = []

    @endpoint
    def add(self, item: str) -> int:
        self.items.append(item)
        return len(self.items)

    @endpoint
    def state(self) -> tuple[str, list[str], int]:
        return self.label, self.items, os.getpid()


class Other(Actor):
    @endpoint
    def ping(self) -> str:
        return "pong"


def test_same_name_returns_the_same_actor_and_keeps_its_state():
    first = get_or_spawn_controller("ctl_same", Registry, "first")
    assert isinstance(first, Future)
    reg = first.get()
    assert reg.add.call_one("a").get() == 1
    again = get_or_spawn_controller("ctl_same", Registry, "ignored").get()
    assert again is reg
    assert again.add.call_one("b").get() == 2
    label, items, pid = again.state.call_one().get()
    assert (label, items) == ("first", ["a", "b"])
    assert pid == os.getpid()  # spawned on this_proc(): the client's own process


def test_different_names_are_different_actors():
    one = get_or_spawn_controller("ctl_one", Registry, "one").get()
    two = get_or_spawn_controller("ctl_two", Registry, "two").get()
    assert one is not two
    one.add.call_one("x").get()
    assert one.state.call_one().get()[:2] == ("one", ["x"])
    assert two.state.call_one().get()[:2] == ("two", [])


def test_threads_asking_at_once_get_one_actor():
    before = _inits
    start = threading.Barrier(8)

    def ask(_: int) -> Registry:
        start.wait()
        return get_or_spawn_controller("ctl_threads", Registry, "t").get()

    with ThreadPoolExecutor(8) as pool:
        meshes = list(pool.map(ask, range(8)))
    assert all(m is meshes[0] for m in meshes)
    assert meshes[0].add.call_one("once").get() == 1
    assert _inits == before + 1


def test_same_name_with_another_class_is_a_clear_error():
    reg = get_or_spawn_controller("ctl_class", Registry).get()
    with pytest.raises(ArgumentError, match=r"'ctl_class' is already a .*Registry, not a .*Other"):
        get_or_spawn_controller("ctl_class", Other)
    assert get_or_spawn_controller("ctl_class", Registry).get() is reg  # still there


def test_a_failed_spawn_registers_nothing():
    with pytest.raises(tetrarch.ArgumentTypeError):
        get_or_spawn_controller("ctl_bad", Registry, "a", "too many")
    other = get_or_spawn_controller("ctl_bad", Other).get()
    assert other.ping.call_one().get() == "pong"
