"""``download``: copy a dataset into the prefix as a step of its own, verified and resumable file by file.

    load("@marinbuild//rules:download.py", "download")

    download(name = "proofpile_2_download", hf_dataset = "EleutherAI/proof-pile-2", revision = "901a927",
             patterns = ["**/train/*.jsonl.zst"])
    download(name = "shards", url = "gs://bucket/corpus/v3/", patterns = ["*.jsonl.gz"])
    download(name = "wiki", url = "https://example.org/dumps/2024-05-01/",
             checksums = {"wiki-00.jsonl.gz": "sha256:9f2c..."})

The source is a Hub dataset at a pinned ``revision`` or any fsspec URL (a file, or a folder and every file below it);
``patterns`` select files by glob relative to its root. The source, revision, patterns, ``checksums`` and ``subdir`` are
versioned. The output is the files under their source paths (below ``subdir``), ``manifest.json``, Marin's
``provenance.json`` and per-file done markers: a killed download resumes with the files not yet verified. Published
checksums are checked (Hub: LFS sha256 or git blob sha1; GCS: md5 and crc32c; others: ``checksums``, else the size); a
mismatch fails the step naming the file. Files are copied in parallel (Ray actors of ``file_resources``, or ``workers``
threads). ``raw_data``, ``tokenize`` and ``train_tokenizer`` read the document files of these targets.
``override_output_path`` puts the output where Marin's own download step put it. See docs/download.md."""

from __future__ import annotations

from typing import Any

from marinbuild.analysis.analyze import RuleContext
from marinbuild.load import attr, rule
from marinbuild.ml.download_attrs import check


def _download_impl(ctx: RuleContext) -> dict[str, Any]:
    from marinbuild.ml.download import download, payload_of

    return download(payload_of(ctx.attr, ctx.output_path, ctx.label))


download = rule(
    implementation=_download_impl,
    check=check,  # the source, checksums, patterns, subdir, workers: a load error at the attribute
    attrs={
        "hf_dataset": attr.string(doc="a Hugging Face Hub dataset id, e.g. EleutherAI/proof-pile-2"),
        "revision": attr.string(doc="with hf_dataset: the commit (short or full), tag or branch to copy"),
        "url": attr.string(
            mirrorable=True,
            doc="or: an fsspec URL (gs://, s3://, https://, a local path) of a file or folder, or mirrored(path): "
            "copied into the build's region first",
        ),
        "patterns": attr.list(of=str, doc="globs of the files to copy, relative to the source root (default: all)"),
        "checksums": attr.dict(
            doc='url sources: expected checksums by relative path, "sha256:<hex>" (or md5:, '
            "crc32c:, git_sha1:), checked as if the source published them"
        ),
        "subdir": attr.string(
            doc="a folder of the output to put the files in (Marin's older layouts, such as "
            '"<rev>/huggingface.co/datasets/<id>/resolve/<rev>")'
        ),
        "override_output_path": attr.string(
            versioned=False, doc="the output folder, relative to the prefix or absolute (Marin's override_output_path)"
        ),
        "endpoint": attr.string(versioned=False, doc="the Hub's URL (default $HF_ENDPOINT, else huggingface.co)"),
        "workers": attr.int(default=8, versioned=False, doc="files copied at once (local threads, or Ray actors)"),
        "file_resources": attr.dict(
            versioned=False, doc='Ray backend: what each copying actor asks for (default {"cpu": 1})'
        ),
        "resources": attr.dict(versioned=False, doc='what the step itself asks the backend for, e.g. {"cpu": 1}'),
        "description": attr.string(versioned=False, doc="what the data is, for people"),
    },
    doc="Copy a dataset (Hugging Face Hub at a revision, or an fsspec URL) into the prefix, verified and "
    "resumable file by file.",
)
