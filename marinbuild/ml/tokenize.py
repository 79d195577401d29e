"""Tokenize documents into levanter token caches (the child process of the ``tokenize`` rule).

Output layout, exactly what levanter's ``LmDataConfig`` reads for a component whose
``cache_dir`` is the output folder::

    <out>/train/        levanter TreeCache (input_ids), built by levanter's own cache builder
    <out>/validation/   the same for the validation documents (absent when there are none)
    <out>/tokenized.json  {"tokenizer", "vocab_size", "text_key", "splits": {split: {documents, tokens, files}}}

The builder (``levanter.data.text.build_lm_dataset_cache``) processes the input files as
shards in parallel (zephyr workers, one per file up to the CPU count) and consolidates
them. Run as ``python -m marinbuild.ml.tokenize PAYLOAD`` (see ``marinbuild.ml.process``).
"""

from __future__ import annotations

import json
import os
from typing import Any

import fsspec

from marinbuild.ml.process import child_main, say

METADATA = "tokenized.json"


def read_metadata(tokenized_output: str) -> dict[str, Any]:
    try:
        with fsspec.open(os.path.join(tokenized_output, METADATA), "r") as f:
            return json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{tokenized_output} has no {METADATA}: is it the output of a tokenize target?"
        ) from None


def has_split(tokenized_output: str, split: str) -> bool:
    return split in read_metadata(tokenized_output).get("splits", {})


def resolve_tokenizer(spec: str) -> str:
    """What levanter's loader takes: a local directory (copied here if remote) or a Hub name."""
    from marinbuild.ml.tokenizer import is_tokenizer_dir, local_tokenizer_dir

    if "://" in spec or os.path.isdir(spec):
        if not is_tokenizer_dir(spec):
            raise FileNotFoundError(f"tokenizer {spec}: no tokenizer.json there")
        return local_tokenizer_dir(spec)
    return spec  # a Hub name such as meta-llama/Meta-Llama-3.1-8B (needs the network)


def run(payload: dict[str, Any]) -> dict[str, Any]:
    from levanter.data.sharded_datasource import UrlDataSource
    from levanter.data.text import TextLmDatasetFormat, build_lm_dataset_cache, cached_token_count
    from levanter.store.cache import CacheOptions
    from levanter.tokenizers import load_tokenizer

    out = payload["output_path"]
    text_key = payload["text_key"]
    tokenizer_path = resolve_tokenizer(payload["tokenizer"])
    tokenizer = load_tokenizer(tokenizer_path)
    fmt = TextLmDatasetFormat(text_key=text_key)
    options = CacheOptions(batch_size=payload.get("batch_size", 128))
    splits: dict[str, Any] = {}
    for split in ("train", "validation"):
        files = payload.get(split) or []
        if not files:
            continue
        say(f"tokenizing {len(files)} {split} file(s) with {payload['tokenizer']}")
        cache_dir = os.path.join(out, split)
        cache = build_lm_dataset_cache(cache_dir, UrlDataSource(files, columns=[text_key]), fmt, tokenizer,
                                       options, enforce_eos=True)
        documents = len(cache.as_sync_dataset())
        tokens = cached_token_count(cache_dir)
        splits[split] = {"documents": documents, "tokens": tokens, "files": len(files)}
        say(f"{split}: {documents} documents, {tokens} tokens")
    if "train" not in splits and "validation" not in splits:
        raise ValueError("nothing to tokenize: no train or validation files")
    metadata = {
        "kind": "tokenized",
        "name": payload.get("name"),
        "tokenizer": payload["tokenizer"],
        "vocab_size": len(tokenizer),
        "text_key": text_key,
        "splits": splits,
    }
    with fsspec.open(os.path.join(out, METADATA), "w") as f:
        json.dump(metadata, f, indent=2)
    return metadata


if __name__ == "__main__":
    child_main(run)
