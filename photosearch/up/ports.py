"""The ports of `up`'s children, held by `up` itself until the child that binds one starts.

`up` chooses its ports before the model export, a minute before Triton starts. A port merely
found free then could be another server's by the time the child binds it, and the child's
probe would take that server's answers for its own (another Triton was once "back"). So each
port is held here, bound and listening, from the choice until right before its child starts,
and again whenever that child is down.

The ports a data directory was given are kept in it (ports.json) and taken again at its next
start where they are free: a shell's up.env, and what a command finds of a running `up`, stay
right from one start to the next.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from core.atomicfile import write_atomic
from photosearch.up.bootstrap import BootstrapError
from photosearch.up.processes import ChildError


def hold(port: int, host: str = "127.0.0.1") -> socket.socket | None:
    """A listening socket on host:port (0: one the kernel picks); None where another has it.

    Listening, so that no other socket can bind the port, with SO_REUSEADDR or SO_REUSEPORT or
    without; with SO_REUSEADDR itself, so that connections that linger in TIME_WAIT do not make
    the port taken. Nothing accepts: a client's connection waits unanswered, and is reset when
    the socket is closed for the child.
    """
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(1)
    except OSError:
        sock.close()
        return None
    return sock


def held_by_another(port: int, what: str, child: str, detail: str = "") -> str:
    """The line `up` says when a server other than its child has that child's port."""
    by = f" ({detail})" if detail else ""
    return f"port {port} ({what}) is held by another server{by}, not by this `up`'s {child}"


PORTS_FILE = "ports.json"


def kept_ports(data_dir: Path) -> dict[str, int]:
    """The ports a data directory was given at its earlier starts, by what they are for."""
    try:
        kept = json.loads((data_dir / PORTS_FILE).read_text())
    except (OSError, ValueError):  # a first start, or a file cut short: choose again
        return {}
    if not isinstance(kept, dict):
        return {}
    return {what: n for what, n in kept.items() if isinstance(n, int) and 0 < n < 65536}


@dataclass
class Port:
    number: int
    host: str
    child: str  # the child that binds it
    env: dict[str, str]  # variable -> template of its value, "{}" the port
    firm: str | None  # the option that gave it (it is never moved), else None
    socket: socket.socket | None = field(default=None, repr=False)


class PortBook:
    """The ports `up` chose, by what they are for ("Triton gRPC"), and the sockets holding them."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.ports: dict[str, Port] = {}
        self.data_dir: Path | None = None
        self.kept: dict[str, int] = {}

    def keep_in(self, data_dir: Path) -> None:
        """Take the ports `data_dir` kept where free (`take`), and keep the ones taken there."""
        self.data_dir = data_dir
        self.kept = kept_ports(data_dir)

    def take(
        self,
        what: str,
        preferred: int,
        child: str,
        env: dict[str, str],
        *,
        host: str = "127.0.0.1",
        firm: str | None = None,
        chosen: bool = False,
    ) -> int:
        """Hold a port: `preferred` where the operator chose it (`chosen`: an option or a
        setting given), else the one the data directory kept, else `preferred`; where that
        one is taken, a port the kernel picks, unless `firm` (the option that moves it)."""
        kept = None if chosen else self.kept.get(what)
        wanted = preferred if kept is None else kept
        sock = hold(wanted, host)
        if sock is None:
            taken = f"port {wanted} is taken"
            if kept is not None:
                taken = (
                    f"port {wanted} ({what}), this data directory's since an earlier start, "
                    "is taken by another server"
                )
            if firm is not None:
                raise BootstrapError(f"{taken}: pass {firm}")
            if kept is None:
                taken = f"port {wanted} ({what}) is taken"
            sock = self._any(host)
            self.say(f"{taken}: using {sock.getsockname()[1]}")  # kept from now on: `save`
        self.ports[what] = Port(sock.getsockname()[1], host, child, env, firm, sock)
        return self[what]

    def save(self) -> None:
        """Keep the ports now held in the data directory, for its next start."""
        if self.data_dir is None:
            return
        numbers = {what: port.number for what, port in self.ports.items()}
        if numbers != self.kept:
            write_atomic(self.data_dir / PORTS_FILE, json.dumps(numbers, indent=2) + "\n")
            self.kept = numbers

    def __getitem__(self, what: str) -> int:
        return self.ports[what].number

    def __contains__(self, what: object) -> bool:
        return what in self.ports

    def of(self, child: str) -> list[str]:
        return [what for what, port in self.ports.items() if port.child == child]

    def environment(self) -> dict[str, str]:
        """The PHOTOSEARCH_* variables that give the children these ports."""
        return {
            name: template.format(port.number)
            for port in self.ports.values()
            for name, template in port.env.items()
        }

    def release(self, whats: Iterable[str]) -> None:
        """Close the sockets right before the child that binds these ports starts.

        From here to the child's own bind (Triton binds after loading its models: seconds)
        another server could take a port. The child then fails to bind and exits, or its probe
        finds another server answering (the probes ask who answers); its next start moves it.
        """
        for what in whats:
            port = self.ports[what]
            if port.socket is not None:
                port.socket.close()
                port.socket = None

    def reclaim(self, whats: Iterable[str], patience_s: float = 3.0) -> list[str]:
        """Hold a child's ports again before it starts once more; those another server took
        meanwhile are moved to ports the kernel picks (returned), or refused where firm.

        Patience: the dead child's own processes (Triton's backend stubs) are killed just
        before, and close their sockets a moment later.
        """
        moved: list[str] = []
        for what in whats:
            port = self.ports[what]
            if port.socket is not None:
                continue
            deadline = time.monotonic() + patience_s
            while (sock := hold(port.number, port.host)) is None and time.monotonic() < deadline:
                time.sleep(0.1)
            if sock is None:
                line = held_by_another(port.number, what, port.child)
                if port.firm is not None:
                    raise ChildError(f"{line}; it starts again once the port is free")
                sock = self._any(port.host)
                self.say(f"{line}: moving {port.child} to port {sock.getsockname()[1]}")
                moved.append(what)
            port.number, port.socket = sock.getsockname()[1], sock
        return moved

    def close(self) -> None:
        self.release(list(self.ports))

    @staticmethod
    def _any(host: str) -> socket.socket:
        sock = hold(0, host)
        if sock is None:
            raise OSError(f"no free port on {host}")
        return sock
