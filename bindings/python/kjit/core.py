"""The torch-free core: libkjit's C API over plain integers.

Device pointers are ints (cuMemAlloc's CUdeviceptr, torch's data_ptr(), CuPy's
data.ptr), streams are ints (a cudaStream_t's address; 0 is the legacy default
stream), strides are in elements. A 2-D argument is a (pointer, row_stride)
pair. Failed calls raise KjitError (or a subclass), with the library's own
message, which names the argument at fault; Python-level mistakes (a float
where a pointer belongs, an unknown argument name) raise TypeError or
ValueError before the library is called.
"""

import ctypes
import os
import numbers
import threading
import weakref

from . import _lib
from ._lib import LibraryError

__all__ = [
    "KjitError", "InvalidArgument", "IndexOutOfRange", "OutOfMemory", "LibraryError",
    "Context", "check", "dtype_code", "dtype_name", "dtype_size", "status_name",
    "adaln_workspace", "adaln_partition_bytes", "row_gather_workspace", "runtime_info", "device_info", "op_names",
    "library_path",
]


class KjitError(RuntimeError):
    """A libkjit call failed. status: the KJIT_E* code; name: "KJIT_EINVAL";
    message: kjit_last_error(), naming the argument, file or kernel at fault."""

    def __init__(self, function, status, name, message):
        self.function, self.status, self.name, self.message = function, status, name, message
        super().__init__(f"{function}: {name}: {message}")


class InvalidArgument(KjitError, ValueError):
    """KJIT_EINVAL and KJIT_EUNSUPPORTED: also a ValueError, as Python callers expect."""


class IndexOutOfRange(KjitError, IndexError):
    """KJIT_EINDEX: an adaln index outside 0..R-1 (index checking SYNC)."""


class OutOfMemory(KjitError, MemoryError):
    """KJIT_ENOMEM."""


_CLASSES = {
    "KJIT_EINVAL": InvalidArgument,
    "KJIT_EUNSUPPORTED": InvalidArgument,
    "KJIT_EINDEX": IndexOutOfRange,
    "KJIT_ENOMEM": OutOfMemory,
}


def _text(b):
    return b.decode("utf-8", "replace") if b else ""


def status_name(status):
    """"KJIT_EINVAL" for -1, from the library's own table."""
    return _text(_lib.load().kjit_status_name(_i32(status, "status")))


def check(status, function):
    """Raises the KjitError for a non-zero status returned by `function`."""
    if status == 0:
        return
    lib = _lib.load()
    name = status_name(status)
    message = _text(lib.kjit_last_error()) or _text(lib.kjit_status_string(status))
    raise _CLASSES.get(name, KjitError)(function, status, name, message)


def library_path():
    """Where the loaded libkjit came from (a path, or the name the loader resolved)."""
    return _lib.load().path


# ---- argument conversion --------------------------------------------------


def _as_int(value, what):
    if type(value) is int:  # the common case, first
        return value
    # bool is an int subclass but never a pointer, size or stride.
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{what}: expected an int, got {type(value).__name__}")
    return value.__index__()


def _int(value, what, bits=64):
    """An int that fits the C argument's signed `bits`-bit type (ctypes would
    silently wrap one that does not)."""
    value = _as_int(value, what)
    if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
        raise ValueError(f"{what}: {value} does not fit the library's {bits}-bit signed integer")
    return value


def _i32(value, what):
    return _int(value, what, 32)


def _unsigned(value, what, kind):
    """A non-negative int below 2**64 (an address, a stream or a byte count)."""
    value = _as_int(value, what)
    if value < 0:
        raise ValueError(f"{what}: {kind} cannot be negative ({value})")
    if value >= 1 << 64:
        raise ValueError(f"{what}: {value} does not fit 64 bits")
    return value


def _pointer(value, what):
    """None -> NULL; otherwise a non-negative int address below 2**64."""
    if value is None:
        return None
    return _unsigned(value, what, "a device pointer") or None


