"""Supervision: the error split, __supervise__, references, slice health, process death."""

from __future__ import annotations

import os
import time

import pytest

from kernel_actors import InitFails
from supervision_actors import AsyncSupervisor, Fragile, RefUser, Supervisor
from tetrarch import ActorError, Channel, PortReceiver, ProcMesh, SupervisionError, this_host
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(60))

#: Documented: a pending call fails within milliseconds of its proc's death; the test
#: allows this much (nominal seconds, scaled) from the exit to the caller's error.
CALL_FAILS_WITHIN_S = 2.0


@pytest.fixture(scope="module")
def child_procs():
    """Procs the supervisors spawn their children on (2 procs)."""
    pm = this_host().spawn_procs(per_host={"gpus": 2})
    yield pm
    pm.stop().get(timeout=scaled(30))


# -- 1. error split -----------------------------------------------------------------
def test_exception_with_a_reply_is_an_actor_error_and_no_failure(procs, faults):
    mesh = procs.spawn("split_reply", Fragile)
    with pytest.raises(ActorError, match="plain exception"):
        mesh.slice(gpus=0).raise_exc.call_one().get(timeout=scaled(10))
    assert mesh.ok.call().get(timeout=scaled(10)).values() == ["alive"] * 4  # survived; no unhealthy rank
    assert faults.items == []


def test_broadcast_exception_kills_the_actor_and_tells_the_owner(procs, faults):
    mesh = procs.spawn("split_broadcast", Fragile)
    mesh.slice(gpus=2).raise_exc.broadcast()
    (failure,) = faults.wait(1)
    assert (failure.mesh_name, failure.rank, failure.crashed_ranks) == ("split_broadcast", 2, [2])
    assert "plain exception" in failure.cause and failure.pid > 0
    # What failed, for a fault hook: the actor's class and the endpoint it ran, named in the
    # report in Monarch's order (class and actor, then endpoint, then cause).
    assert (failure.actor_class, failure.endpoint) == ("supervision_actors.Fragile", "raise_exc")
    report = failure.report()
    assert "actor <supervision_actors.Fragile split_broadcast{'gpus': 2/4}> (pid" in report
    assert report.index("supervision_actors.Fragile") < report.index("endpoint 'raise_exc'") < report.index(
        "plain exception")
    with pytest.raises(SupervisionError, match="unhealthy: rank 2"):
        mesh.ok.call()
    assert mesh.slice(gpus=slice(0, 2)).ok.call().get(timeout=scaled(10)).values() == ["alive"] * 2


def test_a_failed_init_is_reported_with_its_class_and_init(procs, faults):
    mesh = procs.slice(gpus=3).spawn("init_fails", InitFails)
    with pytest.raises(ActorError):
        mesh.initialized.get(timeout=scaled(10))
    (failure,) = faults.wait(1)
    assert (failure.actor_class, failure.endpoint) == ("kernel_actors.InitFails", "__init__")
    assert "actor <kernel_actors.InitFails init_fails> (pid" in failure.report()
    assert "failed in __init__: __init__ raised" in failure.report()


@pytest.mark.parametrize(("method", "args", "text"), [
    ("raise_base", (), "KeyboardInterrupt: base exception"),
    ("ported_raise", (), "explicit-port exception"),
    ("abort", ("on purpose",), "aborted: on purpose"),
], ids=["BaseException", "explicit-port", "abort"])
def test_deadly_raises_fail_the_call_and_reach_the_owner(procs, faults, method, args, text):
    mesh = procs.spawn(f"deadly_{method}", Fragile)
    with pytest.raises(SupervisionError, match="and all its descendants have failed") as info:
        getattr(mesh.slice(gpus=1), method).call_one(*args).get(timeout=scaled(10))
    assert text in str(info.value)
    (failure,) = faults.wait(1)
    assert failure.rank == 1 and text in failure.cause
    assert (failure.actor_class, failure.endpoint) == ("supervision_actors.Fragile", method)
    assert f"failed in endpoint {method!r}: " in failure.report()
    with pytest.raises(SupervisionError):  # later calls fail fast
        mesh.slice(gpus=1).ok.call_one().get(timeout=scaled(1))


