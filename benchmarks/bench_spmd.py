"""A tiny DDP script on 4 ranks: torchrun against tetrarch.spmd, measured in the same run.

    python benchmarks/bench_spmd.py [--repeat 5] [--quick] [--no-breakdown]

The script (written to a temporary folder): ``import torch``, ``init_process_group("gloo")``
from torchrun's variables, one ``all_reduce`` of a 1-element tensor, ``destroy_process_group``,
end. Each figure is the wall time of one whole run, as seen by this process:

(a) ``torchrun``: ``python -m torch.distributed.run --standalone --nproc-per-node=4 tiny.py``
    in a subprocess, from ``Popen`` to its exit: the launcher's interpreter start and its
    ``import torch``, its c10d rendezvous, 4 worker interpreters each importing torch and
    running the script, and the launcher's exit.
(b) ``tetrarch, fresh mesh``: a fresh client subprocess (``python -c``), from ``Popen`` to its
    exit: interpreter start, ``import tetrarch`` and ``tetrarch.spmd``,
    ``this_host().spawn_procs(per_host={"gpus": 4})`` (host agent and 4 procs started),
    ``spawn("spmd", SPMDActor)``, ``get_host_port`` (rank 0 imports torch and starts the
    store), ``main`` on the script (ranks 1-3 import torch there), ``procs.stop()``, exit.
(c) ``tetrarch, reserved mesh``: ``am.main.call(addr, port, [tiny.py]).get()`` in this process
    on 4 procs and actors that are already up and have run the script once (torch imported):
    a fresh per-run store, the rendezvous, the all-reduce, the teardown, the reply.
(d) ``serve().run_spmd() rerun``: when ``tetrarch.job.spmd.serve`` exists, a further
    ``run_spmd()`` of ``serve(["torchrun", "--standalone", "--nproc-per-node=4", tiny.py])``
    after a first one (untimed) brought its procs up.

Each repetition runs every variant once (their order rotates), with a short pause between;
the table gives per variant the median, min and max over the repetitions and the ratio of
medians to torchrun's, with the range of the per-repetition ratios (each against torchrun's
figure of the same repetition). ``CPU s`` is the median user+system CPU time of the variant's
process tree (``RUSAGE_CHILDREN``: the launcher or client and every process it reaped: workers,
host agent, procs), a figure that other load on the machine moves much less than wall time.
Targets (issue 29, on the 2-core development VM): (b) at most 1.0 x torchrun; (c) and (d) at
most 0.25 x torchrun.

Breakdown (unless ``--no-breakdown``): the script and the fresh client write wall-clock
(``time.time()``) marks, and a table gives the median of each, in seconds after the launch, so
one can see where (a) and (b) spend their time (interpreter start, torch imports, procs,
rendezvous, teardown). Under tetrarch rank 0 imports torch in ``get_host_port`` and ranks 1-3 in
``main`` before the script starts (the run's rendezvous uses a ``TCPStore``), so their script
starts after their import.

Figures are comparable inside one run only: on a shared 2-core VM other work moves them by
tens of percent between runs (and between the variants of one repetition).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

NPROC = 4
TARGETS = {"fresh": 1.0, "reserved": 0.25, "serve": 0.25}

#: The DDP script every variant runs. With a folder as its argument it writes its rank's marks there.
TINY = r'''
import json, os, sys, time
marks = {"begin": time.time()}
import torch
import torch.distributed as dist
marks["torch"] = time.time()
dist.init_process_group("gloo")
marks["init"] = time.time()
t = torch.ones(1)
dist.all_reduce(t)
assert t.item() == dist.get_world_size(), t
marks["all_reduce"] = time.time()
rank = dist.get_rank()
dist.destroy_process_group()
marks["destroy"] = time.time()
if len(sys.argv) > 1 and sys.argv[1]:
    with open(os.path.join(sys.argv[1], "rank%d.json" % rank), "w") as f:
        json.dump(marks, f)
'''

#: The fresh client of (b), run with ``python -c``: argv = [script, marks folder].
CLIENT = r'''
import time
t0 = time.time()
import json, os, sys
from tetrarch import this_host
from tetrarch.spmd import SPMDActor
marks = {"client": t0, "imported": time.time()}
script, where = sys.argv[1], sys.argv[2]
procs = this_host().spawn_procs(per_host={"gpus": __NPROC__})
am = procs.spawn("spmd", SPMDActor)
marks["procs"] = time.time()
addr, port = am.slice(gpus=0).get_host_port.call_one(None).get()
marks["store"] = time.time()
am.main.call(addr, port, [script, where]).get()
marks["main"] = time.time()
procs.stop().get()
marks["stopped"] = time.time()
with open(os.path.join(where, "client.json"), "w") as f:
    json.dump(marks, f)
'''.replace("__NPROC__", str(NPROC))

LABELS = {
    "torchrun": "(a) torchrun --standalone",
    "fresh": "(b) tetrarch, fresh mesh",
    "reserved": "(c) tetrarch, reserved mesh",
    "serve": "(d) serve().run_spmd() rerun",
}


def _run_subprocess(argv: list[str], marks: Path, timeout: float) -> tuple[float, dict[str, Any]]:
    """Wall seconds of ``argv`` from Popen to exit, and the marks it left in ``marks`` (relative to launch)."""
    for f in marks.glob("*.json"):
        f.unlink()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    launched = time.time()
    t = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, check=False)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:4]} exited with {proc.returncode}:\n{proc.stdout.decode(errors='replace')[-3000:]}")
    found: dict[str, Any] = {"exit": wall, "cpu": after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime}
    for f in marks.glob("*.json"):
        found[f.stem] = {k: v - launched for k, v in json.loads(f.read_text()).items()}
    return wall, found


def torchrun(script: Path, marks: Path, timeout: float) -> tuple[float, dict[str, Any]]:
    return _run_subprocess([sys.executable, "-m", "torch.distributed.run", "--standalone",
                            f"--nproc-per-node={NPROC}", str(script), str(marks)], marks, timeout)


def fresh(script: Path, marks: Path, timeout: float) -> tuple[float, dict[str, Any]]:
    return _run_subprocess([sys.executable, "-c", CLIENT, str(script), str(marks)], marks, timeout)


@contextlib.contextmanager
def reserved_mesh(script: Path) -> Iterator[Callable[[], float]]:
    """4 procs with SPMDActor, the script run once; yields a timed rerun."""
    from tetrarch import this_host
    from tetrarch.spmd import SPMDActor

    procs = this_host().spawn_procs(per_host={"gpus": NPROC})
    try:
        am: Any = procs.spawn("spmd", SPMDActor)
        addr, port = am.slice(gpus=0).get_host_port.call_one(None).get()
        am.main.call(addr, port, [str(script)]).get()

        def rerun() -> float:
            t = time.perf_counter()
            am.main.call(addr, port, [str(script)]).get()
            return time.perf_counter() - t

        yield rerun
    finally:
        procs.stop().get()


def _serve_available() -> str | None:
    """None when ``tetrarch.job.spmd.serve`` exists, else why not."""
    try:
        from tetrarch.job.spmd import serve  # noqa: F401
    except ImportError as exc:
        return f"tetrarch.job.spmd.serve not importable ({exc})"
    return None


@contextlib.contextmanager
def served_job(script: Path, state_dir: Path) -> Iterator[Callable[[], float]]:
    """``serve(torchrun command)``, one untimed ``run_spmd()``; yields a timed rerun; ``kill()`` after."""
    from tetrarch.job.spmd import serve

    job = serve(["torchrun", "--standalone", f"--nproc-per-node={NPROC}", str(script)],
                state_path=str(state_dir / "spmd_job.json"))
    try:
        job.run_spmd()

        def rerun() -> float:
            t = time.perf_counter()
            job.run_spmd()
            return time.perf_counter() - t

        yield rerun
    finally:
        job.kill()


def report(walls: dict[str, list[float]], marks: dict[str, list[dict[str, Any]]]) -> None:
    """Per variant: median, min, max wall seconds; the ratio of medians to torchrun's and the range
    of the per-repetition ratios; the CPU seconds its process tree used (subprocess variants)."""
    base = walls["torchrun"]
    base_med = statistics.median(base)
    print(f"\n{'':32}{'median s':>9}{'min':>7}{'max':>7}{'x torchrun':>11}{'per-rep':>12}{'CPU s':>7}   target")
    for key, xs in walls.items():
        med = statistics.median(xs)
        ratio = med / base_med
        per = [x / b for x, b in zip(xs, base, strict=True)]
        rng = f"{min(per):.2f}-{max(per):.2f}" if key != "torchrun" else ""
        cpu = [m["cpu"] for m in marks[key] if "cpu" in m]
        cpu_cell = f"{statistics.median(cpu):7.1f}" if cpu else f"{'-':>7}"
        target = TARGETS.get(key)
        verdict = "" if target is None else f"<= {target:g} x: {'ok' if ratio <= target else 'MISSED'}"
        print(f"{LABELS[key]:32}{med:9.2f}{min(xs):7.2f}{max(xs):7.2f}{ratio:11.2f}{rng:>12}{cpu_cell}   {verdict}")


def _med(found: list[dict[str, Any]], who: str, mark: str, agg: Callable[[list[float]], float]) -> float | None:
    """Median over repetitions of ``agg`` over the ranks (``who="rank"``) or of one file's mark."""
    vals = []
    for f in found:
        if who == "rank":
            xs = [v[mark] for k, v in f.items() if k.startswith("rank") and mark in v]
            if len(xs) == NPROC:
                vals.append(agg(xs))
        elif who == "exit":
            vals.append(f["exit"])
        elif who in f and mark in f[who]:
            vals.append(f[who][mark])
    return statistics.median(vals) if vals else None