def _stream(value):
    """A CUstream handle as an int (0: the legacy default stream)."""
    if value is None:
        return None
    return _unsigned(value, "stream", "a stream handle") or None


def _real(value, what):
    """A finite-or-not real number for a C float/double argument (not None,
    not a bool, not a string)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what}: expected a real number, got {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:  # an int past the double range
        raise ValueError(f"{what}: {str(value)[:24]}... is too large for a C double") from None


_FLT_MAX = 3.4028234663852886e38


def _eps(value):
    """eps for the library's C float: finite and >= 0 before the narrowing
    (which would make -1e-50 a -0.0 that passes, and 1e39 an inf)."""
    eps = _real(value, "eps")
    if not 0.0 <= eps <= _FLT_MAX:  # NaN fails too
        raise ValueError(f"eps: {eps!r} must be finite (a float32) and >= 0")
    return eps


def _strided(value, what):
    """A 2-D argument: (pointer, row_stride), or None for NULL."""
    if value is None:
        return None, 0
    if not (isinstance(value, (tuple, list)) and len(value) == 2):
        raise TypeError(f"{what}: expected a (pointer, row_stride) pair, got {value!r}")
    return _pointer(value[0], what + " pointer"), _int(value[1], what + " row stride")


_dtype_codes = {}  # names the library has parsed once


def _c_path(value, name):
    """A str, bytes or os.PathLike as C string bytes; a NUL (which C would
    cut the string at) or another type is refused, naming the argument."""
    try:
        raw = os.fsencode(value)
    except TypeError:
        raise TypeError(f"{name}: expected a str, bytes or path, got {type(value).__name__}") from None
    if b"\0" in raw:
        raise ValueError(f"{name}: {value!r} contains a NUL character")
    return raw


def dtype_code(dtype, what="dtype", allowed=None):
    """kjit_dtype of a name ("bf16", "bfloat16", "fp32", "int64", ...) or a
    code; a bad one is refused naming `what` (the argument it came from) and,
    for a name kjit does not know, the names `what` takes (`allowed`)."""
    if isinstance(dtype, str):
        code = _dtype_codes.get(dtype)
        if code is None:
            if "\0" in dtype:
                raise ValueError(f"{what}: {dtype!r} contains a NUL character")
            out = ctypes.c_int(-1)
            status = _lib.load().kjit_dtype_parse(dtype.encode(), ctypes.byref(out))
            if status and allowed:
                raise InvalidArgument(f"{what} (kjit_dtype_parse)", status, status_name(status),
                                      f"{dtype!r} is not a dtype kjit knows; {what} takes {', '.join(allowed)}")
            check(status, f"{what} (kjit_dtype_parse)")
            code = _dtype_codes[dtype] = out.value
        return code
    code = _int(dtype, what)
    if code not in (_lib.F32, _lib.BF16, _lib.F16, _lib.I32, _lib.I64):
        raise ValueError(f"{what}: {code} is not a kjit_dtype (0..4)")
    return code


def dtype_name(dtype):
    return _text(_lib.load().kjit_dtype_name(dtype_code(dtype)))


def dtype_size(dtype):
    return _lib.load().kjit_dtype_size(dtype_code(dtype))


_INDEX_CHECK = {"off": _lib.INDEX_CHECK_OFF, "sync": _lib.INDEX_CHECK_SYNC,
                "async": _lib.INDEX_CHECK_ASYNC}
_ADALN_STRIDED = dict(_lib.ADALN_TENSORS)  # name -> has a row stride
_ADALN_OPS = {"norm_modulate": _lib.NORM_MODULATE, "gated_residual": _lib.GATED_RESIDUAL,
              "gated_residual_norm_modulate": _lib.GATED_RESIDUAL_NORM_MODULATE}
# The tensors each call reads or writes (kjit.h's comment on kjit_adaln_args);
# any other field of the block would be ignored by the library, so a name
# outside the call's set is refused rather than silently unused.
_ADALN_USES = {
    "kjit_norm_modulate_fwd": ("x", "weight", "shift", "scale", "out"),
    "kjit_norm_modulate_bwd": ("x", "weight", "scale", "dout", "dx", "dweight", "dshift", "dscale"),
    "kjit_gated_residual_fwd": ("res", "y", "gate", "out"),
    "kjit_gated_residual_bwd": ("y", "gate", "dout", "dx", "dy", "dgate"),
    "kjit_gated_residual_norm_modulate_fwd": ("res", "y", "gate", "weight", "shift", "scale", "h", "out"),
    "kjit_gated_residual_norm_modulate_bwd": ("x", "y", "gate", "weight", "scale", "dh", "dout", "dx", "dy",
                                              "dgate", "dweight", "dshift", "dscale"),
}


def _index(index, what="index"):
    """(pointer, dtype, rows) -> kjit_index; rows is R, the table rows."""
    if not (isinstance(index, (tuple, list)) and len(index) == 3):
        raise TypeError(f"{what}: expected (pointer, dtype, rows), got {index!r}")
    ptr, dtype, rows = index
    return _lib.Index(_pointer(ptr, what + " pointer"), dtype_code(dtype, what + " dtype", ("int32", "int64")),
                      _int(rows, what + " rows"))


def _workspace(workspace):
    """None -> the context's own workspace; else (pointer, bytes)."""
    if workspace is None:
        return None, 0
    if not (isinstance(workspace, (tuple, list)) and len(workspace) == 2):
        raise TypeError(f"workspace: expected a (pointer, bytes) pair or None, got {workspace!r}")
    return (_pointer(workspace[0], "workspace pointer"),
            _unsigned(workspace[1], "workspace bytes", "a byte count"))


