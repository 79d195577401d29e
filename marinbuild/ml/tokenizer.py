"""Train a byte-level BPE tokenizer with HF ``tokenizers`` and save it as a directory levanter loads.

The directory holds ``tokenizer.json`` and ``tokenizer_config.json`` (special tokens, ``model_max_length``, the
fast-tokenizer class): all ``levanter.tokenizers.load_tokenizer`` and ``AutoTokenizer.from_pretrained`` need. Training
is deterministic for the same texts and settings; ``tokenizers`` is imported in the functions."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

BOS, EOS, PAD = "<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"


def train_bpe_tokenizer(
    texts: Iterable[str],
    output_dir: str,
    *,
    vocab_size: int = 1024,
    min_frequency: int = 2,
    model_max_length: int = 4096,
) -> dict[str, Any]:
    """Train a byte-level BPE on ``texts`` and write it to ``output_dir`` (any fsspec path); its path, vocabulary
    size and how many documents trained it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    documents = 0

    def counted() -> Iterator[str]:
        nonlocal documents
        for text in texts:
            documents += 1
            yield text

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[BOS, EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(counted(), trainer=trainer)
    config = {
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "unk_token": None,
        "model_max_length": model_max_length,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    fs, root = fsspec.core.url_to_fs(output_dir)
    fs.makedirs(root, exist_ok=True)
    with fs.open(os.path.join(root, "tokenizer.json"), "w") as f:
        f.write(tokenizer.to_str(pretty=True))
    with fs.open(os.path.join(root, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with fs.open(os.path.join(root, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": BOS, "eos_token": EOS, "pad_token": PAD}, f, indent=2)
    return {"path": output_dir, "vocab_size": tokenizer.get_vocab_size(), "documents": documents}


def is_tokenizer_dir(path: str) -> bool:
    """Whether ``path`` (local or fsspec) is a directory holding a ``tokenizer.json``."""
    try:
        fs, root = fsspec.core.url_to_fs(path)
        return bool(fs.isfile(os.path.join(root, "tokenizer.json")))
    except Exception:
        return False


def local_tokenizer_dir(path: str) -> str:
    """A local directory with the tokenizer at ``path``: itself if local, else a copy in the temp folder."""
    fs, root = fsspec.core.url_to_fs(path)
    if isinstance(fs, LocalFileSystem):
        return root

    local = os.path.join(tempfile.gettempdir(), "marinbuild_tokenizers", hashlib.sha256(path.encode()).hexdigest()[:16])
    os.makedirs(local, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        src = os.path.join(root, name)
        if fs.exists(src):
            fs.get(src, os.path.join(local, name))
    return local


def is_local_tokenizer(spec: str) -> bool:
    return "://" in spec or os.path.isdir(spec)


def resolve_tokenizer(spec: str) -> str:
    """What levanter's loader takes: a local directory (copied here if remote) or a Hub name."""
    if is_local_tokenizer(spec):
        if not is_tokenizer_dir(spec):
            raise FileNotFoundError(f"tokenizer {spec}: no tokenizer.json there")
        return local_tokenizer_dir(spec)
    return spec  # a Hub name such as meta-llama/Meta-Llama-3.1-8B (needs the network)
