"""kjit.client: talk to a running `kjit serve` over its Unix socket.

Pure standard library (socket, json, struct): usable without libkjit, torch
or a GPU. The wire format is docs/PROTOCOL.md: a 16-byte frame header
(magic "KJIT", u16 version, u16 flags, u32 JSON length, u32 payload length,
little-endian), a JSON header, then an optional binary payload.

    from kjit.client import Client
    with Client() as c:
        reply = c.compile("norm_modulate", 5376, "bf16", arch="sm_90")
        for k in reply["kernels"]:
            print(k["lowered"], len(k["cubin"]))
"""

import json
import os
import socket
import struct

PROTO_VERSION = 1
_HEADER = struct.Struct("<4sHHII")
_MAX_REPLY_JSON = 16 << 20
_MAX_REPLY_PAYLOAD = 1 << 30

__all__ = ["Client", "ServerError", "ProtocolError", "default_socket"]


class ServerError(Exception):
    """The server answered {"ok": false, "error": {"code", "message"}}."""

    def __init__(self, reply):
        err = reply.get("error") or {}
        self.code = err.get("code", "")
        self.message = err.get("message", "")
        self.reply = reply
        super().__init__("%s: %s" % (self.code, self.message))


class ProtocolError(Exception):
    """The connection broke or carried something that is not a kjit frame."""


def _with_cubins(reply, data):
    """Gives each entry of reply["kernels"] its "cubin" bytes from the payload."""
    for k in reply["kernels"]:
        k["cubin"] = data[k["offset"]:k["offset"] + k["size"]]
    return reply


def default_socket():
    """Where `kjit serve` listens by default."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return os.path.join(xdg, "kjit", "kjit.sock")
    return "/tmp/kjit-%d/kjit.sock" % os.geteuid()


class Client:
    """One connection; one request at a time (use one Client per thread).

    path: the socket (None: $KJIT_SERVER, else the default socket).
    timeout: seconds to wait for each frame from the server (None: forever).
    """

    def __init__(self, path=None, timeout=600.0):
        self.path = path or os.environ.get("KJIT_SERVER") or default_socket()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        self._next_id = 1
        try:
            self._sock.connect(self.path)
            self.hello, _ = self.request({"type": "hello", "versions": [PROTO_VERSION], "client": "kjit-py"})
        except BaseException:
            self._sock.close()
            raise

    def close(self):
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _read_exact(self, n):
        chunks = []
        while n:
            b = self._sock.recv(min(n, 1 << 20))
            if not b:
                raise ProtocolError("the kjit server at %s closed the connection" % self.path)
            chunks.append(b)
            n -= len(b)
        return b"".join(chunks)

    def _read_frame(self):
        magic, version, flags, jlen, plen = _HEADER.unpack(self._read_exact(_HEADER.size))
        if magic != b"KJIT" or version != PROTO_VERSION or flags:
            raise ProtocolError("not a kjit frame (magic %r, version %d, flags %d)" % (magic, version, flags))
        if jlen < 2 or jlen > _MAX_REPLY_JSON or plen > _MAX_REPLY_PAYLOAD:
            raise ProtocolError("frame lengths out of range: JSON %d, payload %d" % (jlen, plen))
        header = json.loads(self._read_exact(jlen))
        return header, self._read_exact(plen) if plen else b""

    def request(self, req, payload=b"", on_event=None, check=True):
        """Sends one request (a dict with a "type"; its id is set here) and
        returns (reply, payload bytes). Progress events go to on_event(dict).
        check: raise ServerError on {"ok": false} instead of returning it."""
        req = dict(req)
        req["id"] = rid = self._next_id
        self._next_id += 1
        body = json.dumps(req, separators=(",", ":")).encode()
        self._sock.sendall(_HEADER.pack(b"KJIT", PROTO_VERSION, 0, len(body), len(payload)) + body + payload)
        while True:
            header, data = self._read_frame()
            if header.get("id") == rid and "event" in header:
                if on_event:
                    on_event(header)
                continue
            # id null: an error about the connection itself (refused, bad frame).
            if header.get("id") == rid or header.get("id") is None:
                if check and not header.get("ok"):
                    raise ServerError(header)
                return header, data

    def ping(self):
        return self.request({"type": "ping"})[0]

    def stats(self):
        return self.request({"type": "stats"})[0]

    def compile(self, op, hidden, dtype, arch=None):
        """Every kernel of op for (hidden, dtype, arch); each entry of
        reply["kernels"] gains its "cubin" bytes."""
        req = {"type": "compile", "op": op, "hidden": hidden, "dtype": dtype}
        if arch:
            req["arch"] = arch
        return _with_cubins(*self.request(req))

    def kernel(self, op, template, expr, arch=None):
        """One kernel by its template file and name expression (what the C
        library asks when KJIT_SERVER is set); the entry of reply["kernels"]
        gains its "cubin" bytes."""
        req = {"type": "kernel", "op": op, "template": template, "expr": expr}
        if arch:
            req["arch"] = arch
        return _with_cubins(*self.request(req))

    def prewarm(self, ops, hidden, dtype, arch=None, on_event=None):
        req = {"type": "prewarm", "ops": ops, "hidden": hidden, "dtype": dtype}
        if arch:
            req["arch"] = arch
        return self.request(req, on_event=on_event)[0]

    def shutdown(self):
        return self.request({"type": "shutdown"})[0]
