"""Library code of the ML rule types (``rules/data.py``, ``tokenizer.py``, ``tokenize.py``, ``train.py``,
``evaluate.py``, ``report.py``).

Importing this package, or ``configs``, ``corpus``, ``jsonl`` and ``process``, is cheap: jax,
levanter, tokenizers and matplotlib are imported only inside the functions that need them,
and levanter itself only runs in child processes (``python -m marinbuild.ml.train``,
``.evaluate``; see ``process``) and in tokenize's shard workers (local processes or Ray tasks,
``shard_pool``, running ``shard_work``). ``tracker`` imports levanter and is for those
children only. The dependencies are the ``ml`` extra: ``pip install -e '.[ml]'``.
"""
