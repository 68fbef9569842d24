"""CPU tests of the Python binding: library loading, the ctypes mirror of
kjit.h against the C compiler's layout, status mapping, the torch-free core's
checks, and (when torch is importable) the torch layer's refusals and fake
implementations. Needs no GPU. KJIT_LIBRARY points at the built library."""

import ctypes
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bindings" / "python"))

if os.environ.get("KJIT_TEST_WITHOUT_TORCH"):
    sys.modules["torch"] = None  # import torch now raises ImportError

import kjit  # noqa: E402
from kjit import _lib, core  # noqa: E402

try:
    import torch
except ImportError:
    torch = None


class Loading(unittest.TestCase):
    def test_loads_from_kjit_library(self):
        path = core.library_path()
        self.assertTrue(Path(path).exists(), path)
        if os.environ.get("KJIT_LIBRARY"):  # a relative one is taken against the working directory
            self.assertEqual(path, os.path.abspath(os.environ["KJIT_LIBRARY"]))

    def test_search_order(self):
        env = dict(os.environ)
        try:
            os.environ["KJIT_LIBRARY"] = "/nonexistent/libkjit.so"
            self.assertEqual(_lib.candidates(), [("KJIT_LIBRARY", "/nonexistent/libkjit.so")])
            del os.environ["KJIT_LIBRARY"]
            where = [w for w, _ in _lib.candidates()]
            self.assertEqual(where[-1], "the loader path")
        finally:
            os.environ.clear()
            os.environ.update(env)

    def test_missing_library_names_every_place_tried(self):
        code = ("import kjit\n"
                "try:\n    kjit.core.op_names()\n"
                "except kjit.LibraryError as e:\n    print('LibraryError', e)\n")
        env = dict(os.environ, KJIT_LIBRARY="/nonexistent/libkjit.so",
                   PYTHONPATH=str(ROOT / "bindings" / "python"))
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True).stdout
        self.assertIn("LibraryError", out)
        self.assertIn("/nonexistent/libkjit.so", out)
        self.assertIn("KJIT_LIBRARY", out)

    def test_missing_library_without_kjit_library(self):
        # No KJIT_LIBRARY, no copy beside the package, none on the loader
        # path: the message names the package directory and ldconfig.
        code = ("import kjit\n"
                "try:\n    kjit.core.op_names()\n"
                "except kjit.LibraryError as e:\n    print('LibraryError', e)\n")
        env = {k: v for k, v in os.environ.items() if k not in ("KJIT_LIBRARY", "LD_LIBRARY_PATH")}
        env["PYTHONPATH"] = str(ROOT / "bindings" / "python")
        if any(os.path.exists(ROOT / "bindings" / "python" / "kjit" / n) for n in ("libkjit.so", "libkjit.so.0")):
            self.skipTest("a libkjit copy lies beside the package")
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True).stdout
        if "LibraryError" not in out:
            self.skipTest("a libkjit is installed on the loader path")
        self.assertIn(f"no libkjit.so in {ROOT / 'bindings' / 'python' / 'kjit'}", out)
        self.assertIn("ldconfig", out)

    def test_a_library_that_does_not_load_is_not_missing(self):
        code = ("import kjit\n"
                "try:\n    kjit.core.op_names()\n"
                "except kjit.LibraryError as e:\n    print('LibraryError', e)\n")
        with tempfile.NamedTemporaryFile(suffix=".so") as f:
            f.write(b"not an ELF file")
            f.flush()
            env = dict(os.environ, KJIT_LIBRARY=f.name, PYTHONPATH=str(ROOT / "bindings" / "python"))
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                 text=True, check=True).stdout
        self.assertIn("libkjit found but could not be loaded", out)
        self.assertIn(f.name, out)
        self.assertNotIn("not found", out)

    def _load_error(self, library, cwd=None):
        code = ("import kjit\n"
                "try:\n    print(kjit.core.op_names())\n"
                "except kjit.LibraryError as e:\n    print('LibraryError', e)\n")
        env = dict(os.environ, KJIT_LIBRARY=library, PYTHONPATH=str(ROOT / "bindings" / "python"))
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, cwd=cwd,
                              text=True, check=True).stdout

    def test_a_bare_library_name_is_a_file_here(self):
        # Not the loader's search: ./libkjit.so in the working directory.
        lib = core.library_path()
        out = self._load_error(os.path.basename(lib), cwd=os.path.dirname(lib))
        self.assertIn("timestep_sinusoid", out)

    def test_a_directory_or_another_library_is_named_as_such(self):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d, True)
        out = self._load_error(d)
        self.assertIn(f"{d}: a directory, not the library file", out)
        self.assertNotIn("next to the package", out)  # not tried with KJIT_LIBRARY set
        import _ctypes  # a shared object that loads, and is not libkjit
        out = self._load_error(_ctypes.__file__)
        self.assertIn("is not libkjit (no kjit_op_count)", out)
        self.assertNotIn("missing dependency", out)

    def test_a_copy_beside_the_package_is_loaded_without_find_library(self):
        # find_library runs ldconfig and a compiler in subprocesses (tens of
        # ms, forked from a CUDA process at the first op): it used to run
        # before the copy beside the package was even tried.
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d, True)
        shutil.copytree(ROOT / "bindings" / "python" / "kjit", os.path.join(d, "kjit"))
        shutil.copy(core.library_path(), os.path.join(d, "kjit", "libkjit.so"))
        code = ("import ctypes.util\ncalls = []\n"
                "ctypes.util.find_library = lambda name: calls.append(name)\n"
                "import kjit\nkjit.core.op_names()\n"
                "print('path', kjit.core.library_path(), 'calls', calls)\n")
        env = {k: v for k, v in os.environ.items() if k != "KJIT_LIBRARY"}
        env["PYTHONPATH"] = d
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True).stdout
        self.assertIn(f"path {os.path.join(d, 'kjit', 'libkjit.so')} calls []", out)

    def test_client_without_a_server_names_the_socket(self):
        from kjit import client
        with self.assertRaisesRegex(FileNotFoundError,
                                    "kjit server at /nonexistent/kjit.sock: .*kjit serve"):
            client.Client("/nonexistent/kjit.sock")

    def test_core_works_without_torch(self):
        code = ("import sys\nsys.modules['torch'] = None\nimport kjit\n"
                "assert not hasattr(kjit, 'norm_modulate')\n"
                "try:\n    kjit.norm_modulate\n"
                "except AttributeError as e:\n    assert 'needs PyTorch' in str(e), e\n"
                "print(kjit.core.op_names())\n")
        env = dict(os.environ, PYTHONPATH=str(ROOT / "bindings" / "python"))
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True).stdout
        self.assertIn("timestep_sinusoid", out)

    def test_contexts_and_clients_are_not_copied(self):
        # A copy shared the handle and destroyed it twice: a crash at exit.
        import copy
        import pickle
        from kjit import client
        c = core.Context(None, cache_dir="")
        self.addCleanup(c.close)
        for f in (copy.copy, copy.deepcopy, pickle.dumps):
            with self.subTest(f=f.__name__), self.assertRaisesRegex(TypeError, "kjit Context cannot be"):
                f(c)
        cl = client.Client.__new__(client.Client)  # no server needed to refuse a copy
        for f in (copy.copy, copy.deepcopy, pickle.dumps):
            with self.subTest(f=f.__name__), self.assertRaisesRegex(TypeError, "kjit Client cannot be"):
                f(cl)

    def test_a_torch_that_fails_to_import_is_named(self):
        # A torch whose import fails (a missing libcudnn) is not "not installed";
        # one without torch.library.custom_op (before 2.4) is named, and kjit.core
        # still imports.
        stub = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, stub)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([stub, str(ROOT / "bindings" / "python")]))
        check = ("import kjit\ntry:\n    kjit.norm_modulate\n"
                 "except AttributeError as e:\n    print(e)\nprint(kjit.core.op_names()[0])\n")
        for body, want in (("raise ImportError('libcudnn.so.9: cannot open shared object file')",
                            "failed to import: libcudnn.so.9"),
                           # A torch whose CUDA libraries are missing fails with an
                           # OSError from its ctypes loads, not an ImportError.
                           ("raise OSError('libtorch_cuda.so: cannot open shared object file')",
                            "failed to import: libtorch_cuda.so"),
                           ("import types\n__version__ = '2.3.1'\nlibrary = types.SimpleNamespace()",
                            "PyTorch 2.4 or later (torch.library.custom_op); this is 2.3.1")):
            with self.subTest(want=want):
                Path(stub, "torch.py").write_text(body + "\n")
                r = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn(want, r.stdout)

    def test_missing_symbol_is_a_library_error(self):
        lib = _lib.load()
        with self.assertRaises(AttributeError):
            lib.not_a_kjit_function  # noqa: B018
        cdll = ctypes.CDLL(None)  # the process itself exports no kjit_*
        with self.assertRaisesRegex(_lib.LibraryError, "kjit_norm_modulate_fwd"):
            _lib.Library(cdll, "<process>").kjit_norm_modulate_fwd  # noqa: B018


def in_child(test, fn, timeout=20):
    """Runs fn() in a forked child; an exception there fails the test with
    its text, and a child that has not finished within timeout seconds (a
    lock inherited held, in the fork hooks or in fn) is killed and fails it."""
    import select
    import signal
    import traceback
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        code = 0
        try:
            fn()
        except BaseException:  # noqa: BLE001 - reported to the parent
            os.write(w, traceback.format_exc().encode())
            code = 1
        os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        if not select.select([f], [], [], timeout)[0]:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            test.fail(f"the child did not finish within {timeout} s (it waited on a lock held at the fork?)")
        why = f.read().decode()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        test.fail(f"the child died of signal {os.WTERMSIG(status)}")
    test.assertEqual(os.WEXITSTATUS(status), 0, why)


class held_elsewhere:
    """A with-block in which another thread holds lock (as a thread of the
    process may at a fork: the child has no such thread, and a lock that
    remembers its owner by thread id would not be re-entered by mistake)."""

    def __init__(self, lock):
        import threading
        self.lock, self.taken, self.go = lock, threading.Event(), threading.Event()
        self.t = threading.Thread(target=self._hold, daemon=True)

    def _hold(self):
        with self.lock:
            self.taken.set()
            self.go.wait(30)

    def __enter__(self):
        self.t.start()
        assert self.taken.wait(10)

    def __exit__(self, *exc):
        self.go.set()
        self.t.join(10)


class Fork(unittest.TestCase):
    """A process forked with kjit objects open (a trainer's data-loader
    workers): the child does not use the parent's contexts or connections,
    and says so, instead of calling into an inherited CUDA context (or a
    lock another thread held at the fork)."""

    @unittest.skipUnless(hasattr(os, "register_at_fork"), "no os.register_at_fork")
    def test_a_context_is_not_used_in_a_forked_child(self):
        c = core.Context(None, cache_dir="")
        self.addCleanup(c.close)
        arch, parent = c.arch, os.getpid()

        def child():
            for use in (lambda: c.handle, lambda: c.arch, lambda: c.cache_dir):
                try:
                    use()
                except RuntimeError as e:
                    assert f"belongs to process {parent}, of which this process ({os.getpid()}) is a fork" in \
                        str(e), e
                else:
                    raise AssertionError("the parent's context was used")
            c.close()  # not destroyed here: nothing to do, and no wait on the lock held at the fork
            c.close()
            own = core.Context(None, cache_dir="")  # a compile-only context of its own works
            assert own.arch == arch, own.arch
            own.close()

        with held_elsewhere(c._close_lock):  # as if another thread were closing it at the fork
            in_child(self, child)
        self.assertEqual(c.arch, arch)  # the parent's context is untouched

    @unittest.skipUnless(hasattr(os, "register_at_fork"), "no os.register_at_fork")
    def test_no_device_context_after_a_parent_had_one(self):
        # The child of a process with a device context cannot start CUDA: a
        # device Context is refused there before the driver is asked. (No
        # GPU here: a compile-only context stands in for the device one.)
        closed = core.Context(None, cache_dir="")
        closed.close()  # a closed context is not disowned: it stays "closed"
        core._cuda_started(os.getpid())  # as a device Context does, even one closed since
        self.addCleanup(setattr, core, "_cuda_pid", None)

        def child():
            try:
                core.Context(0, cache_dir="")
            except RuntimeError as e:
                assert f"is a fork of process {os.getppid()}, which had a kjit Context on a CUDA device" in str(e), e
            else:
                raise AssertionError("a device Context was made")
            try:
                closed.handle
            except ValueError as e:
                assert "closed" in str(e), e
            core.Context(None, cache_dir="").close()
            if torch is not None:
                import kjit.ops
                try:
                    kjit.ops.context(0)
                except RuntimeError as e:
                    assert "forked after CUDA was initialized" in str(e), e
                else:
                    raise AssertionError("kjit.context made a context")

        in_child(self, child)


