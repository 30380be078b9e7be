"""Where a benchmark result came from: code, files, software and the machine's load.

A result names the git commit of this tree and whether the tree had uncommitted changes,
the SHA-256 of every file its models and drafter were loaded from (`ModelPair.weight_files`,
plus the look-up drafter's calibration and corpus when it drafts), the versions of the
packages the numbers depend on, the 1-minute load average before and after the run, and the
share of the machine's CPU time that *other* processes used during it (`others_share`: the load
average counts this process's own threads too, so inside a report, where every run follows
another, it cannot tell a busy machine from the report itself). A share above `BUSY_SHARE`
means other processes competed for the CPU; a load above `BUSY_LOAD` before a report starts
means the same.
Digests of large files are cached by path, size and modification time.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import subprocess
from pathlib import Path

from ..drafters.lookup import DEFAULT_CALIBRATION
from ..files import atomic_write_text, sha256_file
from ..paths import ROOT, cache_root

BUSY_LOAD = 0.5  # 1-minute load average before a report starts above which other processes are running
BUSY_SHARE = 0.25  # share of the machine's CPU time other processes took during a run that makes it busy
LOOKUP_DRAFTERS = ("lookup", "hybrid")  # drafters that read the look-up calibration and corpus


def versions() -> dict:
    """Versions of the software a result depends on."""
    from importlib.metadata import PackageNotFoundError, version

    import numpy
    import pandas
    import torch
    import transformers

    out = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "numpy": numpy.__version__,
        "pandas": pandas.__version__,
    }
    try:
        out["libraspec"] = version("libraspec")
    except PackageNotFoundError:
        out["libraspec"] = "source tree"
    return out


def git_state(root: str | os.PathLike = ROOT) -> dict:
    """{"commit": full hash or None, "dirty": uncommitted changes to tracked files (None without git)}."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()

    try:
        return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


@functools.lru_cache(maxsize=None)
def source_digest(root: str | os.PathLike = ROOT) -> str:
    """SHA-256 over the library's Python sources (path and bytes of each, sorted): results of
    one digest came from the same decoding code, committed or not. Read once per process: it
    names the code this process loaded, and every run and job key would otherwise read it again."""
    digest = hashlib.sha256()
    package = Path(root) / "libraspec"
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def load_average() -> float | None:
    """The 1-minute load average, None where the system has none."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def cpu_clock() -> tuple[float, float, float] | None:
    """(CPU seconds the machine spent busy, all its CPU seconds, this process's CPU seconds) since
    boot, from /proc/stat and os.times(); None where /proc is missing. This process's seconds include
    its finished child processes' (a benchmark's worker pool is its own work, not another load)."""
    try:
        with open("/proc/stat") as handle:
            ticks = [int(v) for v in handle.readline().split()[1:8]]  # user nice system idle iowait irq softirq
    except (OSError, ValueError):
        return None
    per_second = os.sysconf("SC_CLK_TCK")
    own = os.times()
    mine = own.user + own.system + own.children_user + own.children_system
    return (sum(ticks) - ticks[3] - ticks[4]) / per_second, sum(ticks) / per_second, mine


def others_share(start, end) -> float | None:
    """Share of the machine's CPU time between two `cpu_clock` readings that other processes used."""
    if start is None or end is None or end[1] <= start[1]:
        return None
    others = (end[0] - start[0]) - (end[2] - start[2])
    return min(1.0, max(0.0, others / (end[1] - start[1])))


def cached_sha256(path: str | os.PathLike) -> str:
    """`files.sha256_file`, remembered by absolute path, size and mtime in the user cache."""
    path = Path(path).resolve()
    stat = path.stat()
    key = f"{path}|{stat.st_size}|{stat.st_mtime_ns}"
    store = Path(cache_root()) / "file_hashes.json"
    try:
        known = json.loads(store.read_text())
    except (OSError, ValueError):
        known = {}
    if key not in known:
        known[key] = sha256_file(path)
        atomic_write_text(store, json.dumps(known, indent=1, sort_keys=True))
    return known[key]


def shown_path(path: str | os.PathLike) -> str:
    """A path as results and commands show it: relative to the repository when inside it."""
    full = Path(path).resolve()
    return str(full.relative_to(ROOT)) if full.is_relative_to(ROOT) else str(full)


def model_files(pair, drafter: str) -> list[dict]:
    """[{"role", "path", "bytes", "sha256"}] for every file the pair and `drafter` read."""
    roles = [(role, Path(p)) for role, paths in pair.weight_files.items() for p in paths]
    if drafter in LOOKUP_DRAFTERS:
        roles.append(("drafter", DEFAULT_CALIBRATION))
        if pair.lookup_corpus is not None:
            roles.append(("drafter", Path(pair.lookup_corpus)))
    return [
        {"role": role, "path": shown_path(path), "bytes": path.stat().st_size, "sha256": cached_sha256(path)}
        for role, path in roles
        if path.is_file()
    ]


def provenance(pair, drafter: str, load_before: float | None, clock_before=None) -> dict:
    """The config's "provenance" entry, taken after a run that began at `load_before` and
    `clock_before` (a `cpu_clock` reading)."""
    return {
        **{f"git_{k}": v for k, v in git_state().items()},
        "source_sha256": source_digest(),
        "files": model_files(pair, drafter),
        "load_1min": {"before": load_before, "after": load_average()},
        "others_cpu_share": others_share(clock_before, cpu_clock()),
    }
