"""The admin API's OpenAPI 3.1 document: written first, served as is, responses tested against it."""

from __future__ import annotations

from typing import Any

__all__ = ["API_PREFIX", "document"]

API_PREFIX = "/api/v1"

_INT_OR_NULL = {"type": ["integer", "null"]}
_NUM_OR_NULL = {"type": ["number", "null"]}
_STR_OR_NULL = {"type": ["string", "null"]}


def _obj(required: dict[str, Any], optional: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "object", "required": sorted(required), "properties": {**required, **(optional or {})}}


_SCHEMAS: dict[str, Any] = {
    "Host": _obj({
        "mesh": {"type": "string", "description": "the host mesh's name"},
        "index": {"type": "integer"},
        "ident": {"type": "string"},
        "address": {"type": "string", "description": "the host agent's tetrarch address"},
        "pid": {"type": "integer"},
        "hostname": {"type": "string"},
        "allocator": {"type": "string"},
        "state": {"enum": ["running", "exited"]},
        "returncode": _INT_OR_NULL,
    }),
    "Proc": _obj({
        "ident": {"type": "string"},
        "mesh": {"type": "string", "description": "the proc mesh's name"},
        "name": {"type": "string"},
        "address": {"type": "string"},
        "pid": {"type": "integer"},
        "host": {"type": "string"},
        "agent": _STR_OR_NULL,
        "returncode": _INT_OR_NULL,
        "state": {"enum": ["running", "not answering", "exited"],
                  "description": "not answering: it did not answer within the request's bound (stopped, or a "
                                 "C call holds its GIL)"},
        "rss_bytes": _INT_OR_NULL,
        "cpu_s": _NUM_OR_NULL,
        "threads": _INT_OR_NULL,
        "transport": _STR_OR_NULL,
        "actors": _INT_OR_NULL,
    }, {"reason": {"type": "string", "description": "why it is gone"}}),
    "Actor": _obj({
        "key": {"type": "string"},
        "mesh": {"type": "string", "description": "the actor mesh's name"},
        "rank": {"type": "integer"},
        "point": {"type": "string", "description": "its coordinates, e.g. {'gpus': 1/4}"},
        "class": {"type": "string"},
        "state": {"enum": ["idle", "busy", "stopped", "failed"]},
        "mailbox": {"type": "integer", "description": "messages queued for it"},
        "endpoint": {**_STR_OR_NULL, "description": "what it runs now: an endpoint, __init__, ..."},
        "failure": _STR_OR_NULL,
        "handled": {"type": "integer", "description": "calls it has handled (ended)"},
        "busy_s": {"type": "number", "description": "seconds spent in its handlers"},
        "last_endpoint": {**_STR_OR_NULL, "description": "the endpoint of the last call that ended"},
        "running_for_s": {**_NUM_OR_NULL, "description": "how long the plain handler running now has run"},
        "endpoints": {"type": "object", "description": "per endpoint: calls, seconds in it, longest and mean call",
                      "additionalProperties": _obj({"calls": {"type": "integer"}, "total_s": {"type": "number"},
                                                    "max_s": {"type": "number"}, "mean_s": {"type": "number"}})},
        "proc": {"type": "string"},
        "proc_mesh": {"type": "string"},
        "pid": {"type": "integer"},
        "host": {"type": "string"},
    }),
    "Mesh": _obj({
        "key": {"type": "string"},
        "name": {"type": "string"},
        "class": _STR_OR_NULL,
        "labels": {"type": "array", "items": {"type": "string"}},
        "sizes": {"type": "array", "items": {"type": "integer"}},
        "actors": {"type": "integer"},
        "proc_mesh": _STR_OR_NULL,
        "state": {"enum": ["running", "failed", "stopped"]},
        "failed_ranks": {"type": "array", "items": {"type": "integer"}},
    }),
    "Failure": _obj({
        "mesh": {"type": "string"},
        "mesh_key": {"type": "string"},
        "rank": {"type": "integer"},
        "actor": {"type": "string"},
        "class": _STR_OR_NULL,
        "endpoint": _STR_OR_NULL,
        "host": {"type": "string"},
        "pid": {"type": "integer"},
        "cause": {"type": "string"},
        "received": {"type": "boolean", "description": "user code already got it as an exception"},
        "causes": {"type": "array", "items": {"$ref": "#/components/schemas/Failure"},
                   "description": "the earlier failures that led to it, the root event first"},
    }),
    "Backends": _obj({
        "client": _obj({"transport": {"type": "string"},
                        "allocators": {"type": "array", "items": {"type": "string"}}}),
        "procs": {"type": "array", "items": _obj({"ident": {"type": "string"}, "transport": {"type": "string"}})},
    }),
    "Thread": _obj({
        "id": {"type": "integer"},
        "name": {"type": "string"},
        "actor": {**_STR_OR_NULL, "description": "the actor this thread runs, if any"},
        "endpoint": {**_STR_OR_NULL, "description": "what that actor runs now"},
        "stack": {"type": "string", "description": "the thread's Python stack, innermost last"},
    }),
    "Stack": _obj({
        "mesh": {"type": "string"},
        "rank": {"type": "integer"},
        "actor": {"type": "string"},
        "pid": {"type": "integer"},
        "host": {"type": "string"},
        "state": {"enum": ["running", "not answering", "exited"]},
        "threads": {"type": ["array", "null"], "items": {"$ref": "#/components/schemas/Thread"},
                    "description": "the proc's own view of its Python threads (null: it did not answer)"},
        "pyspy": {**_STR_OR_NULL, "description": "py-spy's dump, taken by the proc's host agent (null: none)"},
        "notes": {"type": "array", "items": {"type": "string"}},
    }),
    "Check": _obj({
        "kind": {"enum": ["host agent", "proc", "actor"]},
        "name": {"type": "string"},
        "pid": {"type": "integer"},
        "host": {"type": "string"},
        "status": {"enum": ["pass", "slow", "fail"]},
        "latency_ms": {**_NUM_OR_NULL, "description": "how long it took to answer (an actor: its proc)"},
        "detail": {"type": "string", "description": "why it failed; empty otherwise"},
    }),
    "DebugSession": _obj({
        "id": {"type": "string"},
        "actor": {"type": "string"},
        "mesh": {"type": "string"},
        "rank": {"type": "integer"},
        "pid": {"type": "integer"},
        "host": {"type": "string"},
        "address": {"type": "string", "description": "host:port where the paused actor waits for its debugger"},
        "token": {"type": "string", "description": "the line a debugger sends first"},
        "where": {"type": "string", "description": "file:line in function"},
        "since": {"type": "number"},
    }),
    "Error": _obj({"error": {"type": "string"}}),
    "QueryResult": _obj({
        "columns": {"type": "array", "items": {"type": "string"}},
        "rows": {"type": "array", "items": {"type": "array"}, "description": "one array per row, in column order"},
        "missing": {"type": "array", "items": {"type": "string"},
                    "description": "host agents whose rows are not in the answer (address and why)"},
    }),
}


