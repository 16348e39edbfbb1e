"""The kernel, as a stack of layers. A module imports only from its own layer or below.

That holds for every import: at module level, under ``TYPE_CHECKING`` and inside
functions (``tests/kernel/test_layers.py`` checks it, and that no import cycle exists).
A module that needs something from above takes it as an argument or a ``Protocol``.

``foundation`` (outside ``_runtime``; import nothing of tetrarch above them)
    ``tetrarch._errors``   every error tetrarch raises (one tree under ``TetrarchError``)
    ``tetrarch._config``   every setting, declared once
    ``tetrarch._config_launch``, ``_config_monarch``  the variables the kernel sets; Monarch's setting names
    ``tetrarch._config_plugins``  plugins' settings as the settings see them (read through a provider the
                    package installs: this layer does not import the plugin layer)
    ``tetrarch._log``      the ``tetrarch.*`` logger tree
    ``tetrarch._lazy``     lazy module attributes for the public packages

``values`` (plain data and pure functions, no runtime state)
    ``_shape``      Extent, Point, Shape and the slicing shared by every mesh
    ``_valuemesh``  ValueMesh: one value per rank
    ``_future``     Future: a result usable from threads and asyncio
    ``_wire``       every message kind, declared once as a named record
    ``_buffers``    receive buffers that become ``bytes`` without a copy
    ``_serial``     pickling with out-of-band buffers
    ``_outcome``    error records out, exceptions back
    ``_context``    context(), current_rank(), Instance (what actor code sees)
    ``_tombstones`` why the actors of a process are gone, in bounded memory
    ``_early``      calls that reach a proc ahead of their actor's spawn, held until it arrives
    ``_secret``     the allocation's secret passed to a child outside its environment (pipe or 0600 file)
    ``_spawn``      child processes that die with their parent and report their exit
    ``_alloc``      the allocator plugin interface
    ``_cma``        cross-memory attach: process_vm_readv/writev with another process of this host
    ``_segments``   shared-memory segments (memfd) for large payloads: a bounded pool, lent and taken back
    ``_shmwire``    large payloads to a process of this host through those segments, and back into views
    ``_stdio``      a proc's sys.stdout/sys.stderr: never blocked by a host agent that does not read
    ``_procstate``  what the OS says of a process (stopped, ended) and a tick that notices its own stalls
    ``_stopguard``  bounds on a proc's stop: actors whose stop cannot begin, a finalisation that hangs
    ``_bootcmd``    BootstrapCommand: how a host agent starts a proc

``transport`` (outside ``_runtime``)
    ``tetrarch._transport``  the transport interface, the builtin ipc/tcp transport, authentication

``plugins`` (outside ``_runtime``)
    ``tetrarch._plugins``    the plugin registry (pluggy): finds transports, allocators, RDMA backends

``router``
    ``_router``     one per process: connections, authentication, dispatch to ports, mailboxes, services

``services`` (each handed a router explicitly)
    ``_launch``       processes this one started: ready, exit, heartbeat
    ``_supervision``  MeshFailure, the per-process Supervisor, the client's fault hook
    ``_port``         Port and PortReceiver
    ``_collect``      gathering the replies of one operation
    ``_endpoint``     Endpoint[P, R] and its adverbs over a mesh
    ``_output``       procs' stdout and stderr at their owner, prefixed with mesh and rank; process titles

``actors``
    ``_actor``      Actor and the @endpoint decorators
    ``_standby``    an idle actor thread reading for its proc's transport loop (one wake-up per call)
    ``_stall``      calls that wait long behind a plain async handler: said once per actor
    ``_runner``     ActorRunner: one actor's thread, loop, mailbox and fate
    ``_procagent``  the ``proc`` service: spawns and stops the actors of a process

``process``
    ``_root``       wires a process together (router + services) and holds it

``rdma`` (outside ``_runtime``; needs the process's router and the actor context)
    ``tetrarch._rdma``       RDMABuffer, RDMAAction, the backend interface, core's tcp and shm backends

``meshes`` (what users call)
    ``_mesh``       ActorMesh
    ``_hostalloc``  which allocator starts a host mesh (the registry's selection rules)
    ``_procmesh``   HostMesh, ProcMesh, this_host(), this_proc()
    ``_controller`` get_or_spawn_controller(): one named singleton actor per process
    ``_shutdown``   shutdown_context(), and stopping what the client started at exit
    ``_workerauth`` the secret file, the sealed session secret and address checks of workers and their clients
    ``_attach``     attach_to_workers(): a HostMesh over workers something else started
    ``_compat``     proc_mesh(): Monarch's deprecated way to make procs, kept for its programs
    ``_job_cache``  dump / job_load of jobs, and the cached job state() reuses
    ``_job``        jobs: named host meshes from an allocator (``tetrarch.job``)
    ``_worker_job`` WorkerJob: a job over running workers, reusable across runs
    ``_channel``    Channel, send(), Accumulator

``spmd`` (outside ``_runtime``; torchrun-style programs on a proc mesh, behind ``tetrarch.spmd``)
    ``tetrarch._spmd``       SPMDActor, setup_torch_elastic_env, the rendezvous store, torchrun's variables

``programs`` (entry points of the processes tetrarch starts)
    ``_host_agent``  one per host: starts procs
    ``_proc_main``   one per proc
    ``_worker``      run_worker_loop_forever(): a host agent that serves one client at a time, re-keyed for each
"""

from __future__ import annotations

__all__ = ["LAYERS"]

#: The stack, bottom first: ``(layer, modules)``. Module names are absolute; a package
#: name stands for every module in it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("tetrarch._errors", "tetrarch._config", "tetrarch._config_launch", "tetrarch._config_monarch",
                    "tetrarch._config_plugins", "tetrarch._config_doc", "tetrarch._log", "tetrarch._lazy")),
    ("values", tuple(f"tetrarch._runtime.{m}" for m in (
        "_shape", "_valuemesh", "_future", "_wire", "_buffers", "_serial", "_outcome", "_context", "_tombstones",
        "_early", "_secret", "_spawn", "_alloc", "_cma", "_segments", "_shmwire", "_stdio",
        "_procstate", "_stopguard", "_bootcmd"))),
    ("transport", ("tetrarch._transport",)),
    ("plugins", ("tetrarch._plugins",)),
    ("router", ("tetrarch._runtime._router",)),
    ("services", tuple(f"tetrarch._runtime.{m}" for m in (
        "_launch", "_supervision", "_port", "_collect", "_endpoint", "_output"))),
    ("actors", tuple(f"tetrarch._runtime.{m}" for m in ("_actor", "_standby", "_stall", "_runner", "_procagent"))),
    ("process", ("tetrarch._runtime._root",)),
    ("rdma", ("tetrarch._rdma",)),
    ("meshes", tuple(f"tetrarch._runtime.{m}" for m in (
        "_mesh", "_hostalloc", "_procmesh", "_controller", "_compat", "_shutdown", "_workerauth", "_attach",
        "_job_cache", "_job", "_worker_job", "_channel"))),
    ("spmd", ("tetrarch._spmd",)),
    ("programs", ("tetrarch._runtime._host_agent", "tetrarch._runtime._proc_main", "tetrarch._runtime._worker")),
)
