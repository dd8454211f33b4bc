"""stdin/stdout joined to a socket, for the channels that reach a guest:
- SSH's ProxyCommand: `ip netns exec <run namespace> python -m vnetbench.guests.relay HOST PORT` joins ssh's
  stdin/stdout to a TCP connection made inside the run's guest namespace (where the management bridge is), so the
  ssh client itself runs anywhere, and the OpenSSH client needs no netcat;
- a qemu guest's agent port: `python -m vnetbench.guests.relay --unix SOCKET` joins them to qemu's end of the
  virtio-serial port (guests/qemu.py: agent_channel)."""
from __future__ import annotations

import os
import selectors
import socket
import sys


def join(sock: socket.socket, half_close: bool) -> None:
    """Copy stdin to the socket and the socket to stdout until the socket ends. At stdin's end, `half_close` shuts
    the socket's sending side and goes on reading (TCP); otherwise it returns (letting go of a serial port is what
    ends the agent behind it)."""
    sel = selectors.DefaultSelector()
    sel.register(0, selectors.EVENT_READ)
    sel.register(sock, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            if key.fileobj == 0:
                data = os.read(0, 65536)
                if not data:
                    if not half_close:
                        return
                    sock.shutdown(socket.SHUT_WR)
                    sel.unregister(0)
                    continue
                sock.sendall(data)
            else:
                data = sock.recv(65536)
                if not data:
                    return
                os.write(1, data)


def main(argv: list[str]) -> None:
    if argv[:1] == ["--unix"] and len(argv) == 2:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(argv[1])
        return join(sock, half_close=False)
    if len(argv) != 2:
        sys.exit("usage: python -m vnetbench.guests.relay HOST PORT | --unix SOCKET")
    sock = socket.create_connection((argv[0], int(argv[1])), timeout=5)
    sock.settimeout(None)
    join(sock, half_close=True)


if __name__ == "__main__":
    main(sys.argv[1:])
