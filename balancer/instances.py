"""Which process a worker's membership row belongs to, and whether that process is gone.

A worker joins under an *instance id*, ``host/pid/nonce``: the name says which worker, the
instance id which process is it. A worker restarted under its own name after a hard stop
finds its name held by the old instance, still "live" by its last heartbeat. When that
instance ran on this machine and its process no longer exists, nobody will heartbeat for it
again: the new process takes the name (and the name's leases) at once instead of waiting
out the suspicion timeout. An instance on another machine, or an id of another form, is
never judged dead here: only the timeout can tell.

>>> me = new_instance_id()
>>> instance_is_dead(me), instance_is_dead("3f2a9c")  # this process; an id of another form
(False, False)
"""

from __future__ import annotations

import os
import socket
import uuid
from typing import NamedTuple


class Instance(NamedTuple):
    host: str
    pid: int


def new_instance_id() -> str:
    """``host/pid/nonce`` of this process (the nonce tells two joins of one process apart)."""
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:12]}"


def parse_instance(instance_id: str) -> Instance | None:
    """The host and pid of an instance id; ``None`` for an id of another form.

    >>> parse_instance("vm-1/4242/3f2a9c0d1e2f")
    Instance(host='vm-1', pid=4242)
    """
    host, sep, rest = instance_id.rpartition("/")
    host, sep2, pid = host.rpartition("/")
    if not (sep and sep2 and host and pid.isdigit()):
        return None
    return Instance(host, int(pid))


def instance_is_dead(instance_id: str) -> bool:
    """Whether the process of ``instance_id`` is known to be gone: it ran on this machine
    and no process (or only its unreaped remains) has its pid."""
    instance = parse_instance(instance_id)
    if instance is None or instance.host != socket.gethostname():
        return False
    if instance.pid == os.getpid():
        return False
    try:
        os.kill(instance.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # a process of another user has the pid: it exists
        return False
    return _is_zombie(instance.pid)


def _is_zombie(pid: int) -> bool:
    """A killed process its parent has not reaped yet still answers ``kill(pid, 0)``."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rpartition(")")[2].split()[0] == "Z"
    except (OSError, IndexError):
        return False
