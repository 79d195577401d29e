"""``tokenize``: documents to a levanter token cache, with train and validation splits, shard by shard.

    load("@marinbuild//rules:tokenize.py", "tokenize")

    tokenize(name = "stories_tokenized", train = [":stories_train"], validation = [":stories_validation"],
             tokenizer = ":tokenizer")
    tokenize(name = "dclm_tokenized", train = [":dclm"], tokenizer_name = "meta-llama/Meta-Llama-3.1-8B",
             shard_resources = {"cpu": 1, "memory": "4g"})

``train`` and ``validation`` are ``raw_data`` or ``download`` targets. The tokenizer is a ``train_tokenizer`` target or,
in ``tokenizer_name``, a tokenizer directory (local or fsspec) or a Hub name (fetched when the step runs). The inputs
are cut into shards of about ``shard_bytes``, each a cached action of its own: shards already tokenized (by any version
of any target) are reused, the others tokenized in parallel by warm workers (Ray actors of ``shard_resources``, or
``workers`` local processes), then merged into one cache per split. ``skip_bad_records`` skips unreadable records
(counted) instead of failing on the first, which names its file and line. ``override_output_path`` puts the output where
Marin's tokenize step put it. See docs/tokenize.md."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from marinbuild.analysis.analyze import RuleContext
from marinbuild.load import attr, rule
from marinbuild.load.attrs import AttrValueError


def _tokenize_impl(ctx: RuleContext) -> dict[str, Any]:
    from marinbuild.ml.tokenize import payload_of, tokenize

    return tokenize(payload_of(ctx.attr, ctx.output_path, ctx.name, ctx.package))


def _check(values: Mapping[str, Any]) -> None:
    """What the attribute types cannot say, as a load error at the attribute: one tokenizer, sizes in range."""
    if bool(values.get("tokenizer")) == bool(values.get("tokenizer_name")):
        raise AttrValueError(
            "give exactly one of tokenizer (a train_tokenizer target) and tokenizer_name",
            attr="tokenizer_name" if values.get("tokenizer_name") else None,
        )
    for name, least in (("shard_bytes", 0), ("batch_size", 1), ("workers", 0)):
        if values.get(name) is not None and values[name] < least:
            raise AttrValueError(f"{name} must be at least {least}, got {values[name]}", attr=name)
    if not values.get("text_key"):
        raise AttrValueError("text_key is empty; the field of each record that holds its text", attr="text_key")


tokenize = rule(
    implementation=_tokenize_impl,
    check=_check,  # one tokenizer, sizes in range: a load error at the attribute
    attrs={
        "train": attr.label_list(doc="raw_data or download targets: the training documents"),
        "validation": attr.label_list(doc="raw_data or download targets: the validation documents"),
        "tokenizer": attr.label(doc="a train_tokenizer target"),
        "tokenizer_name": attr.string(doc="or: a tokenizer directory (local or fsspec) or a Hugging Face Hub name"),
        "text_key": attr.string(default="text", doc="the field of each record holding its text"),
        "skip_bad_records": attr.bool(
            default=False, doc="skip records that cannot be read (counted) instead of failing on the first"
        ),
        "shard_bytes": attr.int(
            default=64 * 1024 * 1024,  # see marinbuild.ml.shard_plan
            doc="about how much of the input one shard reads: larger plain .jsonl and Parquet "
            "files are split into ranges, smaller files grouped (0: a shard per file)",
        ),
        "batch_size": attr.int(default=128, versioned=False, doc="documents per tokenizer batch"),
        "workers": attr.int(
            default=0, versioned=False, doc="local processes building shards (0: one per CPU); on Ray, most actors"
        ),
        "shard_resources": attr.dict(
            versioned=False, doc='Ray backend: what each worker (an actor) asks for (default {"cpu": 1})'
        ),
        "shard_store": attr.string(
            versioned=False, doc="where shard caches are kept (default <prefix>/tokenize_shards)"
        ),
        "resources": attr.dict(versioned=False, doc='what the step itself asks the backend for, e.g. {"cpu": 1}'),
        "override_output_path": attr.string(
            versioned=False, doc="the output folder, relative to the prefix or absolute (Marin's override_output_path)"
        ),
    },
    doc="Documents to a levanter token cache (train and validation splits), shards cached and built in parallel.",
)
