"""Library code of the ML rule types (``rules/data.py``, ``train.py``, ...); their dependencies are the ``ml`` extra.

Importing this package, ``configs``, ``corpus``, ``jsonl`` or ``process`` is cheap: jax, levanter, tokenizers and
matplotlib are imported inside the functions that need them, and levanter runs only in child processes and tokenize's
shard workers."""
