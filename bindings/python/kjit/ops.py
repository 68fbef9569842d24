"""kjit's ops on torch tensors: custom ops (torch.library) with autograd.

The public functions check their arguments (clear TypeError/ValueError naming
the argument) and call torch.ops.kjit.*, which torch.compile traces without
graph breaks (each has a fake implementation) and CUDA graphs capture (a call
allocates its outputs and workspace from torch's caching allocator and
launches on torch's current stream; nothing synchronizes). Gradients of the
modulation tables come back in the table's dtype as fresh contiguous (R, H)
tensors, so the chunk(6) views of one (R, 6H) projection get their gradients
through torch's view machinery, with no copy in the forward.
"""

import ctypes
import functools
import math
import os
import threading
from typing import List, Optional

import torch
from torch import Tensor

from . import _lib, core

try:
    from torch.fx.experimental.symbolic_shapes import guard_or_false, guard_or_true
except ImportError:  # an older torch: its sizes are ints or symbols with a hint
    def guard_or_false(cond):
        return bool(cond)

    def guard_or_true(cond):
        return bool(cond)

_ACT = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
_PARAM = {torch.float32: "fp32", torch.bfloat16: "bf16"}
_INDEX = {torch.int32: "int32", torch.int64: "int64"}
# The same as kjit_dtype codes, for the argument blocks built per call.
_ACT_CODE = {torch.float32: _lib.F32, torch.bfloat16: _lib.BF16, torch.float16: _lib.F16}
_PARAM_CODE = {torch.float32: _lib.F32, torch.bfloat16: _lib.BF16}
_INDEX_CODE = {torch.int32: _lib.I32, torch.int64: _lib.I64}

_contexts = {}
_by_device = {}  # torch.device("cuda", i) -> its Context
_by_ordinal = {}  # a tensor's get_device() -> its Context
_contexts_lock = threading.Lock()


def _forget_after_fork():
    # In a forked child the parent's contexts are disowned (core.Context);
    # their lock may have been held by another thread at the fork.
    global _contexts_lock
    _contexts_lock = threading.Lock()
    _contexts.clear()
    _by_device.clear()
    _by_ordinal.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)

# How eager (not compiled) calls reach the kernels: "function" (the default)
# or "custom_op" through the torch.library ops (the dispatcher and torch.library's autograd wrapper; the
# registered backward calls the backward op's implementation itself), or
# "function": a torch.autograd.Function calling the same implementations
# directly, or the forward implementation alone when no input needs a
# gradient (less host time per call; the same kernels and bits: on the
# H200, 589 vs 702 us of host time per norm_modulate step at 4097 rows). Under torch.compile, or any other tracer (_direct), the
# torch.library ops are always used.
# A value that names neither path is an error at the first eager op call,
# not at import: kjit.core and kjit.client, which import this package, do
# not use the setting.
_EAGER = os.environ.get("KJIT_EAGER", "function").strip().lower()
_EAGER_ERROR = (None if _EAGER in ("custom_op", "function") else
                f"KJIT_EAGER={os.environ.get('KJIT_EAGER')!r}: expected 'custom_op' or 'function'")


# The ops' implementations are registered for CPU tensors too, only so that
# a direct torch.ops.kjit.* call on them gets the implementation's argument
# check (a ValueError naming the tensor's device, as the public functions
# give) instead of the dispatcher's NotImplementedError.
_DEVICES = ("cuda", "cpu")


_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", None) or (
    lambda: torch.utils._python_dispatch._get_current_dispatch_mode() is not None)
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", None) or (lambda: False)
_tracing_state = getattr(torch._C, "_get_tracing_state", None) or (lambda: None)


# Tensors the direct calls take as they are: plain ones and parameters (a
# weight is usually an nn.Parameter); any other subclass goes through the ops.
_PLAIN = (Tensor, torch.nn.Parameter)

# The library's limits (src/ops/rows.h), checked here too so that calls with
# no rows and traced calls refuse what the library would.
_MAX_HIDDEN = 65536
_MAX_TABLE_ROWS = 65535
_MAX_ROWS = 2**31 - 1  # KJIT_MAX_ROWS: row ids are int32 in the partition


def _direct(t):
    """True when a call on t runs for real: a plain CUDA tensor (not a meta,
    fake or other subclass one), and no tracer (torch.compile, make_fx,
    torch.jit.trace) nor functorch transform is active. The implementations
    are then called directly, with the same arguments the torch.library ops
    would pass them; anything else goes through the ops."""
    return (not torch.compiler.is_compiling() and type(t) in _PLAIN and t.is_cuda
            and not _dispatch_modes() and not _functorch_active() and _tracing_state() is None)


def _function_path(t, *others):
    """The Function path: t as _direct wants it and every other tensor
    argument a plain Tensor too (a subclass, e.g. a DTensor weight, goes
    through the ops and their dispatch)."""
    direct = _direct(t)
    if direct and _EAGER_ERROR:  # an eager call: traced ones use the ops whatever the setting
        raise ValueError(_EAGER_ERROR)
    return (_EAGER == "function" and direct
            and all(o is None or type(o) in _PLAIN for o in others))


def _backward_direct(dout):
    """A torch.library op's backward calls the implementation of its backward
    op directly when nothing traces it and it is not itself differentiated:
    under create_graph=True it calls the op, whose backward raises a clear
    error (it has no autograd formula) instead of giving wrong gradients."""
    return not torch.is_grad_enabled() and _direct(dout)


_any_requires_grad = getattr(torch._C, "_any_requires_grad", None) or (
    lambda *args: any(isinstance(a, Tensor) and a.requires_grad for a in args))


def _needs_graph(*tensors):
    return torch.is_grad_enabled() and _any_requires_grad(*tensors)


