"""Output files, the one way every command writes them (docs/cli.md, "The contract").

- ``check_output`` runs before the work: a directory, a missing parent, an unknown suffix or a
  place the process cannot write is a usage error naming the flag, not a traceback at the end of
  a run. It proves the parent writable by creating (and removing) a file there: permission bits
  say nothing when running as root, /proc refuses new files whatever they say.
- ``atomic_write`` writes beside the target and renames over it when done: an interrupted or
  failed write leaves the old file, or none, never half of one; and a file is only replaced
  when there is something to write.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from gpupair.command.flags import UsageError


def check_output(value: str, flag: str, suffixes: tuple[str, ...]) -> Path:
    """``value`` as the path that will be written, or UsageError saying why it cannot be."""
    path = Path(value)
    if path.is_dir():
        raise UsageError(f"{flag}: {value} is a directory; give a file name")
    if path.suffix.lower() not in suffixes:
        raise UsageError(f"{flag}: {value} must end in {' or '.join(suffixes)}")
    parent = path.parent
    if not parent.is_dir():
        raise UsageError(f"{flag}: {parent} does not exist or is not a directory")
    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=f".{path.name}.", suffix=".probe"):
            pass
    except OSError as error:
        raise UsageError(f"{flag}: cannot write in {parent.resolve()}: {error.strerror or error}") from None
    if path.exists() and not os.access(path, os.W_OK):
        raise UsageError(f"{flag}: {value} is not writable")
    return path


@contextlib.contextmanager
def atomic_write(path: Path, binary: bool = False) -> Iterator[TextIO]:
    """A file (text unless ``binary``) that becomes ``path`` only when the block completes."""
    text = {} if binary else {"encoding": "utf-8", "newline": "\n"}
    handle = tempfile.NamedTemporaryFile("wb" if binary else "w", dir=path.parent, prefix=f".{path.name}.",
                                         suffix=".part", delete=False, **text)
    try:
        with handle:
            yield handle
            os.chmod(handle.name, _mode(path))  # a temporary file is 0600; the result is an ordinary one
        os.replace(handle.name, path)
    except BaseException:  # Ctrl-C included: no partial file is left behind
        with contextlib.suppress(OSError):
            os.unlink(handle.name)
        raise


def _mode(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o7777  # replacing a file keeps its mode
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_text(path: Path, text: str) -> Path:
    with atomic_write(path) as out:
        out.write(text)
    return path