# ---- queries that need no context ------------------------------------------


def _choice(value, table, name):
    """table[value] for a str value; else TypeError or ValueError naming name
    (a list or dict would otherwise fail as "unhashable type")."""
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected one of {sorted(table)}, got {type(value).__name__}")
    if value not in table:
        raise ValueError(f"{name}: {value!r} is not one of {sorted(table)}")
    return table[value]


def _adaln_size(function, op, n, hidden, rows):
    _choice(op, _ADALN_OPS, "op")
    out = ctypes.c_size_t(0)
    check(getattr(_lib.load(), function)(_ADALN_OPS[op], _int(n, "n"), _i32(hidden, "hidden"),
                                         _int(rows, "rows"), ctypes.byref(out)), function)
    return out.value


def adaln_workspace(op, n, hidden, rows):
    """Backward workspace bytes of "norm_modulate", "gated_residual" or
    "gated_residual_norm_modulate" for n rows, hidden, R table rows."""
    return _adaln_size("kjit_adaln_workspace", op, n, hidden, rows)


def adaln_partition_bytes(op, n, hidden, rows):
    """Bytes of the row partition a training forward builds for its backward
    (kjit_adaln_train_fwd / kjit_adaln_train_bwd): 4 per row plus the
    sort's counters (about 4 per row at small R)."""
    return _adaln_size("kjit_adaln_partition_bytes", op, n, hidden, rows)


def row_gather_workspace(n, hidden, num_tables, rows):
    """Backward workspace bytes of adaln_row_gather."""
    out = ctypes.c_size_t(0)
    check(_lib.load().kjit_adaln_row_gather_workspace(
        _int(n, "n"), _i32(hidden, "hidden"), _i32(num_tables, "num_tables"), _int(rows, "rows"),
        ctypes.byref(out)), "kjit_adaln_row_gather_workspace")
    return out.value


def runtime_info():
    """NVRTC version and path, the archs it targets, the driver version, device count."""
    info = _lib.RuntimeInfo()
    check(_lib.load().kjit_runtime_info_get(ctypes.byref(info)), "kjit_runtime_info_get")
    return {
        "nvrtc": f"{info.nvrtc_major}.{info.nvrtc_minor}" if info.nvrtc_major else None,
        "nvrtc_path": _text(info.nvrtc_path),
        "archs": [f"sm_{a}" for a in info.archs[:info.n_archs]],
        "driver_version": info.driver_version,
        "device_count": info.device_count,
    }


