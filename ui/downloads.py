"""Files the app hands out for download (trace exports, sweep CSVs): one folder per app process,
a subfolder per download, and only the newest `keep` of them kept. Gradio copies a
returned file into its own cache at once, so a pruned subfolder loses nothing a page still shows."""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
import time
from pathlib import Path


class Downloads:
    def __init__(self, keep: int = 16):
        self.keep = keep
        self._root: Path | None = None
        self._lock = threading.Lock()

    @property
    def root(self) -> Path:
        """The process's folder, made on first use and removed when the process exits."""
        with self._lock:
            if self._root is None:
                self._root = Path(tempfile.mkdtemp(prefix="libraspec-downloads-"))
                atexit.register(shutil.rmtree, self._root, True)
            return self._root

    def folder(self) -> Path:
        """A new empty folder for one download; the oldest beyond `keep` are deleted."""
        root = self.root
        with self._lock:
            # named by the time it was made, unique even across forked workers (a ZeroGPU Space)
            folder = Path(tempfile.mkdtemp(prefix=f"{time.time_ns():020d}-", dir=root))
            for old in sorted(root.iterdir())[: -self.keep]:
                shutil.rmtree(old, ignore_errors=True)
        return folder