class ClientWithoutTorch(unittest.TestCase):
    @unittest.skipUnless(torch is None, "torch is installed")
    def test_run_names_what_it_needs(self):
        from kjit.client import Client
        with self.assertRaisesRegex(ImportError, "needs torch.*run_raw"):
            Client.run(object.__new__(Client), "norm_modulate", {})


class ClientEdges(unittest.TestCase):
    """kjit.client against a scripted fake server (no kjit serve, no GPU):
    a dead server is a ProtocolError, a reply cut by a timeout leaves the
    connection refused rather than out of step, requests past the server's
    limits and values JSON cannot carry are refused before sending."""

    HELLO = {"ok": True, "version": 1, "limits": {"max_request_json": 256, "max_request_payload": 128}}

    def serve(self, script):
        """A fake server on a fresh socket running script(conn, read_req,
        send) in a thread; returns the socket path."""
        import socket
        import struct
        import threading
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d, True)
        path = os.path.join(d, "s.sock")
        ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        ls.bind(path)
        ls.listen(1)
        hdr = struct.Struct("<4sHHII")

        def read_req(conn):
            buf = b""
            while len(buf) < hdr.size:
                buf += conn.recv(hdr.size - len(buf))
            _, _, _, jlen, plen = hdr.unpack(buf)
            body = b""
            while len(body) < jlen + plen:
                body += conn.recv(jlen + plen - len(body))
            import json
            return json.loads(body[:jlen])

        def frame(obj):
            import json
            body = json.dumps(obj).encode()
            return hdr.pack(b"KJIT", 1, 0, len(body), 0) + body

        def run():
            conn, _ = ls.accept()
            try:
                req = read_req(conn)
                conn.sendall(frame(dict(self.HELLO, id=req["id"])))
                script(conn, lambda: read_req(conn), frame)
            except OSError:
                pass
            finally:
                conn.close()
                ls.close()

        t = threading.Thread(target=run, daemon=True)
        t.start()
        self.addCleanup(t.join, 5)
        return path

    def serve_once(self, reply):
        """serve() with a script that reads one request, answers it with
        reply (raw bytes, or an object framed as the server frames it) and
        holds the connection a moment; returns the socket path."""
        def script(conn, read, frame):
            read()
            conn.sendall(reply if isinstance(reply, bytes) else frame(reply))
            import time
            time.sleep(0.3)

        return self.serve(script)

    def test_a_server_gone_is_a_protocol_error(self):
        from kjit import client
        path = self.serve(lambda conn, read, frame: None)  # closes after hello
        with client.Client(path, timeout=5) as c:
            import time
            time.sleep(0.2)
            with self.assertRaisesRegex(client.ProtocolError, "closed the connection"):
                c.ping()
            # The next send meets a broken pipe: the same exception type
            # (before: BrokenPipeError, without the socket's path).
            with self.assertRaisesRegex(client.ProtocolError, "kjit server at .*s.sock"):
                c.ping()

    def test_a_reply_cut_by_a_timeout_leaves_no_stale_bytes(self):
        from kjit import client
        import time

        def script(conn, read, frame):
            req = read()
            f = frame({"id": req["id"], "ok": True, "pad": "x" * 4000})
            conn.sendall(f[:100])
            time.sleep(1.0)
            conn.sendall(f[100:])
            time.sleep(0.5)

        path = self.serve(script)
        c = client.Client(path, timeout=0.3)
        self.addCleanup(c.close)
        # The socket's own TimeoutError, naming the server and the bound.
        with self.assertRaisesRegex(TimeoutError, r"kjit server at .*s\.sock did not answer in 0\.3 s"):
            c.ping()
        time.sleep(1.2)
        # Before: "not a kjit frame" from the reply's leftover bytes, forever.
        with self.assertRaisesRegex(client.ProtocolError, "out of step .*TimeoutError.*new Client"):
            c.ping()

    def test_limits_nan_and_handles_are_checked_before_sending(self):
        from kjit import client

        def script(conn, read, frame):
            req = read()
            conn.sendall(frame({"id": req["id"], "ok": True}))

        path = self.serve(script)
        with client.Client(path, timeout=5) as c:
            with self.assertRaisesRegex(ValueError, "the request is .* bytes, the server takes at most 256"):
                c.request({"type": "ping", "x": "a" * 300})
            with self.assertRaisesRegex(ValueError, "the payload is 192 bytes, the server takes at most 128"):
                c.run_raw({"op": "x"}, handles=[bytes(64)] * 3)
            with self.assertRaisesRegex(ValueError, "hidden: NaN and infinity"):
                c.compile("timestep_sinusoid", float("nan"), "bf16")
            with self.assertRaisesRegex(ValueError, r"eps: NaN and infinity"):
                c.request({"type": "run", "eps": float("inf")})
            with self.assertRaisesRegex(TypeError, r"handles\[0\]: expected a 64-byte"):
                c.run_raw({"op": "x"}, handles=[64])
            with self.assertRaisesRegex(ValueError, r"handles\[1\]: 3 bytes"):
                c.run_raw({"op": "x"}, handles=[bytes(64), b"abc"])
            with self.assertRaisesRegex(TypeError, "req: expected a dict, got list"):
                c.request([("type", "ping")])
            # None of them cost the connection.
            self.assertTrue(c.ping()["ok"])

    def test_path_objects_and_integer_types_are_taken(self):
        from kjit import client
        got = []

        def script(conn, read, frame):
            req = read()
            got.append(req)
            conn.sendall(frame({"id": req["id"], "ok": True}))

        import numbers

        class Int:  # an integer that is not an int (numpy's, ...)
            def __index__(self):
                return 256

        numbers.Integral.register(Int)  # as numpy registers its integers

        class Indexable:  # __index__ alone (a one-element tensor has it): not an integer
            def __index__(self):
                return 7

        path = self.serve(script)
        with client.Client(Path(path), timeout=5) as c:
            self.assertEqual(c.path, path)
            c.request({"type": "compile", "hidden": Int()})
            with self.assertRaisesRegex(TypeError, "type object cannot be sent"):
                c.request({"type": "compile", "hidden": object()})
            with self.assertRaisesRegex(TypeError, "type Indexable cannot be sent"):
                c.request({"type": "compile", "hidden": Indexable()})
        self.assertEqual(got[0]["hidden"], 256)

    def test_full_backlog_waits_for_the_timeout(self):
        # A server whose backlog is full (it accepts nothing): the client
        # waits up to its timeout, as the C client does, and then says so;
        # it failed at once with BlockingIOError ("start one with kjit
        # serve"). With room made before the timeout, it connects.
        import socket
        import threading
        import time
        from kjit.client import Client, ProtocolError
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d, True)
        path = os.path.join(d, "s.sock")
        ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(ls.close)
        ls.bind(path)
        ls.listen(0)
        fill = []
        self.addCleanup(lambda: [f.close() for f in fill])
        for _ in range(64):
            f = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            f.setblocking(False)
            try:
                f.connect(path)
            except BlockingIOError:
                f.close()
                break
            fill.append(f)
        else:
            self.skipTest("the backlog never filled")
        t0 = time.monotonic()
        with self.assertRaisesRegex(socket.timeout, "accepted no connection within 0.4 s"):
            Client(path, timeout=0.4)
        self.assertGreaterEqual(time.monotonic() - t0, 0.35)
        # Room made after 0.2 s: the connect goes through (the hello then
        # waits for a server that never answers: the timeout of the reply).
        threading.Timer(0.2, lambda: ls.accept()[0].close()).start()
        with self.assertRaises((ProtocolError, socket.timeout, OSError)) as cm:
            Client(path, timeout=1)
        self.assertNotIn("accepted no connection", str(cm.exception))

    def test_timeout_is_checked_before_a_socket_is_made(self):
        from kjit import client
        before = len(os.listdir("/proc/self/fd"))
        kept = []
        for bad in (-1, float("nan"), float("inf")):
            with self.assertRaisesRegex(ValueError, "timeout"):
                client.Client("/nonexistent/kjit.sock", timeout=bad)
        for bad in ("5", True):
            try:
                client.Client("/nonexistent/kjit.sock", timeout=bad)
            except TypeError as e:
                kept.append(e)
                self.assertIn("timeout", str(e))
        self.assertEqual(len(kept), 2)
        self.assertEqual(len(os.listdir("/proc/self/fd")), before)
        # 0: wait forever, as kjit call --timeout 0 (it was non-blocking).
        with self.assertRaises(FileNotFoundError):
            client.Client("/nonexistent/kjit.sock", timeout=0)

    def test_arch_is_sent_whenever_given(self):
        from kjit import client
        got = []

        def script(conn, read, frame):
            req = read()
            got.append(req)
            conn.sendall(frame({"id": req["id"], "ok": False, "error": {"code": "bad_request", "message": "arch"}}))

        path = self.serve(script)
        with client.Client(path, timeout=5) as c:
            with self.assertRaises(client.ServerError):
                c.compile("timestep_sinusoid", 256, "bf16", arch="")
        self.assertEqual(got[0].get("arch"), "")  # before: dropped, the default compiled


    def test_garbage_replies_are_protocol_errors(self):
        """A frame that is not JSON, not an object, not UTF-8, or a reply
        whose kernels do not describe its payload: ProtocolError (before:
        AttributeError, KeyError, TypeError, JSONDecodeError...), and a
        ServerError whose error is not an object still says something."""
        from kjit import client
        import struct
        hdr = struct.Struct("<4sHHII")

        def raw(body):
            return hdr.pack(b"KJIT", 1, 0, len(body), 0) + body

        cases = [
            (raw(b"this is not json"), "not JSON"),
            (raw(b"[1, 2, 3]"), "not a JSON object"),
            (raw(b'"a string"'), "not a JSON object"),
            (raw(b'{"id": 2, "ok": true, "x": "\xff\xfe"}'), "not JSON"),
        ]
        for body, want in cases:
            path = self.serve_once(body)
            with client.Client(path, timeout=5) as c:
                with self.assertRaisesRegex(client.ProtocolError, want):
                    c.ping()
                # The connection is then out of step, and says so.
                with self.assertRaisesRegex(client.ProtocolError, "out of step"):
                    c.ping()

        for reply, want in [({"ok": True}, 'without its "kernels"'),
                            ({"ok": True, "kernels": [{"offset": "a", "size": 4}]}, "offset 'a'"),
                            ({"ok": True, "kernels": [{"offset": 0, "size": 4}]}, "outside the 0-byte payload")]:
            def script(conn, read, frame, reply=reply):
                req = read()
                conn.sendall(frame(dict(reply, id=req["id"])))

            path = self.serve(script)
            with client.Client(path, timeout=5) as c:
                with self.assertRaisesRegex(client.ProtocolError, want):
                    c.compile("timestep_sinusoid", 256, "bf16")

        def script(conn, read, frame):
            req = read()
            conn.sendall(frame({"id": req["id"], "ok": False, "error": "boom"}))

        path = self.serve(script)
        with client.Client(path, timeout=5) as c:
            with self.assertRaisesRegex(client.ServerError, "boom"):
                c.ping()

    def test_the_timeout_bounds_the_whole_reply(self):
        """One byte every 0.25 s, or only other requests' frames: cut off at
        the 1 s deadline (before: each recv had its own second, 16.8 s)."""
        from kjit import client
        import time

        def trickle(conn, read, frame):
            req = read()
            for b in frame({"id": req["id"], "ok": True, "pad": "x" * 40}):
                conn.sendall(bytes([b]))
                time.sleep(0.25)

        def others(conn, read, frame):
            read()
            for _ in range(30):
                conn.sendall(frame({"id": 999999, "ok": True}))
                time.sleep(0.2)

        for script in (trickle, others):
            path = self.serve(script)
            c = client.Client(path, timeout=1)
            self.addCleanup(c.close)
            t0 = time.monotonic()
            with self.assertRaises(TimeoutError):
                c.ping()
            self.assertLess(time.monotonic() - t0, 1.5, script.__name__)

    def test_id_null_errors_and_replies_without_an_id(self):
        """bad_json with a null id answers the request and keeps the
        connection; timeout (a closing code) ends it; a reply without an id,
        or with a null one that says ok, is not taken for ours."""
        from kjit import client

        def script(conn, read, frame):
            read()
            conn.sendall(frame({"id": None, "ok": False, "error": {"code": "bad_json", "message": "x"}}))
            req = read()
            conn.sendall(frame({"id": req["id"], "ok": True}))
            read()
            conn.sendall(frame({"id": None, "ok": False, "error": {"code": "timeout", "message": "idle"}}))

        path = self.serve(script)
        with client.Client(path, timeout=5) as c:
            with self.assertRaisesRegex(client.ServerError, "bad_json"):
                c.ping()
            self.assertTrue(c.ping()["ok"])
            with self.assertRaisesRegex(client.ServerError, "timeout"):
                c.ping()
            with self.assertRaisesRegex(client.ProtocolError, r"out of step .*ended the connection \(timeout\)"):
                c.ping()
        for reply in ({"ok": True}, {"id": None, "ok": True}):
            path = self.serve_once(reply)
            with client.Client(path, timeout=5) as c:
                with self.assertRaisesRegex(client.ProtocolError, "without an id|closed the connection"):
                    c.ping()

    def test_bad_requests_are_refused_before_sending(self):
        """What the server would call bad_json (a NUL, too deep, a lone
        surrogate) is a ValueError naming it, and costs nothing; a request
        after close() is a ProtocolError."""
        from kjit import client
        seen = []

        def script(conn, read, frame):
            req = read()
            seen.append(req["type"])
            conn.sendall(frame({"id": req["id"], "ok": True}))

        path = self.serve(script)
        c = client.Client(path, timeout=5)
        with self.assertRaisesRegex(ValueError, "op: a NUL character"):
            c.request({"type": "ping", "op": "a\0b"})
        with self.assertRaisesRegex(ValueError, "nested deeper than 8"):
            c.request({"type": "ping", "a": [[[[[[[[1]]]]]]]]})
        with self.assertRaisesRegex(ValueError, "not UTF-8"):
            c.request({"type": "ping", "s": "\ud800"})
        self.assertTrue(c.ping()["ok"])
        self.assertEqual(seen, ["ping"])
        c.close()
        with self.assertRaisesRegex(client.ProtocolError, "closed by close"):
            c.ping()

    def test_replies_json_does_not_have(self):
        """NaN, UTF-16 text, a NUL byte: ProtocolError; a tune reply without
        its configs: ProtocolError naming the field."""
        from kjit import client
        import struct
        hdr = struct.Struct("<4sHHII")

        def raw(body):
            return hdr.pack(b"KJIT", 1, 0, len(body), 0) + body

        for body in (b'{"id": 2, "ok": true, "us": NaN}', '{"id": 2, "ok": true}'.encode("utf-16"),
                     b'{"id": 2, "ok": true, "x": "a\x00"}'):
            path = self.serve_once(raw(body))
            with client.Client(path, timeout=5) as c:
                with self.assertRaisesRegex(client.ProtocolError, "not JSON"):
                    c.ping()

        def script(conn, read, frame):
            req = read()
            conn.sendall(frame({"id": req["id"], "ok": True, "fwd": {"rpc": "8"}}))

        path = self.serve(script)
        with client.Client(path, timeout=5) as c:
            with self.assertRaisesRegex(client.ProtocolError, "fwd.rpc is not a whole number"):
                c.tune("norm_modulate", 5376, "bf16")

    def test_a_request_from_an_event_callback_is_refused(self):
        """on_event calling back into the same Client would take the outer
        request's frames for another's: a RuntimeError, and the outer
        request still gets its reply."""
        from kjit import client

        def script(conn, read, frame):
            req = read()
            conn.sendall(frame({"id": req["id"], "event": "progress", "done": 1}))
            conn.sendall(frame({"id": req["id"], "ok": True, "done": 2}))

        path = self.serve(script)
        seen = []
        with client.Client(path, timeout=5) as c:
            def on_event(ev):
                with self.assertRaisesRegex(RuntimeError, "inside a request of the same Client"):
                    c.ping()
                seen.append(ev["done"])

            reply = c.prewarm(["timestep_sinusoid"], [256], ["bf16"], on_event=on_event)
        self.assertEqual((seen, reply.get("done")), ([1], 2))

    def test_threads_take_turns(self):
        """Two threads on one Client: each gets its own reply (before: the
        frames interleaved, "not a kjit frame" on one, a timeout on the
        other)."""
        from kjit import client
        import threading

        def script(conn, read, frame):
            for _ in range(40):
                req = read()
                conn.sendall(frame({"id": req["id"], "ok": True, "pad": "y" * 3000}))

        path = self.serve(script)
        errors = []
        with client.Client(path, timeout=5) as c:
            def work():
                try:
                    for _ in range(20):
                        self.assertTrue(c.ping()["ok"])
                except Exception as e:  # noqa: BLE001 - collected, then asserted
                    errors.append(e)

            ts = [threading.Thread(target=work) for _ in range(2)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(30)
        self.assertEqual(errors, [])

    def test_a_forked_child_does_not_use_the_parents_connection(self):
        """A child forked with a Client open (a data-loader worker) shared the
        parent's stream: its request went to the server and its reply could
        be read by either process. Now the child's request raises, sends
        nothing, and the parent's next request gets its own reply."""
        from kjit import client
        seen = []

        def script(conn, read, frame):
            req = read()  # the parent's ping: the child's must not come
            seen.append(req["type"])
            conn.sendall(frame({"id": req["id"], "ok": True}))

        path = self.serve(script)
        with client.Client(path, timeout=5) as c:
            parent = os.getpid()

            def child():
                try:
                    c.ping()
                except client.ProtocolError as e:
                    assert f"belongs to process {parent}, of which this process" in str(e), e
                else:
                    raise AssertionError("the child's ping was sent")
                c.close()

            with held_elsewhere(c._lock):  # a request in flight on another thread at the fork
                in_child(self, child)
            self.assertTrue(c.ping()["ok"])
        self.assertEqual(seen, ["ping"])

    def test_a_hello_with_bad_limits_is_a_protocol_error(self):
        from kjit import client
        old = self.HELLO
        self.HELLO = dict(old, limits=[1])
        try:
            path = self.serve(lambda conn, read, frame: None)
            with self.assertRaisesRegex(client.ProtocolError, "limits are not an object"):
                client.Client(path, timeout=5)
        finally:
            self.HELLO = old

    def test_default_socket_ignores_a_relative_xdg_runtime_dir(self):
        from kjit import client
        env = dict(os.environ)
        self.addCleanup(lambda: (os.environ.clear(), os.environ.update(env)))
        os.environ["XDG_RUNTIME_DIR"] = "/run/user/4242"
        self.assertEqual(client.default_socket(), "/run/user/4242/kjit/kjit.sock")
        os.environ["XDG_RUNTIME_DIR"] = "rel"  # as the C client: the XDG spec ignores it
        self.assertEqual(client.default_socket(), "/tmp/kjit-%d/kjit.sock" % os.geteuid())

    def test_bad_paths_are_refused(self):
        from kjit import client
        for bad, exc in (("", ValueError), ("/tmp/a\0b", ValueError), (b"/tmp/s", TypeError), (5, TypeError)):
            with self.assertRaisesRegex(exc, "path"):
                client.Client(bad, timeout=1)


class Packaging(unittest.TestCase):
    """The in-tree PEP 517 / 660 backend (bindings/python/_build): the wheel
    holds the package, the editable wheel a .pth naming the source folder."""

    def backend(self):
        sys.path.insert(0, str(ROOT / "bindings" / "python" / "_build"))
        self.addCleanup(sys.path.remove, str(ROOT / "bindings" / "python" / "_build"))
        import kjit_build
        return kjit_build

    def test_wheel_and_editable_wheel(self):
        import zipfile
        b = self.backend()
        with tempfile.TemporaryDirectory() as d:
            names = zipfile.ZipFile(Path(d, b.build_wheel(d))).namelist()
            self.assertIn("kjit/__init__.py", names)
            self.assertIn("kjit/ops.py", names)
            self.assertIn("kjit-0.1.0.dist-info/RECORD", names)
            editable = zipfile.ZipFile(Path(d, b.build_editable(d)))
            pth = [n for n in editable.namelist() if n.endswith(".pth")]
            self.assertEqual(len(pth), 1)
            self.assertEqual(editable.read(pth[0]).decode().strip(), str(ROOT / "bindings" / "python"))
            self.assertFalse(any(n.startswith("kjit/") for n in editable.namelist()))
        self.assertEqual(b.get_requires_for_build_editable(), [])


class Layout(unittest.TestCase):
    """Each ctypes struct against sizeof/offsetof from a C program built now."""

    def test_structs_and_constants_match_the_header(self):
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if not cc:
            self.skipTest("no C compiler")
        lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "kjit.h"',
                 "int main(void) {"]
        for cname, struct in _lib.STRUCTS.items():
            lines.append(f'printf("{cname} . %zu\\n", sizeof({cname}));')
            for field, _ in struct._fields_:
                lines.append(f'printf("{cname} {field} %zu %zu\\n", offsetof({cname}, {field}), '
                             f"sizeof((({cname} *)0)->{field}));")
        for name in _lib.CONSTANTS:
            lines.append(f'printf("const {name} %d\\n", (int)({name}));')
        lines += ["return 0;", "}"]
        with tempfile.TemporaryDirectory() as tmp:
            src, exe = Path(tmp, "layout.c"), Path(tmp, "layout")
            src.write_text("\n".join(lines))
            subprocess.run([cc, "-std=c11", "-I", str(ROOT / "include"), str(src), "-o", str(exe)],
                           check=True)
            out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
        seen = 0
        for line in out.splitlines():
            kind, name, *vals = line.split()
            if kind == "const":
                self.assertEqual(_lib.CONSTANTS[name], int(vals[0]), name)
            elif name == ".":
                self.assertEqual(ctypes.sizeof(_lib.STRUCTS[kind]), int(vals[0]), f"sizeof({kind})")
            else:
                struct = _lib.STRUCTS[kind]
                desc = getattr(struct, name)
                self.assertEqual((desc.offset, desc.size), (int(vals[0]), int(vals[1])),
                                 f"{kind}.{name} (offset, size)")
            seen += 1
        expected = sum(1 + len(s._fields_) for s in _lib.STRUCTS.values()) + len(_lib.CONSTANTS)
        self.assertEqual(seen, expected)


