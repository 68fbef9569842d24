"""Finding and loading libkjit, and the ctypes mirror of include/kjit.h.

Every struct here copies its C counterpart field for field, in the header's
order and with the header's field names: tests/python/test_core.py compiles a
C program that prints sizeof/offsetof for each of them and compares, so a
header change that is not copied here fails CI instead of corrupting calls.
"""

import ctypes
import ctypes.util
import os
import threading

MAX_TABLES = 8
NO_DEVICE = -1

# kjit_dtype
F32, BF16, F16, I32, I64 = 0, 1, 2, 3, 4
# kjit_index_check
INDEX_CHECK_OFF, INDEX_CHECK_SYNC, INDEX_CHECK_ASYNC = 0, 1, 2
# kjit_adaln_op
NORM_MODULATE, GATED_RESIDUAL, GATED_RESIDUAL_NORM_MODULATE = 1, 2, 3

# C enums are int-sized on every ABI kjit builds for.
_enum = ctypes.c_int
_ptr = ctypes.c_void_p
_i64 = ctypes.c_int64


class CtxOptions(ctypes.Structure):
    _fields_ = [
        ("device", ctypes.c_int),
        ("cache_dir", ctypes.c_char_p),
        ("arch", ctypes.c_char_p),
        ("index_check", _enum),
        ("tune", ctypes.c_int),
    ]


class CacheCounters(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in
                ("mem_hits", "disk_hits", "misses", "compiles", "bad_entries", "evictions",
                 "server_builds", "store_failures")]


class RuntimeInfo(ctypes.Structure):
    _fields_ = [
        ("nvrtc_major", ctypes.c_int),
        ("nvrtc_minor", ctypes.c_int),
        ("nvrtc_path", ctypes.c_char * 256),
        ("n_archs", ctypes.c_int),
        ("archs", ctypes.c_int * 64),
        ("driver_version", ctypes.c_int),
        ("device_count", ctypes.c_int),
    ]


class DeviceInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * 128),
        ("sm", ctypes.c_int),
        ("sm_count", ctypes.c_int),
        ("memory_bytes", ctypes.c_uint64),
    ]


class SinusoidOpts(ctypes.Structure):
    _fields_ = [
        ("flip_sin_to_cos", ctypes.c_int),
        ("downscale_freq_shift", ctypes.c_double),
        ("scale", ctypes.c_double),
        ("max_period", ctypes.c_double),
    ]


class Index(ctypes.Structure):
    _fields_ = [("ptr", _ptr), ("dtype", _enum), ("rows", _i64)]


class RowGatherArgs(ctypes.Structure):
    _fields_ = [
        ("n", _i64),
        ("hidden", ctypes.c_int),
        ("num_tables", ctypes.c_int),
        ("dtype", _enum),
        ("index", Index),
        ("table", _ptr * MAX_TABLES), ("table_stride", _i64 * MAX_TABLES),
        ("out", _ptr * MAX_TABLES), ("out_stride", _i64 * MAX_TABLES),
        ("dout", _ptr * MAX_TABLES), ("dout_stride", _i64 * MAX_TABLES),
        ("dtable", _ptr * MAX_TABLES), ("dtable_stride", _i64 * MAX_TABLES),
    ]


# (name, has a row stride) for the pointer fields of kjit_adaln_args, in order.
ADALN_TENSORS = (
    ("x", True), ("res", True), ("y", True), ("weight", False),
    ("shift", True), ("scale", True), ("gate", True),
    ("out", True), ("h", True), ("dout", True), ("dh", True),
    ("dx", True), ("dy", True), ("dweight", False),
    ("dshift", True), ("dscale", True), ("dgate", True),
)


def _adaln_fields():
    fields = [
        ("n", _i64),
        ("hidden", ctypes.c_int),
        ("eps", ctypes.c_float),
        ("act_dtype", _enum),
        ("param_dtype", _enum),
        ("index", Index),
    ]
    for name, strided in ADALN_TENSORS:
        fields.append((name, _ptr))
        if strided:
            fields.append((name + "_stride", _i64))
    return fields


class AdalnArgs(ctypes.Structure):
    _fields_ = _adaln_fields()


# C type name -> mirror, for the layout test.
STRUCTS = {
    "kjit_ctx_options": CtxOptions,
    "kjit_cache_counters": CacheCounters,
    "kjit_runtime_info": RuntimeInfo,
    "kjit_device_info": DeviceInfo,
    "kjit_sinusoid_opts": SinusoidOpts,
    "kjit_index": Index,
    "kjit_row_gather_args": RowGatherArgs,
    "kjit_adaln_args": AdalnArgs,
}