def context(device=None):
    """The kjit Context of a CUDA device (an index, torch.device or None for
    the current one), created on first use. Index checking follows
    $KJIT_INDEX_CHECK ("off" by default, "sync" or "async"; see core.Context)."""
    try:
        ctx = _by_device.get(device)  # the per-call path: a tensor's own device
    except TypeError:  # unhashable (a list): named below
        ctx = None
    if ctx is not None and ctx._handle is not None:
        return ctx
    key = device
    if device is not None and not isinstance(device, (int, str, torch.device)) or isinstance(device, bool):
        raise TypeError(f"kjit.context: device: expected an index, a str, a torch.device or None, "
                        f"got {type(device).__name__}")
    try:
        device = torch.device(device) if device is not None else None
    except RuntimeError as e:  # torch's own words for a bad name or index
        raise ValueError(f"kjit.context: device {key!r}: {e}") from None
    if device is not None and device.type != "cuda":
        raise ValueError(f"kjit.context: {device} is not a CUDA device")
    # torch keeps an index in 8 bits: 256 came back as 0, "cuda:300" as 44.
    given = key if isinstance(key, int) else None
    if isinstance(key, str) and ":" in key:
        tail = key.rsplit(":", 1)[1].strip()
        given = int(tail) if tail.isdigit() else None
    if device is not None and given is not None and device.index != given:
        raise ValueError(f"kjit.context: device {key!r}: {given} is not a CUDA device index")
    if core._cuda_forked_from is not None or getattr(torch.cuda, "_is_in_bad_fork", lambda: False)():
        raise RuntimeError("kjit.context: this process was forked after CUDA was initialized in its parent, "
                           "and CUDA cannot start again here: worker processes that use CUDA start with "
                           "multiprocessing's 'spawn' method")
    if device is None or device.index is None:
        try:
            ordinal = torch.cuda.current_device()
        except (RuntimeError, AssertionError) as e:  # no driver, or a torch without CUDA
            raise RuntimeError(f"kjit.context: no current CUDA device ({e})") from None
    else:
        ordinal = device.index
    ctx = _contexts.get(ordinal)
    if ctx is None or ctx._handle is None:
        with _contexts_lock:
            ctx = _contexts.get(ordinal)
            if ctx is None or ctx._handle is None:  # none yet, or the last one closed
                # Case and spaces ignored, as KJIT_EAGER's.
                raw = os.environ.get("KJIT_INDEX_CHECK", "off")
                check = raw.strip().lower()
                if check not in core._INDEX_CHECK:  # named here: core.Context names its argument
                    raise ValueError(f"KJIT_INDEX_CHECK={raw!r}: expected off, sync or async")
                ctx = core.Context(ordinal, index_check=check)
                _contexts[ordinal] = ctx
    if isinstance(key, torch.device) and key.index is not None:
        _by_device[key] = ctx
    return ctx


# ---- argument checks (in the public functions, so they run once at trace time
# under torch.compile and cost nothing in the compiled graph) -----------------


