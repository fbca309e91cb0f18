#!/usr/bin/env python3
"""Hostile / broken peers for tallyd's Unix socket (standard library only).

    raw_peer.py SOCKET garbage      send an HTTP request line, wait for tallyd to close
    raw_peer.py SOCKET truncated    send a valid header announcing 64 message bytes, send 10, close
    raw_peer.py SOCKET oversize     send a header announcing a ~4 GiB message, wait for the close
    raw_peer.py SOCKET idle         connect, print "idle-connected", then sleep until killed
    raw_peer.py SOCKET silent       connect, send nothing, wait for tallyd to close (handshake timeout)
    raw_peer.py SOCKET trickle      send a frame one byte every 100 ms, wait for tallyd to close
    raw_peer.py SOCKET hello FILE   send FILE (a Cap'n Proto message) framed as a Tally frame,
                                    write the reply frame's message bytes to stdout
    raw_peer.py SOCKET cuts FILE N  N connections, each sending the framed FILE cut at a random
                                    point (every prefix length, the whole frame too) and then
                                    vanishing, as a client killed mid-handshake would (seeded)

Prints "pid=<own pid>" first on stderr so the caller can find tallyd's log line about
this peer (tallyd logs Unix peers as "unix pid=N uid=N gid=N").
Exit status: 0 done as described, 3 tallyd kept the connection open too long, 4 bad reply.
"""
import os
import socket
import struct
import sys
import time

MAGIC = 0x544C5931
HEADER = struct.Struct("<III")  # magic, messageBytes, bulkBytes (little-endian)
WAIT_S = 5.0


def connect(path):
    deadline = time.monotonic() + WAIT_S
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(WAIT_S)
        try:
            s.connect(path)
            return s
        except BlockingIOError:  # the listen backlog is full: tallyd has not accepted yet
            s.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def wait_closed(s):
    """True when tallyd closes (or resets) the connection within WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    try:
        while time.monotonic() < deadline:
            if not s.recv(4096):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
    return False


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def cuts(first, path, hello_file, count):
    """Sends prefixes of a framed Hello and drops the connection; every 4th one with an abortive
    close (RST), as the kernel does for a process killed with unread data."""
    import random
    with open(hello_file, "rb") as f:
        message = f.read()
    frame = HEADER.pack(MAGIC, len(message), 0) + message
    rng = random.Random(5)
    lengths = list(range(len(frame) + 1)) + [rng.randrange(len(frame) + 1) for _ in range(max(0, count - len(frame) - 1))]
    first.close()
    for i, n in enumerate(lengths[:count]):
        s = connect(path)
        s.sendall(frame[:n])
        if i % 4 == 3:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    print(f"cut {min(count, len(lengths))} connections of a {len(frame)}-byte Hello frame")
    return 0


def trickle(s):
    """A frame header announcing 64 bytes, then the bytes, one every 100 ms: every read of
    tallyd sees progress, only a deadline over the whole Hello ends it. 0 if closed in WAIT_S."""
    data = HEADER.pack(MAGIC, 64, 0) + b"\x00" * 64
    deadline = time.monotonic() + WAIT_S
    s.setblocking(False)
    for byte in data:
        if time.monotonic() > deadline:
            return 3
        try:
            if s.recv(1) == b"":
                return 0
        except BlockingIOError:
            pass
        except (ConnectionResetError, BrokenPipeError):
            return 0
        try:
            s.send(bytes([byte]))
        except (ConnectionResetError, BrokenPipeError):
            return 0
        time.sleep(0.1)
    s.setblocking(True)
    return 0 if wait_closed(s) else 3


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    path, mode = sys.argv[1], sys.argv[2]
    print(f"pid={os.getpid()}", file=sys.stderr, flush=True)
    s = connect(path)
    if mode == "garbage":
        s.sendall(b"GET / HTTP/1.1\r\n\r\n")
        return 0 if wait_closed(s) else 3
    if mode == "truncated":
        s.sendall(HEADER.pack(MAGIC, 64, 0) + b"\x00" * 10)
        s.close()
        return 0
    if mode == "oversize":
        s.sendall(HEADER.pack(MAGIC, 0xFFFFFFF0, 0))
        return 0 if wait_closed(s) else 3
    if mode == "silent":
        return 0 if wait_closed(s) else 3
    if mode == "trickle":
        return trickle(s)
    if mode == "idle":
        print("idle-connected", flush=True)
        while True:
            time.sleep(60)
    if mode == "hello":
        with open(sys.argv[3], "rb") as f:
            message = f.read()
        s.sendall(HEADER.pack(MAGIC, len(message), 0) + message)
        magic, message_bytes, bulk_bytes = HEADER.unpack(recv_exact(s, HEADER.size))
        if magic != MAGIC:
            print(f"reply has bad magic 0x{magic:08x}", file=sys.stderr)
            return 4
        sys.stdout.buffer.write(recv_exact(s, message_bytes))
        recv_exact(s, bulk_bytes)
        return 0 if wait_closed(s) else 3
    if mode == "cuts":
        return cuts(s, path, sys.argv[3], int(sys.argv[4]))
    print(f"unknown mode {mode}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