# C enum constant -> the value mirrored above, for the layout test.
CONSTANTS = {
    "KJIT_MAX_TABLES": MAX_TABLES, "KJIT_NO_DEVICE": NO_DEVICE,
    "KJIT_F32": F32, "KJIT_BF16": BF16, "KJIT_F16": F16, "KJIT_I32": I32, "KJIT_I64": I64,
    "KJIT_INDEX_CHECK_OFF": INDEX_CHECK_OFF, "KJIT_INDEX_CHECK_SYNC": INDEX_CHECK_SYNC,
    "KJIT_INDEX_CHECK_ASYNC": INDEX_CHECK_ASYNC,
    "KJIT_NORM_MODULATE": NORM_MODULATE, "KJIT_GATED_RESIDUAL": GATED_RESIDUAL,
    "KJIT_GATED_RESIDUAL_NORM_MODULATE": GATED_RESIDUAL_NORM_MODULATE,
}

_c = ctypes
_P = ctypes.POINTER
# name -> (restype, argtypes). Functions returning a status return c_int.
PROTOTYPES = {
    "kjit_status_name": (_c.c_char_p, [_c.c_int]),
    "kjit_status_string": (_c.c_char_p, [_c.c_int]),
    "kjit_last_error": (_c.c_char_p, []),
    "kjit_dtype_name": (_c.c_char_p, [_enum]),
    "kjit_dtype_parse": (_c.c_int, [_c.c_char_p, _P(_enum)]),
    "kjit_dtype_size": (_c.c_size_t, [_enum]),
    "kjit_ctx_options_init": (None, [_P(CtxOptions)]),
    "kjit_ctx_create": (_c.c_int, [_P(_ptr), _P(CtxOptions)]),
    "kjit_ctx_destroy": (None, [_ptr]),
    "kjit_ctx_has_device": (_c.c_int, [_ptr]),
    "kjit_ctx_arch": (_c.c_char_p, [_ptr]),
    "kjit_ctx_cache_dir": (_c.c_char_p, [_ptr]),
    "kjit_ctx_index_error": (_c.c_int, [_ptr, _ptr, _P(_c.c_int)]),
    "kjit_ctx_cache_counters": (_c.c_int, [_ptr, _P(CacheCounters)]),
    "kjit_runtime_info_get": (_c.c_int, [_P(RuntimeInfo)]),
    "kjit_device_info_get": (_c.c_int, [_c.c_int, _P(DeviceInfo)]),
    "kjit_op_count": (_c.c_int, []),
    "kjit_op_name": (_c.c_char_p, [_c.c_int]),
    "kjit_sinusoid_opts_init": (None, [_P(SinusoidOpts)]),
    "kjit_timestep_sinusoid": (_c.c_int, [_ptr, _ptr, _i64, _c.c_int, _ptr, _i64, _enum,
                                          _P(SinusoidOpts), _ptr]),
    "kjit_adaln_row_gather_fwd": (_c.c_int, [_ptr, _P(RowGatherArgs), _ptr]),
    "kjit_adaln_row_gather_bwd": (_c.c_int, [_ptr, _P(RowGatherArgs), _ptr, _c.c_size_t, _ptr]),
    "kjit_adaln_row_gather_workspace": (_c.c_int, [_i64, _c.c_int, _c.c_int, _i64,
                                                   _P(_c.c_size_t)]),
    "kjit_adaln_workspace": (_c.c_int, [_enum, _i64, _c.c_int, _i64, _P(_c.c_size_t)]),
    "kjit_adaln_partition_bytes": (_c.c_int, [_enum, _i64, _c.c_int, _i64, _P(_c.c_size_t)]),
    "kjit_adaln_train_fwd": (_c.c_int, [_ptr, _enum, _P(AdalnArgs), _ptr, _c.c_size_t, _ptr]),
    "kjit_adaln_train_bwd": (_c.c_int, [_ptr, _enum, _P(AdalnArgs), _ptr, _c.c_size_t, _ptr,
                                        _c.c_size_t, _ptr]),
}
for _op in ("norm_modulate", "gated_residual", "gated_residual_norm_modulate"):
    PROTOTYPES[f"kjit_{_op}_fwd"] = (_c.c_int, [_ptr, _P(AdalnArgs), _ptr])
    PROTOTYPES[f"kjit_{_op}_bwd"] = (_c.c_int, [_ptr, _P(AdalnArgs), _ptr, _c.c_size_t, _ptr])


