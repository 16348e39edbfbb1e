#!/usr/bin/env bash
# Install the Debian packages tetrarch's backends need, only those that are missing.
#
# Called by `make deps-apt` (and so before `make venv`). With nothing missing it does
# nothing at all: no sudo, no `apt-get update`, no network.
#
# The list is empty in this first version: later issues add what their backends need,
# e.g. libfabric1 libfabric-dev (rdma_efa's cffi module) or the slurm packages
# (alloc_slurm's tests). Keep one package per line with a comment saying who needs it.
set -euo pipefail

PACKAGES=(
    python3-pyverbs  # rdma_verbs: its probe and tests import the real pyverbs (found without PYTHONPATH)
    libfabric1      # rdma_efa: the libfabric runtime (its tests run the efa backend over shm and tcp;ofi_rxm)
    libfabric-dev   # rdma_efa: headers its cffi binding is compiled against on first use
    gcc             # rdma_efa: compiles that binding (fresh bookworm images may lack a compiler)
    libc6-dev       # rdma_efa: C library headers for the same compilation
    chromium        # tests/kernel/test_admin.py: the admin dashboard checked in a real headless browser
)

missing=()
for pkg in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$pkg")
    fi
done

if ((${#missing[@]} == 0)); then
    echo "apt-deps: nothing to install"
    exit 0
fi

sudo=()
if [[ "$(id -u)" != 0 ]]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "apt-deps: need root or sudo to install: ${missing[*]}" >&2
        exit 1
    fi
    sudo=(sudo)
fi

export DEBIAN_FRONTEND=noninteractive
echo "apt-deps: installing ${missing[*]}"
# Try with the current package lists first; refresh them only if that fails.
if ! "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"; then
    "${sudo[@]}" apt-get update
    "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
fi
