"""SSH's ProxyCommand for guests: `ip netns exec <run namespace> python -m vnetbench.guests.relay HOST PORT` joins
ssh's stdin/stdout to a TCP connection made inside the run's guest namespace (where the management bridge is), so
the ssh client itself runs anywhere, and the OpenSSH client needs no netcat."""
from __future__ import annotations

import os
import selectors
import socket
import sys


def main(host: str, port: int) -> None:
    sock = socket.create_connection((host, port), timeout=5)
    sock.settimeout(None)
    sel = selectors.DefaultSelector()
    sel.register(0, selectors.EVENT_READ)
    sel.register(sock, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            if key.fileobj == 0:
                data = os.read(0, 65536)
                if not data:
                    sock.shutdown(socket.SHUT_WR)
                    sel.unregister(0)
                    continue
                sock.sendall(data)
            else:
                data = sock.recv(65536)
                if not data:
                    return
                os.write(1, data)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
