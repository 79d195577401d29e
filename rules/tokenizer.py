"""``train_tokenizer``: a byte-level BPE tokenizer trained on ``raw_data`` documents.

    train_tokenizer(name = "tokenizer", data = [":stories"], vocab_size = 512)

The output folder is the tokenizer (``tokenizer.json``, ``tokenizer_config.json``), loadable by levanter and
``AutoTokenizer``; training (HF ``tokenizers``, in this process) is deterministic."""

from __future__ import annotations

from typing import Any

from marinbuild.analysis.analyze import RuleContext
from marinbuild.load import attr, rule


def _train_tokenizer_impl(ctx: RuleContext) -> dict[str, Any]:
    from marinbuild.ml.corpus import document_paths, iter_texts
    from marinbuild.ml.tokenizer import train_bpe_tokenizer

    if ctx.attr.vocab_size < 259:
        raise ValueError(f"train_tokenizer {ctx.label}: vocab_size must be at least 259 (256 bytes + 3 special tokens)")
    paths = document_paths(ctx.attr.data)
    limit = ctx.attr.max_documents or None
    return train_bpe_tokenizer(
        iter_texts(paths, ctx.attr.text_key, limit=limit),
        ctx.output_path,
        vocab_size=ctx.attr.vocab_size,
        min_frequency=ctx.attr.min_frequency,
        model_max_length=ctx.attr.model_max_length,
    )


train_tokenizer = rule(
    implementation=_train_tokenizer_impl,
    attrs={
        "data": attr.label_list(mandatory=True, doc="raw_data or download targets whose documents train the tokenizer"),
        "vocab_size": attr.int(default=1024, doc="vocabulary size, including 256 bytes and 3 special tokens"),
        "min_frequency": attr.int(default=2, doc="a merge must occur at least this often"),
        "text_key": attr.string(default="text", doc="the field of each record holding its text"),
        "max_documents": attr.int(default=0, doc="train on at most this many documents (0: all)"),
        "model_max_length": attr.int(default=4096, doc="model_max_length in tokenizer_config.json"),
    },
    doc="A byte-level BPE tokenizer (HF tokenizers), saved as a directory levanter loads.",
)
