"""A proc's record of stopped actors stays bounded, and late callers still hear "was stopped"."""

from __future__ import annotations

import pytest

from kernel_actors import Counter
from tetrarch import SupervisionError, this_proc
from tetrarch._runtime.meshes._proc_mesh import _uid
from tetrarch._runtime.process._root import get_root
from tetrarch._runtime.values._tombstones import Tombstones
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(60))


def test_old_reasons_shrink_to_a_generation_but_still_say_stopped() -> None:
    stones = Tombstones(limit=3)
    keys = [_uid("worker") for _ in range(10)]
    for key in keys:
        stones[key] = f"{key} was stopped"
    assert len(stones) == 3
    assert stones.get(keys[-1]) == f"{keys[-1]} was stopped"  # recent: verbatim
    old = stones.get(keys[0])
    assert old is not None and "was stopped" in old and "worker" in old  # pruned: still answered
    assert stones.get(_uid("never-spawned-here")) is None  # newer than anything evicted: unknown
    assert stones.get("not-a-tetrarch-key") is None


def test_spawn_stop_cycles_keep_the_table_bounded_and_late_calls_informative() -> None:
    table = get_root().router.stopped_actors
    limit = table._limit
    table._limit = 8
    try:
        first = this_proc().spawn("cycled", Counter, 0)
        first.initialized.get(timeout=scaled(10))
        first.stop().get(timeout=scaled(10))
        for _ in range(30):
            mesh = this_proc().spawn("cycled", Counter, 0)
            mesh.initialized.get(timeout=scaled(10))
            mesh.stop().get(timeout=scaled(10))
        assert len(table) <= 8
        ref = _reference(first)
        with pytest.raises(SupervisionError, match="was stopped"):
            ref.value.call_one().get(timeout=scaled(10))
    finally:
        table._limit = limit


def _reference(mesh):  # a reference (as another process would hold it): not the owner's stopped state
    import pickle

    return pickle.loads(pickle.dumps(mesh))
