"""``marinbuild serve``: a local, read-only web view of a workspace's build graph, cache, runs and training curves.

Modules: ``url`` (the base URL builds print; no server import), ``model`` (the graph and step pages, from
the engine's own functions: ``cache status``, ``why``, ``cache show``), ``history`` (runs: the event logs
and the run info JSONs), ``curves`` (training curves by ``marinbuild.ml.report``), ``facts`` (small shared
readers), ``files`` (the file view's path checks), ``live`` (tailing the event logs for Server-Sent
Events), ``app`` (the Starlette routes), ``main`` (uvicorn, the port and the host). ``static/`` holds the
pages and the vendored JavaScript (dagre for the graph layout, uPlot for the curves), so the page needs no
internet.

Nothing here is imported by ``import marinbuild`` or the CLI's startup: Starlette and uvicorn load only when
``serve`` runs (``tests/serve/test_serve_imports.py``).
"""