def _tensor(fn, name, t):
    """A CUDA tensor, or a meta one: those reach only the ops' fake
    implementations (shape inference, e.g. a model built on the meta
    device), never a kernel (_direct is false for them)."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if not t.is_cuda and not t.is_meta:
        raise ValueError(f"{fn}: {name} is on {t.device}; kjit runs on CUDA tensors")
    return t


def _differ(a, b):
    """a != b, for sizes. Where torch.compile knows a size only at run time
    (an unbacked size: .item(), nonzero()) and cannot tell, the two are
    asserted equal at run time (torch._check) instead of refused here."""
    if guard_or_false(a != b):
        return True
    if not isinstance(a, int) or not isinstance(b, int):
        torch._check(a == b, lambda: f"sizes {a} and {b} differ")
    return False


def _check_rows(fn, name, n):
    # A row count known only at run time (an unbacked size under
    # torch.compile: .item(), nonzero()) is checked there, by the C call.
    if guard_or_false(n > _MAX_ROWS):
        raise ValueError(f"{fn}: {name} has {n} rows; kjit takes at most {_MAX_ROWS} (2^31 - 1)")


def _dtype(fn, name, t, allowed):
    if t.dtype not in allowed:
        raise TypeError(f"{fn}: {name} has dtype {t.dtype}; expected one of "
                        + ", ".join(str(d) for d in allowed))


def _rows_layout(fn, name, t, rows=None, hidden=None, like=None):
    """A 2-D (rows, hidden) tensor whose rows are contiguous (stride(1) == 1)
    and do not overlap: any row stride >= hidden, as chunk() views have.
    like: the tensor rows and hidden come from (for the messages)."""
    if t.dim() != 2:
        raise ValueError(f"{fn}: {name} must be 2-D (rows, hidden), got shape {tuple(t.shape)}"
                         + ("; flatten the leading dimensions with .reshape(-1, hidden)"
                            if t.dim() > 2 else ""))
    r, h = t.shape
    if rows is not None and _differ(r, rows):
        raise ValueError(f"{fn}: {name} has {r} rows, expected {rows}"
                         + (f" (as {like})" if like else ""))
    if hidden is not None and _differ(h, hidden):
        raise ValueError(f"{fn}: {name} has hidden size {h}, expected {hidden}"
                         + (f" (as {like})" if like else ""))
    row_stride, col_stride = t.stride()
    if h > 1 and col_stride != 1:
        raise ValueError(f"{fn}: {name} has column stride {col_stride}; kjit needs each row "
                         "contiguous (stride(1) == 1): pass .contiguous()")
    # With a row count known only at run time, the stride is checked as for
    # several rows (N > 1 undecided is taken as true): a refusal at trace
    # time, never rows that overlap at run time.
    if guard_or_true(r > 1) and row_stride < h:
        raise ValueError(f"{fn}: {name} has row stride {row_stride} < hidden {h} (overlapping "
                         "or broadcast rows): pass .contiguous()")


def _index(fn, index, n, device):
    """index: (N,) int32/int64, contiguous; n None: any N (the gather's)."""
    _tensor(fn, "index", index)
    _dtype(fn, "index", index, _INDEX)
    if index.dim() != 1 or (n is not None and _differ(index.shape[0], n)):
        raise ValueError(f"{fn}: index must be 1-D with one entry per row"
                         + ("" if n is None else f" ({n})") + f", got shape {tuple(index.shape)}")
    _check_rows(fn, "index", index.shape[0])
    if guard_or_true(index.shape[0] > 1) and index.stride(0) != 1:
        raise ValueError(f"{fn}: index must be contiguous, got stride {index.stride(0)}")
    if index.device != device:
        raise ValueError(f"{fn}: index is on {index.device} but the rows are on {device}")


def _tables(fn, named, hidden, device):
    """Modulation tables and the weight: one dtype (bf16 or fp32), R rows each."""
    rows = dtype = first = None
    for name, t in named:
        _tensor(fn, name, t)
        _dtype(fn, name, t, _PARAM)
        if dtype is not None and t.dtype != dtype:
            raise TypeError(f"{fn}: {name} has dtype {t.dtype} but {named[0][0]} has {dtype}; "
                            + ("tables and weight share one dtype" if any(n == "weight" for n, _ in named)
                               else "the tables share one dtype"))
        dtype = t.dtype
        if t.device != device:
            raise ValueError(f"{fn}: {name} is on {t.device} but the rows are on {device}")
        if name == "weight":
            if t.dim() != 1 or t.shape[0] != hidden or (hidden > 1 and t.stride(0) != 1):
                raise ValueError(f"{fn}: weight must be a contiguous ({hidden},) tensor, got "
                                 f"shape {tuple(t.shape)} stride {t.stride()}")
            continue
        _rows_layout(fn, name, t, rows, hidden, first)
        if rows is None:
            rows, first = t.shape[0], name
            # The name, not a message: an f-string of a symbolic R made
            # torch.compile specialize on it (a recompile per table size).
            _check_table_rows(fn, rows, name)


def _activations(fn, named, allowed=_ACT):
    """Row tensors: one CUDA device, one dtype (of allowed), one (N, H) shape.
    Returns it."""
    first_name, first = named[0]
    _tensor(fn, first_name, first)
    _dtype(fn, first_name, first, allowed)
    _rows_layout(fn, first_name, first)
    _check_rows(fn, first_name, first.shape[0])
    if not 1 <= first.shape[1] <= _MAX_HIDDEN:
        raise ValueError(f"{fn}: {first_name} has hidden size {first.shape[1]}; kjit takes "
                         f"1..{_MAX_HIDDEN}")
    for name, t in named[1:]:
        _tensor(fn, name, t)
        if t.dtype != first.dtype:
            raise TypeError(f"{fn}: {name} has dtype {t.dtype} but {first_name} has {first.dtype}")
        if t.device != first.device:
            raise ValueError(f"{fn}: {name} is on {t.device} but {first_name} is on {first.device}")
        _rows_layout(fn, name, t, *first.shape, like=first_name)
    return first.shape


def _real(fn, name, v):
    """float(v) for a real-number argument (not None, a string or a bool).
    Written with float() and comparisons only, so that torch.compile traces
    it when v is a symbolic float (math.isfinite would break the graph)."""
    if v is None or isinstance(v, (str, bytes, bool)):
        raise TypeError(f"{fn}: {name} must be a real number, got {type(v).__name__}")
    try:
        return float(v)
    except (TypeError, ValueError):
        raise TypeError(f"{fn}: {name} must be a real number, got {type(v).__name__}") from None
    except OverflowError:  # an int past the double range
        raise ValueError(f"{fn}: {name} {str(v)[:24]}... is too large for a float") from None


def _eps(fn, eps):
    """eps as the library takes it: a finite C float >= 0 (a double above
    FLT_MAX would become inf on the way)."""
    eps = _real(fn, "eps", eps)
    if not (0.0 <= eps <= core._FLT_MAX):  # NaN fails too
        raise ValueError(f"{fn}: eps {eps} must be finite (a float32) and >= 0")
    return eps


def _check_dweight(fn, weight, need_dweight):
    if need_dweight and weight is None:
        raise ValueError(f"{fn}: need_dweight is True but weight is None")


def _check_table_rows(fn, rows, name=None):
    """R within 1.._MAX_TABLE_ROWS; name (the tensor) is in the message. The
    message is formatted only on failure: formatting a symbolic size makes
    torch.compile take it for a constant."""
    if not 1 <= rows <= _MAX_TABLE_ROWS:
        what = f"{name} has {rows} rows" if name else f"rows {rows}"
        raise ValueError(f"{fn}: {what}; kjit takes 1..{_MAX_TABLE_ROWS} table rows")


# ---- helpers of the implementations ----------------------------------------------


def _rows(t):
    """(pointer, row stride); a single row's stride is never read."""
    r, h = t.shape
    return t.data_ptr(), (t.stride(0) if r > 1 else h)


def _idx(index, rows):
    return index.data_ptr(), _INDEX[index.dtype], rows


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _launch_on(t):
    """(Context, stream) for a launch on t's device: the context by the
    tensor's device ordinal, and torch's current stream there (its raw
    handle, read with no Stream object where torch has the query)."""
    ordinal = t.get_device()
    ctx = _by_ordinal.get(ordinal)
    if ctx is None or ctx._handle is None:  # a closed one is replaced
        ctx = _by_ordinal[ordinal] = context(t.device)
    if _raw_stream is not None:
        return ctx, _raw_stream(ordinal)
    return ctx, torch.cuda.current_stream(t.device).cuda_stream


def _workspace(nbytes, device):
    # From torch's caching allocator: stream-ordered reuse, and graph-capturable.
    ws = torch.empty(nbytes, dtype=torch.uint8, device=device)
    return ws, (ws.data_ptr(), nbytes)


# Workspace bytes per (op, n, hidden, R): a pure function of the shape,
# asked of the library once per shape.
_adaln_workspace = functools.lru_cache(maxsize=512)(core.adaln_workspace)


_adaln_partition_bytes = functools.lru_cache(maxsize=512)(core.adaln_partition_bytes)


def _adaln_fwd_launch(op, a, t, rows, train):
    """Launches op's forward with argument block a on t's device and stream.
    train: the training forward, which also builds the backward's row
    partition (it depends on the index alone) into a small tensor from
    torch's allocator, returned for the backward; else None."""
    ctx, stream = _launch_on(t)
    if not train:
        ctx._run(_FWD_FN[op], ctypes.byref(a), stream)
        return None
    nb = _adaln_partition_bytes(op, a.n, a.hidden, rows)
    part = torch.empty(nb, dtype=torch.uint8, device=t.device)
    ctx._run("kjit_adaln_train_fwd", _OP_CODE[op], ctypes.byref(a), part.data_ptr(), nb, stream)
    return part


def _adaln_bwd_launch(op, a, t, n, h, rows, part=None, rows_only=False):
    """Launches op's backward with argument block a on t's device and stream,
    with a workspace from torch's allocator (alive until the call returns);
    with part (a training forward's partition), the training backward.
    rows_only: no table or weight gradient in a (the row gradients alone),
    which needs no workspace."""
    ws, ws_arg = (None, (None, 0)) if rows_only else _workspace(_adaln_workspace(op, n, h, rows), t.device)
    ctx, stream = _launch_on(t)
    if part is None:
        ctx._run(_BWD_FN[op], ctypes.byref(a), *ws_arg, stream)
    else:
        ctx._run("kjit_adaln_train_bwd", _OP_CODE[op], ctypes.byref(a), part.data_ptr(), part.numel(),
                 *ws_arg, stream)


_OP_CODE = core._ADALN_OPS  # op name -> kjit_adaln_op
_FWD_FN = {op: f"kjit_{op}_fwd" for op in _OP_CODE}
_BWD_FN = {op: f"kjit_{op}_bwd" for op in _OP_CODE}


def _row_major(g):
    """Incoming gradients can be expanded or transposed (e.g. out.sum()'s).
    A clone, not .contiguous(): an empty tensor counts as contiguous, so
    .contiguous() would keep an expanded one's zero strides, which the
    backward ops' checks refuse (N = 0 under torch.compile)."""
    ok = (g.shape[1] <= 1 or g.stride(1) == 1) and (guard_or_false(g.shape[0] <= 1) or g.stride(0) >= g.shape[1])
    return g if ok else g.clone(memory_format=torch.contiguous_format)


def _param_grad(like, n, *size):
    """A parameter gradient the kernels write whole (every table row, those
    no index selects as zeros); with no rows (no launch), zeros. The sizes go
    as separate ints, which torch parses faster than a tuple."""
    return like.new_empty(*size) if n else like.new_zeros(size)


def _placeholder(like):
    # custom ops cannot return None: an empty tensor stands for "not computed".
    return like.new_empty((0,))


def _eager_function(name, forward, setup, backward, bwd):
    """The eager path of an op (KJIT_EAGER=function): a torch.autograd.Function
    that runs the torch.library op's implementation and its registered setup
    and backward, the backward calling the implementation of the backward op
    directly. forward(*inputs, train) returns (output, partition): the
    Function runs the training forward (the op's forward and the backward's
    row partition in one launch) and keeps the partition for bwd(*args,
    part), which skips building it; forward and bwd are lambdas that look
    the implementations up when called."""

    def fwd(ctx, *inputs):
        out, ctx.kjit_part = forward(*inputs, True)
        setup(ctx, inputs, out)
        return out

    # Under create_graph=True (grad mode on in the backward) the backward
    # goes through the torch.library backward op, as the ops path does: it
    # has no autograd formula, so differentiating kjit's gradients again
    # raises instead of silently leaving kjit's part out.
    # So does a backward that is traced (compiled autograd hands it fake
    # gradients): the ctypes calls of the direct path would break its graph.
    def bwd_(ctx, *grads):
        if not _backward_direct(next(g for g in grads if g is not None)):
            return backward(ctx, *grads, None)
        part = ctx.kjit_part
        return backward(ctx, *grads, lambda *args: bwd(*args, part))

    return type(name, (torch.autograd.Function,),
                {"__doc__": f"The eager path of {name}.", "forward": staticmethod(fwd),
                 "backward": staticmethod(bwd_)})


# ---- timestep_sinusoid --------------------------------------------------------------


def _sinusoid_impl(t: Tensor, dim: int, flip_sin_to_cos: bool, downscale_freq_shift: float,
              scale: float, max_period: float, out_dtype: torch.dtype) -> Tensor:
    out = torch.empty((t.shape[0], dim), dtype=out_dtype, device=t.device)
    ctx, stream = _launch_on(t)
    ctx.timestep_sinusoid(
        t.data_ptr(), t.shape[0], dim, out.data_ptr(), dim, _ACT[out_dtype],
        flip_sin_to_cos=flip_sin_to_cos, downscale_freq_shift=downscale_freq_shift, scale=scale,
        max_period=max_period, stream=stream)
    return out


def _check_t(fn, t):
    """t as the op reads it: (N,) fp32, contiguous, on a CUDA device (the
    public function makes a strided t contiguous first)."""
    _tensor(fn, "t", t)
    _dtype(fn, "t", t, (torch.float32,))
    if t.dim() != 1 or (guard_or_true(t.shape[0] > 1) and t.stride(0) != 1):
        raise ValueError(f"{fn}: t must be a contiguous 1-D tensor, got shape {tuple(t.shape)} "
                         f"stride {t.stride()}")


def _check_out_dtype(fn, out_dtype):
    try:
        known = out_dtype in _ACT
    except TypeError:  # unhashable (a list)
        known = False
    if not known:
        raise TypeError(f"{fn}: out_dtype {out_dtype}; expected torch.float32, bfloat16 or float16")


def _check_sinusoid_args(fn, dim, downscale_freq_shift, scale, max_period):
    """The library's checks of the plain arguments, here too so that a traced
    call (the op's fake) refuses what the library would. Returns them as
    int and floats."""
    if isinstance(dim, bool) or not hasattr(dim, "__index__"):
        raise TypeError(f"{fn}: dim must be an int, got {type(dim).__name__}")
    dim = dim.__index__()
    if not 1 <= dim <= 65536:
        raise ValueError(f"{fn}: dim must be in 1..65536, got {dim}")

    def finite(name, v):
        v = _real(fn, name, v)
        if not (-math.inf < v < math.inf):
            raise ValueError(f"{fn}: {name} {v} must be finite")
        return v

    downscale_freq_shift = finite("downscale_freq_shift", downscale_freq_shift)
    scale, max_period = finite("scale", scale), finite("max_period", max_period)
    if max_period <= 0:
        raise ValueError(f"{fn}: max_period {max_period} must be > 0")
    if dim // 2 - downscale_freq_shift == 0:
        raise ValueError(f"{fn}: dim // 2 - downscale_freq_shift is 0 (dim {dim}, shift "
                         f"{downscale_freq_shift}): the frequencies are undefined")
    return dim, downscale_freq_shift, scale, max_period


def _sinusoid_op(t: Tensor, dim: int, flip_sin_to_cos: bool, downscale_freq_shift: float,
                 scale: float, max_period: float, out_dtype: torch.dtype) -> Tensor:
    # The library checks the plain values again, each named in its message.
    _check_t("kjit.timestep_sinusoid", t)
    _check_out_dtype("kjit.timestep_sinusoid", out_dtype)
    return _sinusoid_impl(t, dim, flip_sin_to_cos, downscale_freq_shift, scale, max_period, out_dtype)


_sinusoid = torch.library.custom_op("kjit::timestep_sinusoid", mutates_args=(),
                                     device_types=_DEVICES)(_sinusoid_op)

@_sinusoid.register_fake
def _(t, dim, flip_sin_to_cos, downscale_freq_shift, scale, max_period, out_dtype):
    fn = "kjit.timestep_sinusoid"
    _check_t(fn, t)
    _check_out_dtype(fn, out_dtype)
    _check_sinusoid_args(fn, dim, downscale_freq_shift, scale, max_period)
    return t.new_empty((t.shape[0], dim), dtype=out_dtype)


def timestep_sinusoid(t, dim, flip_sin_to_cos=False, downscale_freq_shift=1.0, scale=1.0,
                      max_period=10000.0, out_dtype=torch.float32):
    """diffusers' get_timestep_embedding: t (N,) fp32 -> (N, dim) of out_dtype.
    Forward only (SPEC.md): timesteps are not differentiated."""
    fn = "kjit.timestep_sinusoid"
    _tensor(fn, "t", t)
    if t.dim() == 1 and guard_or_true(t.shape[0] > 1) and t.stride(0) != 1:
        t = t.contiguous()  # e.g. timesteps.expand(batch): N floats
    _check_t(fn, t)
    if t.requires_grad and torch.is_grad_enabled():  # under no_grad no graph is built
        raise ValueError(f"{fn}: t requires grad, but the op has no backward (timesteps are not "
                         "differentiated); pass t.detach()")
    _check_out_dtype(fn, out_dtype)
    flip_sin_to_cos = core._bool_arg(fn, "flip_sin_to_cos", flip_sin_to_cos)
    dim, downscale_freq_shift, scale, max_period = _check_sinusoid_args(
        fn, dim, downscale_freq_shift, scale, max_period)
    call = _sinusoid_impl if _function_path(t) else _sinusoid
    return call(t, dim, flip_sin_to_cos, downscale_freq_shift, scale, max_period, out_dtype)


# ---- adaln_row_gather -----------------------------------------------------------------


def _gather_impl(tables: List[Tensor], index: Tensor) -> List[Tensor]:
    n, (rows, h) = index.shape[0], tables[0].shape
    outs = [torch.empty((n, h), dtype=t.dtype, device=index.device) for t in tables]
    if n:
        ctx, stream = _launch_on(index)
        ctx.adaln_row_gather_fwd(
            n, h, _PARAM[tables[0].dtype], _idx(index, rows), [_rows(t) for t in tables],
            [_rows(o) for o in outs], stream=stream)
    return outs


def _gather_op(tables: List[Tensor], index: Tensor) -> List[Tensor]:
    _check_gather(tables, index)
    return _gather_impl(tables, index)


_gather = torch.library.custom_op("kjit::adaln_row_gather", mutates_args=(),
                                   device_types=_DEVICES)(_gather_op)

@_gather.register_fake
def _(tables, index):
    _check_gather(tables, index)
    return [t.new_empty((index.shape[0], t.shape[1])) for t in tables]


def _gather_bwd_impl(douts: List[Tensor], index: Tensor, rows: int) -> List[Tensor]:
    n, h = douts[0].shape
    if not n:
        return [d.new_zeros((rows, h)) for d in douts]
    dtables = [d.new_empty((rows, h)) for d in douts]
    ws, ws_arg = _workspace(core.row_gather_workspace(n, h, len(douts), rows), index.device)
    ctx, stream = _launch_on(index)
    ctx.adaln_row_gather_bwd(
        n, h, _PARAM[douts[0].dtype], _idx(index, rows), [_rows(d) for d in douts],
        [_rows(d) for d in dtables], workspace=ws_arg, stream=stream)
    return dtables


def _check_gather_bwd(douts, index, rows):
    fn = "kjit.adaln_row_gather_bwd"
    if not isinstance(douts, (list, tuple)) or not 1 <= len(douts) <= 8:
        raise ValueError(f"{fn}: douts must be a list of 1..8 tensors, got "
                         f"{len(douts) if isinstance(douts, (list, tuple)) else type(douts).__name__}")
    # The tables' gradients: rows of the tables' dtype.
    n, _ = _activations(fn, [(f"douts[{k}]", d) for k, d in enumerate(douts)], _PARAM)
    _index(fn, index, n, douts[0].device)
    _check_table_rows(fn, rows)


def _gather_bwd_op(douts: List[Tensor], index: Tensor, rows: int) -> List[Tensor]:
    _check_gather_bwd(douts, index, rows)
    return _gather_bwd_impl(douts, index, rows)


# The backward ops check their arguments as the forwards do: a direct
# torch.ops.kjit.*_bwd call (or a graph built by hand) gets an error naming
# the argument, not a kernel reading the wrong memory. Autograd's own
# backwards reach the implementations directly or through these checks.
_gather_bwd = torch.library.custom_op("kjit::adaln_row_gather_bwd", mutates_args=(),
                                       device_types=_DEVICES)(_gather_bwd_op)

@_gather_bwd.register_fake
def _(douts, index, rows):
    _check_gather_bwd(douts, index, rows)
    return [d.new_empty((rows, d.shape[1])) for d in douts]


def _gather_setup(ctx, inputs, output):
    tables, index = inputs
    ctx.rows = tables[0].shape[0]
    ctx.save_for_backward(index)


def _gather_backward(ctx, douts, bwd=None):
    (index,) = ctx.saved_tensors
    # An output that took no part in the loss may come back as None.
    present = next(d for d in douts if d is not None)
    douts = [_row_major(d) if d is not None else torch.zeros_like(present) for d in douts]
    if bwd is None:
        bwd = (_gather_bwd_impl if _backward_direct(present)
               else torch.ops.kjit.adaln_row_gather_bwd)
    return bwd(douts, index, ctx.rows), None


_gather.register_autograd(_gather_backward, setup_context=_gather_setup)


class _GatherFn(torch.autograd.Function):
    """The eager path of adaln_row_gather (tables as separate inputs)."""

    @staticmethod
    def forward(ctx, index, *tables):
        outs = _gather_impl(list(tables), index)
        _gather_setup(ctx, (list(tables), index), outs)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *douts):
        # create_graph=True or a traced backward: through the op, as in
        # _eager_function (_gather_backward decides).
        dtables, _ = _gather_backward(ctx, list(douts))
        return (None, *dtables)


