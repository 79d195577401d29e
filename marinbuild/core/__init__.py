"""The pure core: placeholders, config walking, versions and hashing, the step graph.

Nothing here does I/O or imports fsspec, ray or jax; storage and execution are adapters around it (``marinbuild.store``,
``marinbuild.run``)."""
