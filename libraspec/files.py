"""Atomic file writes (a temporary file beside the target, then one rename) and file digests.

An interrupted write never leaves a half-written trace, profile or benchmark file behind.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from typing import Callable


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> str:
    """Call `write(tmp_path)`, then rename the result onto `path` (readable by all, 0644)."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> str:
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)

    return atomic_write(path, write)


def sha256_file(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes as 64 hex digits, read in 4 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()
