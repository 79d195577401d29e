"""What a step's folder costs the file system: ``mkdir`` plus N file creations, per step.

A cold marinbuild step makes its output folder and six files (lease, status, info, action
record, artifact, output), as Marin's layout asks; a ninja action writes one file into one
shared folder. This loop does the same file-system work with no Python engine around it, so
the README can say how much of a cold run is the disk, and how much that varies by folder.

    python bench/fs_bench.py [--dirs DIR ...] [--steps 1000] [--files 6] [--after-delete [--settle 30]]
                             [--doc docs/performance.md]

Prints, per folder, wall and kernel (system) time per step, for one shared folder (ninja's
layout) and a folder per step (Marin's), then removes what it wrote.

``--after-delete`` measures instead how deleting files changes the cost of creating them: the
folder-per-step layout in a fresh folder; again right after deleting that first one; and again
``--settle`` seconds later. (On this project's VM, ext4 mounted with ``discard``, creations right
after a delete of a few thousand files cost several times more; this is why ``bench/run.py`` and
``bench/engine_bench.py`` delete old outputs only when they end.)
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from doc_section import write_section  # noqa: E402  (bench/ is not a package)

DATA = b"x" * 200


def one_layout(root: str, steps: int, files: int, per_step_folder: bool) -> tuple[float, float]:
    """(wall, kernel) seconds per step for writing ``files`` files per step."""
    os.makedirs(os.path.join(root, "shared"), exist_ok=True)
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    for i in range(steps):
        if per_step_folder:
            folder = os.path.join(root, "steps", f"n{i}-abcdef")
            os.makedirs(folder)
            names = [os.path.join(folder, f"f{k}") for k in range(files)]
        else:
            names = [os.path.join(root, "shared", f"n{i}")]
        for name in names:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, DATA)
            os.close(fd)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    return wall / steps, (after.ru_stime - before.ru_stime) / steps


def after_delete(base: str, steps: int, files: int, settle: float) -> list[str]:
    """Table rows for the folder-per-step layout: fresh, right after deleting a copy of it, and ``settle``
    seconds later (each printed as soon as it is measured)."""
    label = f"a folder per step, {files} files (Marin)"
    roots = [tempfile.mkdtemp(prefix="marinbuild-fs-bench-", dir=base) for _ in range(3)]
    rows: list[str] = []

    def row(when: str, wall: float, kernel: float) -> None:
        rows.append(f"| {base} | {label} | {when} | {wall * 1e3:.3f} ms | {kernel * 1e3:.3f} ms |")
        print(rows[-1], flush=True)

    try:
        row("fresh", *one_layout(roots[0], steps, files, True))
        shutil.rmtree(roots[0])
        row(f"right after deleting {steps * (files + 1)} entries", *one_layout(roots[1], steps, files, True))
        time.sleep(settle)  # the point of this row: what the file system is like once the delete has settled
        row(f"{settle:g} s after that", *one_layout(roots[2], steps, files, True))
    finally:
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dirs", nargs="+", default=[tempfile.gettempdir()], help="folders to measure under (default: the temp dir)"
    )
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--files", type=int, default=6, help="files per step in the folder-per-step layout")
    parser.add_argument(
        "--after-delete",
        action="store_true",
        help="measure file creation fresh, right after a delete, and once the delete settled",
    )
    parser.add_argument("--settle", type=float, default=30.0, help="seconds to let a delete settle (--after-delete)")
    parser.add_argument("--doc", help="write the table into this file (docs/performance.md), between markers")
    args = parser.parse_args(argv)

    print(f"{args.steps} steps; load average {os.getloadavg()[0]:.2f}\n")
    if args.after_delete:
        lines = ["| under | layout | when | wall per step | kernel per step |", "| --- | --- | --- | ---: | ---: |"]
        print("\n".join(lines), flush=True)
        for base in args.dirs:
            lines += after_delete(base, args.steps, args.files, args.settle)
    else:
        lines = ["| under | layout | wall per step | kernel per step |", "| --- | --- | ---: | ---: |"]
        print("\n".join(lines), flush=True)
        for base in args.dirs:
            root = tempfile.mkdtemp(prefix="marinbuild-fs-bench-", dir=base)
            try:
                for per_step, label in (
                    (False, "one shared folder, 1 file per step (ninja)"),
                    (True, f"a folder per step, {args.files} files (Marin)"),
                ):
                    wall, kernel = one_layout(root, args.steps, 1 if not per_step else args.files, per_step)
                    lines.append(f"| {base} | {label} | {wall * 1e3:.3f} ms | {kernel * 1e3:.3f} ms |")
                    print(lines[-1], flush=True)
            finally:
                shutil.rmtree(root, ignore_errors=True)
    if args.doc:
        flags = ["--dirs", *args.dirs]
        if args.steps != 1000:
            flags += ["--steps", str(args.steps)]
        if args.files != 6:
            flags += ["--files", str(args.files)]
        if args.after_delete:
            flags += ["--after-delete", "--settle", f"{args.settle:g}"]
        command = shlex.join([".venv/bin/python", "bench/fs_bench.py", *flags])
        write_section(args.doc, "fs_bench", f"`{command}`:\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