def device_info(ordinal):
    info = _lib.DeviceInfo()
    check(_lib.load().kjit_device_info_get(_i32(ordinal, "ordinal"), ctypes.byref(info)),
          "kjit_device_info_get")
    return {"name": _text(info.name), "sm": info.sm, "sm_count": info.sm_count,
            "memory_bytes": info.memory_bytes}


def op_names():
    lib = _lib.load()
    return [_text(lib.kjit_op_name(i)) for i in range(lib.kjit_op_count())]


# ---- the context --------------------------------------------------------------


def _bool_arg(fn, name, v):
    """v as a bool: a bool, an int or a NumPy bool (numpy.bool_, named "bool"
    since NumPy 2). bool("False") is True: a string (or None) is refused,
    not read."""
    if not isinstance(v, (bool, int)) and not (type(v).__module__ == "numpy"
                                               and type(v).__name__ in ("bool_", "bool")):
        raise TypeError(f"{fn}: {name}: expected a bool, got {type(v).__name__}")
    return bool(v)


# Every open Context of this process, so that a forked child can disown them.
_live = weakref.WeakSet()
# The pid of this process once it has made a device Context (CUDA started
# here), and in a forked child the pid of such a parent (or grandparent):
# CUDA cannot start again in this process.
_cuda_pid = None
_cuda_forked_from = None


def _forget_after_fork():
    """In a forked child: the parent's contexts are not this process's (a
    CUDA context does not survive fork, and a lock of kjit's may have been
    held by another thread at the fork). Each is disowned, never destroyed
    here: using it raises a RuntimeError that says so, and close() or its
    collection does nothing."""
    global _cuda_forked_from, _cuda_pid
    if _cuda_pid is not None:  # also where its device contexts were closed
        _cuda_forked_from, _cuda_pid = _cuda_pid, None
    for ctx in list(_live):
        ctx._close_lock = threading.Lock()  # another thread may have held it at the fork
        if ctx._handle is not None:
            ctx._forked_from = ctx._pid
            ctx._handle = None
    _live.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def _cuda_started(pid):
    global _cuda_pid
    _cuda_pid = pid