def breakdown(marks: dict[str, list[dict[str, Any]]]) -> None:
    """Median seconds after launch of each mark, for (a) and (b)."""
    rows = [
        ("client up, tetrarch imported", "client", "imported", None),
        ("4 procs up (spawn_procs)", "client", "procs", None),
        ("store up (get_host_port: rank 0 imports torch)", "client", "store", None),
        ("script starts, first rank", "rank", "begin", min),
        ("script starts, last rank", "rank", "begin", max),
        ("import torch done, last rank", "rank", "torch", max),
        ("init_process_group done, last rank", "rank", "init", max),
        ("all_reduce done, last rank", "rank", "all_reduce", max),
        ("destroy_process_group done, last rank", "rank", "destroy", max),
        ("main returned to the client", "client", "main", None),
        ("procs.stop() returned", "client", "stopped", None),
        ("process exited (the figure above)", "exit", "exit", None),
    ]
    print(f"\nWhere the time goes: median seconds after launch ({len(marks['torchrun'])} repetitions)")
    print(f"{'':50}{'torchrun':>10}{'tetrarch':>10}")
    for label, who, mark, agg in rows:
        cells = []
        for key in ("torchrun", "fresh"):
            v = _med(marks[key], who, mark, agg or min)
            cells.append(f"{v:10.2f}" if v is not None else f"{'-':>10}")
        print(f"{label:50}{''.join(cells)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5, help="repetitions of every variant (default 5)")
    ap.add_argument("--quick", action="store_true", help="3 repetitions instead of --repeat")
    ap.add_argument("--pause", type=float, default=1.0, help="seconds between runs (teardown settles)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds one subprocess run may take")
    ap.add_argument("--no-breakdown", action="store_true", help="skip the where-the-time-goes table")
    args = ap.parse_args()
    repeat = 3 if args.quick else args.repeat
    if importlib.util.find_spec("torch") is None:  # not imported here: this process only drives
        print("bench_spmd needs torch: pip install torch", file=sys.stderr)
        return 2

    no_serve = _serve_available()
    print(f"cores: {os.cpu_count()}   python: {sys.version.split()[0]}   "
          f"torch: {importlib.metadata.version('torch')}   ranks: {NPROC}   repetitions: {repeat}")
    if no_serve:
        print(f"(d) skipped: {no_serve}")

    with tempfile.TemporaryDirectory(prefix="bench_spmd_") as tmp, contextlib.ExitStack() as stack:
        script = Path(tmp) / "tiny_ddp.py"
        script.write_text(TINY)
        marks_dir = Path(tmp) / "marks"
        marks_dir.mkdir()
        runners: dict[str, Callable[[], tuple[float, dict[str, Any]]]] = {
            "torchrun": lambda: torchrun(script, marks_dir, args.timeout),
            "fresh": lambda: fresh(script, marks_dir, args.timeout),
        }
        rerun = stack.enter_context(reserved_mesh(script))
        runners["reserved"] = lambda: (rerun(), {})
        if not no_serve:
            serve_rerun = stack.enter_context(served_job(script, Path(tmp) / "job"))
            runners["serve"] = lambda: (serve_rerun(), {})
        walls: dict[str, list[float]] = {k: [] for k in runners}
        marks: dict[str, list[dict[str, Any]]] = {k: [] for k in runners}
        order = list(runners)
        for n in range(repeat):
            rot = order[n % len(order):] + order[:n % len(order)]
            for key in rot:
                time.sleep(args.pause)
                wall, found = runners[key]()
                walls[key].append(wall)
                marks[key].append(found)
            print(f"rep {n + 1}/{repeat}: " + "  ".join(f"{k} {walls[k][-1]:.2f} s" for k in order), flush=True)

    report(walls, marks)
    if not args.no_breakdown:
        breakdown(marks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
