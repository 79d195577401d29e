"""``marinbuild serve``: a local, read-only web view of a workspace's build graph, cache, runs and training curves.

``static/`` holds the pages and vendored JavaScript (dagre, uPlot): no internet needed. Starlette and uvicorn load only
when ``serve`` runs."""
