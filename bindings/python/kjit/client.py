"""kjit.client: talk to a running `kjit serve` over its Unix socket.

Pure standard library (socket, json, struct): usable without libkjit, torch
or a GPU (importing it imports the kjit package, which imports torch when
torch is installed; a bad KJIT_EAGER does not stop it). The wire format is docs/PROTOCOL.md: a 16-byte frame header
(magic "KJIT", u16 version, u16 flags, u32 JSON length, u32 payload length,
little-endian), a JSON header, then an optional binary payload.

    from kjit.client import Client
    with Client() as c:
        reply = c.compile("norm_modulate", 5376, "bf16", arch="sm_90")
        for k in reply["kernels"]:
            print(k["lowered"], len(k["cubin"]))

run() (an op on the server's GPU over this process's torch CUDA tensors,
shared through CUDA IPC) needs torch and the CUDA driver (libcuda, through
ctypes); everything else needs neither.
"""

import ctypes
import json
import numbers
import operator
import os
import select
import socket
import struct
import threading
import time
import weakref

PROTO_VERSION = 1
_HEADER = struct.Struct("<4sHHII")
_MAX_REPLY_JSON = 16 << 20
_MAX_REPLY_PAYLOAD = 1 << 30

__all__ = ["Client", "ServerError", "ProtocolError", "default_socket"]


class ServerError(Exception):
    """The server answered {"ok": false, "error": {"code", "message"}}."""

    def __init__(self, reply):
        err = reply.get("error") if isinstance(reply, dict) else None
        if not isinstance(err, dict):  # a server that says less than it should
            err = {"message": "" if err is None else str(err)}
        self.code = str(err.get("code", ""))
        self.message = str(err.get("message", ""))
        self.reply = reply
        super().__init__("%s: %s" % (self.code, self.message))


class ProtocolError(Exception):
    """The connection broke or carried something that is not a kjit frame.
    Also raised by every later request on a connection a timeout or an
    interrupt left in the middle of a frame: open a new Client."""


_MAX_JSON_DEPTH = 8  # the server's limit on a request's nesting (hello's limits.max_json_depth)
_CLOSING = ("bad_frame", "busy", "timeout", "not_allowed")  # id-null errors after which the server closes


def _request_problem(value, where, depth=1):
    """What a request must not hold, as "path: why", or None: NaN or
    infinity (JSON has neither), and what the server would refuse as
    bad_json naming no field (a NUL in a string or a key, nesting deeper
    than 8)."""
    here = where or "the request"
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return f"{here}: NaN and infinity cannot be sent (JSON has neither)"
    if isinstance(value, str):
        return f"{here}: a NUL character (the server would refuse the request as bad_json)" if "\0" in value else None
    if not isinstance(value, (dict, list, tuple)):
        return None
    if depth > _MAX_JSON_DEPTH:
        return f"{here}: nested deeper than {_MAX_JSON_DEPTH} levels (the server would refuse the request as bad_json)"
    if isinstance(value, dict):
        children = [(f"{where}.{k}" if where else str(k), k, v) for k, v in value.items()]
    else:
        children = [(f"{where}[{i}]", None, v) for i, v in enumerate(value)]
    for path, key, v in children:
        if isinstance(key, str) and "\0" in key:
            return f"{here}: a key with a NUL character (the server would refuse the request as bad_json)"
        got = _request_problem(v, path, depth + 1)
        if got:
            return got
    return None


