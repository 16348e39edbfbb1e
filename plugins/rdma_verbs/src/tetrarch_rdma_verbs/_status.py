"""Work completion statuses (``enum ibv_wc_status``) as errors that say what went wrong.

The numbers are the ibverbs ABI (``infiniband/verbs.h``); a test checks them against
pyverbs' own enum where pyverbs is installed.
"""

from __future__ import annotations

from tetrarch.rdma import RDMAError

__all__ = ["WC_STATUS", "VerbsError", "WcError", "wc_error"]


class VerbsError(RDMAError):
    """The verbs backend failed (device, queue pair or registration); the message says how to fix it."""


class WcError(VerbsError):
    """A work request completed with a status other than ``IBV_WC_SUCCESS``.

    ``status`` is the number, ``name`` its ``IBV_WC_*`` name, ``vendor_err`` the NIC's own code.
    """

    def __init__(self, message: str, status: int = -1, name: str = "", vendor_err: int = 0) -> None:
        super().__init__(message)
        self.status = status
        self.name = name
        self.vendor_err = vendor_err

    def __reduce__(self) -> tuple:
        return (WcError, (self.args[0], self.status, self.name, self.vendor_err))


_FABRIC = "check the link (`ibstat`), that both ports are ACTIVE and can reach each other (subnet, GID/RoCE config)"
_STALE = ("the owner no longer has this memory registered (dropped, freed, or its process restarted): ask the owner "
          "for a fresh RDMABuffer")

#: ``status -> (name, what it means and the fix)``.
WC_STATUS: dict[int, tuple[str, str]] = {
    0: ("IBV_WC_SUCCESS", ("success")),
    1: ("IBV_WC_LOC_LEN_ERR", ("local length error: a scatter/gather entry exceeds the registered local memory "
        "(a bug in tetrarch's chunking: please report it)")),
    2: ("IBV_WC_LOC_QP_OP_ERR", ("local queue pair operation error: the QP cannot carry this work request "
        "(the QP is in error state; the next transfer reconnects)")),
    3: ("IBV_WC_LOC_EEC_OP_ERR", ("local EE context operation error (RD only; not used by RC queue pairs)")),
    4: ("IBV_WC_LOC_PROT_ERR", ("local protection error: the local memory is not registered with this protection "
        "domain or lacks the access rights (was the local buffer freed during the transfer?)")),
    5: ("IBV_WC_WR_FLUSH_ERR", ("flushed: the queue pair went into error state (an earlier failure, a missed "
        "deadline or the backend closing) before this work request ran; the next transfer reconnects")),
    6: ("IBV_WC_MW_BIND_ERR", ("memory window bind error")),
    7: ("IBV_WC_BAD_RESP_ERR", ("bad response from the remote NIC (unexpected transport opcode); " + _FABRIC)),
    8: ("IBV_WC_LOC_ACCESS_ERR", ("local access error: a protection error on the local data (local memory "
        "freed or re-mapped during the transfer?)")),
    9: ("IBV_WC_REM_INV_REQ_ERR", ("remote invalid request: the owner's NIC refused the request (length beyond "
        "its limits or an unsupported operation)")),
    10: ("IBV_WC_REM_ACCESS_ERR", ("remote access error: the remote key or address range is not valid at the owner; "
         + _STALE)),
    11: ("IBV_WC_REM_OP_ERR", ("remote operation error: the owner's NIC could not complete the operation "
         "(its QP may be in error state; the next transfer reconnects)")),
    12: ("IBV_WC_RETRY_EXC_ERR", ("transport retry counter exceeded: the owner's NIC did not answer (owner process "
         "gone, or the path between the ports is down); " + _FABRIC)),
    13: ("IBV_WC_RNR_RETRY_EXC_ERR", ("receiver-not-ready retry counter exceeded (unexpected for one-sided "
         "operations); " + _FABRIC)),
    14: ("IBV_WC_LOC_RDD_VIOL_ERR", ("local RDD violation (RD only)")),
    15: ("IBV_WC_REM_INV_RD_REQ_ERR", ("remote invalid RD request (RD only)")),
    16: ("IBV_WC_REM_ABORT_ERR", ("remote aborted the operation")),
    17: ("IBV_WC_INV_EECN_ERR", ("invalid EE context number (RD only)")),
    18: ("IBV_WC_INV_EEC_STATE_ERR", ("invalid EE context state (RD only)")),
    19: ("IBV_WC_FATAL_ERR", ("fatal error of the local device: check `dmesg` and the NIC's firmware; the backend "
         "must be restarted (restart the process)")),
    20: ("IBV_WC_RESP_TIMEOUT_ERR", ("response timeout: the owner's NIC did not respond; " + _FABRIC)),
    21: ("IBV_WC_GENERAL_ERR", ("general error reported by the NIC (see vendor_err and `dmesg`)")),
    22: ("IBV_WC_TM_ERR", ("tag matching error (not used by this backend)")),
    23: ("IBV_WC_TM_RNDV_INCOMPLETE", ("tag matching rendezvous incomplete (not used by this backend)")),
}


def wc_error(status: int, vendor_err: int, what: str) -> WcError:
    """The error for a work completion of ``status`` on ``what`` (e.g. "RDMA READ of 4096 bytes from ...")."""
    name, meaning = WC_STATUS.get(status, (f"IBV_WC_<{status}>", "a status this backend does not know"))
    return WcError(f"{what} failed with {name} (status {status}, vendor error {vendor_err:#x}): {meaning}",
                   status, name, vendor_err)