class Context:
    """A kjit_ctx: one CUDA device's kernels and cache.

    device: CUDA ordinal, or None for a compile-only context. cache_dir: None
    for $KJIT_CACHE_DIR / ~/.cache/kjit, "" for memory only. arch: None for
    the device's own (where NVRTC does not know it, the newest arch NVRTC
    knows whose cubins run there); an arch the device cannot run raises
    InvalidArgument (compile for another arch with device=None).
    index_check: "off" (the caller guarantees 0 <= index < R), "sync" (bad
    indices raise IndexOutOfRange, the call waits for its stream, so it
    cannot be graph-captured) or "async" (rows with a bad index are skipped
    and a flag is raised: index_error()).

    Without a CUDA driver the context is still created (compile-only) and op
    calls raise KjitError KJIT_ENODRIVER after checking their arguments.
    Thread-safe; close() (or a with-block) releases it. A process forked
    from the one that made it does not use it (a CUDA context does not
    survive fork): there it raises RuntimeError, and close() does nothing.
    Nor does such a child make a device Context when the parent had made
    one (CUDA cannot start again in a child forked after it started): worker
    processes that use CUDA start with multiprocessing's 'spawn' method.
    """

    def __init__(self, device=0, cache_dir=None, arch=None, index_check="off"):
        _choice(index_check, _INDEX_CHECK, "index_check")
        self._lib = _lib.load()
        opts = _lib.CtxOptions()
        self._lib.kjit_ctx_options_init(ctypes.byref(opts))
        if device is not None and _i32(device, "device") < 0:
            # -1 is KJIT_NO_DEVICE in C, and what torch gives a CPU tensor's device.
            raise ValueError(f"device: {device} is not a CUDA ordinal; pass None for a compile-only context")
        opts.device = _lib.NO_DEVICE if device is None else _i32(device, "device")
        opts.cache_dir = None if cache_dir is None else _c_path(cache_dir, "cache_dir")
        opts.arch = None if arch is None else _c_path(str(arch) if isinstance(arch, int) else arch, "arch")
        opts.index_check = _INDEX_CHECK[index_check]
        if device is not None and _cuda_forked_from is not None:
            raise RuntimeError(f"kjit Context(device={device}): this process ({os.getpid()}) is a fork of process "
                               f"{_cuda_forked_from}, which had a kjit Context on a CUDA device: CUDA cannot be "
                               "used in a child forked after it was initialized (start worker processes that "
                               "use CUDA with multiprocessing's 'spawn' method); a compile-only Context "
                               "(device=None) works")
        handle = ctypes.c_void_p()
        check(self._lib.kjit_ctx_create(ctypes.byref(handle), ctypes.byref(opts)), "kjit_ctx_create")
        self._handle = handle
        self._close_lock = threading.Lock()
        self._pid = os.getpid()
        self._forked_from = None
        if self._lib.kjit_ctx_has_device(handle):
            _cuda_started(self._pid)
        self.device = device
        self.index_check = index_check
        _live.add(self)

    @property
    def handle(self):
        if self._handle is None:
            if self._forked_from is not None:
                raise RuntimeError(f"this kjit Context belongs to process {self._forked_from}, of which this "
                                   f"process ({os.getpid()}) is a fork: it is not used here (a CUDA context "
                                   "does not survive fork; worker processes that use CUDA start with "
                                   "multiprocessing's 'spawn' method)")
            raise ValueError("the kjit Context is closed")
        return self._handle

    def close(self):
        """Destroys the context; calls on other threads must have returned
        (the ops take no lock per call). kjit.context() then makes a new one."""
        with self._close_lock:
            if self._handle is not None:
                self._lib.kjit_ctx_destroy(self._handle)
                self._handle = None

    # A copy would share the handle and destroy it twice (a crash at exit).
    def __copy__(self):
        raise TypeError("a kjit Context cannot be copied: share the one object, or create another")

    def __deepcopy__(self, memo):
        raise TypeError("a kjit Context cannot be copied: share the one object, or create another")

    def __reduce__(self):
        raise TypeError("a kjit Context cannot be pickled: it holds a CUDA context of this process")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        # Interpreter shutdown may have torn down the module globals already.
        if getattr(self, "_handle", None) is not None and ctypes is not None:
            self.close()

    @property
    def has_device(self):
        return bool(self._lib.kjit_ctx_has_device(self.handle))

    @property
    def arch(self):
        return _text(self._lib.kjit_ctx_arch(self.handle))

    @property
    def cache_dir(self):
        return _text(self._lib.kjit_ctx_cache_dir(self.handle))

    def index_error(self, stream=0):
        """Waits for `stream` (a CUstream handle, or an object with one in
        .cuda_stream, e.g. a torch.cuda.Stream); True if an op since the last
        call saw an index out of range (index_check="async"); clears the flag."""
        stream = getattr(stream, "cuda_stream", stream)
        flag = ctypes.c_int(0)
        check(self._lib.kjit_ctx_index_error(self.handle, _stream(stream),
                                             ctypes.byref(flag)), "kjit_ctx_index_error")
        return bool(flag.value)

    def cache_counters(self):
        c = _lib.CacheCounters()
        check(self._lib.kjit_ctx_cache_counters(self.handle, ctypes.byref(c)),
              "kjit_ctx_cache_counters")
        return {name: getattr(c, name) for name, _ in _lib.CacheCounters._fields_}

    # ---- ops ---------------------------------------------------------------

    def timestep_sinusoid(self, t, n, dim, out, out_stride=None, out_dtype="fp32", *,
                          flip_sin_to_cos=False, downscale_freq_shift=1.0, scale=1.0,
                          max_period=10000.0, stream=0):
        """out[n, dim] (row stride out_stride, default dim) from t[n] (fp32)."""
        opts = _lib.SinusoidOpts()
        self._lib.kjit_sinusoid_opts_init(ctypes.byref(opts))
        opts.flip_sin_to_cos = int(_bool_arg("timestep_sinusoid", "flip_sin_to_cos", flip_sin_to_cos))
        opts.downscale_freq_shift = _real(downscale_freq_shift, "downscale_freq_shift")
        opts.scale = _real(scale, "scale")
        opts.max_period = _real(max_period, "max_period")
        dim = _i32(dim, "dim")
        check(self._lib.kjit_timestep_sinusoid(
            self.handle, _pointer(t, "t"), _int(n, "n"), dim, _pointer(out, "out"),
            dim if out_stride is None else _int(out_stride, "out_stride"),
            dtype_code(out_dtype, "out_dtype", ("fp32", "bf16", "fp16")),
            ctypes.byref(opts), _stream(stream)), "kjit_timestep_sinusoid")

    def _row_gather_args(self, n, hidden, dtype, index, pairs):
        a = _lib.RowGatherArgs()
        a.n, a.hidden, a.dtype = _int(n, "n"), _i32(hidden, "hidden"), dtype_code(dtype, "dtype", ("fp32", "bf16"))
        a.index = _index(index)
        count = None
        for field, items in pairs.items():
            if not isinstance(items, (list, tuple)):
                raise TypeError(f"{field}: expected a list of (pointer, row_stride) pairs")
            if not 1 <= len(items) <= _lib.MAX_TABLES:
                raise ValueError(f"{field}: {len(items)} tables; kjit takes 1..{_lib.MAX_TABLES}")
            if count is not None and len(items) != count:
                raise ValueError(f"{field}: {len(items)} entries, but {count} tables")
            count = len(items)
            for k, item in enumerate(items):
                ptr, stride = _strided(item, f"{field}[{k}]")
                getattr(a, field)[k] = ptr
                getattr(a, field + "_stride")[k] = stride
        a.num_tables = count
        return a

    def adaln_row_gather_fwd(self, n, hidden, dtype, index, tables, outs, stream=0):
        """outs[k][i] = tables[k][index[i]]. tables, outs: lists of (pointer,
        row_stride); index: (pointer, "int32"|"int64", R)."""
        a = self._row_gather_args(n, hidden, dtype, index, {"table": tables, "out": outs})
        check(self._lib.kjit_adaln_row_gather_fwd(self.handle, ctypes.byref(a),
                                                  _stream(stream)),
              "kjit_adaln_row_gather_fwd")

    def adaln_row_gather_bwd(self, n, hidden, dtype, index, douts, dtables, workspace=None,
                             stream=0):
        """dtables[k][r] = sum over index[i] == r of douts[k][i]. workspace:
        (pointer, bytes) of row_gather_workspace() bytes, or None for the
        context's own (one stream at a time)."""
        a = self._row_gather_args(n, hidden, dtype, index, {"dout": douts, "dtable": dtables})
        ws, ws_bytes = _workspace(workspace)
        check(self._lib.kjit_adaln_row_gather_bwd(self.handle, ctypes.byref(a), ws, ws_bytes,
                                                  _stream(stream)),
              "kjit_adaln_row_gather_bwd")

    def _adaln(self, function, n, hidden, act_dtype, param_dtype, index, eps, tensors, stream,
               backward=False, workspace=None):
        a = _lib.AdalnArgs()
        a.n, a.hidden, a.eps = _int(n, "n"), _i32(hidden, "hidden"), _eps(eps)
        a.act_dtype = dtype_code(act_dtype, "act_dtype", ("fp32", "bf16", "fp16"))
        a.param_dtype = dtype_code(param_dtype, "param_dtype", ("fp32", "bf16"))
        a.index = _index(index)
        strided = _ADALN_STRIDED
        for name, value in tensors.items():
            if name not in strided:
                raise TypeError(f"{function}: unknown argument {name!r}; kjit_adaln_args has "
                                + ", ".join(sorted(strided)))
            if name not in _ADALN_USES[function]:
                raise TypeError(f"{function}: {name!r} is not used by this op; it takes "
                                + ", ".join(_ADALN_USES[function]))
            if strided[name]:
                ptr, stride = _strided(value, name)
                setattr(a, name + "_stride", stride)
            else:
                ptr = _pointer(value, name)
            setattr(a, name, ptr)
        fn = getattr(self._lib, function)
        if backward:
            ws, ws_bytes = _workspace(workspace)
            rc = fn(self.handle, ctypes.byref(a), ws, ws_bytes, _stream(stream))
        else:
            rc = fn(self.handle, ctypes.byref(a), _stream(stream))
        check(rc, function)

    def _run(self, function, *args):
        """`function`(handle, *args) with its arguments already in C form (an
        argument block built and checked by the caller): the torch ops'
        per-call path. Raises the KjitError of a failed call."""
        check(getattr(self._lib, function)(self.handle, *args), function)

    # Each op below takes n, hidden, the dtypes, index=(pointer, dtype, R) and
    # its tensors by name as in kjit_adaln_args: 2-D ones as (pointer,
    # row_stride), weight and dweight as plain pointers. Backward passes take
    # workspace=(pointer, bytes) sized by adaln_workspace(), or None.

    def norm_modulate_fwd(self, n, hidden, *, act_dtype, param_dtype, index, eps=1e-5, stream=0,
                          **tensors):
        """Reads x, weight (optional), shift, scale; writes out."""
        self._adaln("kjit_norm_modulate_fwd", n, hidden, act_dtype, param_dtype, index, eps,
                    tensors, stream)

    def norm_modulate_bwd(self, n, hidden, *, act_dtype, param_dtype, index, eps=1e-5,
                          workspace=None, stream=0, **tensors):
        """Reads x, weight, scale, dout; writes dx, dweight (optional), dshift, dscale."""
        self._adaln("kjit_norm_modulate_bwd", n, hidden, act_dtype, param_dtype, index, eps,
                    tensors, stream, True, workspace)

    def gated_residual_fwd(self, n, hidden, *, act_dtype, param_dtype, index, eps=None, stream=0,
                           **tensors):
        """Reads res, y, gate; writes out. eps is accepted for a uniform call
        signature and unused (the op has no norm)."""
        self._adaln("kjit_gated_residual_fwd", n, hidden, act_dtype, param_dtype, index, 0.0,
                    tensors, stream)

    def gated_residual_bwd(self, n, hidden, *, act_dtype, param_dtype, index, eps=None,
                           workspace=None, stream=0, **tensors):
        """Reads y, gate, dout; writes dx (= dres, optional), dy, dgate. Without
        dgate (a frozen gate): dy and dx alone, y not read, no workspace.
        eps: unused."""
        self._adaln("kjit_gated_residual_bwd", n, hidden, act_dtype, param_dtype, index, 0.0,
                    tensors, stream, True, workspace)

    def gated_residual_norm_modulate_fwd(self, n, hidden, *, act_dtype, param_dtype, index,
                                         eps=1e-5, stream=0, **tensors):
        """Reads res, y, gate, weight (optional), shift, scale; writes h, out."""
        self._adaln("kjit_gated_residual_norm_modulate_fwd", n, hidden, act_dtype, param_dtype,
                    index, eps, tensors, stream)

    def gated_residual_norm_modulate_bwd(self, n, hidden, *, act_dtype, param_dtype, index,
                                         eps=1e-5, workspace=None, stream=0, **tensors):
        """Reads x (= h), y, gate, weight, scale, dh (optional), dout; writes
        dx (= dres), dy, dgate, dweight (optional), dshift, dscale."""
        self._adaln("kjit_gated_residual_norm_modulate_bwd", n, hidden, act_dtype, param_dtype,
                    index, eps, tensors, stream, True, workspace)