# -- 2. __supervise__ ------------------------------------------------------------------
def test_supervise_returning_true_handles_the_failure(procs, child_procs, faults):
    report, seen_rx = Channel.open()
    sup = procs.slice(gpus=0).spawn("sup_handle", Supervisor, child_procs, "handle", report)
    sup.fail_child.call_one(0).get(timeout=scaled(10))
    seen = _wait_seen(seen_rx, 1)
    assert seen[0].startswith("fragile:0:raise_exc raised ValueError: plain exception")
    assert sup.healthy_values.call_one().get(timeout=scaled(10)) == ["alive"]  # the other child rank works
    assert faults.items == []  # handled: nothing reached the client


def test_async_supervise_runs_on_the_actor_loop(procs, child_procs, faults):
    report, seen_rx = Channel.open()
    sup = procs.slice(gpus=0).spawn("sup_async", AsyncSupervisor, child_procs, "handle", report)
    sup.fail_child.call_one(1).get(timeout=scaled(10))
    assert _wait_seen(seen_rx, 1) == ["async:fragile:1"]
    assert faults.items == []


def test_unhandled_failure_goes_up_to_the_owners_owner_with_the_chain(procs, child_procs, faults):
    sup = procs.slice(gpus=0).spawn("sup_pass", Supervisor, child_procs, "pass")
    sup.fail_child.call_one(0).get(timeout=scaled(10))
    (failure,) = faults.wait(1)
    assert failure.mesh_name == "sup_pass" and "did not handle a failure of its mesh 'fragile'" in failure.cause
    root = failure.root_event
    assert root.mesh_name == "fragile" and "plain exception" in root.cause
    assert (root.actor_class, root.endpoint) == ("supervision_actors.Fragile", "raise_exc")
    assert failure.actor_class == "supervision_actors.Supervisor" and failure.endpoint == "__supervise__"
    report = failure.report()
    assert report.index("root event: actor <supervision_actors.Fragile fragile") < report.index(
        "then: actor <supervision_actors.Supervisor sup_pass")
    assert "failed in endpoint 'raise_exc'" in report and "failed in __supervise__" in report
    with pytest.raises(SupervisionError, match=r"unhealthy: rank 0 failed .*root event: fragile"):
        sup.seen_failures.call_one()


def test_raising_supervise_chains_a_new_failure(procs, child_procs, faults):
    sup = procs.slice(gpus=0).spawn("sup_raise", Supervisor, child_procs, "raise")
    sup.fail_child.call_one(1).get(timeout=scaled(10))
    (failure,) = faults.wait(1)
    assert "__supervise__ raised RuntimeError: supervise hook raised on purpose" in failure.cause
    assert failure.root_event.mesh_name == "fragile" and failure.root_event.rank == 1
    assert failure.endpoint == "__supervise__" and failure.root_event.endpoint == "raise_exc"


def test_failures_of_a_reference_go_to_the_owner_and_the_user_gets_supervision_error(procs, child_procs,
                                                                                      faults):
    report, seen_rx = Channel.open()
    sup = procs.slice(gpus=0).spawn("sup_ref", Supervisor, child_procs, "handle", report)
    user = procs.slice(gpus=1).spawn("ref_user", RefUser)
    ref = sup.child.call_one().get(timeout=scaled(10))
    assert user.call_ok.call_one(ref).get(timeout=scaled(10)) == "['alive', 'alive']"
    ref.slice(gpus=0).exit.broadcast(7)  # the client uses the reference too: it owns nothing here
    seen = _wait_seen(seen_rx, 1)
    # The owner is not the procs' owner (the client is): it learns of the death from the
    # dropped connection, not from the exit report.
    assert seen[0].startswith("fragile:0:") and "connection to the process" in seen[0]
    answer = user.call_ok.call_one(ref).get(timeout=scaled(10))
    assert answer.startswith("SupervisionError") and "rank 0" in answer
    assert faults.items == []


def _wait_seen(seen_rx: PortReceiver[str], n: int) -> list[str]:
    """The first ``n`` failures the supervisor's ``__supervise__`` saw (sent to its report port)."""
    return [seen_rx.recv().get(timeout=scaled(10)) for _ in range(n)]


