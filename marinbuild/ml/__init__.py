"""Library code of the ML rule types (``rules/data.py``, ``tokenizer.py``, ``tokenize.py``, ``train.py``,
``evaluate.py``, ``report.py``); their dependencies are the ``ml`` extra.

Importing this package, or ``configs``, ``corpus``, ``jsonl`` and ``process``, is cheap: jax, levanter,
tokenizers and matplotlib are imported only inside the functions that need them, and levanter runs only in
child processes (``process``) and tokenize's shard workers (``shard_pool``); ``tracker`` is for those only.
"""