class Status(unittest.TestCase):
    def test_names_come_from_the_library(self):
        self.assertEqual(core.status_name(0), "KJIT_OK")
        self.assertEqual(core.status_name(-1), "KJIT_EINVAL")
        self.assertEqual(core.status_name(-10), "KJIT_EINDEX")
        core.check(0, "anything")

    def test_einval_names_the_argument(self):
        with kjit.Context(device=None, cache_dir="") as ctx:
            with self.assertRaises(kjit.InvalidArgument) as cm:
                ctx.timestep_sinusoid(t=0x1000, n=4, dim=0, out=0x2000)
        e = cm.exception
        self.assertIsInstance(e, ValueError)
        self.assertIsInstance(e, kjit.KjitError)
        self.assertEqual((e.status, e.name, e.function), (-1, "KJIT_EINVAL", "kjit_timestep_sinusoid"))
        self.assertIn("d = 0", e.message)

    def test_bad_stride_and_dtype_are_named(self):
        with kjit.Context(device=None, cache_dir="") as ctx:
            with self.assertRaisesRegex(kjit.InvalidArgument, "out_stride"):
                ctx.timestep_sinusoid(0x1000, 4, 256, 0x2000, out_stride=8)
            with self.assertRaisesRegex(kjit.InvalidArgument, "out_dtype"):
                ctx.timestep_sinusoid(0x1000, 4, 256, 0x2000, out_dtype="int32")
            with self.assertRaisesRegex(kjit.InvalidArgument, "max_period"):
                ctx.timestep_sinusoid(0x1000, 4, 256, 0x2000, max_period=-1.0)

    def test_valid_call_without_a_driver_says_so(self):
        with kjit.Context(device=0, cache_dir="") as ctx:
            if ctx.has_device:
                self.skipTest("a GPU is present")
            with self.assertRaises(kjit.KjitError) as cm:
                ctx.timestep_sinusoid(0x1000, 4, 256, 0x2000)
            self.assertEqual(cm.exception.name, "KJIT_ENODRIVER")
            ctx.timestep_sinusoid(0x1000, 0, 256, 0x2000)  # n == 0 is a no-op

    def test_context_options(self):
        with self.assertRaisesRegex(kjit.InvalidArgument, "sm_12"):
            kjit.Context(device=None, cache_dir="", arch="sm_12")
        with self.assertRaisesRegex(ValueError, "index_check"):
            kjit.Context(device=None, index_check="sometimes")
        with kjit.Context(device=None, cache_dir="", arch="sm_90") as ctx:
            self.assertEqual(ctx.arch, "sm_90")
            self.assertFalse(ctx.has_device)
            self.assertEqual(set(ctx.cache_counters()),
                             {"mem_hits", "disk_hits", "misses", "compiles", "bad_entries",
                              "evictions", "server_builds", "store_failures"})
        with self.assertRaisesRegex(ValueError, "closed"):
            ctx.arch  # noqa: B018


