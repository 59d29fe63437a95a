"""Find who holds this host's TPU: libtpu's lock file and open TPU device files.

libtpu lets one process own a host's TPU chips. It takes a POSIX lock on
/tmp/libtpu_lockfile and opens the chips' device files (/dev/accel* on TPU
v2-v4, /dev/vfio/* on v5e, v5p and v6e); a second process then fails with "The
TPU is already in use by process with pid N" (tensorflow/tensorflow#55429 added
that message). A lock file left by a killed kernel blocked older libtpu
releases until it was removed (jax-ml/jax#10192). Everything here reads /proc
and never opens the lock file, because closing any descriptor of a file drops
this process's own POSIX locks on it (which would free a TPU we hold).
"""

import dataclasses
import glob
import os

LOCK_FILE = "tmp/libtpu_lockfile"  # Relative to the host root.


@dataclasses.dataclass(frozen=True)
class Holder:
    """A process that holds the TPU.

    Attributes:
      pid: its process id.
      command: its command line ("?" when /proc does not tell).
      path: what it holds: the lock file or a TPU device file.
      how: "lock" (a POSIX lock on the lock file) or "open" (an open descriptor).
    """

    pid: int
    command: str
    path: str
    how: str


@dataclasses.dataclass(frozen=True)
class TPUUse:
    """Who uses this host's TPU.

    Attributes:
      holders: other processes holding the lock file or a TPU device file.
      stale_lock: the lock file path when it exists but nobody holds it, else None.
      own: True when this process itself holds the TPU (initialised already).
    """

    holders: tuple = ()
    stale_lock: str | None = None
    own: bool = False


def device_files(root="/"):
    """Return the TPU device files under `root` (/dev/accel*, /dev/vfio/*)."""
    return sorted(
        glob.glob(os.path.join(root, "dev/accel[0-9]*"))
        + glob.glob(os.path.join(root, "dev/vfio/*"))
    )


def _command(pid, proc):
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as f:
            raw = f.read()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip() or "?"


def _lock_holders(path, proc):
    """Return the pids holding a POSIX or flock lock on `path`, from /proc/locks."""
    try:
        st = os.stat(path)
        with open(os.path.join(proc, "locks")) as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    # Lines read "1: POSIX  ADVISORY  WRITE 1234 fd:01:5678 0 EOF" (pid, dev:inode).
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids = []
    for line in lines:
        fields = line.split()
        if "->" in fields:  # A waiter blocked on the lock, not its holder.
            continue
        for i, field in enumerate(fields[:-1]):
            if field.isdigit() and fields[i + 1] == want:
                pids.append(int(field))
    return pids


def _open_holders(paths, proc, own_pid):
    """Return Holders for processes with a descriptor open on any of `paths`."""
    wanted = {os.path.realpath(p) for p in paths}
    found = []
    for entry in os.listdir(proc):
        if not entry.isdigit() or int(entry) == own_pid:
            continue
        fd_dir = os.path.join(proc, entry, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:  # Gone, or another user's process (not readable without root).
            continue
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target in wanted:
                found.append(Holder(int(entry), _command(entry, proc), target, "open"))
                break
    return found


def tpu_use(root="/", proc="/proc", own_pid=None):
    """Return who holds the TPU of the host at `root`, read from `proc`.

    Args:
      root: the host's filesystem root for the lock and device files (tests fake it).
      proc: the process table to read.
      own_pid: this process's id (defaults to os.getpid()).
    """
    own_pid = os.getpid() if own_pid is None else own_pid
    lock = os.path.join(root, LOCK_FILE)
    holders, own = [], False
    lockers = _lock_holders(lock, proc) if os.path.exists(lock) else []
    for pid in lockers:
        if pid == own_pid:
            own = True
        else:
            holders.append(Holder(pid, _command(pid, proc), lock, "lock"))
    seen = {h.pid for h in holders}
    for holder in _open_holders(device_files(root), proc, own_pid):
        if holder.pid not in seen:
            holders.append(holder)
    stale = lock if os.path.exists(lock) and not lockers else None
    return TPUUse(tuple(holders), stale, own)
