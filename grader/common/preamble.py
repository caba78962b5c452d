"""Preamble: the one message the judge puts on its socket to the submission's process before any
request, and the descriptor it carries (the launch records' socket: grader.judge.launches,
grader.submission.launches). Standard library only: the submission's process reads it before it
imports torch, and the judge writes it before it imports torch.

A 4-byte big-endian length, then that many bytes of JSON: {"so": the records extension's path}
with the records' socket attached (SCM_RIGHTS), or {"off": why there are no records}. Sent
before the process starts (the socket holds it), read before the socket becomes the process's
multiprocessing Connection: exactly its own bytes, never the first request's.
"""
from __future__ import annotations

import json
import socket

MAX = 1 << 16


def send_preamble(sock: socket.socket, payload: dict, fd: int | None = None) -> None:
    data = json.dumps(payload).encode()
    socket.send_fds(sock, [len(data).to_bytes(4, "big") + data], [fd] if fd is not None else [])


def recv_preamble(fd: int) -> tuple[dict, int | None]:
    """(the payload, the descriptor it carried or None), read from the socket numbered `fd`,
    which stays open (the caller goes on using it)."""
    sock = socket.socket(fileno=fd)
    try:
        head, fds, _, _ = socket.recv_fds(sock, 4, 1)
        while len(head) < 4:
            more = sock.recv(4 - len(head))
            if not more:
                raise EOFError("the judge's socket closed in its preamble")
            head += more
        size = int.from_bytes(head, "big")
        if size > MAX:
            raise ValueError(f"a preamble of {size} bytes")
        data = b""
        while len(data) < size:
            more = sock.recv(size - len(data))
            if not more:
                raise EOFError("the judge's socket closed in its preamble")
            data += more
    finally:
        sock.detach()  # the number stays the caller's
    return json.loads(data), (fds[0] if fds else None)
