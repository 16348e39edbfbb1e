"""Small Monarch APIs that Monarch programs use as they are (issue 30, "types and small APIs").

``ActorMesh[T]`` in annotations, ``procs.logging_option(...)`` awaited or run with
``asyncio.run`` (Monarch's is an ``async def``) as well as ``.get()``, ``ProcMesh._labels``
(Monarch's DDP example: ``dict.fromkeys(procs._labels, 0)``), and a clear error for
``spawn_procs(per_host=4)``.
"""

from __future__ import annotations

import asyncio
import logging
import typing
import warnings

import pytest

from kernel_actors import Counter, Info, Looper
from tetrarch import ActorMesh, ArgumentTypeError, Future, ProcMesh, ValueMesh, this_host
from tetrarch._runtime.values._shape import Extent, Shape
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(60))


def _annotated(mesh: ActorMesh[Counter]) -> ValueMesh[int]:  # evaluated below, as at a Monarch program's import
    raise NotImplementedError


@pytest.mark.transport_independent  # pure typing: no process
def test_actor_mesh_is_generic_in_its_actor_class() -> None:
    alias = ActorMesh[Counter]
    assert typing.get_origin(alias) is ActorMesh and typing.get_args(alias) == (Counter,)
    hints = typing.get_type_hints(_annotated, globalns=globals())
    assert hints["mesh"] == ActorMesh[Counter] and hints["return"] == ValueMesh[int]
    assert Future[ActorMesh[Counter]] is not None  # nests, as in Future[ActorMesh[Trainer]]


@pytest.mark.transport_independent  # pure: a ProcMesh over no processes
def test_proc_mesh_labels_are_its_dimension_names() -> None:
    pm = ProcMesh(None, Shape(Extent(["hosts", "gpus"], [2, 4])), [], owned=False, name="labels")
    assert pm._labels == ["hosts", "gpus"]
    assert dict.fromkeys(pm._labels, 0) == {"hosts": 0, "gpus": 0}  # Monarch's DDP example
    assert pm.slice(hosts=1)._labels == ["gpus"]
    assert pm.slice(**dict.fromkeys(pm._labels, 0))._labels == []


@pytest.mark.transport_independent  # refused before any host agent or proc is started
def test_spawn_procs_with_a_bare_count_names_the_dict_form() -> None:
    with pytest.raises(ArgumentTypeError, match=r'per_host=\{"gpus": 4\}') as info:
        this_host().spawn_procs(per_host=4)  # type: ignore[arg-type]
    assert isinstance(info.value, TypeError) and "int 4" in str(info.value)
    with pytest.raises(ArgumentTypeError, match=r'takes a dict.*per_host=\{"gpus": 4\}'):
        this_host().spawn_procs(per_host=[("gpus", 4)])  # type: ignore[arg-type]


def test_logging_option_is_awaited_run_with_asyncio_or_got() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 1}, name="logopt")  # its own: logging_option changes it
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no "get() inside an event loop", no "never awaited"
            assert procs.logging_option(stream_to_client=True, level=logging.WARNING).get(timeout=scaled(30)) is None
            assert asyncio.run(procs.logging_option(stream_to_client=True, level=logging.WARNING)) is None

            async def monarch_style() -> None:
                await procs.logging_option(stream_to_client=True, aggregate_window_sec=None, level=logging.WARNING)
                task = asyncio.create_task(procs.logging_option(level=logging.WARNING))
                assert await asyncio.wait_for(task, scaled(30)) is None

            asyncio.run(monarch_style())
        fut = procs.logging_option(level=logging.WARNING)
        assert asyncio.run(fut) is None and asyncio.run(fut) is None and fut.get() is None  # same outcome each time
        assert procs.spawn("logopt_counter", Counter, 3).value.call_one().get(timeout=scaled(30)) == 3
    finally:
        procs.stop().get(timeout=scaled(30))


def test_deprecated_proc_mesh_and_the_awaitable_style_of_monarchs_older_examples() -> None:
    """Monarch's spmd_ddp.py: ``pm = await proc_mesh(gpus=N, env={...})``, ``await pm.spawn(...)``."""
    from tetrarch import proc_mesh

    async def older_style() -> tuple[ProcMesh, list[int], list[str | None]]:
        pm = await proc_mesh(gpus=2, env={"MASTER_ADDR": "localhost", "MASTER_PORT": "12355"})
        counters = await pm.spawn("older_style", Counter, 5)
        await counters.incr.call(2)
        values = (await counters.value.call()).values()
        info = await pm.spawn("older_env", Info)
        return pm, values, (await info.env.call("MASTER_PORT")).values()

    with pytest.warns(DeprecationWarning, match=r"spawn_procs\(per_host=\{'gpus': n\}\)"):
        pm, values, env = asyncio.run(older_style())
    try:
        assert dict(pm.extent) == {"gpus": 2}
        assert values == [7, 7]
        assert env == ["12355", "12355"]  # proc_mesh(env=...) reaches every proc
    finally:
        pm.stop().get(timeout=scaled(30))


@pytest.mark.transport_independent  # refused before any proc is started
def test_deprecated_proc_mesh_refuses_what_it_cannot_do() -> None:
    from tetrarch import NotSupportedError, proc_mesh

    deprecated = "proc_mesh.. is deprecated"
    with pytest.warns(DeprecationWarning, match=deprecated), pytest.raises(NotSupportedError, match="an actor"):
        proc_mesh(gpus=1, setup=lambda: None)
    with pytest.warns(DeprecationWarning, match=deprecated), pytest.raises(ArgumentTypeError, match="positive"):
        proc_mesh(gpus="4")  # type: ignore[arg-type]


def test_an_endpoint_named_stop_shadows_the_meshs_stop_as_in_monarch() -> None:
    from tetrarch import SupervisionError

    procs = this_host().spawn_procs(per_host={"gpus": 1}, name="looper")
    try:
        looper = procs.spawn("looper", Looper)
        assert looper.stop.call_one().get(timeout=scaled(30)) == "loop stopped"  # the endpoint, not stop()
        assert looper.slice(gpus=0).stop.call_one().get(timeout=scaled(30)) == "loop stopped"
        assert looper.is_running.call_one().get(timeout=scaled(30)) is False
        ActorMesh.stop(looper).get(timeout=scaled(30))  # the mesh's own stop, spelled out
        with pytest.raises(SupervisionError, match="stopped"):
            looper.is_running.call_one().get(timeout=scaled(30))
    finally:
        procs.stop().get(timeout=scaled(30))