def _check_gather(tables, index):
    fn = "kjit.adaln_row_gather"
    if not isinstance(tables, (list, tuple)) or not 1 <= len(tables) <= 8:
        raise ValueError(f"{fn}: tables must be a list of 1..8 tensors, got "
                         f"{len(tables) if isinstance(tables, (list, tuple)) else type(tables).__name__}")
    named = [(f"tables[{k}]", t) for k, t in enumerate(tables)]
    _tensor(fn, "tables[0]", tables[0])
    _rows_layout(fn, "tables[0]", tables[0])
    hidden = tables[0].shape[-1]
    if not 1 <= hidden <= _MAX_HIDDEN:
        raise ValueError(f"{fn}: tables[0] has hidden size {hidden}; kjit takes 1..{_MAX_HIDDEN}")
    _tables(fn, named, hidden, tables[0].device)
    _index(fn, index, None, tables[0].device)


def adaln_row_gather(tables, index):
    """out_k = tables[k][index] for each of 1..8 (R, H) tables (e.g. the six
    chunk(6) views of an (R, 6H) projection, used without a copy); returns the
    list of (N, H) outputs. Backward sums each output's rows into its table's
    rows in a fixed order (fp32, one rounding): repeatable bitwise."""
    _check_gather(tables, index)
    if _function_path(index, *tables):
        return list(_GatherFn.apply(index, *tables))
    return _gather(list(tables), index)