class CoreChecks(unittest.TestCase):
    """Python-level mistakes are caught before the library is called."""

    def test_context_paths_refuse_nul_and_other_types(self):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d, True)
        with self.assertRaisesRegex(ValueError, "cache_dir: .* NUL"):
            kjit.Context(device=None, cache_dir=os.path.join(d, "nul") + "\0junk")
        with self.assertRaisesRegex(ValueError, "arch: .* NUL"):
            kjit.Context(device=None, cache_dir="", arch="sm_90\0junk")
        with self.assertRaisesRegex(TypeError, "cache_dir: expected a str, bytes or path"):
            kjit.Context(device=None, cache_dir=3.5)
        self.assertFalse(os.path.exists(os.path.join(d, "nul")))  # before: created, the rest cut off
        # bytes and PathLike are paths (before: bytes made "./b'...'").
        with kjit.Context(device=None, cache_dir=os.fsencode(os.path.join(d, "cb"))):
            pass
        with kjit.Context(device=None, cache_dir=Path(d) / "cp"):
            pass
        self.assertTrue(os.path.isdir(os.path.join(d, "cb")) and os.path.isdir(os.path.join(d, "cp")))

    def test_sinusoid_flip_is_a_bool_not_any_truthy_value(self):
        # bool("False") is True: the core read the string as "flip" (the
        # torch layer refused it already).
        for bad in ("False", None, 1.0, [0]):
            with self.assertRaisesRegex(TypeError, "flip_sin_to_cos: expected a bool"):
                self.ctx.timestep_sinusoid(16, 1, 8, 16, flip_sin_to_cos=bad)
        good = [True, 0]
        try:
            import numpy  # a NumPy bool is named "bool" since NumPy 2, "bool_" before
            good += [numpy.True_, numpy.bool_(False)]
        except ImportError:
            pass
        for ok in good:  # past the check: the compile-only context has no driver
            with self.assertRaisesRegex(kjit.KjitError, "KJIT_ENODRIVER"):
                self.ctx.timestep_sinusoid(16, 1, 8, 4096, flip_sin_to_cos=ok)

    def test_choices_of_the_wrong_type_name_themselves(self):
        # Before: "unhashable type: 'list'", naming nothing.
        with self.assertRaisesRegex(TypeError, "index_check: expected one of"):
            kjit.Context(device=None, cache_dir="", index_check=[])
        with self.assertRaisesRegex(ValueError, "index_check: 'never' is not one of"):
            kjit.Context(device=None, cache_dir="", index_check="never")
        with self.assertRaisesRegex(TypeError, "op: expected one of"):
            core.adaln_workspace(["x"], 10, 256, 9)
        with self.assertRaisesRegex(ValueError, "op: 'nope' is not one of"):
            core.adaln_workspace("nope", 10, 256, 9)

    def setUp(self):
        self.ctx = kjit.Context(device=None, cache_dir="")
        self.addCleanup(self.ctx.close)

    def test_dtypes(self):
        self.assertEqual(core.dtype_code("bfloat16"), _lib.BF16)
        self.assertEqual(core.dtype_code("fp32"), _lib.F32)
        self.assertEqual(core.dtype_name(_lib.I64), "int64")
        self.assertEqual(core.dtype_size("bf16"), 2)
        with self.assertRaisesRegex(kjit.InvalidArgument, "fp8"):
            core.dtype_code("fp8")
        with self.assertRaisesRegex(ValueError, "kjit_dtype"):
            core.dtype_code(7)

    def test_bad_dtypes_name_their_argument(self):
        kw = dict(act_dtype="bf16", param_dtype="bf16", index=(0x3000, "int64", 9))
        for arg, bad, err in (("act_dtype", "bfloat8", kjit.InvalidArgument),
                              ("param_dtype", "fp8", kjit.InvalidArgument), ("act_dtype", 7, ValueError),
                              ("index", (0x3000, "int16", 9), kjit.InvalidArgument)):
            want = "index dtype" if arg == "index" else arg
            with self.subTest(arg=arg, bad=bad), self.assertRaisesRegex(err, "^" + want + "[ :]"):
                self.ctx.norm_modulate_fwd(8, 64, **dict(kw, **{arg: bad}))
        with self.assertRaisesRegex(kjit.InvalidArgument, "^out_dtype "):
            self.ctx.timestep_sinusoid(0x1000, 4, 256, 0x2000, out_dtype="float64")
        # A name kjit does not know: the names the argument takes, not every dtype.
        for arg, bad, takes in (("act_dtype", "fp8", "fp32, bf16, fp16"), ("param_dtype", "fp8", "fp32, bf16"),
                                ("index", (0x3000, "int16", 9), "int32, int64")):
            want = "index dtype" if arg == "index" else arg
            with self.subTest(arg=arg), self.assertRaisesRegex(kjit.InvalidArgument, f"^{want} .*takes {takes}$"):
                self.ctx.norm_modulate_fwd(8, 64, **dict(kw, **{arg: bad}))

    def test_pointer_types(self):
        with self.assertRaisesRegex(TypeError, "^t: expected an int, got float"):
            self.ctx.timestep_sinusoid(1.5, 4, 256, 0x2000)
        with self.assertRaisesRegex(TypeError, "n: expected an int, got bool"):
            self.ctx.timestep_sinusoid(0x1000, True, 256, 0x2000)
        with self.assertRaisesRegex(ValueError, "out: a device pointer cannot be negative"):
            self.ctx.timestep_sinusoid(0x1000, 4, 256, -8)
        with self.assertRaisesRegex(TypeError, "stream: expected an int"):
            self.ctx.timestep_sinusoid(0x1000, 4, 256, 0x2000, stream="default")
        with self.assertRaisesRegex(ValueError, "^stream: a stream handle cannot be negative"):
            self.ctx.timestep_sinusoid(0x1000, 4, 256, 0x2000, stream=-1)
        with self.assertRaisesRegex(ValueError, "^stream: a stream handle cannot be negative"):
            self.ctx.index_error(stream=-1)

    def test_ints_that_do_not_fit_are_refused(self):
        # ctypes would wrap these silently (a negative workspace size became
        # SIZE_MAX, a 2**32 + 256 hidden size 256, a 2**64 + P pointer P).
        kw = dict(act_dtype="bf16", param_dtype="bf16", index=(0x3000, "int64", 9))
        with self.assertRaisesRegex(ValueError, "workspace bytes: a byte count cannot be negative"):
            self.ctx.norm_modulate_bwd(8, 64, workspace=(0x4000, -1), **kw)
        with self.assertRaisesRegex(ValueError, "workspace bytes: .* does not fit 64 bits"):
            self.ctx.norm_modulate_bwd(8, 64, workspace=(0x4000, 2**64 + 1), **kw)
        with self.assertRaisesRegex(ValueError, "hidden: 4294967552 does not fit the library's 32-bit"):
            self.ctx.norm_modulate_fwd(8, 2**32 + 256, **kw)
        with self.assertRaisesRegex(ValueError, "n: .* does not fit the library's 64-bit"):
            self.ctx.norm_modulate_fwd(2**64 + 8, 64, **kw)
        with self.assertRaisesRegex(ValueError, "index rows: .* 64-bit"):
            self.ctx.norm_modulate_fwd(8, 64, **dict(kw, index=(0x3000, "int64", 2**64 + 9)))
        with self.assertRaisesRegex(ValueError, "x pointer: .* does not fit 64 bits"):
            self.ctx.norm_modulate_fwd(8, 64, x=(2**64 + 0x1000, 64), **kw)
        with self.assertRaisesRegex(ValueError, "stream: .* does not fit 64 bits"):
            self.ctx.timestep_sinusoid(0x1000, 4, 256, 0x2000, stream=2**64)
        with self.assertRaisesRegex(ValueError, "num_tables: .* 32-bit"):
            core.row_gather_workspace(16, 256, 2**32 + 1, 9)
        with self.assertRaisesRegex(ValueError, "device: .* 32-bit"):
            kjit.Context(device=2**32)
        # -1 (KJIT_NO_DEVICE in C, torch's device of a CPU tensor) is not a
        # quiet compile-only context: None is.
        with self.assertRaisesRegex(ValueError, "device: -1 is not a CUDA ordinal; pass None"):
            kjit.Context(device=-1)
        with self.assertRaisesRegex(ValueError, "ordinal: .* 32-bit"):
            core.device_info(2**32)
        with self.assertRaisesRegex(ValueError, "status: .* 32-bit"):
            core.status_name(2**40)
        with self.assertRaisesRegex(TypeError, "status: expected an int, got NoneType"):
            core.status_name(None)
        with self.assertRaisesRegex(TypeError, "eps: expected a real number, got NoneType"):
            self.ctx.norm_modulate_fwd(8, 64, eps=None, **kw)
        with self.assertRaisesRegex(TypeError, "max_period: expected a real number, got str"):
            self.ctx.timestep_sinusoid(0x1000, 4, 256, 0x2000, max_period="1e4")
        # An int past the double range is named (it was a bare OverflowError);
        # eps is judged before its narrowing to a C float (-1e-50 became a
        # -0.0 that passed, 1e39 an inf the message then named).
        for name in ("scale", "max_period"):
            with self.assertRaisesRegex(ValueError, name + r": 10{23}\.\.\. is too large for a C double"):
                self.ctx.timestep_sinusoid(0x1000, 4, 256, 0x2000, **{name: 10**400})
        for eps in (10**400, -1e-50, 1e39, float("nan")):
            with self.assertRaisesRegex(ValueError, "eps: "):
                self.ctx.norm_modulate_fwd(8, 64, eps=eps, **kw)
        with self.assertRaisesRegex(ValueError, "NUL"):
            core.dtype_code("bf16\0x")
        # Values at the edges still pass the Python checks (the library
        # judges them): the largest pointer, a 32-bit hidden size.
        with self.assertRaisesRegex(kjit.InvalidArgument, "hidden"):
            self.ctx.norm_modulate_fwd(8, 2**31 - 1, x=(2**64 - 16, 64), **kw)

    def test_adaln_arguments(self):
        kw = dict(act_dtype="bf16", param_dtype="bf16", index=(0x3000, "int64", 9))
        with self.assertRaisesRegex(TypeError, "unknown argument 'bias'"):
            self.ctx.norm_modulate_fwd(8, 64, bias=(0x1000, 64), **kw)
        # A field of the block that this op does not use: refused, not ignored.
        for fn, name in ((self.ctx.norm_modulate_fwd, "res"), (self.ctx.norm_modulate_bwd, "shift"),
                         (self.ctx.gated_residual_fwd, "h"), (self.ctx.gated_residual_bwd, "dh"),
                         (self.ctx.gated_residual_norm_modulate_fwd, "x"),
                         (self.ctx.gated_residual_norm_modulate_bwd, "res")):
            with self.subTest(fn=fn.__name__, name=name), \
                    self.assertRaisesRegex(TypeError, f"'{name}' is not used by this op; it takes "):
                fn(8, 64, **{name: (0x1000, 64)}, **kw)
        with self.assertRaisesRegex(TypeError, r"x: expected a \(pointer, row_stride\) pair"):
            self.ctx.norm_modulate_fwd(8, 64, x=0x1000, **kw)
        with self.assertRaisesRegex(TypeError, r"index: expected \(pointer, dtype, rows\)"):
            self.ctx.norm_modulate_fwd(8, 64, **dict(kw, index=0x3000))
        with self.assertRaisesRegex(kjit.InvalidArgument, "int16"):
            self.ctx.norm_modulate_fwd(8, 64, **dict(kw, index=(0x3000, "int16", 9)))
        with self.assertRaisesRegex(TypeError, r"workspace: expected a \(pointer, bytes\)"):
            self.ctx.norm_modulate_bwd(8, 64, workspace=4096, **kw)
        with self.assertRaisesRegex(ValueError, "op: 'layer_norm'"):
            core.adaln_workspace("layer_norm", 8, 64, 9)
        with self.assertRaisesRegex(ValueError, "op: 'layer_norm'"):
            core.adaln_partition_bytes("layer_norm", 8, 64, 9)
        with self.assertRaisesRegex(kjit.InvalidArgument, "hidden = 0"):
            core.adaln_partition_bytes("norm_modulate", 8, 0, 9)
        # The training pair's partition: ~4 bytes per row, a prefix of the workspace.
        part = core.adaln_partition_bytes("norm_modulate", 32768, 5376, 9)
        self.assertTrue(32768 * 4 <= part <= 32768 * 4 + 8192)
        self.assertLess(part, core.adaln_workspace("norm_modulate", 32768, 5376, 9))

    def test_overlapping_outputs_are_refused(self):
        # An output over an input or another output: InvalidArgument naming
        # both; in place as documented, and chunk views of one table, pass
        # the checks (no driver here: KJIT_ENODRIVER, or OK with a GPU).
        kw = dict(act_dtype="bf16", param_dtype="bf16", index=(0x3000, "int64", 9))
        t = dict(x=(0x10000, 64), shift=(0x20000, 6 * 64), scale=(0x20000 + 128, 6 * 64))
        with self.assertRaisesRegex(kjit.InvalidArgument, "out overlaps input shift"):
            self.ctx.norm_modulate_fwd(8, 64, out=(0x20000 + 256, 64), **t, **kw)
        with self.assertRaisesRegex(kjit.InvalidArgument, "out overlaps input x .in place"):
            self.ctx.norm_modulate_fwd(8, 64, out=(0x10000 + 128, 64), **t, **kw)
        g = dict(x=(0x10000, 64), scale=t["scale"], dout=(0x40000, 64), dx=(0x50000, 64))
        with self.assertRaisesRegex(kjit.InvalidArgument, "dshift overlaps output dscale"):
            self.ctx.norm_modulate_bwd(8, 64, dshift=(0x60000, 6 * 64), dscale=(0x60000 + 64, 6 * 64),
                                       **g, **kw)
        with self.assertRaisesRegex(kjit.InvalidArgument, "workspace overlaps input dout"):
            self.ctx.norm_modulate_bwd(8, 64, dshift=(0x60000, 6 * 64), dscale=(0x60000 + 128, 6 * 64),
                                       workspace=(0x40000, 1 << 20), **g, **kw)
        with self.assertRaises(kjit.KjitError) as cm:
            self.ctx.norm_modulate_fwd(8, 64, out=(0x10000, 64), **t, **kw)  # in place: out = x
        self.assertEqual(cm.exception.name, "KJIT_ENODRIVER")
        with self.assertRaises(kjit.KjitError) as cm:
            self.ctx.norm_modulate_bwd(8, 64, dshift=(0x60000, 6 * 64), dscale=(0x60000 + 128, 6 * 64),
                                       **g, **kw)  # chunk views of one gradient
        self.assertEqual(cm.exception.name, "KJIT_ENODRIVER")

    def test_row_gather_arguments(self):
        idx = (0x3000, "int32", 9)
        with self.assertRaisesRegex(ValueError, "table: 9 tables; kjit takes 1..8"):
            self.ctx.adaln_row_gather_fwd(8, 64, "bf16", idx, [(0x1000, 64)] * 9,
                                          [(0x2000, 64)] * 9)
        with self.assertRaisesRegex(ValueError, "out: 2 entries, but 3 tables"):
            self.ctx.adaln_row_gather_fwd(8, 64, "bf16", idx, [(0x1000, 64)] * 3,
                                          [(0x2000, 64)] * 2)
        with self.assertRaisesRegex(TypeError, r"table\[1\]: expected a \(pointer, row_stride\)"):
            self.ctx.adaln_row_gather_fwd(8, 64, "bf16", idx, [(0x1000, 64), 0x1100],
                                          [(0x2000, 64)] * 2)


