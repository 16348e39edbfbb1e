"""The benchmark suite's runner (``python -m benchmarks``; see ``--help`` and docs/performance.md).

Per repeat (after waiting for an idle machine, up to ``--idle-wait`` seconds), per workload
and size: one fresh process per framework (tetrarch; with ``--peers`` Ray and Monarch, in
the peers' venv, ``_peers_env``) and per raw baseline, in an order that rotates between
repeats. Each row reports per column the median over the repeats with its range, and per
framework the median (and range) of the per-repeat ratios to the row's first raw baseline
from the same repeat, as ``x raw``: how many times the raw cost (>1: slower than raw,
for times and rates alike). A column that cannot run says ``n/a``, with the reason under the
table and in the JSON (``--json``), which also holds every sample and the machine it ran on.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _idle import wait_idle
from _report import markdown_table
from _workloads import RAW, WORKLOADS, Workload, params

HERE = Path(__file__).resolve().parent
PEERS = ("ray", "monarch")
#: Displayed per unit: the factor from the workers' figures (seconds for times).
SCALE = {"µs": 1e6, "ms/round": 1e3, "s": 1.0, "calls/s": 1.0, "GB/s": 1.0}


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_epilog())
    ap.add_argument("--only", help=f"comma-separated workloads (default: all of {', '.join(WORKLOADS)})")
    ap.add_argument("--repeat", type=int, help="runs of every measurement; medians over them (default 5, "
                    "--quick: 1)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes and counts, 1 repeat: proves it works, "
                    "measures little")
    ap.add_argument("--json", metavar="PATH", help="also write every figure, sample and reason there")
    ap.add_argument("--peers", action="store_true", help="add Ray 2.60 and Monarch 0.7 columns (builds their "
                    "venv once, outside the repository)")
    ap.add_argument("--idle-wait", type=float, default=120.0, metavar="S",
                    help="before each repeat, wait up to S seconds for the CPUs to be idle (0: do not wait)")
    ap.add_argument("--timeout", type=float, default=600.0, metavar="S", help="seconds one measurement may take")
    return ap


def _epilog() -> str:
    lines = ["workloads:"]
    for w in WORKLOADS.values():
        lines.append(f"  {w.name:15} [{w.unit}, sizes {'/'.join(w.sizes)}; raw: {', '.join(w.baselines)}] {w.what}")
    lines.append("raw baselines:")
    lines += [f"  {name:15} {what}" for name, what in RAW.items()]
    return "\n".join(lines)


def _kill_tree(pid: int) -> None:
    """SIGKILL the worker ``pid``, its process group and every descendant (Monarch's procs and a Ray
    cluster's processes start sessions of their own, out of the worker's group)."""
    try:
        import psutil  # type: ignore[import-untyped]

        tree = psutil.Process(pid).children(recursive=True)
    except Exception:  # noqa: BLE001 - psutil missing or the worker gone: its group is what is left
        tree = []
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    for child in tree:
        with contextlib.suppress(Exception):
            child.kill()


def _worker(python: str, framework: str, workload: str, size: str, p: dict[str, Any],
            timeout: float) -> dict[str, Any]:
    """One measurement in a fresh ``python``: ``{"value", "extra"}`` or ``{"error"}``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    env["TETRARCH_BENCH_FRAMEWORK"] = framework
    argv = [python, str(HERE / "_suite_worker.py"), framework, workload, size, json.dumps(p)]
    # A session of its own: on a timeout, its whole process group (procs, a Ray cluster) goes.
    try:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=HERE,
                                start_new_session=True)
    except OSError as exc:
        return {"error": f"cannot start {python}: {exc}"}
    with proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_tree(proc.pid)
            proc.communicate()
            return {"error": f"took over {timeout:g} s (killed)"}
        except BaseException:  # Ctrl-C or SIGTERM (main): the measurement goes with the runner
            _kill_tree(proc.pid)
            raise
    out: dict[str, Any] = {}
    for line in reversed(stdout.splitlines()):
        with contextlib.suppress(ValueError):
            out = json.loads(line)
            break
    if proc.returncode != 0 or "value" not in out:
        tail = stderr.strip().splitlines()[-1:] or ["no output"]
        return {"error": out.get("error") or f"exit {proc.returncode}: {tail[0][:300]}"}
    return out