# ---- norm_modulate --------------------------------------------------------------------


def _adaln_args(x, index, param, eps=0.0):
    """A kjit_adaln_args with n, hidden, the dtypes, the index (R: param's
    rows) and eps set, every tensor NULL: each implementation sets the
    fields its op reads and writes (core.Context's checks, done here by the
    public functions, are not repeated per call)."""
    a = _lib.AdalnArgs()
    a.n, a.hidden = x.shape
    a.eps = eps
    a.act_dtype = _ACT_CODE[x.dtype]
    a.param_dtype = _PARAM_CODE[param.dtype]
    a.index = _lib.Index(index.data_ptr(), _INDEX_CODE[index.dtype], param.shape[0])
    return a


def _norm_modulate_fwd(x, weight, shift, scale, index, eps, train):
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    part = None
    if x.shape[0]:
        a = _adaln_args(x, index, shift, eps)
        a.x, a.x_stride = _rows(x)
        a.weight = None if weight is None else weight.data_ptr()
        a.shift, a.shift_stride = _rows(shift)
        a.scale, a.scale_stride = _rows(scale)
        a.out, a.out_stride = _rows(out)
        part = _adaln_fwd_launch("norm_modulate", a, x, shift.shape[0], train)
    return out, part


def _norm_modulate_impl(x: Tensor, weight: Optional[Tensor], shift: Tensor, scale: Tensor,
                   index: Tensor, eps: float) -> Tensor:
    return _norm_modulate_fwd(x, weight, shift, scale, index, eps, False)[0]


def _norm_modulate_op(x: Tensor, weight: Optional[Tensor], shift: Tensor, scale: Tensor,
                      index: Tensor, eps: float) -> Tensor:
    eps = _check_norm_modulate(x, weight, shift, scale, index, eps)
    return _norm_modulate_impl(x, weight, shift, scale, index, eps)