@unittest.skipIf(torch is None, "torch is not installed")
class TorchRefusals(unittest.TestCase):
    """The torch functions refuse what kjit cannot take, naming the argument."""

    N, H, R = 6, 64, 9

    def setUp(self):
        self.x = torch.randn(self.N, self.H, dtype=torch.bfloat16)
        self.table = torch.randn(self.R, 6 * self.H, dtype=torch.bfloat16)
        self.idx = torch.arange(self.N) % self.R

    def test_cpu_tensors_are_refused(self):
        sh, sc, g = self.table.chunk(6, 1)[:3]
        for call in (
            lambda: kjit.norm_modulate(self.x, None, sh, sc, self.idx),
            lambda: kjit.gated_residual(self.x, self.x, g, self.idx),
            lambda: kjit.gated_residual_norm_modulate(self.x, self.x, g, None, sh, sc, self.idx),
            lambda: kjit.adaln_row_gather(list(self.table.chunk(6, 1)), self.idx),
            lambda: kjit.timestep_sinusoid(torch.rand(4), 256),
        ):
            with self.assertRaisesRegex(ValueError, "is on cpu; kjit runs on CUDA tensors"):
                call()
        # The torch.library ops called directly: the same ValueError, not the
        # dispatcher's NotImplementedError for a CPU backend.
        ops = torch.ops.kjit
        for call in (
            lambda: ops.norm_modulate(self.x, None, sh, sc, self.idx, 1e-5),
            lambda: ops.gated_residual(self.x, self.x, g, self.idx),
            lambda: ops.gated_residual_norm_modulate(self.x, self.x, g, None, sh, sc, self.idx, 1e-5),
            lambda: ops.adaln_row_gather(list(self.table.chunk(6, 1)), self.idx),
            lambda: ops.timestep_sinusoid(torch.rand(4), 256, False, 1.0, 1.0, 10000.0, torch.float32),
        ):
            with self.assertRaisesRegex(ValueError, "is on cpu; kjit runs on CUDA tensors"):
                call()

    def test_scalars_and_shapes_on_fake_cuda_tensors(self):
        # Checked in Python, so that calls with no rows and traced calls
        # refuse them too; each names the argument.
        from torch._subclasses.fake_tensor import FakeTensorMode
        with FakeTensorMode():
            x = torch.empty(self.N, self.H, device="cuda", dtype=torch.bfloat16)
            table = torch.empty(self.R, 6 * self.H, device="cuda", dtype=torch.bfloat16)
            idx = torch.zeros(self.N, device="cuda", dtype=torch.int64)
            t = torch.empty(self.N, device="cuda")
            sh, sc, g = table.chunk(6, 1)[:3]
            nm = kjit.norm_modulate
            for eps, err, msg in ((None, TypeError, "eps must be a real number, got NoneType"),
                                  ("1e-5", TypeError, "eps must be a real number, got str"),
                                  (float("nan"), ValueError, r"eps nan must be finite \(a float32\) and >= 0"),
                                  (-1.0, ValueError, r"eps -1.0 must be finite \(a float32\) and >= 0"),
                                  (10**400, ValueError, r"eps 10{23}\.\.\. is too large for a float"),
                                  (1e39, ValueError, r"eps 1e\+39 must be finite")):
                with self.assertRaisesRegex(err, msg):
                    nm(x, None, sh, sc, idx, eps=eps)
                with self.assertRaisesRegex(err, msg):
                    kjit.gated_residual_norm_modulate(x, x, g, None, sh, sc, idx, eps=eps)
            x0 = torch.empty(0, self.H, device="cuda", dtype=torch.bfloat16)
            i0 = torch.zeros(0, device="cuda", dtype=torch.int64)
            with self.assertRaisesRegex(ValueError, "eps nan"):
                nm(x0, None, sh, sc, i0, eps=float("nan"))  # no rows: still refused
            empty = torch.empty(0, 6 * self.H, device="cuda", dtype=torch.bfloat16)
            with self.assertRaisesRegex(ValueError, "shift has 0 rows; kjit takes 1..65535"):
                nm(x0, None, empty[:, :self.H], empty[:, self.H:2 * self.H], i0)
            with self.assertRaisesRegex(ValueError, "x has hidden size 0; kjit takes 1..65536"):
                nm(torch.empty(self.N, 0, device="cuda", dtype=torch.bfloat16), None, sh[:, :0],
                   sc[:, :0], idx)
            with self.assertRaisesRegex(ValueError, r"shift has 9 rows, expected 3 \(as gate\)"):
                kjit.gated_residual_norm_modulate(x, x, g[:3], None, sh, sc, idx)
            with self.assertRaisesRegex(ValueError, r"tables\[0\] must be 2-D"):
                kjit.adaln_row_gather([torch.empty((), device="cuda", dtype=torch.bfloat16)], idx)
            with self.assertRaisesRegex(TypeError, "dim must be an int, got float"):
                kjit.timestep_sinusoid(t, 256.0)
            with self.assertRaisesRegex(ValueError, "dim must be in 1..65536, got 0"):
                kjit.timestep_sinusoid(t, 0)
            with self.assertRaisesRegex(TypeError, "downscale_freq_shift must be a real number"):
                kjit.timestep_sinusoid(t, 256, downscale_freq_shift=None)
            with self.assertRaisesRegex(ValueError, "max_period 0.0 must be > 0"):
                kjit.timestep_sinusoid(t, 256, max_period=0.0)
            with self.assertRaisesRegex(ValueError, "scale inf must be finite"):
                kjit.timestep_sinusoid(t, 256, scale=float("inf"))
            # An index-like dim (e.g. a numpy integer: it has __index__) is an int.
            class Index:
                def __index__(self):
                    return 256
            self.assertEqual(tuple(kjit.timestep_sinusoid(t, Index()).shape), (self.N, 256))

    def test_bad_index_check_variable_is_named(self):
        from kjit import ops
        env = dict(os.environ)
        self.addCleanup(lambda: (os.environ.clear(), os.environ.update(env)))
        os.environ["KJIT_INDEX_CHECK"] = "bogus"
        before = dict(ops._contexts)
        with self.assertRaisesRegex(ValueError, "KJIT_INDEX_CHECK='bogus': expected off, sync or async"):
            ops.context("cuda:7")
        self.assertEqual(ops._contexts, before)  # no context made
        # Case and spaces are ignored (as KJIT_EAGER's): past the check, the
        # context is refused for want of a driver, not for the value.
        os.environ["KJIT_INDEX_CHECK"] = " SYNC "
        try:
            ops.context("cuda:7")
        except Exception as e:  # noqa: BLE001
            self.assertNotIn("KJIT_INDEX_CHECK", str(e))

    def test_scalar_checks_trace_with_varying_values(self):
        # torch.compile makes a float argument symbolic once it varies: the
        # checks must trace (math.isfinite on it broke fullgraph).
        from kjit import ops

        def f(x, eps, scale):
            return x * ops._eps("f", eps) * ops._real("f", "scale", scale)

        cf = torch.compile(f, backend="eager", fullgraph=True)
        x = torch.ones(3)
        for eps, scale in ((1e-5, 1.0), (2e-5, 3.0), (3e-6, 0.5)):
            self.assertAlmostEqual(cf(x, eps, scale)[0].item(), eps * scale, delta=1e-9)

    def test_context_refusals_name_the_device(self):
        from kjit import ops
        before = dict(ops._contexts)
        for bad, err, msg in (("bogus", ValueError, "device 'bogus'"), ("meta", ValueError, "meta is not a CUDA device"),
                              (-1, ValueError, "device -1"), (1.5, TypeError, "device: expected"),
                              (True, TypeError, "device: expected"), ([0], TypeError, "device: expected"),
                              # torch keeps 8 bits of an index: 256 was device 0, 'cuda:300' device 44
                              (256, ValueError, "device 256: 256 is not a CUDA device index"),
                              (128, ValueError, "device 128: 128 is not a CUDA device index"),
                              ("cuda:300", ValueError, "device 'cuda:300': 300 is not a CUDA device index")):
            with self.subTest(device=bad), self.assertRaisesRegex(err, "kjit.context: " + msg):
                ops.context(bad)
        self.assertEqual(ops._contexts, before)

    def test_types(self):
        t = torch.empty(4, device="meta")
        for kw, msg in (({"flip_sin_to_cos": "False"}, "flip_sin_to_cos: expected a bool, got str"),
                        ({"flip_sin_to_cos": None}, "flip_sin_to_cos: expected a bool"),
                        ({"out_dtype": ["bf16"]}, "out_dtype")):
            with self.subTest(kw=kw), self.assertRaisesRegex(TypeError, "kjit.timestep_sinusoid: " + msg):
                kjit.timestep_sinusoid(t, 8, **kw)
        a = torch.empty(2, 8, device="meta", dtype=torch.bfloat16)
        b = torch.empty(2, 8, device="meta", dtype=torch.float32)
        idx = torch.empty(3, dtype=torch.int32, device="meta")
        with self.assertRaisesRegex(TypeError, "the tables share one dtype"):  # the gather has no weight
            kjit.adaln_row_gather([a, b], idx)
        with self.assertRaisesRegex(TypeError, "kjit.norm_modulate: x must be a torch.Tensor"):
            kjit.norm_modulate([1.0], None, self.x, self.x, self.idx)
        with self.assertRaisesRegex(ValueError, "tables must be a list of 1..8"):
            kjit.adaln_row_gather([self.x] * 9, self.idx)


