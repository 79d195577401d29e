"""Marin's run info spliced from an earlier file's entries and a few new ones, copied and hashed by a child process.

A build from recorded rows (``marinbuild.analysis.incremental``) writes a run info whose entries are those of the
previous file, in the same order, but for the few steps it versioned. The file is still exactly Marin's
(``marinbuild.store.run_info``: the same bytes, the name's md5 over every entry); what changes is who does the work
and when:

- ``SplicedRunInfo`` starts the child (``python -S`` on this file: the standard library only, no marinbuild
  import) as soon as the build knows which entries it keeps, before it checks, analyses or runs anything. The
  child copies each run of kept entries from the previous file with ``copy_file_range`` (in the kernel, falling
  back to ``pwrite``) on a thread of its own and hashes them from a mapping of the file, while the build goes on;
  at a new entry it waits for the parent to send it.
- ``add(entries)`` sends the new entries as soon as the build has versioned them (before it plans), so that the
  child hashes the rest of the file while the build plans and runs; ``finish()`` (when the steps start, as the
  thread writer of a full build starts) sends ``NAME``: the child names the file with one ``os.replace``
  (keeping an existing file of the same name, as ``run_info.write(..., only_if_new=True)`` does) and answers the
  md5. ``result()`` waits for that answer. The parent computes each entry's span itself.
- ``abandon()``: the build ended without a run info (nothing to run, an error): the child names nothing.
- Resuming the md5: the child saves the md5's state (``MD5_CTX``) after the entry that ends every
  ``STATE_EVERY`` bytes hashed, and answers them; ``md5_states`` holds them after ``result()`` (with the
  earlier file's states before the first new entry, which hold for this file too), and the rows keep them. A
  splice given the earlier file's states resumes from the last one before its first new entry (``resumed_from``):
  the entries before it are the earlier file's, byte for byte, so the child copies them without hashing them.

Contract: the same bytes and name as ``run_info.write`` of the same entries. A crash or kill of either side never
loses or tears the previous file and never names a torn one: the child writes ``.tmp-<script>.json.<random>``
(``cache gc`` removes a left one, as the thread writer's) and names it only on the parent's ``NAME``; at the end
of its input without it (the parent died, or abandoned the write) it removes the temporary file and exits.

Why a process, not a thread: hashing and copying a file of about 15 KB per step (over a gigabyte at 100,000
steps) on a thread competes with the build for the GIL: every hash call gives the GIL up and then waits to take
it back while the build's own Python runs. A process has a core of its own (docs/performance.md, the
incremental rows of the 10k and 100k tables).

Why ``ctypes``: ``hashlib`` cannot save or restore an md5 state, and no maintained package does it at OpenSSL's
speed. The child calls OpenSSL's ``MD5_*`` functions from the libcrypto ``hashlib`` loaded, on a context of the
public header's layout (``MD5_STATE`` bytes), after checking that a saved and restored state gives ``hashlib``'s
digest; where the functions are missing or disagree it hashes everything with ``hashlib`` and saves no state.

Why the kept entries can be copied as runs: the file separates entries by ``",\\n    "`` and the hashed text
by ``", "``; entries are compact JSON, which holds no raw newline. The child checks every separator it copies.

Wire format (parent to child): a JSON header line (``source``, ``directory``, ``script``, ``opening`` length,
``every``: the bytes between saved states, ``resume``: [entries, state hex] or null), the opening bytes, then
records: ``K`` + start (u64) + count (u32) + count lengths (u32): a run of kept entries of the source; ``N`` +
length (u32) + bytes: a new entry; ``E``: name the file. The child answers two lines: ``<md5> new`` or ``<md5>
kept``, then its saved states as ``<entries>:<state hex>`` separated by spaces; on an error, a message on stderr
and exit status 1.
"""

from __future__ import annotations

import functools
import hashlib
import json
import mmap
import os
import queue
import struct
import sys
import threading
from array import array
from collections.abc import Iterable, Sequence
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    import subprocess

