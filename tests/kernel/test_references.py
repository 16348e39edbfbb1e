"""Meshes travel as references: passed to and returned from actors, and usable there."""

from __future__ import annotations

import os
import pickle

import pytest

from supervision_actors import Fragile, Nester
from tetrarch import HostMesh, ProcMesh, ValueMesh, this_host
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(60))


def test_proc_and_host_meshes_passed_to_an_actor_can_be_spawned_on(procs):
    nester = procs.slice(gpus=0).spawn("spawner", Nester)
    on_procs, on_host = nester.spawn_on.call_one(procs.slice(gpus=slice(2, 4)), this_host()).get(timeout=scaled(60))
    assert len(on_procs) == 2 and len(set(on_procs)) == 2
    assert on_host[0] not in on_procs and on_host[0] != os.getpid()
    nester.stop().get(timeout=scaled(30))  # stops the proc mesh the actor spawned (it owns it)


def test_meshes_and_value_meshes_round_trip_through_an_actor(procs):
    nester = procs.slice(gpus=1).spawn("echo", Nester)
    mesh = procs.spawn("echoed", Fragile)
    values = mesh.pid.call().get(timeout=scaled(10))
    back_procs, back_host, back_mesh, back_values = nester.echo.call_one(
        (procs, this_host(), mesh, values)).get(timeout=scaled(10))
    assert isinstance(back_procs, ProcMesh) and back_procs.extent == procs.extent
    assert isinstance(back_host, HostMesh)
    assert isinstance(back_values, ValueMesh) and back_values == values
    assert back_mesh.pid.call().get(timeout=scaled(10)) == values  # a returned mesh reaches the same actors
    with pytest.raises(ValueError, match="must be stopped by its owner"):
        back_procs.stop()  # a reference, not the owner


def test_context_inside_an_actor_and_this_proc_spawn(procs):
    nester = procs.spawn("ctx", Nester)
    here = nester.slice(gpus=2).here.call_one().get(timeout=scaled(30))
    assert here["name"] == "ctx" and here["rank"] == {"gpus": 2}
    assert here["proc_len"] == 1 and "ProcMesh" in here["proc"]
    assert here["local_pid"] == here["pid"]  # this_proc().spawn ran the actor in the same process


def test_actors_spawn_procs_on_this_host():
    pm = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        nester = pm.spawn("nester", Nester)
        outer = nester.here.call_one().get(timeout=scaled(30))["pid"]
        pids = nester.nest.call_one(2).get(timeout=scaled(60))
        assert len(set(pids)) == 2 and outer not in pids
    finally:
        pm.stop().get(timeout=scaled(30))  # the nested procs are stopped first, by their owner


def test_a_proc_mesh_reference_pickles_without_its_owner_state(procs):
    ref = pickle.loads(pickle.dumps(procs))
    assert ref.extent == procs.extent and ref.slice(gpus=1).extent == procs.slice(gpus=1).extent
    with pytest.raises(ValueError, match="must be stopped by its owner"):
        ref.stop()
