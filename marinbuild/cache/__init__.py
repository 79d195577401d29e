"""Inspecting and pruning the output cache under a prefix, one module a command: ``commands`` (``cache status/show/ls``
and ``clean``), ``gc``, ``stats``, ``verify``, ``why``; library functions returning data, plus ``format_*`` text
formatters; nothing prints. Each is imported by its module's name, so a command loads only its own."""
