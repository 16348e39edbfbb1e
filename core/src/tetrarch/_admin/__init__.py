"""The admin server: a running program's hosts, procs, actors, meshes and failures over HTTP.

Opt-in (``configure(admin=True)``, ``TETRARCH_ADMIN=1`` or :func:`tetrarch.admin.serve`),
served from the client by Starlette on Uvicorn in a thread of its own, on loopback unless
configured otherwise, every request authenticated by a bearer token that the CLI
(``tetrarch ps``) finds in a 0600 file per client (:mod:`._token`). The API is described by
an OpenAPI 3.1 document (:mod:`._openapi`) served at ``/openapi.json``; its data is gathered
on demand (:mod:`._snapshot`): the procs are asked over the router when a request comes,
nothing is counted or polled on the path of a call.
"""
