"""The test helpers of ``tetrarch.testing``: the slowdown factor and the collector."""

from __future__ import annotations

import threading

import pytest

from tetrarch.testing import SLOWDOWN_ENV, Collector, scaled, slowdown

pytestmark = pytest.mark.timeout(scaled(30))


# -- scaled / slowdown ---------------------------------------------------------------------
@pytest.mark.parametrize("value", [None, "", "  "], ids=["unset", "empty", "blank"])
def test_factor_defaults_to_one(monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    if value is None:
        monkeypatch.delenv(SLOWDOWN_ENV, raising=False)
    else:
        monkeypatch.setenv(SLOWDOWN_ENV, value)
    assert slowdown() == 1.0
    assert scaled(2.5) == 2.5


@pytest.mark.parametrize(("value", "factor"), [("3", 3.0), ("0.5", 0.5), (" 2.5 ", 2.5), ("1e1", 10.0)])
def test_scaled_multiplies_by_the_factor(monkeypatch: pytest.MonkeyPatch, value: str, factor: float) -> None:
    monkeypatch.setenv(SLOWDOWN_ENV, value)
    assert slowdown() == factor
    assert scaled(2.0) == 2.0 * factor
    assert scaled(0) == 0


def test_the_factor_is_read_on_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SLOWDOWN_ENV, "2")
    assert scaled(1.0) == 2.0
    monkeypatch.setenv(SLOWDOWN_ENV, "4")
    assert scaled(1.0) == 4.0


@pytest.mark.parametrize("value", ["fast", "0", "-1", "nan", "inf", "2s", "1,5"])
def test_garbage_factor_is_a_value_error_naming_the_variable(monkeypatch: pytest.MonkeyPatch,
                                                             value: str) -> None:
    monkeypatch.setenv(SLOWDOWN_ENV, value)
    with pytest.raises(ValueError, match=f"{SLOWDOWN_ENV}={value!r} must be a positive number"):
        slowdown()
    with pytest.raises(ValueError, match=SLOWDOWN_ENV):
        scaled(1.0)


@pytest.mark.parametrize("seconds", [-1.0, float("nan")])
def test_scaled_rejects_a_negative_or_nan_limit(seconds: float) -> None:
    with pytest.raises(ValueError, match="time limit"):
        scaled(seconds)


# -- Collector -------------------------------------------------------------------------------
def test_wait_returns_every_item_in_arrival_order() -> None:
    got: Collector[int] = Collector("numbers")
    go = threading.Event()

    def produce() -> None:
        go.wait(scaled(10))
        for i in range(5):
            got.add(i)

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        assert got.wait(0) == []  # nothing needed: returns at once
        go.set()
        first = got.wait(3)
        assert first[:3] == [0, 1, 2] and len(first) >= 3
        assert got.wait(5) == [0, 1, 2, 3, 4]
    finally:
        go.set()
        producer.join(scaled(10))
    assert not producer.is_alive()
    assert got.items == [0, 1, 2, 3, 4] and len(got) == 5


def test_items_is_a_snapshot_and_clear_forgets() -> None:
    got: Collector[str] = Collector()
    got.add("a")
    snapshot = got.items
    snapshot.append("not in the collector")
    got.add("b")
    assert snapshot == ["a", "not in the collector"] and got.items == ["a", "b"]
    got.clear()
    assert got.items == [] and len(got) == 0
    assert "0 item(s)" in repr(got)


def test_add_is_a_callback_from_many_threads() -> None:
    got: Collector[tuple[int, int]] = Collector("pairs")

    def produce(sender: int) -> None:
        for i in range(200):
            got.add((sender, i))

    threads = [threading.Thread(target=produce, args=(sender,)) for sender in range(4)]
    for thread in threads:
        thread.start()
    items = got.wait(800)
    for thread in threads:
        thread.join(scaled(10))
    for sender in range(4):  # each thread's items stay in its own order
        assert [i for s, i in items if s == sender] == list(range(200))


def test_wait_times_out_saying_how_many_arrived(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SLOWDOWN_ENV, raising=False)
    got: Collector[str] = Collector("failures at the fault hook")
    got.add("first")
    with pytest.raises(TimeoutError, match=r"expected 3 failures at the fault hook within 0.05 s, "
                                           r"but 1 arrived: \['first'\]"):
        got.wait(3, timeout=0.05)
    assert got.items == ["first"]  # a timeout consumes nothing


def test_wait_timeout_is_scaled_and_the_message_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SLOWDOWN_ENV, "2")
    got: Collector[int] = Collector("exits")
    for i in range(12):
        got.add(i)
    with pytest.raises(TimeoutError, match=r"within 0.1 s \(0.05 s x slowdown 2\), but 12 arrived: "
                                           r"\[0, 1, .*, 9, \.\.\. and 2 more\]"):
        got.wait(13, timeout=0.05)


def test_wait_rejects_a_negative_count() -> None:
    with pytest.raises(ValueError, match="negative"):
        Collector().wait(-1)
