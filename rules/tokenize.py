"""``tokenize``: documents to a levanter token cache, with train and validation splits.

    load("@marinbuild//rules:tokenize.py", "tokenize")

    tokenize(name = "stories_tokenized", train = [":stories_train"], validation = [":stories_validation"],
             tokenizer = ":tokenizer")
    tokenize(name = "dclm_tokenized", train = [":dclm"], tokenizer_name = "meta-llama/Meta-Llama-3.1-8B")

``train`` and ``validation`` are ``raw_data`` targets (JSON lines, gzipped or not, JSON or
Parquet, text under ``text_key``). The tokenizer is a ``train_tokenizer`` target
(``tokenizer``) or, in ``tokenizer_name``, an existing tokenizer directory (local or
fsspec) or a Hugging Face Hub name (which needs the network when the step runs; nothing
is fetched before). The cache is built by levanter's own builder, input files processed
as shards in parallel, in a child process; see ``marinbuild.ml.tokenize`` for the layout.
``train_lm`` and ``eval_lm`` take these targets.
"""

from __future__ import annotations

import os
from typing import Any

from marinbuild.analysis import RuleContext
from marinbuild.load import attr, rule


def _tokenize_impl(ctx: RuleContext) -> dict[str, Any]:
    from marinbuild.ml.corpus import document_paths
    from marinbuild.ml.process import run_child

    if bool(ctx.attr.tokenizer) == bool(ctx.attr.tokenizer_name):
        raise ValueError(f"tokenize {ctx.label}: give exactly one of tokenizer (a target) and tokenizer_name")
    spec = ctx.attr.tokenizer or ctx.attr.tokenizer_name
    train = document_paths(ctx.attr.train)
    validation = document_paths(ctx.attr.validation)
    payload = {
        "output_path": ctx.output_path,
        "name": ctx.name,
        "train": train,
        "validation": validation,
        "tokenizer": spec,
        "text_key": ctx.attr.text_key,
        "batch_size": ctx.attr.batch_size,
    }
    offline = "://" in spec or os.path.isdir(spec)
    return run_child("marinbuild.ml.tokenize", payload, log_dir=os.path.join(ctx.output_path, "logs"),
                     name="tokenize", offline=offline)


tokenize = rule(
    implementation=_tokenize_impl,
    attrs={
        "train": attr.label_list(doc="raw_data targets: the training documents"),
        "validation": attr.label_list(doc="raw_data targets: the validation documents"),
        "tokenizer": attr.label(doc="a train_tokenizer target"),
        "tokenizer_name": attr.string(doc="or: a tokenizer directory (local or fsspec) or a Hugging Face Hub name"),
        "text_key": attr.string(default="text", doc="the field of each record holding its text"),
        "batch_size": attr.int(default=128, versioned=False, doc="documents per tokenizer batch"),
        "resources": attr.dict(versioned=False, doc="what the step asks the backend for, e.g. {\"cpu\": 4}"),
    },
    doc="Documents to a levanter token cache (train and validation splits), shards in parallel.",
)
