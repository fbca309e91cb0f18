#!/usr/bin/env python3
"""A tallyd that dies: accepts one client on a Unix socket, answers its Hello with the Welcome
in WELCOME_FILE (a Cap'n Proto ServerMessage made with `capnp encode`), then closes the
connection and the socket as a crashing tallyd would. Standard library only.

    fake_tallyd.py SOCKET WELCOME_FILE      prints "listening", then "welcomed; gone"
"""
import os
import socket
import struct
import sys

MAGIC = 0x544C5931
HEADER = struct.Struct("<III")  # magic, messageBytes, bulkBytes (little-endian)


def recv_exact(conn, n):
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            sys.exit("the client closed before its Hello arrived")
        data += chunk
    return data


def main():
    path, welcome_file = sys.argv[1], sys.argv[2]
    with open(welcome_file, "rb") as f:
        welcome = f.read()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    server.settimeout(20)
    print("listening", flush=True)
    conn, _ = server.accept()
    conn.settimeout(10)
    magic, message_bytes, bulk_bytes = HEADER.unpack(recv_exact(conn, HEADER.size))
    if magic != MAGIC:
        sys.exit(f"bad magic {magic:#x}")
    recv_exact(conn, message_bytes + bulk_bytes)
    conn.sendall(HEADER.pack(MAGIC, len(welcome), 0) + welcome)
    conn.close()
    server.close()
    os.unlink(path)
    print("welcomed; gone", flush=True)


if __name__ == "__main__":
    main()
