"""Build listeners: what a build shows and records from the engine's events. ``progress`` (live terminal display, or one
plain line per event), ``summary`` (counts and failures after the build), ``bep`` (JSON lines, like Bazel's
``--build_event_json_file``), ``trace`` (a Chrome / Perfetto trace), ``build_report`` (the listeners ``marinbuild
build`` opens, and what it prints). Imports nothing."""
