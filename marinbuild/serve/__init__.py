"""``marinbuild serve``: a local, read-only web view of a workspace's build graph, cache, runs and training curves.

``model`` (the graph and step pages, from ``cache status``, ``why``, ``cache show``), ``history`` (runs: event
logs and run infos), ``curves`` (training curves), ``facts`` (shared readers), ``files`` (the file view's
checks), ``live`` (Server-Sent Events from the event logs), ``app`` (the Starlette routes), ``main`` (uvicorn).
``static/`` holds the pages and vendored JavaScript (dagre, uPlot): no internet needed. Starlette and uvicorn
load only when ``serve`` runs, never on ``import marinbuild`` or the CLI's start.
"""