def _json_default(value):
    """Integers of other types (numpy's: registered as numbers.Integral) as
    JSON numbers; anything else (a tensor, an array, numpy's bool) is a
    TypeError naming its type, as json.dumps raises."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return operator.index(value)
    raise TypeError(f"a request value of type {type(value).__name__} cannot be sent (not JSON)")


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


def _check_tune_reply(reply):
    """A tune reply's numbers as `kjit tune --json` has them: whole numbers
    for the configs and counts, lists of numbers per row count."""
    def whole(v):
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0
    for obj, keys in (("fwd", ("rpc", "pf", "grid_per_sm")), ("bwd", ("bwd_pf", "accs")),
                      ("default_fwd", ("rpc", "pf", "grid_per_sm")), ("default_bwd", ("bwd_pf", "accs"))):
        o = reply.get(obj)
        for k in keys:
            if not isinstance(o, dict) or not whole(o.get(k)):
                raise ProtocolError(f"a tune reply whose {obj}.{k} is not a whole number: {o!r}")
    for k in ("fwd_candidates", "bwd_candidates"):
        if not whole(reply.get(k)):
            raise ProtocolError(f"a tune reply whose {k} is not a whole number: {reply.get(k)!r}")
    rows = reply.get("rows", [])
    if not isinstance(rows, list) or not all(whole(r) for r in rows):
        raise ProtocolError(f"a tune reply whose rows are not whole numbers: {rows!r}")
    for k in ("fwd_us_rows", "bwd_us_rows", "default_fwd_us_rows", "default_bwd_us_rows"):
        v = reply.get(k, [])
        if not isinstance(v, list) or len(v) != len(rows) or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
            raise ProtocolError(f"a tune reply whose {k} is not {len(rows)} numbers: {v!r}")
    return reply


def _with_cubins(reply, data):
    """Gives each entry of reply["kernels"] its "cubin" bytes from the payload
    (ProtocolError for a reply whose kernels do not describe it)."""
    kernels = reply.get("kernels")
    if not isinstance(kernels, list):
        raise ProtocolError('a reply without its "kernels" list')
    for k in kernels:
        off, size = (k.get("offset"), k.get("size")) if isinstance(k, dict) else (None, None)
        if not (type(off) is int and type(size) is int and 0 <= off and 0 <= size and off + size <= len(data)):
            raise ProtocolError(f"a kernel entry with offset {off!r} and size {size!r}, outside the "
                                f"{len(data)}-byte payload")
        k["cubin"] = data[off:off + size]
    return reply


_CU_EVENT_DISABLE_TIMING = 0x2
_CU_EVENT_INTERPROCESS = 0x4
_IPC_HANDLE_BYTES = 64
_cuda = None


def _libcuda():
    global _cuda
    if _cuda is None:
        _cuda = ctypes.CDLL("libcuda.so.1")
    return _cuda


def _cu(result, what):
    if result:
        name = ctypes.c_char_p()
        _libcuda().cuGetErrorName(result, ctypes.byref(name))
        raise RuntimeError("%s failed: %s" % (what, (name.value or b"CUDA error %d" % result).decode()))


_CU_POINTER_ATTRIBUTE_BUFFER_ID = 7
_CU_DEVICE_ATTRIBUTE_MPS_ENABLED = 133


def _ipc_buffer(name, t, known):
    """(allocation base, CUipcMemHandle bytes, buffer entry without its
    handle index) of a CUDA tensor. known: {buffer id: (base, handle)} of
    allocations seen before (the driver documents the buffer id as unique
    within the process, so a freed and reallocated range gets a new one);
    one driver call for those."""
    if not getattr(t, "is_cuda", False):
        raise ValueError("buffer %r is not a CUDA tensor" % name)
    cuda = _libcuda()
    ptr = t.data_ptr()
    bid = ctypes.c_ulonglong()
    _cu(cuda.cuPointerGetAttribute(ctypes.byref(bid), _CU_POINTER_ATTRIBUTE_BUFFER_ID, ctypes.c_uint64(ptr)),
        "cuPointerGetAttribute (buffer %r)" % name)
    hit = known.get(bid.value)
    if hit is None:
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        _cu(cuda.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr)),
            "cuMemGetAddressRange (buffer %r)" % name)
        handle = ctypes.create_string_buffer(_IPC_HANDLE_BYTES)
        _cu(cuda.cuIpcGetMemHandle(handle, ctypes.c_uint64(base.value)), "cuIpcGetMemHandle (buffer %r)" % name)
        if len(known) >= 4096:
            known.clear()
        hit = known[bid.value] = (base.value, handle.raw)
    base, handle = hit
    entry = {"name": name, "offset": ptr - base}
    if t.dim() == 2:
        if t.stride(1) != 1:
            raise ValueError("buffer %r: rows must be contiguous (stride(1) == 1)" % name)
        entry["stride"] = t.stride(0)
    elif t.dim() != 1 or (t.numel() > 1 and t.stride(0) != 1):
        raise ValueError("buffer %r: expected a 2-D tensor with contiguous rows or a contiguous 1-D one" % name)
    return base, handle, entry


def _spin_us():
    """How long run() polls for its reply before sleeping in recv: as the C
    client, KJIT_SPIN_US (0..1000000) if set, else 2000 us on hosts with 4
    or more CPUs and 0 on smaller ones (a polling client would take the CPU
    the server needs). A reply that comes within it costs no wake-up."""
    v = os.environ.get("KJIT_SPIN_US", "")
    if v.isdigit() and int(v) <= 1000000:
        return int(v)
    return 2000 if (os.cpu_count() or 1) >= 4 else 0


def default_socket():
    """Where `kjit serve` listens by default."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and xdg.startswith("/"):  # a relative one is ignored (the XDG spec), as the C client does
        return os.path.join(xdg, "kjit", "kjit.sock")
    return "/tmp/kjit-%d/kjit.sock" % os.geteuid()


