"""Library code of the ML rule types (``rules/data.py``, ``tokenizer.py``, ``tokenize.py``, ``train.py``,
``evaluate.py``, ``report.py``).

Importing this package, or ``configs``, ``corpus``, ``jsonl`` and ``process``, is cheap: jax,
levanter, tokenizers and matplotlib are imported only inside the functions that need them,
and levanter itself only runs in child processes (``python -m marinbuild.ml.tokenize``,
``.train``, ``.evaluate``; see ``process``). ``tracker`` imports levanter and is for those
children only. The dependencies are the ``ml`` extra: ``pip install -e '.[ml]'``.
"""