_norm_modulate = torch.library.custom_op("kjit::norm_modulate", mutates_args=(),
                                          device_types=_DEVICES)(_norm_modulate_op)

@_norm_modulate.register_fake
def _(x, weight, shift, scale, index, eps):
    _check_norm_modulate(x, weight, shift, scale, index, eps)
    return x.new_empty(x.shape)


def _norm_bwd_fields(a, dout, weight, scale, dweight, need_dweight, dshift, dscale):
    """The argument-block fields the two norm backwards share."""
    a.weight = None if weight is None else weight.data_ptr()
    a.scale, a.scale_stride = _rows(scale)
    a.dout, a.dout_stride = _rows(dout)
    a.dweight = dweight.data_ptr() if need_dweight else None
    if dshift is not None:  # None: the row gradients alone
        a.dshift, a.dshift_stride = _rows(dshift)
        a.dscale, a.dscale_stride = _rows(dscale)


def _norm_modulate_bwd_impl(dout: Tensor, x: Tensor, weight: Optional[Tensor], scale: Tensor,
                       index: Tensor, eps: float, need_dweight: bool, need_tables: bool = True
                       ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return _norm_modulate_bwd_run(dout, x, weight, scale, index, eps, need_dweight, need_tables, None)


def _norm_modulate_bwd_run(dout, x, weight, scale, index, eps, need_dweight, need_tables, part):
    """need_tables False and need_dweight False: dx alone (frozen tables and
    weight), the library's row-gradients-only backward; dshift and dscale
    are then empty placeholders."""
    n, h = x.shape
    rows = scale.shape[0]
    rows_only = not (need_tables or need_dweight)
    dx = torch.empty_like(x, memory_format=torch.contiguous_format)
    dweight = _param_grad(weight, n, h) if need_dweight else _placeholder(scale)
    dshift, dscale = ((_placeholder(scale), _placeholder(scale)) if rows_only
                      else (_param_grad(scale, n, rows, h), _param_grad(scale, n, rows, h)))
    if n:
        a = _adaln_args(x, index, scale, eps)
        a.x, a.x_stride = _rows(x)
        a.dx, a.dx_stride = _rows(dx)
        _norm_bwd_fields(a, dout, weight, scale, dweight, need_dweight, None if rows_only else dshift,
                         None if rows_only else dscale)
        _adaln_bwd_launch("norm_modulate", a, x, n, h, rows, part, rows_only)
    return dx, dweight, dshift, dscale


def _check_norm_modulate_bwd(dout, x, weight, scale, index, eps, need_dweight):
    fn = "kjit.norm_modulate_bwd"
    n, h = _activations(fn, [("x", x), ("dout", dout)])
    _tables(fn, [("scale", scale)] + ([("weight", weight)] if weight is not None else []), h, x.device)
    _index(fn, index, n, x.device)
    _check_dweight(fn, weight, need_dweight)
    return _eps(fn, eps)


def _norm_modulate_bwd_op(dout: Tensor, x: Tensor, weight: Optional[Tensor], scale: Tensor,
                          index: Tensor, eps: float, need_dweight: bool, need_tables: bool = True
                          ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    eps = _check_norm_modulate_bwd(dout, x, weight, scale, index, eps, need_dweight)
    return _norm_modulate_bwd_impl(dout, x, weight, scale, index, eps, need_dweight, need_tables)


_norm_modulate_bwd = torch.library.custom_op("kjit::norm_modulate_bwd", mutates_args=(),
                                              device_types=_DEVICES)(_norm_modulate_bwd_op)

@_norm_modulate_bwd.register_fake
def _(dout, x, weight, scale, index, eps, need_dweight, need_tables=True):
    _check_norm_modulate_bwd(dout, x, weight, scale, index, eps, need_dweight)
    rows, h = scale.shape
    dweight = weight.new_empty((h,)) if need_dweight else _placeholder(scale)
    if not (need_tables or need_dweight):
        return x.new_empty(x.shape), dweight, _placeholder(scale), _placeholder(scale)
    return x.new_empty(x.shape), dweight, scale.new_empty((rows, h)), scale.new_empty((rows, h))


def _norm_modulate_setup(ctx, inputs, output):
    x, weight, shift, scale, index, eps = inputs
    ctx.eps = eps
    ctx.save_for_backward(x, weight, scale, index)


def _norm_modulate_backward(ctx, dout, bwd=None):
    x, weight, scale, index = ctx.saved_tensors
    need_dweight = weight is not None and ctx.needs_input_grad[1]
    need_tables = ctx.needs_input_grad[2] or ctx.needs_input_grad[3]
    dout = _row_major(dout)
    if bwd is None:  # the torch.library op's backward
        bwd = (_norm_modulate_bwd_impl if _backward_direct(dout)
               else torch.ops.kjit.norm_modulate_bwd)
    dx, dweight, dshift, dscale = bwd(dout, x, weight, scale, index, ctx.eps, need_dweight, need_tables)
    if not need_tables:
        dshift = dscale = None
    return dx, (dweight if need_dweight else None), dshift, dscale, None, None


_norm_modulate.register_autograd(_norm_modulate_backward, setup_context=_norm_modulate_setup)


def _any_grad(*ts):
    return any(t is not None and t.requires_grad for t in ts)


# The training forward (which builds the backward's row partition) only when
# a table or the weight will get a gradient: otherwise the backward computes
# the row gradients alone and needs no partition.
_NormModulateFn = _eager_function(
    "_NormModulateFn",
    lambda x, w, sh, sc, i, e, train: _norm_modulate_fwd(x, w, sh, sc, i, e, train and _any_grad(w, sh, sc)),
    _norm_modulate_setup, _norm_modulate_backward, lambda *a: _norm_modulate_bwd_run(*a))


def _check_norm_args(fn, x_named, weight, shift, scale, gate, index):
    n, h = _activations(fn, x_named)
    params = ([("gate", gate)] if gate is not None else []) + [("shift", shift), ("scale", scale)]
    if weight is not None:
        params.append(("weight", weight))
    _tables(fn, params, h, x_named[0][1].device)
    _index(fn, index, n, x_named[0][1].device)


def _check_norm_modulate(x, weight, shift, scale, index, eps):
    _check_norm_args("kjit.norm_modulate", [("x", x)], weight, shift, scale, None, index)
    return _eps("kjit.norm_modulate", eps)


def norm_modulate(x, weight, shift, scale, index, eps=1e-5):
    """out = rms_norm(x) * weight * (1 + scale[index]) + shift[index].
    x (N, H) bf16/fp16/fp32; weight (H,) or None; shift, scale (R, H) bf16 or
    fp32 (views with any row stride >= H, e.g. chunks of one projection); index (N,)
    int32/int64 into 0..R-1."""
    eps = _check_norm_modulate(x, weight, shift, scale, index, eps)
    if not _function_path(x, weight, shift, scale, index):
        return _norm_modulate(x, weight, shift, scale, index, eps)
    if _needs_graph(x, weight, shift, scale):
        return _NormModulateFn.apply(x, weight, shift, scale, index, eps)
    return _norm_modulate_impl(x, weight, shift, scale, index, eps)


# ---- gated_residual -------------------------------------------------------------------


def _gated_residual_fwd(res, y, gate, index, train):
    out = torch.empty_like(res, memory_format=torch.contiguous_format)
    part = None
    if res.shape[0]:
        a = _adaln_args(res, index, gate)
        a.res, a.res_stride = _rows(res)
        a.y, a.y_stride = _rows(y)
        a.gate, a.gate_stride = _rows(gate)
        a.out, a.out_stride = _rows(out)
        part = _adaln_fwd_launch("gated_residual", a, res, gate.shape[0], train)
    return out, part


def _gated_residual_impl(res: Tensor, y: Tensor, gate: Tensor, index: Tensor) -> Tensor:
    return _gated_residual_fwd(res, y, gate, index, False)[0]


def _gated_residual_op(res: Tensor, y: Tensor, gate: Tensor, index: Tensor) -> Tensor:
    _check_gated_residual(res, y, gate, index)
    return _gated_residual_impl(res, y, gate, index)


_gated_residual = torch.library.custom_op("kjit::gated_residual", mutates_args=(),
                                           device_types=_DEVICES)(_gated_residual_op)

@_gated_residual.register_fake
def _(res, y, gate, index):
    _check_gated_residual(res, y, gate, index)
    return res.new_empty(res.shape)


def _gated_residual_bwd_impl(dout: Tensor, y: Tensor, gate: Tensor, index: Tensor,
                             need_gate: bool = True) -> tuple[Tensor, Tensor]:
    return _gated_residual_bwd_run(dout, y, gate, index, need_gate, None)


def _gated_residual_bwd_run(dout, y, gate, index, need_gate, part):
    """need_gate False: dy alone (a frozen gate), the library's
    row-gradients-only backward (no y read); dgate is then an empty
    placeholder."""
    n, h = y.shape
    dy = torch.empty_like(y, memory_format=torch.contiguous_format)
    dgate = _param_grad(gate, n, gate.shape[0], h) if need_gate else _placeholder(gate)
    if n:
        # dres is dout itself: dx stays NULL and no copy is made.
        a = _adaln_args(y, index, gate)
        a.gate, a.gate_stride = _rows(gate)
        a.dout, a.dout_stride = _rows(dout)
        a.dy, a.dy_stride = _rows(dy)
        if need_gate:
            a.y, a.y_stride = _rows(y)
            a.dgate, a.dgate_stride = _rows(dgate)
        _adaln_bwd_launch("gated_residual", a, y, n, h, gate.shape[0], part, not need_gate)
    return dy, dgate


def _check_gated_residual_bwd(dout, y, gate, index):
    fn = "kjit.gated_residual_bwd"
    n, h = _activations(fn, [("y", y), ("dout", dout)])
    _tables(fn, [("gate", gate)], h, y.device)
    _index(fn, index, n, y.device)


def _gated_residual_bwd_op(dout: Tensor, y: Tensor, gate: Tensor, index: Tensor,
                           need_gate: bool = True) -> tuple[Tensor, Tensor]:
    _check_gated_residual_bwd(dout, y, gate, index)
    return _gated_residual_bwd_impl(dout, y, gate, index, need_gate)


_gated_residual_bwd = torch.library.custom_op("kjit::gated_residual_bwd", mutates_args=(),
                                               device_types=_DEVICES)(_gated_residual_bwd_op)

@_gated_residual_bwd.register_fake
def _(dout, y, gate, index, need_gate=True):
    _check_gated_residual_bwd(dout, y, gate, index)
    dgate = gate.new_empty((gate.shape[0], y.shape[1])) if need_gate else _placeholder(gate)
    return y.new_empty(y.shape), dgate


def _gated_residual_setup(ctx, inputs, output):
    res, y, gate, index = inputs
    ctx.save_for_backward(y, gate, index)


def _gated_residual_backward(ctx, dout, bwd=None):
    if not ctx.needs_input_grad[1] and not ctx.needs_input_grad[2]:
        return dout, None, None, None  # dres is dout: nothing to launch
    y, gate, index = ctx.saved_tensors
    need_gate = ctx.needs_input_grad[2]
    dout = _row_major(dout)
    if bwd is None:
        bwd = (_gated_residual_bwd_impl if _backward_direct(dout)
               else torch.ops.kjit.gated_residual_bwd)
    dy, dgate = bwd(dout, y, gate, index, need_gate)
    return dout, dy, (dgate if need_gate else None), None


_gated_residual.register_autograd(_gated_residual_backward, setup_context=_gated_residual_setup)


_GatedResidualFn = _eager_function(
    "_GatedResidualFn", lambda r, y, g, i, train: _gated_residual_fwd(r, y, g, i, train and _any_grad(g)),
    _gated_residual_setup,
    _gated_residual_backward, lambda *a: _gated_residual_bwd_run(*a))


def _check_gated_residual(res, y, gate, index):
    fn = "kjit.gated_residual"
    n, h = _activations(fn, [("res", res), ("y", y)])
    _tables(fn, [("gate", gate)], h, res.device)
    _index(fn, index, n, res.device)


def gated_residual(res, y, gate, index):
    """out = res + gate[index] * y. res, y (N, H); gate (R, H) bf16 or fp32."""
    _check_gated_residual(res, y, gate, index)
    if not _function_path(res, y, gate, index):
        return _gated_residual(res, y, gate, index)
    if _needs_graph(res, y, gate):
        return _GatedResidualFn.apply(res, y, gate, index)
    return _gated_residual_impl(res, y, gate, index)


# ---- gated_residual_norm_modulate -------------------------------------------------------


def _fused_impl(res: Tensor, y: Tensor, gate: Tensor, weight: Optional[Tensor], shift: Tensor,
           scale: Tensor, index: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    return _fused_fwd(res, y, gate, weight, shift, scale, index, eps, False)[0]


def _fused_fwd(res, y, gate, weight, shift, scale, index, eps, train):
    part = None
    h = torch.empty_like(res, memory_format=torch.contiguous_format)
    out = torch.empty_like(res, memory_format=torch.contiguous_format)
    if res.shape[0]:
        a = _adaln_args(res, index, shift, eps)
        a.res, a.res_stride = _rows(res)
        a.y, a.y_stride = _rows(y)
        a.gate, a.gate_stride = _rows(gate)
        a.weight = None if weight is None else weight.data_ptr()
        a.shift, a.shift_stride = _rows(shift)
        a.scale, a.scale_stride = _rows(scale)
        a.h, a.h_stride = _rows(h)
        a.out, a.out_stride = _rows(out)
        part = _adaln_fwd_launch("gated_residual_norm_modulate", a, res, shift.shape[0], train)
    return (h, out), part


def _fused_op(res: Tensor, y: Tensor, gate: Tensor, weight: Optional[Tensor], shift: Tensor,
              scale: Tensor, index: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    eps = _check_fused(res, y, gate, weight, shift, scale, index, eps)
    return _fused_impl(res, y, gate, weight, shift, scale, index, eps)


_fused = torch.library.custom_op("kjit::gated_residual_norm_modulate", mutates_args=(),
                                  device_types=_DEVICES)(_fused_op)

@_fused.register_fake
def _(res, y, gate, weight, shift, scale, index, eps):
    _check_fused(res, y, gate, weight, shift, scale, index, eps)
    return res.new_empty(res.shape), res.new_empty(res.shape)


def _fused_bwd_impl(dh: Optional[Tensor], dout: Tensor, h: Tensor, y: Tensor, gate: Tensor,
               weight: Optional[Tensor], scale: Tensor, index: Tensor, eps: float,
               need_dweight: bool, need_tables: bool = True
               ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    return _fused_bwd_run(dh, dout, h, y, gate, weight, scale, index, eps, need_dweight, need_tables, None)


def _fused_bwd_run(dh, dout, h, y, gate, weight, scale, index, eps, need_dweight, need_tables, part):
    """need_tables False and need_dweight False: dres and dy alone (frozen
    tables and weight); dgate, dshift and dscale are then placeholders."""
    n, hidden = h.shape
    rows = scale.shape[0]
    rows_only = not (need_tables or need_dweight)
    dres = torch.empty_like(h, memory_format=torch.contiguous_format)
    dy = torch.empty_like(y, memory_format=torch.contiguous_format)
    dgate, dshift, dscale = ((_placeholder(scale) if rows_only else _param_grad(scale, n, rows, hidden))
                             for _ in range(3))
    dweight = _param_grad(weight, n, hidden) if need_dweight else _placeholder(scale)
    if n:
        a = _adaln_args(h, index, scale, eps)
        a.x, a.x_stride = _rows(h)
        a.y, a.y_stride = _rows(y)
        a.gate, a.gate_stride = _rows(gate)
        if dh is not None:
            a.dh, a.dh_stride = _rows(dh)
        a.dx, a.dx_stride = _rows(dres)
        a.dy, a.dy_stride = _rows(dy)
        if not rows_only:
            a.dgate, a.dgate_stride = _rows(dgate)
        _norm_bwd_fields(a, dout, weight, scale, dweight, need_dweight, None if rows_only else dshift,
                         None if rows_only else dscale)
        _adaln_bwd_launch("gated_residual_norm_modulate", a, h, n, hidden, rows, part, rows_only)
    return dres, dy, dgate, dweight, dshift, dscale


def _check_fused_bwd(dh, dout, h, y, gate, weight, scale, index, eps, need_dweight):
    fn = "kjit.gated_residual_norm_modulate_bwd"
    n, hidden = _activations(fn, [("h", h), ("y", y), ("dout", dout)] + ([("dh", dh)] if dh is not None else []))
    _tables(fn, [("gate", gate), ("scale", scale)] + ([("weight", weight)] if weight is not None else []),
            hidden, h.device)
    _index(fn, index, n, h.device)
    _check_dweight(fn, weight, need_dweight)
    return _eps(fn, eps)


def _fused_bwd_op(dh: Optional[Tensor], dout: Tensor, h: Tensor, y: Tensor, gate: Tensor,
                  weight: Optional[Tensor], scale: Tensor, index: Tensor, eps: float,
                  need_dweight: bool, need_tables: bool = True
                  ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    eps = _check_fused_bwd(dh, dout, h, y, gate, weight, scale, index, eps, need_dweight)
    return _fused_bwd_impl(dh, dout, h, y, gate, weight, scale, index, eps, need_dweight, need_tables)


_fused_bwd = torch.library.custom_op("kjit::gated_residual_norm_modulate_bwd", mutates_args=(),
                                      device_types=_DEVICES)(_fused_bwd_op)

@_fused_bwd.register_fake
def _(dh, dout, h, y, gate, weight, scale, index, eps, need_dweight, need_tables=True):
    _check_fused_bwd(dh, dout, h, y, gate, weight, scale, index, eps, need_dweight)
    rows, hidden = scale.shape
    dweight = weight.new_empty((hidden,)) if need_dweight else _placeholder(scale)
    rows_only = not (need_tables or need_dweight)
    dgate, dshift, dscale = ((_placeholder(scale) if rows_only else scale.new_empty((rows, hidden)))
                             for _ in range(3))
    return h.new_empty(h.shape), y.new_empty(y.shape), dgate, dweight, dshift, dscale


def _fused_setup(ctx, inputs, output):
    res, y, gate, weight, shift, scale, index, eps = inputs
    ctx.eps = eps
    ctx.save_for_backward(output[0], y, gate, weight, scale, index)


def _fused_backward(ctx, dh, dout, bwd=None):
    h, y, gate, weight, scale, index = ctx.saved_tensors
    need_dweight = weight is not None and ctx.needs_input_grad[3]
    need_tables = ctx.needs_input_grad[2] or ctx.needs_input_grad[4] or ctx.needs_input_grad[5]
    dout = _row_major(dout)
    if bwd is None:
        bwd = (_fused_bwd_impl if _backward_direct(dout)
               else torch.ops.kjit.gated_residual_norm_modulate_bwd)
    dres, dy, dgate, dweight, dshift, dscale = bwd(
        None if dh is None else _row_major(dh), dout, h, y, gate, weight, scale, index, ctx.eps,
        need_dweight, need_tables)
    if not need_tables:
        dgate = dshift = dscale = None
    return dres, dy, dgate, (dweight if need_dweight else None), dshift, dscale, None, None


_fused.register_autograd(_fused_backward, setup_context=_fused_setup)


_FusedFn = _eager_function(
    "_FusedFn",
    lambda r, y, g, w, sh, sc, i, e, train: _fused_fwd(r, y, g, w, sh, sc, i, e, train and _any_grad(g, w, sh, sc)),
    _fused_setup, _fused_backward, lambda *a: _fused_bwd_run(*a))


def _check_fused(res, y, gate, weight, shift, scale, index, eps):
    fn = "kjit.gated_residual_norm_modulate"
    _check_norm_args(fn, [("res", res), ("y", y)], weight, shift, scale, gate, index)
    return _eps(fn, eps)


def gated_residual_norm_modulate(res, y, gate, weight, shift, scale, index, eps=1e-5):
    """h = res + gate[index] * y; out = norm_modulate(h, weight, shift, scale,
    index, eps). Returns (h, out) from one pass; h is the new residual stream."""
    eps = _check_fused(res, y, gate, weight, shift, scale, index, eps)
    if not _function_path(res, y, gate, weight, shift, scale, index):
        return _fused(res, y, gate, weight, shift, scale, index, eps)
    if _needs_graph(res, y, gate, weight, shift, scale):
        return _FusedFn.apply(res, y, gate, weight, shift, scale, index, eps)
    return _fused_impl(res, y, gate, weight, shift, scale, index, eps)