# Every Client of this process, so that a forked child can disown them.
_live = weakref.WeakSet()


def _forget_after_fork():
    """In a forked child: a parent's connection is the parent's. The child
    sharing its stream would interleave frames with the parent's requests
    and take the parent's replies, and its CUDA event is the parent's. Each
    is marked broken (a request raises ProtocolError naming the fork; close()
    closes only the child's copy of the descriptor and destroys no event)."""
    for cl in list(_live):
        cl._lock = threading.RLock()  # another thread may have held it at the fork
        cl._in_request = False
        cl._event = None
        cl._broken = cl._broken or (f"it belongs to process {cl._pid}, of which this process "
                                    f"({os.getpid()}) is a fork")
    _live.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


class Client:
    """One connection; one request at a time (threads sharing a Client take
    turns; one Client per thread lets their requests overlap).

    path: the socket (None: $KJIT_SERVER, else the default socket).
    timeout: seconds the whole of each reply may take (a progress event of
    the request starts it anew; None or 0: forever, as `kjit call --timeout
    0`); also how long the connect waits while the server's backlog is
    full (socket.timeout after it).
    A process forked from the one that opened it does not use it (its
    requests raise ProtocolError): the child opens its own.
    """

    def _connect(self):
        """connect(), waiting while the server's backlog is full (as the C
        client does, up to the timeout): with a timeout the socket is
        non-blocking, and a Unix socket's connect to a full backlog fails at
        once with EAGAIN, which Python does not wait on. socket.timeout
        when the timeout passes first."""
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        pause = 0.001
        while True:
            try:
                self._sock.connect(self.path)
                return
            except BlockingIOError:
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    raise socket.timeout(f"the kjit server at {self.path} accepted no connection within "
                                         f"{self._timeout:g} s (its backlog stayed full)") from None
                time.sleep(pause if deadline is None else min(pause, max(deadline - now, 0.0)))
                pause = min(pause * 2, 0.05)

    def __init__(self, path=None, timeout=600.0):
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
                raise TypeError(f"timeout: expected seconds (a number) or None, got {type(timeout).__name__}")
            if not timeout >= 0 or timeout == float("inf"):
                raise ValueError(f"timeout: {timeout!r} is not a number of seconds >= 0")
        if isinstance(path, os.PathLike):
            path = os.fspath(path)
        if path is not None and (not isinstance(path, str) or not path or "\0" in path):
            raise (TypeError if not isinstance(path, str) else ValueError)(
                f"path: expected a socket path (or None: $KJIT_SERVER, else the default), got {path!r}")
        self.path = path or os.environ.get("KJIT_SERVER") or default_socket()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._timeout = timeout or None
        self._sock.settimeout(self._timeout)
        self._deadline = None  # the request's reply is due by (time.monotonic()), None: no bound
        self._lock = threading.RLock()  # one request at a time on the stream, whatever the threads
        self._in_request = False  # a request of this Client is being exchanged (re-entry is refused)
        self._broken = None  # why the connection is out of step, once it is
        self._partial = False  # bytes of the frame being read have arrived
        self.hello = {}
        self._next_id = 1
        self._event = None  # (CUevent, CUipcEventHandle bytes) of run()
        self._ipc = {}  # run(): {buffer id: (allocation base, CUipcMemHandle bytes)}
        self._mps_of = {}  # run(): {device ordinal: MPS or not}
        self._spin_s = _spin_us() * 1e-6
        self.last_order = None  # run()'s ordering the last time: "event" or "host"
        self._pid = os.getpid()
        _live.add(self)
        try:
            try:
                self._connect()
            except socket.timeout:
                raise
            except OSError as exc:
                # The same exception type, with the socket and the way out named.
                msg = (f"cannot connect to a kjit server at {self.path}: {exc.strerror or exc} "
                       "(start one with `kjit serve`, or set KJIT_SERVER to its socket)")
                raise (type(exc)(exc.errno, msg) if exc.errno else type(exc)(msg)) from exc
            # The server must run as this user or as root: another user's
            # server (at a path they made first) could hand back any kernel.
            _, uid, _ = struct.unpack("iII", self._sock.getsockopt(
                socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("iII")))
            if uid not in (os.geteuid(), 0):
                raise PermissionError(f"the kjit server at {self.path} runs as uid {uid}, neither this "
                                      f"user (uid {os.geteuid()}) nor root: not used (another user's "
                                      "server could hand back any kernel)")
            self.hello, _ = self.request({"type": "hello", "versions": [PROTO_VERSION], "client": "kjit-py"})
            if not isinstance(self.hello.get("limits", {}), dict):
                raise ProtocolError(f"the kjit server at {self.path} sent a hello whose limits are not an object")
        except BaseException:
            self._sock.close()
            raise

    def close(self):
        """Closes the connection; the server then unmaps what run() shared."""
        self._broken = self._broken or "closed by close()"
        self._sock.close()
        if self._event is not None:
            _libcuda().cuEventDestroy_v2(self._event[0])
            self._event = None

    # A copy would share the socket and the CUDA event, and close both twice.
    def __copy__(self):
        raise TypeError("a kjit Client cannot be copied: open another connection")

    def __deepcopy__(self, memo):
        raise TypeError("a kjit Client cannot be copied: open another connection")

    def __reduce__(self):
        raise TypeError("a kjit Client cannot be pickled: it holds a connection of this process")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _read_exact(self, n):
        chunks = []
        while n:
            if self._deadline is not None:
                # One bound on the whole reply: a server trickling bytes, or
                # sending only other requests' frames, is cut off at it.
                left = self._deadline - time.monotonic()
                if left <= 0:
                    raise socket.timeout(f"the kjit server at {self.path} did not answer in time")
                self._sock.settimeout(left)
            try:
                b = self._sock.recv(min(n, 1 << 20))
            except socket.timeout:
                # The same exception, saying which server and how long.
                raise socket.timeout(f"the kjit server at {self.path} did not answer in {self._timeout:g} s "
                                     "(Client(timeout=...) sets the bound)") from None
            except OSError as exc:  # reset, broken pipe: the server went away
                self._broken = "the server closed the connection"
                raise ProtocolError(f"the kjit server at {self.path} closed the connection ({exc})") from exc
            if not b:
                self._broken = "the server closed the connection"
                raise ProtocolError("the kjit server at %s closed the connection" % self.path)
            self._partial = True
            chunks.append(b)
            n -= len(b)
        return b"".join(chunks)

    def _read_frame(self):
        self._partial = False
        try:
            magic, version, flags, jlen, plen = _HEADER.unpack(self._read_exact(_HEADER.size))
            if magic != b"KJIT" or version != PROTO_VERSION or flags:
                raise ProtocolError("not a kjit frame (magic %r, version %d, flags %d)" % (magic, version, flags))
            if jlen < 2 or jlen > _MAX_REPLY_JSON or plen > _MAX_REPLY_PAYLOAD:
                raise ProtocolError("frame lengths out of range: JSON %d, payload %d" % (jlen, plen))
            raw = self._read_exact(jlen)
            try:
                if b"\0" in raw:
                    raise ValueError("a NUL byte in it")
                # UTF-8 only (json.loads of bytes would take UTF-16 or 32 too),
                # no NaN or Infinity (not JSON), bounded recursion.
                header = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
            except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, too deep
                raise ProtocolError(f"the kjit server at {self.path} sent a frame that is not JSON ({exc})") from None
            if not isinstance(header, dict):
                raise ProtocolError(f"the kjit server at {self.path} sent a frame that is not a JSON object")
            return header, self._read_exact(plen) if plen else b""
        except BaseException as exc:
            # A frame read in part (a timeout, Ctrl-C, a bad frame): the next
            # bytes are not a frame's start. A timeout before any byte is
            # harmless (a late reply is passed over by its id).
            if self._partial and self._broken is None:
                self._broken = f"{type(exc).__name__} in the middle of a reply"
            raise

    def request(self, req, payload=b"", on_event=None, check=True):
        """Sends one request (a dict with a "type"; its id is set here) and
        returns (reply, payload bytes). Progress events go to on_event(dict).
        check: raise ServerError on {"ok": false} instead of returning it.
        The client's timeout bounds the whole reply (a progress event starts
        it anew). Requests of several threads on one Client take turns."""
        with self._lock:
            if self._in_request:
                # From an on_event callback: the inner request would take the
                # outer one's frames for another request's and drop them.
                raise RuntimeError("Client.request called from inside a request of the same Client (an on_event "
                                   "callback?): use another Client")
            self._in_request = True
            try:
                return self._request(req, payload, on_event, check)
            finally:
                self._in_request = False
                self._deadline = None
                if self._broken is None:
                    self._sock.settimeout(self._timeout)

    def _arm(self):
        self._deadline = None if self._timeout is None else time.monotonic() + self._timeout

    def _request(self, req, payload, on_event, check):
        if self._broken:
            raise ProtocolError(f"the connection to the kjit server at {self.path} is out of step "
                                f"({self._broken}): open a new Client")
        if not isinstance(req, dict):
            raise TypeError(f"req: expected a dict, got {type(req).__name__}")
        bad = _request_problem(req, "")
        if bad:
            raise ValueError(bad)
        rid = self._next_id
        self._next_id += 1
        # The id first, compact: a run repeated on the same buffers is then
        # the same text after its id, which the server keeps parsed.
        req = {"id": rid, **{k: v for k, v in req.items() if k != "id"}}
        try:
            # UTF-8 as it is (a lone surrogate fails here, not as the
            # server's bad_json naming no field).
            body = json.dumps(req, separators=(",", ":"), allow_nan=False, ensure_ascii=False,
                              default=_json_default).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"the request holds text that is not UTF-8 ({exc.reason})") from None
        # Past the server's limits it answers bad_frame and closes the
        # connection: refuse here and keep it.
        limits = self.hello.get("limits") or {}
        for what, size, key in (("request", len(body), "max_request_json"),
                                ("payload", len(payload), "max_request_payload")):
            cap = limits.get(key)
            if isinstance(cap, int) and size > cap:
                raise ValueError(f"{req.get('type')}: the {what} is {size} bytes, the server takes at most {cap} "
                                 f"(hello's limits.{key})")
        self._arm()
        try:
            # MSG_NOSIGNAL: a server gone away is an error here, not a
            # SIGPIPE for a process that has restored its default action.
            self._sock.sendall(_HEADER.pack(b"KJIT", PROTO_VERSION, 0, len(body), len(payload)) + body + payload,
                               socket.MSG_NOSIGNAL)
        except socket.timeout:
            self._broken = "a timeout while sending a request"
            raise
        except (BrokenPipeError, ConnectionResetError) as e:
            # The server may have refused the connection (`busy`, id null)
            # and closed it before this request went out: that frame is
            # still in the socket; raise it, else the broken pipe. Replies
            # to earlier requests are passed over.
            while True:
                try:
                    header, data = self._read_frame()
                except (OSError, ProtocolError, ValueError):
                    self._broken = "the server closed the connection"
                    raise ProtocolError(f"the kjit server at {self.path} closed the connection ({e})") from e
                if "id" in header and header["id"] is None and header.get("ok") is False:
                    self._broken = "the server closed the connection"
                    if check:
                        raise ServerError(header) from None
                    return header, data
        except OSError as e:  # a closed socket, ...: the connection is done
            self._broken = f"sending failed ({e})"
            raise ProtocolError(f"sending to the kjit server at {self.path} failed ({e})") from e
        if self._spin_s and req.get("type") == "run":
            # Only a run waits on purpose for the device: poll for its reply.
            end = time.perf_counter() + self._spin_s
            while not select.select((self._sock,), (), (), 0)[0] and time.perf_counter() < end:
                pass
        while True:
            header, data = self._read_frame()
            hid = header.get("id", "missing")
            mine = type(hid) is int and hid == rid
            if mine and "event" in header:
                self._arm()  # progress: the bound starts anew
                if on_event:
                    on_event(header)
                continue
            if hid is None and header.get("ok") is not False:
                self._broken = "a reply without an id that is not an error"
                raise ProtocolError(f"the kjit server at {self.path} sent a reply without an id that is not an "
                                    "error")
            # id null: an error about a frame whose id the server could not
            # read, or about the connection itself (then it closes it).
            if mine or hid is None:
                err = header.get("error")
                if hid is None and isinstance(err, dict) and err.get("code") in _CLOSING:
                    self._broken = f"the server ended the connection ({err.get('code')})"
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
        if arch is not None:
            req["arch"] = arch
        return _with_cubins(*self.request(req))

    def kernel(self, op, template, expr, arch=None):
        """One kernel by its template file and name expression (what the C
        library asks when KJIT_SERVER is set); the entry of reply["kernels"]
        gains its "cubin" bytes."""
        req = {"type": "kernel", "op": op, "template": template, "expr": expr}
        if arch is not None:
            req["arch"] = arch
        return _with_cubins(*self.request(req))

    def prewarm(self, ops, hidden, dtype, arch=None, on_event=None):
        req = {"type": "prewarm", "ops": ops, "hidden": hidden, "dtype": dtype}
        if arch is not None:
            req["arch"] = arch
        return self.request(req, on_event=on_event)[0]

    def tune(self, op, hidden, dtype):
        """Tunes (op, hidden, dtype) on the server's GPU (kjit_tune there; its
        context uses the result from then on and stores it). The reply has
        `kjit tune --json`'s fields: fwd, bwd, fwd_us, default_fwd_us, ...
        Takes seconds; concurrent requests for one key share one tuning."""
        return _check_tune_reply(self.request({"type": "tune", "op": op, "hidden": hidden, "dtype": dtype})[0])

    def run_raw(self, req, handles=()):
        """A `run` request as the protocol has it: req the header (op, dir,
        hidden, dtype, n, rows, ..., buffers [{name, handle, offset, stride}],
        event), handles the 64-byte IPC handle records its "handle" and
        "event" fields index, in order."""
        records = []
        for i, h in enumerate(handles):
            if not isinstance(h, (bytes, bytearray, memoryview)):
                # bytes(64) would be 64 zero bytes, not a handle.
                raise TypeError(f"handles[{i}]: expected a 64-byte IPC handle record, got {type(h).__name__}")
            records.append(bytes(h))
            if len(records[-1]) != _IPC_HANDLE_BYTES:
                raise ValueError(f"handles[{i}]: {len(records[-1])} bytes, IPC handles are {_IPC_HANDLE_BYTES}")
        req = dict(req, type="run")
        return self.request(req, b"".join(records))[0]

    def run(self, op, buffers, dir="fwd", stream=None, order="auto", **fields):
        """Runs op on the server's GPU over CUDA tensors of this process.

        buffers: {name: tensor} (None values skipped) with the names the op
        takes (docs/PROTOCOL.md): 2-D tensors with contiguous rows (their row
        stride is sent) or contiguous 1-D ones (weight, index, t). fields: the
        other request fields, none inferred: hidden, dtype, n, rows,
        param_dtype, index_dtype, eps, ... Each tensor's allocation is shared
        with cuIpcGetMemHandle (its offset there from cuMemGetAddressRange),
        so tensors must come from cudaMalloc'd memory (torch's default
        allocator; not expandable_segments). An interprocess event recorded
        on `stream` (default: torch's current stream) orders the server's
        work after this process's; the call returns once the op is done on
        the device, with the reply ({"ok": True, "us": the server's time}).
        order="host" instead waits here for `stream`'s work and sends the run
        without the event: the same ordering, cheaper where the GPU
        time-slices between processes (no MPS: ~250 us for the event, see
        docs/PROTOCOL.md), dearer under MPS. order="auto" (the default):
        "event" when the device's contexts are shared through MPS
        (CU_DEVICE_ATTRIBUTE_MPS_ENABLED), else "host".
        The server keeps the allocations mapped until this client closes:
        keep their memory allocated until then. One device: the current one.
        """
        if order not in ("auto", "event", "host"):
            raise ValueError("order must be 'auto', 'event' or 'host', not %r" % (order,))
        try:
            import torch  # initializes CUDA: the current context is then torch's
        except ImportError:
            raise ImportError("kjit.client.Client.run takes torch tensors and needs torch; without it, "
                              "run_raw sends a run over device pointers you share yourself") from None

        if stream is None:
            stream = torch.cuda.current_stream()
        # The shared event, the IPC handles and last_order belong to one run
        # at a time: threads sharing this Client take turns for the whole
        # of it (the event recorded by one must not be re-recorded by
        # another before the server has waited on it).
        with self._lock:
            return self._run_locked(op, buffers, dir, stream, order, fields, torch)

    def _run_locked(self, op, buffers, dir, stream, order, fields, torch):
        if order == "auto":
            order = "event" if self._mps(stream.device.index) else "host"
        self.last_order = order
        handles, index_of, entries = [], {}, []
        for name, t in buffers.items():
            if t is None:
                continue
            base, handle, entry = _ipc_buffer(name, t, self._ipc)
            if base not in index_of:
                index_of[base] = len(handles)
                handles.append(handle)
            entry["handle"] = index_of[base]
            entries.append(entry)
        if order == "host":
            stream.synchronize()
            return self.run_raw(dict(fields, op=op, dir=dir, buffers=entries), handles)
        cuda = _libcuda()
        if self._event is None:
            ev = ctypes.c_void_p()
            _cu(cuda.cuEventCreate(ctypes.byref(ev), _CU_EVENT_INTERPROCESS | _CU_EVENT_DISABLE_TIMING),
                "cuEventCreate")
            handle = ctypes.create_string_buffer(_IPC_HANDLE_BYTES)
            _cu(cuda.cuIpcGetEventHandle(handle, ev), "cuIpcGetEventHandle")
            self._event = (ev, handle.raw)
        _cu(cuda.cuEventRecord(self._event[0], ctypes.c_void_p(stream.cuda_stream)), "cuEventRecord")
        req = dict(fields, op=op, dir=dir, buffers=entries, event=len(handles))
        return self.run_raw(req, handles + [self._event[1]])

    def _mps(self, ordinal):
        """Whether the device's contexts are shared through MPS (an older
        driver that does not say: assumed so, the event is then used)."""
        if ordinal not in self._mps_of:
            cuda = _libcuda()
            dev, v = ctypes.c_int(), ctypes.c_int()
            ok = (cuda.cuDeviceGet(ctypes.byref(dev), ordinal or 0) == 0
                  and cuda.cuDeviceGetAttribute(ctypes.byref(v), _CU_DEVICE_ATTRIBUTE_MPS_ENABLED, dev) == 0)
            self._mps_of[ordinal] = bool(v.value) if ok else True
        return self._mps_of[ordinal]

    def shutdown(self):
        return self.request({"type": "shutdown"})[0]
