"""One writer per run folder: an advisory lock (``flock``) on ``<folder>/.run.lock``, held for a run's whole life.

Workers of a grid (``hydra/launcher=joblib|ray|submitit_*``) share the results root, and each (method, dataset)
run has a folder of its own; two processes on the same folder (the same job launched twice, a duplicate in a
sweep, a shard merge racing a run) would interleave their appends. The second one fails at once with
``RunFolderBusy`` naming the holder, before its data or any model loads (``wait=True`` waits instead, as a shard
merge does). The kernel drops the lock when its holder dies, so a killed run never leaves the folder locked.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.records import LOCK


class RunFolderBusy(RuntimeError):
    """Another process is writing to the run folder."""


@contextmanager
def run_lock(folder: str | Path, wait: bool = False) -> Iterator[Path]:
    """Hold ``folder``'s lock inside the block (the folder is made if missing); raise ``RunFolderBusy`` when
    another process holds it, or wait for it with ``wait``. Yields the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited across exec (PEP 446)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 400, 0).decode(errors="replace").strip() or "another process"
            raise RunFolderBusy(
                f"{folder} is being written by another run ({holder}); wait for it to end (a re-run then resumes "
                "it) or give this one another results_dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%H:%M:%S')}".encode(), 0)
        try:
            yield folder
        finally:
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # releases the lock
