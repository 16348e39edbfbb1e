"""docs/monarch.md lists every public name of Monarch's modules, and its rows agree with tetrarch's exports."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "monarch.md"

#: Monarch's public names (``__all__`` of each ``__init__.py``), by the tetrarch module that stands for it.
MONARCH = {
    "monarch.actor": ("tetrarch", (
        "Actor endpoint concurrent_endpoint as_endpoint Endpoint Accumulator ActorError Future ValueMesh Point Extent "
        "Port PortReceiver Channel send context Context current_rank current_size current_actor_name this_host "
        "this_proc HostMesh ProcMesh get_or_spawn_controller hosts_from_config default_bootstrap_cmd "
        "attach_to_workers run_worker_loop_forever attach enable_transport ChannelTransport shutdown_context "
        "unhandled_fault_hook MeshFailure debug_controller config get_meter span traced ProcId Uid "
        "gpu_direct_rdma_supported proc_mesh local_proc_mesh sim_proc_mesh")),
    "monarch.job": ("tetrarch.job", "JobTrait JobState LocalJob ProcessJob SlurmJob job_load job_loads"),
    "monarch.job.spmd": ("tetrarch.job.spmd", "SPMDJob create_job_for_scheduler"),
    "monarch.rdma": ("tetrarch.rdma", (
        "RDMABuffer RDMAAction get_rdma_backend is_ibverbs_available is_rdma_available RDMATcpFallbackWarning "
        "RDMAReadTransferWarning RDMAWriteTransferWarning")),
    "monarch.spmd": ("tetrarch.spmd", "SPMDActor setup_torch_elastic_env setup_torch_elastic_env_async"),
    "monarch.config": ("tetrarch.config", (
        "configure configured get_global_config get_runtime_config clear_runtime_config Encoding parametrize_config "
        "parametrize_config_pointwise")),
}
#: Rows whose Monarch name exists in tetrarch as something else (explained in the row).
HOMONYMS = {("tetrarch", "config")}


def _rows() -> dict[str, dict[str, str]]:
    """Monarch module -> {Monarch name: the tetrarch cell}, from the doc's tables."""
    rows: dict[str, dict[str, str]] = {}
    section = ""
    for line in DOC.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"## `(monarch[\w.]*)` → ", line)
        if heading:
            section = heading.group(1)
        elif section and line.startswith("| `"):
            first, cell = line[2:].split(" | ", 1)
            for name in re.findall(r"`(\w+)`", first):
                rows.setdefault(section, {})[name] = cell
    return rows


def test_every_monarch_name_has_a_row() -> None:
    rows = _rows()
    for module, (_, names) in MONARCH.items():
        missing = set(names.split()) - set(rows.get(module, {}))
        assert not missing, f"docs/monarch.md: add rows for {module}: {sorted(missing)}"


@pytest.mark.parametrize("module", sorted(MONARCH))
def test_a_row_agrees_with_what_tetrarch_exports(module: str) -> None:
    target, _ = MONARCH[module]
    mod = importlib.import_module(target)
    for name, cell in _rows()[module].items():
        if cell.startswith("same"):
            assert name in getattr(mod, "__all__", ()) and getattr(mod, name) is not None, (module, name)
        elif cell.startswith(("not supported", "renamed")) and (target, name) not in HOMONYMS:
            assert name not in getattr(mod, "__all__", ()), f"{module}.{name} exists in {target}: update its row"
        elif not cell.startswith(("in progress", "not supported", "renamed")):
            pytest.fail(f"{module}.{name}: a row says same, renamed to, not supported or in progress: {cell!r}")


def test_in_progress_rows_are_marked_for_recheck() -> None:
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("| ") and "in progress (issue 30)" in line:
            assert "<!-- recheck -->" in line, line


def test_relative_links_point_at_files_and_headings() -> None:
    for target, anchor in re.findall(r"\]\(([\w./-]+\.md)(?:#([\w-]+))?\)", DOC.read_text(encoding="utf-8")):
        path = DOC.parent / target
        assert path.is_file(), target
        if anchor:
            slugs = {re.sub(r"[^\w\- ]", "", h.strip("# ").lower()).replace(" ", "-")
                     for h in path.read_text(encoding="utf-8").splitlines() if h.startswith("#")}
            assert anchor in slugs, f"{target}#{anchor}"
