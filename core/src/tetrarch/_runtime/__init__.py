"""The kernel, as a stack of layers. A module imports only from its own layer or below.

Each layer of the kernel is one package: ``tetrarch._runtime.<layer>``, so the folders
read like this map. A few layers live beside ``_runtime`` (``_transport``, ``_plugins``,
``_rdma``, ``_spmd``) and the public entry modules sit on top; every one has its place
below. The rule holds for every import: at module level, under ``TYPE_CHECKING`` and
inside functions (``tests/kernel/test_layers.py`` checks it, and that no import cycle
exists). A module that needs something from above takes it as an argument or a ``Protocol``.

``foundation`` (modules of ``tetrarch`` itself; they import nothing of tetrarch above them)
    ``_errors``    every error tetrarch raises (one tree under ``TetrarchError``)
    ``_config``    every setting, declared once; ``tetrarch.config`` is its public face
    ``_config_launch``, ``_config_monarch``  the variables the kernel sets; Monarch's setting names
    ``_config_plugins``  plugins' settings as the settings see them (read through a provider the
                    package installs: this layer does not import the plugin layer)
    ``_config_doc``  the settings table of the docs
    ``_config_setting``  the Setting record: how one setting's value is read
    ``_log``       the ``tetrarch.*`` logger tree
    ``_lazy``      lazy module attributes for the public packages
    ``_version``   the distribution's version
    ``_telemetry`` spans published and subscribed to, and hooks that add OpenTelemetry instruments
    ``_telemetry._io``  messages and bytes per connection, transfers and bytes per RDMA backend
    ``_telemetry._trace``, ``_caller``  spans of calls and spawns; the caller's metrics per endpoint
    ``_telemetry._perfetto``, ``_otlp``  the trace file (Perfetto); OTLP export of spans, shared with metrics
    ``_telemetry._tables``, ``_store``, ``_forward``, ``_query``  the SQL store's tables, a process's
                    bounded rotating store, its recorder, and DuckDB over Arrow
    ``_telemetry._otel_env``  the standard OTEL_* variables, checked once: one warning, the defaults apply

``values`` (``_runtime/values``: plain data and pure functions, no runtime state)
    ``_shape``      Extent, Point, Shape and the slicing shared by every mesh
    ``_value_mesh``  ValueMesh: one value per rank
    ``_future``     Future: a result usable from threads and asyncio
    ``_wire``       every message kind, declared once as a named record
    ``_buffers``    receive buffers that become ``bytes`` without a copy
    ``_serial``     pickling with out-of-band buffers
    ``_cuda``       CUDA tensors: by IPC handle to a process that sees their GPU, else through host memory
    ``_outcome``    error records out, exceptions back
    ``_context``    context(), current_rank(), Instance (what actor code sees)
    ``_tombstones`` why the actors of a process are gone, in bounded memory
    ``_early``      calls that reach a proc ahead of their actor's spawn, held until it arrives

``plumbing`` (``_runtime/plumbing``: processes, secrets and memory, below any router)
    ``_secret``     the allocation's secret passed to a child outside its environment (pipe or 0600 file)
    ``_spawn``      child processes that die with their parent and report their exit
    ``_alloc``      the allocator plugin interface
    ``_cma``        cross-memory attach: process_vm_readv/writev with another process of this host
    ``_segments``   shared-memory segments (memfd) for large payloads: a bounded pool, lent and taken back
    ``_shm_wire``    large payloads to a process of this host through those segments, and back into views
    ``_dirs``       the default folders of a user's files (admin announcements, telemetry)
    ``_stdio``      a proc's sys.stdout/sys.stderr: never blocked by a host agent that does not read
    ``_proc_state``  what the OS says of a process (stopped, ended) and a tick that notices its own stalls
    ``_stop_guard``  bounds on a proc's stop: actors whose stop cannot begin, a finalisation that hangs
    ``_boot_cmd``    BootstrapCommand: how a host agent starts a proc
    ``_preload``    modules a proc imports before its first actor (the ``preload`` setting)

``transport`` (``tetrarch._transport``)
    the transport interface, the builtin ipc/tcp transport, authentication, the transport loop,
    the waiting room that closes connections which do not authenticate in time

``plugins`` (``tetrarch._plugins``)
    the plugin registry (pluggy): finds transports, allocators, RDMA backends

``router`` (``_runtime/router``)
    ``_router``     one per process: connections, authentication, dispatch to ports, mailboxes, services
    ``_outbox``     bursts to one peer coalesced into one vectored write by a flusher thread
    ``_sequencer``  each sender's numbered calls delivered in its order, whether they came straight or relayed

``services`` (``_runtime/services``; each handed a router explicitly)
    ``_launch``       processes this one started: ready, exit, heartbeat
    ``_supervision``  MeshFailure, the per-process Supervisor, the client's fault hook
    ``_client_exit``  the client's way out: a fatal failure ends it from its main thread; Ctrl-C
    ``_port``         Port and PortReceiver
    ``_collect``      gathering the replies of one operation
    ``_relay``        mesh calls through each host's agent: one message per host each way
    ``_ask``          questions to other processes' services, each answer awaited within its own bound
    ``_stack``        a host agent's py-spy dumps of its procs
    ``_telemetry``    each host's telemetry store behind a service, and SQL over every host's
    ``_endpoint``     Endpoint[P, R] and its adverbs over a mesh
    ``_output``       procs' stdout and stderr at their owner, prefixed with mesh and rank; process titles

``actors`` (``_runtime/actors``)
    ``_actor``          Actor and the @endpoint decorators
    ``_standby``        an idle actor thread reading for its proc's transport loop (one wake-up per call)
    ``_stall``          calls that wait long behind a plain async handler: said once per actor
    ``_runner``         ActorRunner: one actor's thread, loop, mailbox and fate
    ``_proc_service``   the ``proc`` service: spawns and stops the actors of a process

``process`` (``_runtime/process``)
    ``_root``       wires a process together (router + services) and holds it

``rdma`` (``tetrarch._rdma``, and its public face ``tetrarch.rdma``; needs the process's router and
the actor context)
    RDMABuffer, RDMAAction, the backend interface, core's tcp and shm backends

``plugin API`` (``tetrarch.plugins`` and its submodules)
    the complete API of plugins: the registry's records and hooks, the interfaces of each kind and
    the kernel's pieces they may use

``meshes`` (``_runtime/meshes``, and its public face ``tetrarch.job``; what users call)
    ``_mesh``       ActorMesh
    ``_host_alloc``  which allocator starts a host mesh (the registry's selection rules)
    ``_proc_mesh``   HostMesh, ProcMesh, this_host(), this_proc()
    ``_controller`` get_or_spawn_controller(): one named singleton actor per process
    ``_shutdown``   shutdown_context(), and stopping what the client started at exit
    ``_worker_auth`` the secret file, the sealed session secret and address checks of workers and their clients
    ``_attach``     attach_to_workers(): a HostMesh over workers something else started
    ``_compat``     proc_mesh(): Monarch's deprecated way to make procs, kept for its programs
    ``_job_cache``  dump / job_load of jobs, and the cached job state() reuses
    ``_job``        jobs: named host meshes from an allocator (``tetrarch.job``)
    ``_worker_job`` WorkerJob: a job over running workers, reusable across runs
    ``_channel``    Channel, send(), Accumulator

``spmd`` (``tetrarch._spmd``, public as ``tetrarch.spmd`` and ``tetrarch.job.spmd``)
    SPMDActor, setup_torch_elastic_env, the rendezvous store, torchrun's variables, served jobs

``programs`` (``_runtime/programs``: entry points of the processes tetrarch starts)
    ``_host_agent``  one per host: starts procs
    ``_zygote``      the host's template process: forks procs with their modules already imported
    ``_proc_main``   one per proc
    ``_worker``      run_worker_loop_forever(): a host agent that serves one client at a time, re-keyed for each

``admin`` (``tetrarch._admin``, public as ``tetrarch.admin``: a running program seen from outside)
    ``_token``     the 0600 announcement file per client: URL and bearer token, found by the CLI
    ``_snapshot``  hosts, procs, actors, meshes, failures: the client's books plus each proc asked on demand
    ``_openapi``   the API's OpenAPI 3.1 document
    ``_server``    Starlette on Uvicorn in a thread of the client, behind the token

``api`` (on top: ``import tetrarch``, the CLI and its tools)
    ``tetrarch``      the public package (``tetrarch/__init__``): names load lazily from the layers
    ``_cli``, ``__main__``, ``_doctor``  ``tetrarch`` the command
    ``_cli_admin``, ``_cli_top``  ``ps``, ``stack``, ``debug``, ``doctor mesh``, ``top``: a running program
    ``_cli_trace``  ``trace``: run a program and write its Perfetto trace file
    ``_cli_query``  ``query``: SQL over a running program's or a finished job's telemetry

``tetrarch.testing`` is not part of the stack: the test kit of plugin authors and of our suite uses
the public API and the kernel alike.
"""