@unittest.skipIf(torch is None, "torch is not installed")
class TorchFakes(unittest.TestCase):
    """Without a GPU: fake tensors trace through every op (what torch.compile
    needs), and the autograd formulas run on meta tensors."""

    N, H, R = 5, 32, 9

    def test_fake_cuda_trace(self):
        # Both eager paths: under a tracer, KJIT_EAGER=function uses the ops too.
        from kjit import ops
        saved = ops._EAGER
        self.addCleanup(setattr, ops, "_EAGER", saved)
        for mode in ("custom_op", "function"):
            ops._EAGER = mode
            with self.subTest(mode=mode):
                self.fake_cuda_trace()

    def fake_cuda_trace(self):
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.proxy_tensor import make_fx

        def block(x, table, w, idx, t):
            ch = table.chunk(6, 1)
            h, o = kjit.gated_residual_norm_modulate(x, x, ch[2], w, ch[0], ch[1], idx)
            rows = kjit.adaln_row_gather(list(ch), idx)
            emb = kjit.timestep_sinusoid(t, 256, True, 0.0, out_dtype=torch.bfloat16)
            return kjit.gated_residual(h, o, ch[5], idx), kjit.norm_modulate(
                x, None, ch[3], ch[4], idx), rows, emb

        with FakeTensorMode():
            args = (torch.empty(self.N, self.H, device="cuda", dtype=torch.bfloat16),
                    torch.empty(self.R, 6 * self.H, device="cuda", dtype=torch.bfloat16),
                    torch.empty(self.H, device="cuda", dtype=torch.bfloat16),
                    torch.zeros(self.N, device="cuda", dtype=torch.int32),
                    torch.empty(self.N, device="cuda"))
            gm = make_fx(block, tracing_mode="fake")(*args)
            res, nm, rows, emb = gm(*args)
        ops = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
        for op in ("kjit.gated_residual_norm_modulate.default", "kjit.adaln_row_gather.default",
                   "kjit.timestep_sinusoid.default", "kjit.gated_residual.default",
                   "kjit.norm_modulate.default"):
            self.assertIn(op, ops)
        self.assertEqual(tuple(res.shape), (self.N, self.H))
        self.assertEqual(len(rows), 6)
        self.assertEqual((tuple(emb.shape), emb.dtype), ((self.N, 256), torch.bfloat16))
        self.assertTrue(nm.is_contiguous())

    def test_fake_autograd_shapes(self):
        # Under FakeTensorMode on CUDA tensors (as torch.compile traces; meta
        # tensors: TorchMeta): the backward ops' fakes give each gradient its
        # shape, and a frozen gate none.
        from torch._subclasses.fake_tensor import FakeTensorMode
        try:  # a CUDA build of torch on a machine without a GPU cannot
            with FakeTensorMode():  # run any backward on fake CUDA tensors
                x = torch.empty(3, device="cuda", requires_grad=True)
                (x * 2).sum().backward()
        except RuntimeError as e:
            self.skipTest(f"this torch runs no backward on fake CUDA tensors here: {e}")
        with FakeTensorMode():
            m = dict(device="cuda", dtype=torch.bfloat16)
            x = torch.empty(self.N, self.H, **m, requires_grad=True)
            table = torch.empty(self.R, 6 * self.H, **m, requires_grad=True)
            w = torch.empty(self.H, **m, requires_grad=True)
            idx = torch.zeros(self.N, dtype=torch.int64, device="cuda")
            ch = table.chunk(6, 1)
            h, out = torch.ops.kjit.gated_residual_norm_modulate(x, x, ch[2], w, ch[0], ch[1], idx,
                                                                 1e-5)
            rows = torch.ops.kjit.adaln_row_gather(list(ch), idx)
            loss = torch.ops.kjit.gated_residual(h, out, ch[5], idx).sum() + rows[3].sum()
            loss.backward()
            self.assertEqual(tuple(table.grad.shape), (self.R, 6 * self.H))
            self.assertEqual(tuple(x.grad.shape), (self.N, self.H))
            self.assertEqual(tuple(w.grad.shape), (self.H,))
            # gated_residual's backward op: dgate of the gate's shape, or an
            # empty placeholder for a frozen gate (need_gate False).
            y, dout, gate = (torch.empty(self.N, self.H, **m), torch.empty(self.N, self.H, **m),
                             torch.empty(self.R, self.H, **m))
            for need_gate, dgate_shape in ((True, (self.R, self.H)), (False, (0,))):
                dy, dgate = torch.ops.kjit.gated_residual_bwd(dout, y, gate, idx, need_gate)
                self.assertEqual((tuple(dy.shape), tuple(dgate.shape)), ((self.N, self.H), dgate_shape))


@unittest.skipIf(torch is None, "torch is not installed")
class TorchMeta(unittest.TestCase):
    """Without a GPU: the ops on meta tensors (shape inference, a model built
    on the meta device) through torch.compile, forward and backward, and the
    fakes refusing what the library refuses."""

    H, R = 64, 4

    def step(self, n, unbacked=None):
        m = "meta"

        def block(x, res, proj, w, idx, t):
            ch = proj.chunk(6, dim=1)
            emb = kjit.timestep_sinusoid(t, 256, flip_sin_to_cos=True, downscale_freq_shift=0.0)
            g = kjit.adaln_row_gather(list(ch), idx)
            y = kjit.norm_modulate(x, w, ch[0], ch[1], idx)
            r2 = kjit.gated_residual(res, y, ch[2], idx)
            h, o = kjit.gated_residual_norm_modulate(r2, y, ch[5], None, ch[3], ch[4], idx)
            return h.float().sum() + o.float().sum() + g[0].sum() + emb.sum()

        H, R = self.H, self.R
        # x a strided view (row stride 2H), the tables fp32 beside bf16 rows
        x = torch.empty(n, 2 * H, device=m, dtype=torch.bfloat16)[:, :H].requires_grad_()
        res = torch.empty(n, H, device=m, dtype=torch.bfloat16, requires_grad=True)
        proj = torch.empty(R, 6 * H, device=m, requires_grad=True)
        w = torch.empty(H, device=m, requires_grad=True)
        idx = torch.empty(n, dtype=torch.int64, device=m)
        t = torch.empty(n, device=m)
        if unbacked:
            for a in (x, res, idx, t):
                unbacked(a, 0)
        torch._dynamo.reset()
        loss = torch.compile(block, fullgraph=True, backend="aot_eager")(x, res, proj, w, idx, t)
        loss.backward()
        return x, res, proj, w

    def test_compiled_step(self):
        # n = 0: out.sum()'s gradient comes expanded with zero strides, which
        # an empty tensor's .contiguous() keeps and the backward ops refuse.
        for n in (5, 0):
            with self.subTest(n=n):
                x, res, proj, w = self.step(n)
                self.assertEqual([tuple(p.grad.shape) for p in (x, res, proj, w)],
                                 [(n, self.H), (n, self.H), (self.R, 6 * self.H), (self.H,)])
                self.assertEqual([p.grad.dtype for p in (x, res, proj, w)],
                                 [torch.bfloat16, torch.bfloat16, torch.float32, torch.float32])

    def test_compiled_step_unbacked_rows(self):
        # Rows known only at run time (an unbacked size: .item(), nonzero()):
        # the checks must not branch on N (fullgraph refused "could not guard
        # on data-dependent expression u0 > 1").
        mark = getattr(getattr(torch._dynamo, "decorators", None), "mark_unbacked", None)
        if mark is None:
            self.skipTest("this torch has no mark_unbacked")
        x, res, proj, w = self.step(5, unbacked=mark)
        self.assertEqual([tuple(p.grad.shape) for p in (x, res, proj, w)],
                         [(5, self.H), (5, self.H), (self.R, 6 * self.H), (self.H,)])

    def test_table_rows_are_not_specialized(self):
        # The table-row check formatted its message before failing, and an
        # f-string of a symbolic R made torch.compile take R for a constant:
        # a recompile per table size, and with fullgraph the ninth a failure.
        from torch._dynamo.utils import counters

        def f(x, proj, idx):
            sh, sc = proj.chunk(2, dim=1)
            return kjit.norm_modulate(x, None, sh, sc, idx)

        torch._dynamo.reset()
        counters.clear()
        cf = torch.compile(f, fullgraph=True, backend="eager")
        x = torch.empty(8, 64, device="meta")
        idx = torch.empty(8, dtype=torch.int64, device="meta")
        for r in range(2, 14):
            self.assertEqual(tuple(cf(x, torch.empty(r, 128, device="meta"), idx).shape), (8, 64))
        self.assertLessEqual(counters["stats"]["unique_graphs"], 2)  # static, then dynamic R

    def test_sinusoid_fake_refuses(self):
        t = torch.empty(4, device="meta")
        op = torch.ops.kjit.timestep_sinusoid
        for args, err, msg in (((0, False, 1.0, 1.0, 1e4, torch.float32), ValueError, "dim"),
                               ((8, False, 4.0, 1.0, 1e4, torch.float32), ValueError, "shift"),
                               ((8, False, 1.0, 1.0, -1.0, torch.float32), ValueError, "max_period"),
                               ((8, False, 1.0, math.inf, 1e4, torch.float32), ValueError, "scale"),
                               ((8, False, 1.0, 1.0, 1e4, torch.float64), TypeError, "out_dtype")):
            with self.subTest(args=args), self.assertRaisesRegex(err, msg):
                op(t, *args)
        self.assertEqual(tuple(op(t, 8, False, 1.0, 1.0, 1e4, torch.bfloat16).shape), (4, 8))

    def test_rows_limit(self):
        n = 2**31
        x = torch.empty(n, 8, device="meta", dtype=torch.bfloat16)
        tab = torch.empty(2, 8, device="meta", dtype=torch.bfloat16)
        idx = torch.empty(n, dtype=torch.int32, device="meta")
        with self.assertRaisesRegex(ValueError, "2147483648 rows"):
            torch.ops.kjit.norm_modulate(x, None, tab, tab, idx, 1e-5)
        with self.assertRaisesRegex(ValueError, "index has 2147483648 rows"):
            torch.ops.kjit.adaln_row_gather([tab], idx)
        self.assertEqual(tuple(torch.ops.kjit.norm_modulate(x[:-1], None, tab, tab, idx[:-1], 1e-5).shape),
                         (n - 1, 8))

    def test_h3_block_refuses_no_iterations(self):
        # Refused before any GPU work: runs without a GPU.
        r = subprocess.run([sys.executable, str(ROOT / "examples" / "h3_block.py"), "--iters", "0"],
                           capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=str(ROOT / "bindings" / "python")))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--iters must be at least 1, got 0", r.stderr)

    def test_cpu_refused(self):
        with self.assertRaisesRegex(ValueError, "x is on cpu; kjit runs on CUDA tensors"):
            kjit.norm_modulate(torch.empty(2, 8), None, torch.empty(2, 8), torch.empty(2, 8),
                               torch.zeros(2, dtype=torch.int32))