class LibraryError(ImportError):
    """libkjit could not be found or loaded, or lacks a function this package calls."""


_SONAMES = ("libkjit.so", "libkjit.so.0")


def _candidates():
    """candidates(), one at a time: find_library (which runs ldconfig and a
    compiler in subprocesses, tens of ms in a CUDA process) only once the
    copies next to the package have failed to load."""
    env = os.environ.get("KJIT_LIBRARY")
    if env:
        # A file, even written without a directory: the loader would search
        # its path for a bare name instead of opening ./libkjit.so.
        yield ("KJIT_LIBRARY", os.path.abspath(env))
        return
    here = os.path.dirname(os.path.abspath(__file__))
    for name in _SONAMES:
        path = os.path.join(here, name)
        if os.path.exists(path):
            yield ("next to the package", path)
    name = ctypes.util.find_library("kjit")
    if name:
        yield ("ctypes.util.find_library('kjit')", name)
    yield ("the loader path", "libkjit.so.0")


def candidates():
    """The library search order, as (where, path-or-name) pairs: $KJIT_LIBRARY
    alone when set (a deliberate choice is never silently overridden), else a
    copy next to this package, else the dynamic loader's search."""
    return list(_candidates())


class Library:
    """A loaded libkjit. Functions are bound on first use, so a library built
    before an op existed still serves the others, and names the missing one."""

    def __init__(self, cdll, path):
        self._cdll = cdll
        self.path = path
        self._bound = {}

    def __getattr__(self, name):
        if not name.startswith("kjit_"):
            raise AttributeError(name)
        fn = self._bound.get(name)
        if fn is None:
            try:
                fn = getattr(self._cdll, name)
            except AttributeError:
                raise LibraryError(f"{self.path} has no {name}: the library is older than this "
                                   "package; rebuild it or point KJIT_LIBRARY at a newer one") from None
            fn.restype, fn.argtypes = PROTOTYPES[name]
            self._bound[name] = fn
            # Later lookups find the instance attribute, not __getattr__.
            setattr(self, name, fn)
        return fn


_lock = threading.Lock()
_library = None


def _reset_lock():
    # A forked child: another thread of the parent may have held it.
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_lock)


def load():
    """The process's libkjit, loaded once (see candidates() for the order)."""
    global _library
    if _library is not None:  # the per-call path: no lock once loaded
        return _library
    with _lock:
        if _library is None:
            tried, paths = [], []
            for where, path in _candidates():
                paths.append(path)
                if os.path.isdir(path):
                    tried.append(f"{where}: {path}: a directory, not the library file")
                    continue
                try:
                    cdll = ctypes.CDLL(path)
                except OSError as exc:
                    tried.append(f"{where}: {path}: {exc}")
                    continue
                # Another library under this name (a stale path, a wrong
                # file) is refused here, not at the first call.
                if not hasattr(cdll, "kjit_op_count"):
                    tried.append(f"{where}: {path}: loads, but is not libkjit (no kjit_op_count)")
                    continue
                _library = Library(cdll, path)
                break
            else:
                # A file that exists but does not load is not "not found": say
                # why (e.g. a dependency the loader cannot find).
                found = [t for path, t in zip(paths, tried)
                         if os.sep in path and os.path.isfile(path)]  # a bare name is the loader's search
                if found:
                    hint = ("" if all("is not libkjit" in t for t in found) else
                            "\n(a missing dependency is installed with the packages "
                            "README.md lists, or found via LD_LIBRARY_PATH)")
                    raise LibraryError("libkjit found but could not be loaded:\n  " + "\n  ".join(found)
                                       + hint)
                here = os.path.dirname(os.path.abspath(__file__))
                # Only the places the search order tried (not beside the
                # package when KJIT_LIBRARY is set).
                beside = ("" if os.environ.get("KJIT_LIBRARY")
                          else f"\n  (and next to the package: no libkjit.so in {here})")
                raise LibraryError("libkjit not found; tried\n  " + "\n  ".join(tried) + beside +
                                   "\nBuild it (cmake -S . -B build && cmake --build build) and set "
                                   "KJIT_LIBRARY=/path/to/build/libkjit.so, copy it next to the kjit "
                                   "package, or install it on the loader path (then run ldconfig)")
        return _library
