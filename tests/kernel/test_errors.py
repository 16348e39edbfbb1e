"""Endpoint errors reach the caller as ActorError; bad input fails loudly and early."""

from __future__ import annotations

import importlib.util
import threading

import pytest

import tetrarch
from kernel_actors import Counter, Failing, InitFails, NotAnActor
from tetrarch import ActorError, SupervisionError
from tetrarch._runtime.values import _serial
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(60))


def test_endpoint_exception_becomes_actor_error_and_actor_survives(procs):
    failing = procs.spawn("failing", Failing)
    with pytest.raises(ActorError) as info:
        failing.slice(gpus=0).boom.call_one("bad value").get()
    err = info.value
    assert isinstance(err.exception, ValueError) and str(err.exception) == "bad value"
    text = str(err)
    assert "Actor call failing" in text and ".boom failed" in text
    assert "raise ValueError(message) from inner" in text  # the remote traceback
    assert "KeyError" in text and "direct cause" in text  # chained causes are kept
    assert failing.slice(gpus=0).ok.call_one().get() == "still alive"


def test_call_raises_first_error_for_whole_mesh(procs):
    failing = procs.spawn("failing_all", Failing)
    with pytest.raises(ActorError, match="async boom"):
        failing.aboom.call().get()
    assert failing.ok.call().get().values() == ["still alive"] * 4


def test_init_failure_reported_by_initialized_calls_and_the_owner(procs, faults):
    broken = procs.spawn("broken", InitFails)
    with pytest.raises(ActorError, match="cannot construct"):
        broken.initialized.get()
    with pytest.raises(SupervisionError, match="__init__ raised RuntimeError: cannot construct"):
        broken.slice(gpus=0).ok.call_one().get()
    # One failure per rank reaches the owner (here the client's fault hook).
    got = faults.wait(4)
    assert sorted(f.rank for f in got) == [0, 1, 2, 3]
    assert all(f.mesh_name == "broken" and "cannot construct" in f.cause for f in got)


def test_spawning_a_non_actor_is_a_type_error(procs):
    with pytest.raises(TypeError, match="NotAnActor"):
        procs.spawn("nope", NotAnActor)


def test_spawn_arguments_checked_against_init(procs):
    with pytest.raises(TypeError, match=r"Counter.__init__"):
        procs.spawn("badargs", Counter, 1, 2, 3)
    with pytest.raises(TypeError, match=r"Failing.__init__: too many arguments: it takes none"):
        procs.spawn("badargs2", Failing, 1)  # no __init__ of its own: object's takes nothing
    with pytest.raises(TypeError, match=r"Failing.__init__"):
        procs.spawn("badargs3", Failing, x=1)


def test_call_one_on_many_says_how_many(procs):
    counters = procs.spawn("many", Counter)
    with pytest.raises(ValueError, match="exactly 1 actor, but mesh many has 4"):
        counters.value.call_one()


def test_non_endpoint_names_endpoint_decorator(procs):
    counters = procs.spawn("plain", Counter)
    with pytest.raises(AttributeError, match="@endpoint"):
        counters.helper  # noqa: B018


def test_unpicklable_argument_named_at_call_site(procs):
    counters = procs.spawn("unpicklable", Counter)
    with pytest.raises(TypeError, match=r"argument 0 of type _thread.lock cannot be pickled") as info:
        counters.incr.call(threading.Lock())
    assert importlib.util.find_spec("tetrarch.rdma") is not None
    assert "RDMABuffer" in str(info.value), "tetrarch.rdma exists: the message suggests RDMABuffer"


@pytest.mark.transport_independent  # pure: no process
def test_the_unpicklable_argument_message_suggests_rdmabuffer_once_it_exists(monkeypatch, tmp_path) -> None:
    (tmp_path / "rdma.py").write_text("")
    monkeypatch.setattr(tetrarch, "__path__", [*tetrarch.__path__, str(tmp_path)])
    with pytest.raises(TypeError, match="RDMABuffer"):
        _serial.dumps_checked(((threading.Lock(),), {}), "call to m.f", [("argument 0", threading.Lock())])


def test_calling_an_endpoint_directly_names_the_adverbs(procs) -> None:
    counters = procs.spawn("called_directly", Counter)
    with pytest.raises(TypeError) as info:
        counters.value()  # what the user typed
    text = str(info.value)
    for adverb in (".call(", ".call_one(", ".broadcast(", ".choose(", ".stream("):
        assert f"called_directly.value{adverb}" in text, text


@pytest.mark.transport_independent  # pure: no process
def test_calling_an_endpoint_on_the_actor_class_says_to_spawn_it() -> None:
    with pytest.raises(TypeError, match=r"Counter.incr is an endpoint.*procs.spawn\('name', Counter"):
        Counter.incr()
    assert Counter.value(Counter(5)) == 5  # with an instance it is the plain method (super().method(), tests)


def test_an_endpoint_typo_names_the_endpoints_and_the_likely_one(procs) -> None:
    counters = procs.spawn("typo", Counter)
    with pytest.raises(AttributeError, match=r"no endpoint 'incrr' \(endpoints: \['incr', 'value'\]\); "
                                             r"did you mean 'incr'\?"):
        counters.incrr  # noqa: B018


def test_slicing_errors(procs):
    with pytest.raises(TypeError, match="no dimension 'hosts'"):
        procs.slice(hosts=0)
    with pytest.raises(IndexError, match="out of range"):
        procs.slice(gpus=4)


def test_stopped_actor_mesh_rejects_calls(procs):
    counters = procs.spawn("stopme", Counter, 3)
    assert counters.value.call().get().values() == [3] * 4
    counters.stop().get(timeout=scaled(10))
    with pytest.raises(SupervisionError, match="stopped"):
        counters.value.call()
    with pytest.raises(ValueError, match="only its owner"):
        counters.slice(gpus=0).stop()


@pytest.mark.parametrize(("kind", "cause"), [("lock", "cannot pickle '_thread.lock'"),
                                             ("deep", "RecursionError")])
def test_an_unpicklable_result_names_its_cause_in_the_message(procs, kind: str, cause: str) -> None:
    failing = procs.slice(gpus=0).spawn("unpicklable_result", Failing)
    with pytest.raises(ActorError) as info:
        failing.unpicklable_result.call_one(kind).get(timeout=scaled(30))
    text = str(info.value)
    assert cause in text and "PicklingError" in text and "could not be pickled" in text, text
    assert text.startswith("Actor call unpicklable_result") and ".unpicklable_result failed" in text, text
    assert failing.ok.call_one().get(timeout=scaled(30)) == "still alive"  # the actor lives on


@pytest.mark.transport_independent  # pure: no process
def test_code_pickled_by_value_keeps_its_file_name() -> None:
    # A remote traceback through a class of the user's script shows its file and lines:
    # cloudpickle 3.1.3 names every by-value code object "<dynamic-code>"; ours keeps the name.
    def local_function() -> int:
        return 1

    clone = _serial.loads(_serial.dumps(local_function))
    assert clone() == 1
    assert clone.__code__.co_filename == __file__