@unittest.skipIf(torch is None, "torch is not installed")
class TorchArgumentBlocks(unittest.TestCase):
    """The torch implementations build each kjit_adaln_args themselves (no
    per-call checks in the core): without a GPU, on CPU tensors, every launch
    entry point is replaced by a recorder, and each block must equal the one
    core.Context's checked path builds from the same tensors."""

    N, H, R, EPS = 6, 40, 5, 1e-6
    STREAM = 0x77

    def setUp(self):
        from kjit import ops
        self.ops = ops
        self.calls = []
        lib = _lib.load()

        def recorder(name):
            def call(handle, args, *rest):
                a = args._obj
                block = {f: getattr(a, f) for f, _ in _lib.AdalnArgs._fields_}
                block["index"] = (a.index.ptr, a.index.dtype, a.index.rows)
                self.calls.append((name, block, rest))
                return 0
            return call

        names = [f"kjit_{op}_{d}" for op in ("norm_modulate", "gated_residual",
                                             "gated_residual_norm_modulate")
                 for d in ("fwd", "bwd")]
        for name in names:
            setattr(lib, name, recorder(name))
        # Dropping the recorders makes the library bind the real functions again.
        self.addCleanup(lambda: [lib.__dict__.pop(name, None) for name in names])
        self.ctx = core.Context(None, cache_dir="")
        self.addCleanup(self.ctx.close)
        saved = dict(ops._by_ordinal), ops._raw_stream
        self.addCleanup(lambda: (ops._by_ordinal.clear(), ops._by_ordinal.update(saved[0]),
                                 setattr(ops, "_raw_stream", saved[1])))
        ops._by_ordinal[-1] = self.ctx  # get_device() of a CPU tensor
        ops._raw_stream = lambda ordinal: self.STREAM

    def data(self, act, param, index_dtype):
        g = torch.Generator().manual_seed(3)
        n, h, r = self.N, self.H, self.R
        wide = torch.randn(n, 3 * h, generator=g).to(act)
        table = torch.randn(r, 6 * h, generator=g).to(param)
        return dict(x=wide[:, :h], y=torch.randn(n, h, generator=g).to(act),
                    dout=torch.randn(n, h, generator=g).to(act), dh=wide[:, h:2 * h],
                    w=torch.randn(h, generator=g).to(param), ch=table.chunk(6, 1),
                    idx=torch.randint(0, r, (n,), generator=g).to(index_dtype))

    def last(self):
        return self.calls.pop()

    def same(self, got, want, label):
        self.assertEqual(got[0], want[0], label)
        self.assertEqual(got[2], want[2], label)
        for field, value in want[1].items():
            self.assertEqual(got[1][field], value, f"{label}: {field}")

    def core_call(self, method, d, act, param, index_dtype, eps, **tensors):
        rows = lambda t: (t.data_ptr(), t.stride(0))
        kw = {k: (v if isinstance(v, int) or v is None else rows(v)) for k, v in tensors.items()}
        getattr(self.ctx, method)(self.N, self.H, act_dtype=act, param_dtype=param,
                                  index=(d["idx"].data_ptr(), index_dtype, self.R), eps=eps,
                                  stream=self.STREAM, **kw)
        return self.last()

    def test_blocks_match_the_core(self):
        ops, E = self.ops, self.EPS
        combos = ((torch.bfloat16, torch.bfloat16, torch.int32),
                  (torch.float16, torch.float32, torch.int64),
                  (torch.float32, torch.float32, torch.int64))
        names = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32",
                 torch.int32: "int32", torch.int64: "int64"}
        for act, param, index_dtype in combos:
            d = self.data(act, param, index_dtype)
            x, y, dout, dh, w, idx = (d[k] for k in ("x", "y", "dout", "dh", "w", "idx"))
            sh, sc, gt = d["ch"][:3]
            a, p, i = names[act], names[param], names[index_dtype]
            label = f"{a} {p} {i}"
            ws = lambda op: core.adaln_workspace(op, self.N, self.H, self.R)

            for weight in (w, None):
                out = ops._norm_modulate_impl(x, weight, sh, sc, idx, E)
                got = self.last()
                want = self.core_call("norm_modulate_fwd", d, a, p, i, E, x=x, weight=(
                    None if weight is None else weight.data_ptr()), shift=sh, scale=sc, out=out)
                self.same(got, want, f"norm_modulate fwd {label}")
                for need_dw in ((True, False) if weight is not None else (False,)):
                    dx, dw, dsh, dsc = ops._norm_modulate_bwd_impl(dout, x, weight, sc, idx, E,
                                                                   need_dw)
                    got = self.last()
                    self.assertEqual(got[2][1:], (ws("norm_modulate"), self.STREAM))
                    want = self.core_call(
                        "norm_modulate_bwd", d, a, p, i, E, x=x,
                        weight=None if weight is None else weight.data_ptr(), scale=sc,
                        dout=dout, dx=dx, dweight=dw.data_ptr() if need_dw else None,
                        dshift=dsh, dscale=dsc)
                    self.same((got[0], got[1], ()), (want[0], want[1], ()),
                              f"norm_modulate bwd {label}")
                    self.assertEqual(tuple(dw.shape), (self.H,) if need_dw else (0,))

            out = ops._gated_residual_impl(x, y, gt, idx)
            got = self.last()
            want = self.core_call("gated_residual_fwd", d, a, p, i, None, res=x, y=y, gate=gt,
                                  out=out)
            self.same(got, want, f"gated_residual fwd {label}")
            dy, dg = ops._gated_residual_bwd_impl(dout, y, gt, idx)
            got = self.last()
            self.assertEqual(got[2][1:], (ws("gated_residual"), self.STREAM))
            want = self.core_call("gated_residual_bwd", d, a, p, i, None, y=y, gate=gt,
                                  dout=dout, dy=dy, dgate=dg)
            self.same((got[0], got[1], ()), (want[0], want[1], ()), f"gated_residual bwd {label}")
            # A frozen gate: dy alone, reading no y, no dgate, no workspace.
            dy, dg = ops._gated_residual_bwd_impl(dout, y, gt, idx, False)
            got = self.last()
            want = self.core_call("gated_residual_bwd", d, a, p, i, None, gate=gt, dout=dout, dy=dy)
            self.same(got, want, f"gated_residual bwd, frozen gate {label}")
            self.assertEqual((got[1]["y"], got[1]["dgate"], tuple(dg.shape)), (None, None, (0,)))

            h, out = ops._fused_impl(x, y, gt, w, sh, sc, idx, E)
            got = self.last()
            want = self.core_call("gated_residual_norm_modulate_fwd", d, a, p, i, E, res=x,
                                  y=y, gate=gt, weight=w.data_ptr(), shift=sh, scale=sc, h=h,
                                  out=out)
            self.same(got, want, f"fused fwd {label}")
            for grad_h in (dh, None):
                dres, dy, dg, dw, dsh, dsc = ops._fused_bwd_impl(grad_h, dout, h, y, gt, w, sc,
                                                                 idx, E, True)
                got = self.last()
                self.assertEqual(got[2][1:], (ws("gated_residual_norm_modulate"), self.STREAM))
                want = self.core_call(
                    "gated_residual_norm_modulate_bwd", d, a, p, i, E, x=h, y=y, gate=gt,
                    weight=w.data_ptr(), scale=sc, dh=grad_h, dout=dout, dx=dres, dy=dy,
                    dgate=dg, dweight=dw.data_ptr(), dshift=dsh, dscale=dsc)
                self.same((got[0], got[1], ()), (want[0], want[1], ()), f"fused bwd {label}")
        self.assertEqual(self.calls, [])

    def test_function_path_takes_parameters(self):
        # A weight is usually an nn.Parameter: it keeps the Function path;
        # another subclass goes through the ops.
        ops = self.ops
        saved = ops._direct, ops._EAGER
        self.addCleanup(lambda: (setattr(ops, "_direct", saved[0]), setattr(ops, "_EAGER", saved[1])))
        ops._direct, ops._EAGER = (lambda t: True), "function"

        class Other(torch.Tensor):
            pass

        x = torch.empty(2, 4)
        self.assertTrue(ops._function_path(x, torch.nn.Parameter(torch.empty(4)), None))
        self.assertFalse(ops._function_path(x, torch.empty(4).as_subclass(Other)))

    def test_direct_only_on_real_cuda_tensors(self):
        ops = self.ops
        self.assertFalse(ops._direct(torch.empty(2)))               # CPU
        self.assertFalse(ops._direct(torch.empty(2, device="meta")))
        from torch._subclasses.fake_tensor import FakeTensorMode
        with FakeTensorMode():
            fake = torch.empty(2, device="cuda")
            self.assertFalse(ops._direct(fake))
        self.assertFalse(ops._backward_direct(torch.empty(2)))


