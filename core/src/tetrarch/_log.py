"""tetrarch's loggers: one tree under ``tetrarch``, silent plumbing for applications.

Every diagnostic goes to a logger named ``tetrarch.<area>`` (``tetrarch.router``,
``tetrarch.actor``, ``tetrarch.supervision``, ...). The package logger carries a
``NullHandler``, as libraries should, plus one fallback handler that keeps tetrarch's
warnings readable when nobody configured logging: it writes ``tetrarch[<process>]:
message`` to stderr, exactly where tetrarch printed before, but only while neither the
root logger nor any logger on the record's way up has a handler of its own. So:

* an application that configures logging (``logging.basicConfig``, pytest's ``caplog``,
  a ``dictConfig``) gets tetrarch's records through its own handlers and nothing else;
* ``logging.getLogger("tetrarch").setLevel(logging.ERROR)`` (or ``.disabled = True``)
  silences tetrarch;
* procs and host agents write to their stderr, which reaches the client's terminal.
"""

from __future__ import annotations

import logging
import sys

__all__ = ["get_logger", "set_process_name"]

ROOT = "tetrarch"
_process = ["client"]


def set_process_name(name: str) -> None:
    """Name this process in fallback output (``client``, ``host0``, ``procs-...[3]``)."""
    _process[0] = name


def get_logger(area: str) -> logging.Logger:
    """The logger ``tetrarch.<area>`` (a plugin uses its own area: ``get_logger("slurm")``).

    Its records go where tetrarch's go: to the application's handlers when it configured
    logging, else to stderr as ``tetrarch[<process>]: message`` (at the default level:
    warnings and errors). Never raises.
    """
    return logging.getLogger(f"{ROOT}.{area}")


class _StderrFallback(logging.Handler):
    """Writes records to stderr while the application has configured no handler for them."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)

    def emit(self, record: logging.LogRecord) -> None:
        if _handled_elsewhere(record.name):
            return
        try:
            text = record.getMessage()
            if record.exc_info:
                text += "\n" + logging.Formatter().formatException(record.exc_info)
            stream = sys.stderr
            if stream is None:  # pragma: no cover - interpreter shutting down
                return
            stream.write(f"tetrarch[{_process[0]}]: {text}\n")
            stream.flush()
        except Exception:  # noqa: BLE001 - logging must never raise into the runtime
            self.handleError(record)


def _handled_elsewhere(name: str) -> bool:
    logger: logging.Logger | None = logging.getLogger(name)
    while logger is not None:
        for handler in logger.handlers:
            if not isinstance(handler, (logging.NullHandler, _StderrFallback)):
                return True
        if not logger.propagate:
            return False
        logger = logger.parent
    return False


_package = logging.getLogger(ROOT)
if not any(isinstance(h, logging.NullHandler) for h in _package.handlers):
    _package.addHandler(logging.NullHandler())
if not any(isinstance(h, _StderrFallback) for h in _package.handlers):
    _package.addHandler(_StderrFallback())