from __future__ import annotations

__all__ = ["EXACT", "LAYERS"]

#: Packages that hold layers of their own: their names in ``LAYERS`` mean their ``__init__`` only.
EXACT = frozenset({"tetrarch", "tetrarch._runtime", "tetrarch._telemetry"})

#: The stack, bottom first: ``(layer, modules)``. Module names are absolute; a package name
#: stands for every module in it (the longest name that matches a module wins), except the
#: packages of :data:`EXACT`, which stand for their ``__init__`` only.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("tetrarch._errors", "tetrarch._config", "tetrarch._config_launch", "tetrarch._config_monarch",
                    "tetrarch._config_plugins", "tetrarch._config_doc", "tetrarch._config_setting", "tetrarch._log",
                    "tetrarch._lazy", "tetrarch._client_hooks", "tetrarch._events", "tetrarch._telemetry",
                    "tetrarch._telemetry._io", "tetrarch._telemetry._otel_env",
                    "tetrarch._telemetry._tables", "tetrarch._telemetry._store", "tetrarch._telemetry._forward",
                    "tetrarch._telemetry._query",
                    "tetrarch._telemetry._trace", "tetrarch._telemetry._perfetto", "tetrarch._telemetry._otlp",
                    "tetrarch._telemetry._caller",
                    "tetrarch._version", "tetrarch._runtime", "tetrarch.config")),
    ("values", ("tetrarch._runtime.values",)),
    ("plumbing", ("tetrarch._runtime.plumbing",)),
    ("transport", ("tetrarch._transport",)),
    ("plugins", ("tetrarch._plugins",)),
    ("router", ("tetrarch._runtime.router",)),
    ("services", ("tetrarch._runtime.services",)),
    ("actors", ("tetrarch._runtime.actors",)),
    ("process", ("tetrarch._runtime.process",)),
    ("rdma", ("tetrarch._rdma", "tetrarch.rdma")),
    ("plugin API", ("tetrarch.plugins",)),
    ("meshes", ("tetrarch._runtime.meshes", "tetrarch.job")),
    ("spmd", ("tetrarch._spmd", "tetrarch.spmd", "tetrarch.job.spmd")),
    ("programs", ("tetrarch._runtime.programs",)),
    ("admin", ("tetrarch._admin", "tetrarch.admin")),
    ("api", ("tetrarch", "tetrarch._cli", "tetrarch._cli_admin", "tetrarch._cli_top", "tetrarch._cli_query",
             "tetrarch.__main__",
             "tetrarch._doctor", "tetrarch._cli_trace")),
)