def _list_of(name: str, what: str, params: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": what,
        "operationId": f"list{name}s",
        "responses": {
            "200": {"description": what, "content": {"application/json": {
                "schema": {"type": "array", "items": {"$ref": f"#/components/schemas/{name}"}}}}},
            "401": {"$ref": "#/components/responses/Unauthorized"},
        },
    }
    if params:
        op["parameters"] = params
    return {"get": op}


def _query(name: str, what: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": what, "schema": {"type": "string"}}


def document(version: str) -> dict[str, Any]:
    """The OpenAPI document of this version of the admin API."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "tetrarch admin API", "version": version,
                 "description": "A running tetrarch program's hosts, procs, actors, meshes and failures. Every "
                                "request needs the bearer token of the client's announcement file "
                                "(docs/observability.md)."},
        "security": [{"bearer": []}],
        "paths": {
            f"{API_PREFIX}/hosts": _list_of("Host", "the host agents of the host meshes this client started"),
            f"{API_PREFIX}/procs": _list_of("Proc", "the procs of the live proc meshes, each asked for its state"),
            f"{API_PREFIX}/actors": _list_of("Actor", "every actor of the live procs, as its proc reports it", [
                _query("mesh", "only the actors of the actor mesh of this name"),
                _query("state", "only those in this state (idle, busy, stopped, failed)")]),
            f"{API_PREFIX}/meshes": _list_of("Mesh", "the actor meshes this client spawned and tracks"),
            f"{API_PREFIX}/failures": _list_of("Failure", "the failures of those meshes, each with its chain"),
            f"{API_PREFIX}/stack": {"get": {
                "summary": "the stacks of an actor's proc: its Python threads (the actor's marked) and py-spy's dump",
                "operationId": "getStack",
                "parameters": [
                    {"name": "mesh", "in": "query", "required": True, "schema": {"type": "string"},
                     "description": "the actor mesh's name"},
                    {"name": "rank", "in": "query", "required": True, "schema": {"type": "integer", "minimum": 0},
                     "description": "the actor's rank in it"}],
                "responses": {
                    "200": {"description": "stacks", "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/Stack"}}}},
                    "400": {"description": "mesh or rank missing", "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/Error"}}}},
                    "404": {"description": "no such actor", "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/Error"}}}},
                    "401": {"$ref": "#/components/responses/Unauthorized"},
                }}},
            f"{API_PREFIX}/probe": _list_of("Check", "probe every host agent, proc and actor now (tetrarch doctor "
                                                     "mesh): pass, slow or fail, with latencies", [
                {"name": "slow_ms", "in": "query", "required": False, "schema": {"type": "number", "minimum": 0},
                 "description": "answers slower than this many milliseconds are slow (default 100)"}]),
            f"{API_PREFIX}/debug": _list_of("DebugSession", "actors paused in breakpoint(), waiting for `tetrarch "
                                                            "debug`"),
            f"{API_PREFIX}/telemetry/query": {"get": {
                "summary": "SQL over every host's telemetry store (docs/telemetry.md lists the tables)",
                "operationId": "queryTelemetry",
                "parameters": [{"name": "sql", "in": "query", "required": False, "schema": {"type": "string"},
                                "description": "one SQL statement (DuckDB's dialect); without it, every table's "
                                               "columns and their types"}],
                "responses": {
                    "200": {"description": "the rows", "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/QueryResult"}}}},
                    "400": {"description": "the statement failed: DuckDB's message", "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
                    "401": {"$ref": "#/components/responses/Unauthorized"},
                }}},
            f"{API_PREFIX}/backends": {"get": {
                "summary": "the transport and allocators in use, per process",
                "operationId": "getBackends",
                "responses": {
                    "200": {"description": "backends", "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/Backends"}}}},
                    "401": {"$ref": "#/components/responses/Unauthorized"},
                }}},
        },
        "components": {
            "schemas": _SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "the token of the client's announcement file"}},
            "responses": {"Unauthorized": {"description": "no token, or a wrong one", "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}},
        },
    }
