"""A burst of connections to a kjit server, all in its backlog at once.

burst_answered(path, pid, n): stops the server (SIGSTOP), connects n sockets,
lets it run on, reads each connection to its end, and returns how many got a
"busy" reply (the rest closed unanswered, printed to stderr)."""
import os
import signal
import socket
import sys


def burst_answered(path, pid, n):
    os.kill(pid, signal.SIGSTOP)
    burst = []
    try:
        for _ in range(n):
            x = socket.socket(socket.AF_UNIX)
            x.settimeout(30)
            x.connect(path)
            burst.append(x)
    finally:
        os.kill(pid, signal.SIGCONT)
    answered = 0
    for x in burst:
        data = b""
        try:
            while True:
                b = x.recv(4096)
                if not b:
                    break
                data += b
        except OSError:
            pass
        answered += b'"busy"' in data
        if b'"busy"' not in data:
            print("not busy:", data[:300], file=sys.stderr)
        x.close()
    return answered