__all__ = ["SplicedRunInfo"]

FILE_SEPARATOR = b",\n    "
HASH_SEPARATOR = b", "
CLOSING = b"\n  ]\n}\n"
CHUNK = 4 << 20
"""Bytes of the mapped earlier file hashed before their pages are given back (the child's resident memory)."""
STATE_EVERY = 4 << 20
"""Bytes hashed between two saved md5 states (``md5_states``): where a later splice of the file may resume."""
MD5_STATE = 92
"""``sizeof(MD5_CTX)`` (OpenSSL's ``openssl/md5.h``: A, B, C, D, Nl, Nh, 16 data words, num)."""


# ---------------------------------------------------------------------------------------------------- the parent


class SplicedRunInfo:
    """The parent's side: one child writing one run info (see the module docstring).

    ``slots``: each entry of the run info in order: (offset, length) of a kept entry in ``source``, or None for a
    new one. ``opening``: the text before the first entry (``run_info.opening``). ``md5_states``: the saved md5
    states of ``source`` (``md5_states`` of the splice that wrote it): the child resumes from the last one before
    the first new entry instead of hashing the entries before it again."""

    def __init__(
        self,
        directory: str,
        script: str,
        opening: bytes,
        source: str,
        slots: Sequence[tuple[int, int] | None],
        md5_states: Sequence[tuple[int, bytes]] = (),
    ):
        import subprocess

        self.script = script
        self._directory = directory
        self._opening_length = len(opening)
        self._slots = slots
        self._records: list[bytes] = []
        self._lock = threading.Condition()
        self._closed = False
        self._done = False
        self._path: str | None = None
        self._error: BaseException | None = None
        self.spans: list[tuple[int, int]] = []
        """After ``result()``: each entry's (offset, length) in the file written (empty if an existing one was
        kept: its head may differ in length)."""
        first_new = next((i for i, slot in enumerate(slots) if slot is None), len(slots))
        self.md5_states = [(index, state) for index, state in md5_states if 0 < index <= first_new]
        """The md5 states of the file written (after ``result()``): those of ``source`` before the first new entry
        (its entries there are the same), then the child's."""
        os.makedirs(directory, exist_ok=True)
        self._process: subprocess.Popen[bytes] = subprocess.Popen(
            [sys.executable, "-S", os.path.abspath(__file__)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        resume = max(self.md5_states, default=None)
        self.resumed_from = resume[0] if resume else 0
        """How many leading entries the child does not hash again (the saved state it resumes from covers them)."""
        header = {
            "source": source,
            "directory": directory,
            "script": script,
            "opening": len(opening),
            "every": STATE_EVERY,
            "resume": [resume[0], resume[1].hex()] if resume else None,
        }
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(header).encode() + b"\n" + opening)  # far less than a pipe holds
        self._process.stdin.flush()
        self._feeder = threading.Thread(target=self._feed, name="marinbuild-run-info-feed", daemon=True)
        self._feeder.start()
        self._send_kept(0, first_new)
        self._sent = first_new

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self._process.pid

    def add(self, new_entries: Iterable[Sequence[bytes]]) -> None:
        """Send the new entries (one per None slot, in order) and the kept entries after them: the child can hash
        the whole file before the run starts. ``finish()`` then names it."""
        entries = iter(new_entries)
        lengths: list[int] = []
        i = self._sent
        while i < len(self._slots):
            if self._slots[i] is None:
                entry = b"".join(next(entries))
                lengths.append(len(entry))
                self._send(b"N" + struct.pack("<I", len(entry)) + entry)
                i += 1
            else:
                end = next((j for j in range(i, len(self._slots)) if self._slots[j] is None), len(self._slots))
                self._send_kept(i, end)
                i = end
        if next(entries, None) is not None:
            raise ValueError("more new run-info entries than new slots")
        self._sent = i
        self._spans_with(lengths)

    def finish(self) -> SplicedRunInfo:
        """Name the file once the child has written it (``add`` first); ``result()`` waits for the child. Returns
        self (the engine's run-info writer)."""
        from marinbuild.store import faults

        if self._sent != len(self._slots):
            raise ValueError("the run info's new entries were not all added")
        faults.point("before-replace run info " + self.script)
        self._send(b"E")
        self._close()
        return self

    def result(self) -> str:
        """The path named; raises what went wrong (the child's message)."""
        self.join()
        if self._error is not None:
            raise self._error
        assert self._path is not None
        return self._path

    def join(self) -> None:
        """Wait for the child's answer, whatever it is."""
        if self._done:
            return
        self._close()
        self._feeder.join()
        out = self._process.stdout.read() if self._process.stdout else b""
        err = self._process.stderr.read() if self._process.stderr else b""
        status = self._process.wait()
        self._done = True
        head, _, saved = out.decode(errors="replace").partition("\n")
        answer = head.split()
        if status != 0 or len(answer) != 2 or self._error is not None:
            message = err.decode(errors="replace").strip() or f"exit status {status}"
            self._error = self._error or OSError(f"writing the run info {self.script} in {self._directory}: {message}")
            return
        md5, how = answer
        self._path = os.path.join(self._directory, f"{self.script}-{md5[:6]}.json")
        for item in saved.split():
            index, _, state = item.partition(":")
            self.md5_states.append((int(index), bytes.fromhex(state)))
        if how == "kept":
            self.spans = []

    def abandon(self) -> None:
        """No run info after all: the child removes its temporary file and names nothing."""
        if self._done:
            return
        self._close()
        self._feeder.join()
        self._process.wait()
        for stream in (self._process.stdout, self._process.stderr):
            if stream is not None:
                stream.close()
        self._done = True
        self._error = self._error or RuntimeError("the run info was abandoned")

    def _spans_with(self, new_lengths: list[int]) -> None:
        at, spans, new = self._opening_length, self.spans, iter(new_lengths)
        for i, slot in enumerate(self._slots):
            at += 6 if i else 4
            length = next(new) if slot is None else slot[1]
            spans.append((at, length))
            at += length

    def _send_kept(self, start: int, end: int) -> None:
        """Records for the kept entries ``start:end`` (all kept): one per run laid out as the file lays entries."""
        slots = self._slots
        i = start
        while i < end:
            first = slots[i]
            assert first is not None
            lengths = array("I", [first[1]])
            at = first[0] + first[1]
            j = i + 1
            while j < end:
                slot = slots[j]
                assert slot is not None
                if slot[0] != at + len(FILE_SEPARATOR):
                    break
                lengths.append(slot[1])
                at = slot[0] + slot[1]
                j += 1
            self._send(b"K" + struct.pack("<QI", first[0], len(lengths)) + lengths.tobytes())
            i = j

    def _send(self, record: bytes) -> None:
        with self._lock:
            self._records.append(record)
            self._lock.notify()

    def _close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify()

    def _feed(self) -> None:
        """The feeder thread: writes queued records to the child in order (a write to a full pipe blocks here,
        never the build), then closes the child's input."""
        stdin = self._process.stdin
        assert stdin is not None
        try:
            while True:
                with self._lock:
                    while not self._records and not self._closed:
                        self._lock.wait()
                    records, self._records = self._records, []
                    closed = self._closed
                if records:
                    stdin.write(b"".join(records))
                    stdin.flush()
                if closed and not records:
                    break
        except BrokenPipeError:  # the child is gone: its exit status and message say why
            pass
        except OSError as exc:
            self._error = self._error or exc
        finally:
            try:
                stdin.close()
            except OSError:
                pass


# ---------------------------------------------------------------------------------------------------- the child


class _StateMd5:
    """md5 whose state can be saved and restored: OpenSSL's ``MD5_*`` functions (from the libcrypto ``hashlib``
    loaded) through ``ctypes``, which ``hashlib`` does not offer. ``load()`` (once per process) is None where they
    are missing or do not give ``hashlib``'s digest from a saved and restored state."""

    def __init__(self, lib: Any, state: bytes | None):
        import ctypes

        self._ctypes, self._lib = ctypes, lib
        self._ctx = ctypes.create_string_buffer(2 * MD5_STATE)
        if state is None:
            lib.MD5_Init(self._ctx)
        else:
            ctypes.memmove(self._ctx, state, MD5_STATE)

    @staticmethod
    @functools.cache
    def load() -> Any | None:
        try:
            import _hashlib  # noqa: F401  (loads libcrypto)
            import ctypes

            with open("/proc/self/maps") as maps:
                path = next(line.split()[-1] for line in maps if "/libcrypto" in line)
            lib = ctypes.CDLL(path)
            lib.MD5_Init.argtypes = [ctypes.c_void_p]
            lib.MD5_Update.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
            lib.MD5_Final.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        except (ImportError, OSError, StopIteration, AttributeError):
            return None
        first = _StateMd5(lib, None)
        first.update(b"[a saved ")
        second = _StateMd5(lib, first.state())
        second.update(b"and restored md5 state]")
        if second.hexdigest() != hashlib.md5(b"[a saved and restored md5 state]").hexdigest():
            return None
        return lib

    def update(self, data: bytes | memoryview) -> None:
        if isinstance(data, memoryview):  # ctypes passes bytes by address, not views
            data = data.tobytes()
        self._lib.MD5_Update(self._ctx, data, len(data))

    def update_at(self, address: int, size: int) -> None:
        self._lib.MD5_Update(self._ctx, address, size)

    def state(self) -> bytes:
        return self._ctx.raw[:MD5_STATE]

    def hexdigest(self) -> str:
        final = self._ctypes.create_string_buffer(2 * MD5_STATE)
        self._ctypes.memmove(final, self._ctx, MD5_STATE)
        out = self._ctypes.create_string_buffer(16)
        self._lib.MD5_Final(out, final)
        return out.raw.hex()


class EntryHasher:
    """The md5 of Marin's list of entries (``[`` + the entries joined by ``", "`` + ``]``: the run-info name's hash),
    fed entry by entry in order (``add``, or ``add_at`` for bytes at an address), saving the md5's state after the
    entry that ends every ``every`` bytes hashed (``states``: (entries hashed, state)). ``resume``: (entries,
    state) saved earlier over the same leading entries: those are skipped. Without OpenSSL's ``MD5_*``
    (``_StateMd5.load``), or with ``every`` 0 and nothing to resume, plain ``hashlib`` hashes and saves no state;
    ``stateful`` tells which."""

    def __init__(self, every: int, resume: tuple[int, bytes] | None = None):
        lib = _StateMd5.load() if every or resume else None
        self.stateful = lib is not None
        self.every, self.skip, self._since = (every, 0, 0) if lib is not None else (0, 0, 0)
        self.states: list[tuple[int, bytes]] = []
        self._digest: _StateMd5 | hashlib._Hash
        if lib is None:
            self._digest = hashlib.md5(b"[")
        elif resume is not None:
            self.skip = resume[0]
            self._digest = _StateMd5(lib, resume[1])
        else:
            self._digest = _StateMd5(lib, None)
            self._digest.update(b"[")

    def add(self, index: int, entry: bytes | memoryview) -> None:
        """Entry ``index`` (after the hashed separator)."""
        if index >= self.skip:
            if index:
                self._digest.update(HASH_SEPARATOR)
            self._digest.update(entry)
            self._saved(index, len(entry))

    def add_pieces(self, index: int, pieces: Sequence[bytes]) -> None:
        """Entry ``index`` given as pieces (hashed one by one, or joined first when a state may be saved)."""
        if not self.stateful:
            if index:
                self._digest.update(HASH_SEPARATOR)
            for piece in pieces:
                self._digest.update(piece)
        else:
            self.add(index, b"".join(pieces))

    def add_at(self, index: int, address: int, size: int) -> None:
        """Entry ``index``, ``size`` bytes at ``address`` (``stateful`` only)."""
        if index >= self.skip:
            digest = self._digest
            assert isinstance(digest, _StateMd5)
            if index:
                digest.update(HASH_SEPARATOR)
            digest.update_at(address, size)
            self._saved(index, size)

    def _saved(self, index: int, size: int) -> None:
        if self.every:
            self._since += size + len(HASH_SEPARATOR)
            if self._since >= self.every:
                digest = self._digest
                assert isinstance(digest, _StateMd5)
                self.states.append((index + 1, digest.state()))
                self._since = 0

    def hexdigest(self) -> str:
        """The md5 of the whole list (call once, after the last entry)."""
        self._digest.update(b"]")
        return self._digest.hexdigest()


def _exactly(stream: IO[bytes], n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise EOFError
    return data


class _Child:
    """Writes the file from the parent's records into a temporary file (see the module docstring).

    Every write is positional, so that the kept runs can be copied on a thread of their own (``copy_file_range``
    in the kernel, or ``pwrite`` from the mapped source) while this thread hashes them from the mapping; the
    mapping's pages are given back as the hashing passes them."""

    def __init__(self, source: int, out: int, every: int = 0, resume: tuple[int, bytes] | None = None):
        self.out, self.at = out, 0
        self.entries = 0
        size = os.fstat(source).st_size
        self.hasher = EntryHasher(every, resume)
        self.base: int | None = None
        self._anchor: object = None
        if not self.hasher.stateful:
            self.mapped = mmap.mmap(source, size, prot=mmap.PROT_READ) if size else None
        else:  # a private mapping is writable (never written): ctypes takes the address of a writable buffer only
            import ctypes

            self.mapped = None
            if size:
                self.mapped = mmap.mmap(source, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
                anchor = ctypes.c_char.from_buffer(self.mapped)
                self._anchor, self.base = anchor, ctypes.addressof(anchor)
        self.view = memoryview(self.mapped) if self.mapped is not None else memoryview(b"")
        self.copies: queue.SimpleQueue[tuple[int, int, int] | None] = queue.SimpleQueue()
        self.copy_error: BaseException | None = None
        self.copier = threading.Thread(target=self._copy_runs, args=(source,), daemon=True)
        self.copier.start()

    def separator(self) -> None:
        self.write(FILE_SEPARATOR if self.entries else b"    ")

    def new(self, entry: bytes) -> None:
        self.separator()
        self.hasher.add(self.entries, entry)
        self.write(entry)
        self.entries += 1

    def kept(self, start: int, lengths: array[int]) -> None:
        """Entries ``start``... of the source, one after the other with the file's separator between them."""
        self.separator()
        count = len(lengths)
        size = sum(lengths) + len(FILE_SEPARATOR) * (count - 1)
        if start + size > len(self.view):
            raise ValueError("the earlier run info is shorter than its recorded entries")
        self.copies.put((start, size, self.at))
        self.at += size
        view, given_back, first = self.view, start - start % mmap.PAGESIZE, self.entries
        position = start
        for k in range(count):
            end = position + lengths[k]
            if self.base is not None:
                self.hasher.add_at(first + k, self.base + position, end - position)
            else:
                self.hasher.add(first + k, view[position:end])
            if k + 1 < count and view[end : end + len(FILE_SEPARATOR)] != FILE_SEPARATOR:
                raise ValueError(f"the earlier run info has no entry separator at byte {end}")
            position = end + len(FILE_SEPARATOR)
            if position - given_back >= CHUNK:  # hashed: the pages go back (the copy reads the file, not these)
                upto = position - position % mmap.PAGESIZE
                assert self.mapped is not None
                self.mapped.madvise(mmap.MADV_DONTNEED, given_back, upto - given_back)
                given_back = upto
        self.entries += count

    def finish(self) -> None:
        """Wait for the copies; raise what they raised."""
        self.copies.put(None)
        self.copier.join()
        self.view.release()
        self._anchor = None  # the mapping closes only once no buffer of it is exported
        if self.mapped is not None:
            self.mapped.close()
        if self.copy_error is not None:
            raise self.copy_error

    def write(self, data: bytes) -> None:
        """``data`` at the end of what is written or being copied."""
        view = memoryview(data)
        while view:
            n = os.pwrite(self.out, view, self.at)
            view, self.at = view[n:], self.at + n

    def _copy_runs(self, source: int) -> None:
        in_kernel = hasattr(os, "copy_file_range")
        while (job := self.copies.get()) is not None:
            if self.copy_error is not None:
                continue
            start, size, at = job
            try:
                done = 0
                if in_kernel:
                    try:
                        while done < size:
                            n = os.copy_file_range(source, self.out, size - done, start + done, at + done)
                            if n == 0:
                                break
                            done += n
                    except OSError:  # another file system, an old kernel...: the plain writes below
                        in_kernel = False
                while done < size:
                    chunk = os.pread(source, min(CHUNK, size - done), start + done)
                    if not chunk:
                        raise ValueError("the earlier run info is shorter than its recorded entries")
                    while chunk:
                        n = os.pwrite(self.out, chunk, at + done)
                        chunk, done = chunk[n:], done + n
            except (OSError, ValueError) as exc:
                self.copy_error = exc


def _temporary(directory: str, name: str) -> tuple[int, str]:
    """A new file ``.tmp-<name>.<random>`` (``marinbuild.store.fs.create_temporary``'s name, which ``cache gc``
    knows), created exclusively."""
    while True:
        tmp = os.path.join(directory, f".tmp-{name}.{os.urandom(6).hex()}")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), tmp
        except FileExistsError:
            continue


def _child(stdin: IO[bytes], stdout: IO[bytes]) -> int:
    header = json.loads(stdin.readline())
    opening = _exactly(stdin, header["opening"])
    directory, script = header["directory"], header["script"]
    source = os.open(header["source"], os.O_RDONLY)
    out, tmp = _temporary(directory, f"{script}.json")
    named = False
    try:
        resume = header.get("resume")
        child = _Child(source, out, header.get("every", 0), (resume[0], bytes.fromhex(resume[1])) if resume else None)
        child.write(opening)
        while True:
            kind = stdin.read(1)
            if kind == b"K":
                start, count = struct.unpack("<QI", _exactly(stdin, 12))
                lengths = array("I")
                lengths.frombytes(_exactly(stdin, 4 * count))
                child.kept(start, lengths)
            elif kind == b"N":
                (size,) = struct.unpack("<I", _exactly(stdin, 4))
                child.new(_exactly(stdin, size))
            elif kind == b"E":
                break
            else:  # the end of the input without ``E``: the parent abandoned the write, or died
                return 1
        child.write(CLOSING)
        child.finish()
        os.close(out)
        out = -1
        md5 = child.hasher.hexdigest()
        path = os.path.join(directory, f"{script}-{md5[:6]}.json")
        if os.path.exists(path):  # the same steps, an earlier run: its file is kept (``only_if_new``)
            how = "kept"
        else:
            os.replace(tmp, path)
            named, how = True, "new"
        saved = " ".join(f"{index}:{state.hex()}" for index, state in child.hasher.states)
        stdout.write(f"{md5} {how}\n{saved}\n".encode())
        stdout.flush()
        return 0
    except EOFError:
        return 1
    finally:
        if out >= 0:
            os.close(out)
        if not named:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass


if __name__ == "__main__":
    try:
        sys.exit(_child(sys.stdin.buffer, sys.stdout.buffer))
    except (OSError, ValueError) as error:
        print(error, file=sys.stderr)
        sys.exit(1)