# -- 4. process death ----------------------------------------------------------------
def test_exit_of_a_proc_fails_pending_calls_fast_naming_actor_rank_and_cause(faults):
    pm = this_host().spawn_procs(per_host={"gpus": 2})
    other = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        mesh = pm.spawn("exiting", Fragile)
        bystander = other.spawn("bystander", Fragile)
        start = time.monotonic()
        with pytest.raises(SupervisionError) as info:
            mesh.slice(gpus=1).exit.call_one(1).get(timeout=scaled(10))
        assert time.monotonic() - start < scaled(CALL_FAILS_WITHIN_S)
        text = str(info.value)
        assert "exiting.exit" in text and "rank 1" in text and "exit code 1" in text
        (failure,) = faults.wait(1)
        assert failure.rank == 1 and "exit code 1" in failure.cause
        # Its owner knows the class; what ran when the process died is unknown there.
        assert (failure.actor_class, failure.endpoint) == ("supervision_actors.Fragile", "")
        assert "actor <supervision_actors.Fragile exiting{'gpus': 1/2}> (pid" in failure.report()
        with pytest.raises(SupervisionError, match="unhealthy"):
            mesh.ok.call()
        assert mesh.slice(gpus=0).ok.call_one().get(timeout=scaled(10)) == "alive"
        assert bystander.ok.call_one().get(timeout=scaled(10)) == "alive"
        with pytest.raises(RuntimeError, match="dead proc"):
            pm.spawn("on_dead", Fragile)
    finally:
        pm.stop().get(timeout=scaled(30))
        other.stop().get(timeout=scaled(30))
    again = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        assert again.spawn("again", Fragile).ok.call_one().get(timeout=scaled(10)) == "alive"
    finally:
        again.stop().get(timeout=scaled(30))


# -- 5. slice health -------------------------------------------------------------------
def test_only_slices_with_the_failed_rank_are_unhealthy(procs, faults):
    mesh = procs.spawn("health", Fragile)
    sibling = procs.spawn("health_sibling", Fragile)
    mesh.slice(gpus=3).raise_exc.broadcast()
    faults.wait(1)
    for unhealthy in (mesh, mesh.slice(gpus=3), mesh.slice(gpus=slice(2, 4))):
        with pytest.raises(SupervisionError, match="rank 3"):
            unhealthy.ok.call()
    assert mesh.slice(gpus=slice(0, 3)).ok.call().get(timeout=scaled(10)).values() == ["alive"] * 3
    assert {mesh.ok.choose().get(timeout=scaled(10)) for _ in range(8)} == {"alive"}  # choose avoids rank 3
    assert sibling.ok.call().get(timeout=scaled(10)).values() == ["alive"] * 4


def test_user_of_a_mesh_on_a_reference_proc_mesh_owns_it(procs: ProcMesh):
    # A ProcMesh travels as a reference; the actor that spawns on it owns the new mesh.
    sup = procs.slice(gpus=0).spawn("sup_owner", Supervisor, procs.slice(gpus=slice(2, 4)), "handle")
    child = sup.child.call_one().get(timeout=scaled(10))
    assert child.ok.call().get(timeout=scaled(10)).values() == ["alive", "alive"]
    with pytest.raises(ValueError, match="only its owner"):
        child.stop()


def test_a_mesh_does_not_outlive_its_owners_process(faults):
    owner_procs = this_host().spawn_procs(per_host={"gpus": 1})
    child_procs = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        sup = owner_procs.spawn("doomed_owner", Supervisor, child_procs, "handle")
        child = sup.child.call_one().get(timeout=scaled(10))
        assert child.ok.call().get(timeout=scaled(10)).values() == ["alive", "alive"]
        os.kill(sup.pid.call_one().get(timeout=scaled(10)), 9)
        deadline = time.monotonic() + scaled(10)
        while True:  # the children stop once their procs see the owner's connection drop
            try:
                child.ok.call().get(timeout=scaled(10))
            except SupervisionError as exc:
                why = str(exc)
                break
            assert time.monotonic() < deadline, "the child mesh outlived its owner"
        assert "stopped because its owner died" in why
        faults.wait(1)  # the owner itself was owned by the client
    finally:
        owner_procs.stop().get(timeout=scaled(30))
        child_procs.stop().get(timeout=scaled(30))
