"""Build listeners: what a build shows and records. The engine emits events; these decide what to do with them.

- ``progress.ProgressDisplay``: live terminal display, or one plain line per event when not a terminal.
- ``summary.BuildSummary``: counts and failures, rendered after the build (text or a dict for JSON).
- ``bep.BuildEventJsonWriter``: every event as one JSON line (like Bazel's ``--build_event_json_file``).
- ``trace.ChromeTraceWriter``: a Chrome / Perfetto trace of the build, one lane per concurrent slot.
- ``build_report.BuildReport``: the listeners ``marinbuild build`` opens, and what it prints from the result.

Submodules are imported on use; importing this package imports nothing else.
"""