def _stats(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _row(w: Workload, size: str, samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """A row of the report from the samples of each column (in repeat order)."""
    base = f"raw:{w.baselines[0]}"
    columns: dict[str, Any] = {}
    for col, got in samples.items():
        values = [s["value"] * SCALE[w.unit] for s in got if "value" in s]
        errors = sorted({s["error"] for s in got if "error" in s})
        cell: dict[str, Any] = {"samples": values}
        cell.update(_stats(values) if values else {})
        if errors:
            cell["error"] = "; ".join(errors)
        extra = next((s.get("extra") for s in got if s.get("extra")), None)
        if extra:
            cell["extra"] = extra
        columns[col] = cell
    ratios = {}
    for col, got in samples.items():
        if col.startswith("raw:"):
            continue
        # Sample i of every column is repeat i's: an interrupted repeat leaves some a sample short.
        pairs = [(m["value"], r["value"]) for m, r in zip(got, samples[base], strict=False)
                 if "value" in m and "value" in r]
        if pairs:
            ratios[col] = _stats([r / m if w.higher_is_better else m / r for m, r in pairs])
    return {"workload": w.name, "size": size, "unit": w.unit, "better": "higher" if w.higher_is_better else "lower",
            "what": w.what, "baseline": base, "columns": columns, "x_raw": ratios}


def async_ratios(rows: list[dict[str, Any]], frameworks: list[str]) -> dict[str, dict[str, dict[str, float]]]:
    """Per ``*_async`` row and framework: how many times slower than the same workload on a plain
    endpoint (>1: slower), as the median and range of per-repeat ratios (both measured in the same repeat)."""
    by_key = {(r["workload"], r["size"]): r for r in rows}
    out: dict[str, dict[str, dict[str, float]]] = {}
    for r in rows:
        sync = by_key.get((r["workload"].removesuffix("_async"), r["size"]))
        if not r["workload"].endswith("_async") or sync is None:
            continue
        for fw in frameworks:
            mine, plain = (row["columns"].get(fw, {}).get("samples", []) for row in (r, sync))
            if mine and len(mine) == len(plain):  # sample i of each is repeat i's unless one failed: then none
                ratios = [s / a if r["better"] == "higher" else a / s for a, s in zip(mine, plain, strict=True)]
                out.setdefault(f"{r['workload']} {r['size']}", {})[fw] = _stats(ratios)
    return out


def _fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def _cell(cell: dict[str, Any] | None) -> str:
    if not cell or "median" not in cell:
        return "n/a"
    if cell["min"] == cell["max"]:
        return _fmt(cell["median"])
    return f"{_fmt(cell['median'])} [{_fmt(cell['min'])}-{_fmt(cell['max'])}]"


def table(rows: list[dict[str, Any]], frameworks: list[str]) -> str:
    """The rows as a markdown table: per framework its figure and ``x raw``, then the raw baselines."""
    header = ["workload", "size", "unit", *frameworks, "raw", *[f"{f} x raw" for f in frameworks]]
    cells = []
    for r in rows:
        raws = [c for c in r["columns"] if c.startswith("raw:")]
        mine = [_cell(r["columns"].get(f)) for f in frameworks]
        ratios = [_cell(r["x_raw"].get(f)) for f in frameworks]
        cells.append([r["workload"], r["size"], r["unit"], *mine, f"{_cell(r['columns'][raws[0]])} ({raws[0][4:]})",
                      *ratios])
        blank = [""] * len(frameworks)
        cells += [["", "", "", *blank, f"{_cell(r['columns'][c])} ({c[4:]})", *blank] for c in raws[1:]]
    return markdown_table(header, cells)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    load = os.getloadavg()
    return {"cpus": os.cpu_count(), "python": sys.version.split()[0], "platform": platform.platform(),
            "loadavg_at_start": load, "versions": {d: _version(d) for d in ("tetrarch", "pyzmq", "numpy")}}


Samples = dict[tuple[str, str], dict[str, list[dict[str, Any]]]]


def _measure(runs: list[tuple[Workload, str]], frameworks: list[str], pythons: dict[str, str],
             reasons: dict[str, str], repeat: int, p: dict[str, Any], args: argparse.Namespace,
             samples: Samples, idle: list[dict[str, Any]]) -> None:
    """Every measurement, ``repeat`` times (each after an idle wait), into ``samples`` (per row and
    column) and ``idle`` (what each wait found) as it goes: an interrupted run keeps what it measured."""
    for rep in range(repeat):
        idle.append(wait_idle(args.idle_wait))
        print(f"repeat {rep + 1}/{repeat}: {idle[-1]['said']}", file=sys.stderr, flush=True)
        for w, size in runs:
            row = samples.setdefault((w.name, size), {c: [] for c in [*frameworks, *(f"raw:{b}" for b in
                                                                                     w.baselines)]})
            cols = list(row)
            for col in cols[rep % len(cols):] + cols[:rep % len(cols)]:  # no column always goes first
                if col in reasons:
                    got: dict[str, Any] = {"error": reasons[col]}
                else:
                    got = _worker(pythons.get(col, sys.executable), col, w.name, size, p, args.timeout)
                row[col].append(got)
                print(f"  {w.name} {size} {col}: " + (f"{got['value'] * SCALE[w.unit]:.4g} {w.unit}" if "value" in got
                      else f"n/a ({got['error']})"), file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """The runner (``python -m benchmarks``): 0; 130 when interrupted (the table shows what was measured)."""
    args = _parser().parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # workers cleaned up on the way
    only = [n.strip() for n in args.only.split(",")] if args.only else list(WORKLOADS)
    unknown = [n for n in only if n not in WORKLOADS]
    if unknown:
        _parser().error(f"unknown workload(s) {', '.join(unknown)} (known: {', '.join(WORKLOADS)})")
    repeat = (1 if args.quick else 5) if args.repeat is None else args.repeat
    if repeat < 1:
        _parser().error(f"--repeat must be at least 1, not {repeat}")
    p = params(args.quick)
    frameworks = ["tetrarch"]
    pythons = {"tetrarch": sys.executable}
    reasons: dict[str, str] = {}
    info = machine()
    if args.peers:
        from _peers_env import ensure_peers_env

        env = ensure_peers_env()
        frameworks += PEERS
        for fw in PEERS:
            python, why = env.python_for(fw)
            if python:
                pythons[fw] = python
            else:
                reasons[fw] = why
                print(f"{fw}: n/a ({why})", file=sys.stderr)
        info["versions"].update({f"peers:{fw}": v for fw, v in env.versions.items()})
    runs = [(WORKLOADS[n], size) for n in only for size in (WORKLOADS[n].quick_sizes if args.quick
                                                            else WORKLOADS[n].sizes)]
    started = time.monotonic()
    samples: Samples = {}
    idle: list[dict[str, Any]] = []
    interrupted = False
    try:
        _measure(runs, frameworks, pythons, reasons, repeat, p, args, samples, idle)
    except (KeyboardInterrupt, SystemExit):  # Ctrl-C, SIGTERM: report what was measured
        interrupted = True
    rows = [_row(w, size, samples[w.name, size]) for w, size in runs if (w.name, size) in samples]
    print(f"cpus: {info['cpus']}   python: {info['python']}   repeats: {repeat}   "
          f"{'quick   ' if args.quick else ''}took {time.monotonic() - started:.0f} s"
          + ("   INTERRUPTED: what was measured so far" if interrupted else ""))
    print(table(rows, frameworks) if rows else "nothing measured")
    print("cells: median [min-max] over the repeats; x raw: per-repeat ratio to the first raw baseline "
          "(>1: slower than raw)")
    slower = async_ratios(rows, frameworks)
    for what, cells in slower.items():
        print(f"{what} x sync (per-repeat ratio to the plain endpoint, >1: slower): "
              + ", ".join(f"{fw} {_cell(cell)}" for fw, cell in cells.items()))
    for fw, why in reasons.items():
        print(f"{fw}: n/a: {why}")
    for r in rows:
        for col, cell in r["columns"].items():
            if "error" in cell and col not in reasons:
                print(f"{r['workload']} {r['size']} {col}: {len(cell['samples'])}/{repeat} measured; {cell['error']}")
    if args.json:
        doc = {"machine": info, "options": {"repeat": repeat, "quick": args.quick, "only": only, "params": p,
                                            "peers": args.peers}, "interrupted": interrupted, "idle": idle,
               "unavailable": reasons, "rows": rows, "async_x_sync": slower}
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 130 if interrupted else 0