@unittest.skipIf(torch is None, "torch is not installed")
class TorchEagerFunction(unittest.TestCase):
    """The eager torch.autograd.Function path (KJIT_EAGER=function) without a
    GPU: its implementations replaced by the float64 references on CPU, each
    Function's gradients (saved tensors, which inputs get one, the chunk(6)
    views' table gradient) must be the references' own."""

    N, H, R, EPS = 7, 16, 3, 1e-5

    def setUp(self):
        from kjit import ops
        from kjit import reference as ref
        self.ops, self.ref = ops, ref
        # Every function replaced below (also the training pair's, which
        # a test replaces again): another class run after this one must
        # find the kernels' own.
        saved = {k: getattr(ops, k) for k in ("_norm_modulate_impl", "_norm_modulate_bwd_impl",
                                                "_gated_residual_impl", "_gated_residual_bwd_impl",
                                                "_fused_impl", "_fused_bwd_impl", "_gather_impl",
                                                "_gather_bwd_impl", "_norm_modulate_fwd",
                                                "_norm_modulate_bwd_run", "_gated_residual_fwd",
                                                "_gated_residual_bwd_run", "_fused_fwd", "_fused_bwd_run",
                                                "_direct")}
        self.addCleanup(lambda: [setattr(ops, k, v) for k, v in saved.items()])
        # CPU tensors stand in for CUDA ones: a backward takes the direct
        # path only for a plain CUDA gradient (a fake one under compiled
        # autograd goes through the ops).
        ops._direct = lambda t: type(t) in ops._PLAIN and not torch.compiler.is_compiling()

        def grads(fn, leaves, outs_up):
            leaves = [None if t is None else t.detach().requires_grad_() for t in leaves]
            with torch.enable_grad():  # a backward runs without grad mode
                outs = fn(*leaves)
            outs = outs if isinstance(outs, (tuple, list)) else (outs,)
            pairs = [(o, u) for o, u in zip(outs, outs_up) if u is not None]
            live = [t for t in leaves if t is not None]
            got = iter(torch.autograd.grad([o for o, _ in pairs], live, [u for _, u in pairs],
                                           allow_unused=True))
            return [None if t is None else next(got) for t in leaves]

        def nm_bwd(dout, x, w, scale, index, eps, need_dw, need_tables=True):
            sh = torch.zeros_like(scale)
            g = grads(lambda x_, sh_, sc_, w_: ref.norm_modulate(x_, w_, sh_, sc_, index, eps),
                      [x, sh, scale, w], [dout])
            return g[0], g[3] if need_dw else scale.new_empty((0,)), g[1], g[2]

        def gr_bwd(dout, y, gate, index, need_gate=True):
            res = torch.zeros_like(y)
            g = grads(lambda y_, gt_: ref.gated_residual(res, y_, gt_, index), [y, gate], [dout])
            return g[0], g[1] if need_gate else gate.new_empty((0,))

        def fu_bwd(dh, dout, h, y, gate, w, scale, index, eps, need_dw, need_tables=True):
            # h = res + gate * y with res = h - gate * y: the same h, so the
            # same gradients through it.
            res = (h - gate.index_select(0, index) * y).detach()
            sh = torch.zeros_like(scale)
            g = grads(lambda r_, y_, gt_, w_, sh_, sc_: ref.gated_residual_norm_modulate(
                r_, y_, gt_, w_, sh_, sc_, index, eps), [res, y, gate, w, sh, scale], [dh, dout])
            return g[0], g[1], g[2], g[3] if need_dw else scale.new_empty((0,)), g[4], g[5]

        def ga_bwd(douts, index, rows):
            tabs = [d.new_zeros((rows, d.shape[1])) for d in douts]
            return list(grads(lambda *t: ref.adaln_row_gather(list(t), index), tabs, douts))

        ops._norm_modulate_impl = lambda x, w, sh, sc, i, e: ref.norm_modulate(x, w, sh, sc, i, e)
        ops._norm_modulate_bwd_impl = nm_bwd
        ops._gated_residual_impl = ref.gated_residual
        ops._gated_residual_bwd_impl = gr_bwd
        ops._fused_impl = lambda *a: tuple(ref.gated_residual_norm_modulate(*a))
        ops._fused_bwd_impl = fu_bwd
        ops._gather_impl = ref.adaln_row_gather
        ops._gather_bwd_impl = ga_bwd
        # The Functions' training forward and backward: the same references;
        # the partition a training forward returns reaches the backward.
        token = object()

        def with_part(fn):
            def run(*a):
                self.assertIs(a[-1], token)
                return fn(*a[:-1])
            return run

        ops._norm_modulate_fwd = lambda x, w, sh, sc, i, e, train: (ref.norm_modulate(x, w, sh, sc, i, e), token)
        ops._norm_modulate_bwd_run = with_part(nm_bwd)
        # gated_residual's as the real ones pair them: a partition only from
        # a training forward, none for a frozen gate's backward.
        ops._gated_residual_fwd = lambda r, y, g, i, train: (ref.gated_residual(r, y, g, i), token if train else None)

        def gr_run(*a):  # (dout, y, gate, index, need_gate, part)
            self.assertIs(a[-1], token if a[4] else None)
            return gr_bwd(*a[:-1])

        ops._gated_residual_bwd_run = gr_run
        ops._fused_fwd = lambda *a: (tuple(ref.gated_residual_norm_modulate(*a[:-1])), token)
        ops._fused_bwd_run = with_part(fu_bwd)

    def data(self, seed):
        g = torch.Generator().manual_seed(seed)
        d = dict(dtype=torch.float64)
        return (torch.randn(self.N, self.H, generator=g, **d), torch.randn(self.N, self.H, generator=g, **d),
                torch.randn(self.R, 6 * self.H, generator=g, **d), 1 + torch.rand(self.H, generator=g, **d),
                torch.randint(0, self.R, (self.N,), generator=g))

    def compare(self, via_function, via_reference, leaves, n_out):
        ups = [torch.randn(self.N, self.H, dtype=torch.float64, generator=torch.Generator().manual_seed(k))
               for k in range(n_out)]
        results = []
        for fn in (via_function, via_reference):
            ls = [t.detach().clone().requires_grad_() for t in leaves]
            outs = fn(*ls)
            outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
            torch.autograd.backward(outs, ups[:len(outs)])
            results.append(([o.detach() for o in outs], [t.grad for t in ls]))
        (o1, g1), (o2, g2) = results
        for a, b in zip(o1 + g1, o2 + g2):
            self.assertEqual(a is None, b is None)
            if a is not None:
                self.assertTrue(torch.allclose(a, b, rtol=1e-12, atol=1e-12))

    def test_functions(self):
        ops, ref, E = self.ops, self.ref, self.EPS
        x, y, table, w, idx = self.data(1)
        ch = lambda t: t.chunk(6, 1)
        self.compare(lambda x, t, w: ops._NormModulateFn.apply(x, w, ch(t)[0], ch(t)[1], idx, E),
                     lambda x, t, w: ref.norm_modulate(x, w, ch(t)[0], ch(t)[1], idx, E), [x, table, w], 1)
        self.compare(lambda x, t: ops._NormModulateFn.apply(x, None, ch(t)[0], ch(t)[1], idx, E),
                     lambda x, t: ref.norm_modulate(x, None, ch(t)[0], ch(t)[1], idx, E), [x, table], 1)
        self.compare(lambda r, y, t: ops._GatedResidualFn.apply(r, y, ch(t)[2], idx),
                     lambda r, y, t: ref.gated_residual(r, y, ch(t)[2], idx), [x, y, table], 1)
        self.compare(lambda r, y, t, w: ops._FusedFn.apply(r, y, ch(t)[2], w, ch(t)[0], ch(t)[1], idx, E),
                     lambda r, y, t, w: ref.gated_residual_norm_modulate(r, y, ch(t)[2], w, ch(t)[0], ch(t)[1],
                                                                         idx, E), [x, y, table, w], 2)
        self.compare(lambda t: ops._GatherFn.apply(idx, *ch(t)),
                     lambda t: ref.adaln_row_gather(list(ch(t)), idx), [table], 6)

    def test_frozen_gate(self):
        # gated_residual with its gate frozen: the Function runs the plain
        # forward (no partition) and asks the backward for dy alone; with
        # the gate trainable, the training forward and every gradient.
        ops, ref = self.ops, self.ref
        x, y, table, w, idx = self.data(3)
        seen = []
        fwd, bwd = ops._gated_residual_fwd, ops._gated_residual_bwd_run
        ops._gated_residual_fwd = lambda *a: (seen.append(("train", a[-1])), fwd(*a))[1]
        ops._gated_residual_bwd_run = lambda *a: (seen.append(("need_gate", a[4])), bwd(*a))[1]
        gate = table.chunk(6, 1)[5]
        self.compare(lambda r, y_: ops._GatedResidualFn.apply(r, y_, gate, idx),
                     lambda r, y_: ref.gated_residual(r, y_, gate, idx), [x, y], 1)
        self.assertEqual(seen, [("train", False), ("need_gate", False)])
        seen.clear()
        self.compare(lambda r, y_, g: ops._GatedResidualFn.apply(r, y_, g, idx),
                     lambda r, y_, g: ref.gated_residual(r, y_, g, idx), [x, y, gate], 1)
        self.assertEqual(seen, [("train", True), ("need_gate", True)])

    def test_double_backward_raises(self):
        # The kernels' gradients have no autograd history. Under
        # create_graph=True the Functions use the torch.library backward ops,
        # which have no autograd formula: a second derivative raises (on a
        # GPU when it is taken; here already at the first backward, the ops
        # refusing CPU tensors with a ValueError) instead of silently leaving
        # kjit's part out.
        ops, E = self.ops, self.EPS
        x, y, table, w, idx = self.data(2)
        ch = lambda t: t.chunk(6, 1)
        calls = [lambda x_, t_: ops._NormModulateFn.apply(x_, w, ch(t_)[0], ch(t_)[1], idx, E),
                 lambda x_, t_: ops._GatedResidualFn.apply(x_, y, ch(t_)[2], idx),
                 lambda x_, t_: ops._FusedFn.apply(x_, y, ch(t_)[2], w, ch(t_)[0], ch(t_)[1], idx, E)[1],
                 lambda x_, t_: ops._GatherFn.apply(idx, *ch(t_))[0] * x_]
        for k, fn in enumerate(calls):
            x_, t_ = x.clone().requires_grad_(), table.clone().requires_grad_()
            with self.assertRaises(ValueError, msg=f"call {k}"):
                g = torch.autograd.grad(fn(x_, t_).sum(), [x_, t_], create_graph=True)
                # A loss that also depends on x_ directly backpropagates even
                # when g carries no history: only a raise shows the second
                # derivative was refused.
                ((g[1] if k == 3 else g[0]) ** 2 + x_ ** 2).sum().backward()
            # Without create_graph the Functions' own backward runs.
            x_, t_ = x.clone().requires_grad_(), table.clone().requires_grad_()
            torch.autograd.grad(fn(x_, t_).sum(), [x_, t_])

    def test_mode_is_checked(self):
        # A bad value fails the first eager op call, not the import (kjit.client
        # and kjit.core do not use it); the case of a good one does not matter.
        code = ("import torch, kjit.client, kjit.ops\n"
                "kjit.ops._direct = lambda t: True  # as for a CUDA tensor in eager mode\n"
                "try:\n    kjit.ops._function_path(torch.empty(1))\n"
                "except ValueError as e:\n    print(e)\n"
                "kjit.ops._direct = lambda t: False  # traced: the ops, whatever the setting\n"
                "print('traced', kjit.ops._function_path(torch.empty(1)))\n")
        env = dict(os.environ, KJIT_EAGER="bogus", PYTHONPATH=str(ROOT / "bindings" / "python"))
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("KJIT_EAGER='bogus': expected 'custom_op' or 'function'", r.stdout)
        self.assertIn("traced False", r.stdout)
        env["KJIT_EAGER"] = "Custom_Op"
        r = subprocess.run([sys.executable, "-c", "import kjit.ops; print(kjit.ops._EAGER)"], env=env,
                           capture_output=True, text=True)
        self.assertEqual(r.stdout.strip(), "custom_op", r.stderr)


@unittest.skipIf(torch is None, "torch is not installed")
class ConformanceVerdict(unittest.TestCase):
    """bench/conformance.py's verdict on kjit's entry: it fails a check that
    failed and a check that never ran, not only a bad number."""

    @classmethod
    def setUpClass(cls):
        import importlib.util
        spec = importlib.util.spec_from_file_location("kjit_conformance", ROOT / "bench" / "conformance.py")
        cls.conf = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(cls.conf)

    def report(self):
        def row():
            return {"spec_rel_err": {"fwd": {"out0": 1e-3}, "tol": {"out0": 4e-3},
                                     "grads": {"x": 1e-3, "sh": 2e-3}, "grads_tol": {"x": 4e-3, "sh": 4e-3}}}
        return {"results": {"plain": {"kjit": {
            "has_backward": True,
            "batch_invariance": {"batch_invariant": True, "params_repeatable": True},
            "accuracy_latency": {"4097": row(), "32768": row()}}}}}

    def verdict(self, rep):
        return self.conf.kjit_verdict("norm_modulate", rep, ["4097", "32768"], ["x", "sh"])

    def test_complete_report_passes(self):
        self.assertEqual(self.verdict(self.report()), [])

    def test_each_gap_fails(self):
        def kj(rep):
            return rep["results"]["plain"]["kjit"]
        cases = {
            "batch_invariant is False": lambda r: kj(r)["batch_invariance"].update(batch_invariant=False),
            "batch_invariant is None": lambda r: kj(r)["batch_invariance"].pop("batch_invariant"),
            "params_repeatable is None": lambda r: kj(r)["batch_invariance"].update(params_repeatable=None),
            "params_repeatable is False": lambda r: kj(r)["batch_invariance"].update(params_repeatable=False),
            "no accuracy row at 32768": lambda r: kj(r)["accuracy_latency"].pop("32768"),
            "no accuracy rows": lambda r: kj(r).update(accuracy_latency={}),
            "no forward error": lambda r: kj(r)["accuracy_latency"]["4097"]["spec_rel_err"].pop("fwd"),
            "gradient errors missing for ['sh']":
                lambda r: kj(r)["accuracy_latency"]["4097"]["spec_rel_err"]["grads"].pop("sh"),
            "gradient errors missing for every": lambda r: kj(r)["accuracy_latency"]["4097"].update(
                spec_rel_err={"fwd": {"out0": 1e-3}, "tol": {"out0": 4e-3}}),
            "grad x rel err nan": lambda r: kj(r)["accuracy_latency"]["4097"]["spec_rel_err"]["grads"].update(
                x=float("nan")),
            "fwd out0 rel err 0.005": lambda r: kj(r)["accuracy_latency"]["32768"]["spec_rel_err"]["fwd"].update(
                out0=5e-3),
            "no kjit entry": lambda r: r["results"]["plain"].pop("kjit"),
        }
        for what, damage in cases.items():
            with self.subTest(what):
                rep = self.report()
                damage(rep)
                got = self.verdict(rep)
                self.assertTrue(any(what in line for line in got), got)


if __name__ == "__main__":
    unittest.main(verbosity=2)
