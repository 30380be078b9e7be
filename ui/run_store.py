"""Finished races on disk, so they outlive the process that decoded them.

On a ZeroGPU Space every `spaces.GPU` call runs in a worker forked from the app and its
memory is gone when the call returns; a race stored only in memory there could not be
inspected, exported or stepped through afterwards. The session writes each finished run
here (one pickle per run, atomic, newest `keep` kept) and reads runs it does not hold in
memory back from here. The files are the app's own; prompts stay on the Space's disk only
as long as the run is among the newest `keep`.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

from libraspec.files import atomic_write

SUFFIX = ".run.pkl"


class RunStore:
    def __init__(self, folder: str | os.PathLike, keep: int):
        if keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        self.folder, self.keep = Path(folder), keep

    def _path(self, run_id: str) -> Path:
        if not run_id or not run_id.isalnum():
            raise ValueError(f"no stored run with id {run_id!r}")
        return self.folder / f"{run_id}{SUFFIX}"

    def ids(self) -> list[str]:
        """Stored run ids, oldest first."""
        if not self.folder.is_dir():
            return []
        files = sorted(self.folder.glob("*" + SUFFIX), key=lambda p: (p.stat().st_mtime_ns, p.name))
        return [p.name[: -len(SUFFIX)] for p in files]

    def save(self, run) -> None:
        """Write `run` (its text segments without their decode function), then drop the oldest."""

        def write(tmp: str) -> None:
            with open(tmp, "wb") as handle:
                pickle.dump(run, handle, protocol=pickle.HIGHEST_PROTOCOL)

        atomic_write(self._path(run.run_id), write)
        for old in self.ids()[: -self.keep]:
            self._path(old).unlink(missing_ok=True)

    def load(self, run_id: str):
        """The stored run, or None when there is none with this id, or when its file is damaged or
        was written by a version whose classes this one no longer has."""
        try:
            with open(self._path(run_id), "rb") as handle:
                return pickle.load(handle)
        except (FileNotFoundError, ValueError, EOFError, pickle.UnpicklingError, AttributeError, ImportError):
            return None
