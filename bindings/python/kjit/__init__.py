"""kjit: bitwise batch-invariant AdaLN ops for diffusion transformers, over libkjit.

kjit.core works on device pointers and needs only the library; with PyTorch
installed, the ops below take tensors, support autograd, torch.compile and
CUDA graphs (see README.md).
"""

from . import core
from .core import Context, InvalidArgument, KjitError, LibraryError

__version__ = "0.1.0"

__all__ = ["core", "Context", "KjitError", "InvalidArgument", "LibraryError"]

# Why the torch ops are absent, when they are: torch not installed, torch
# that fails to import, with whatever error (its own kept: a missing
# libcudnn is not "not installed"; a missing libtorch_cuda.so is an
# OSError), or a torch without torch.library.custom_op (before 2.4).
_torch_missing = None
try:
    import torch
except ModuleNotFoundError as e:
    torch = None
    _torch_missing = ("PyTorch, which is not installed" if e.name == "torch"
                      else f"PyTorch, which failed to import: {e}")
except Exception as e:  # noqa: BLE001  ImportError, or OSError from a missing libtorch_cuda.so
    torch = None
    _torch_missing = f"PyTorch, which failed to import: {e}"
if torch is not None and not hasattr(getattr(torch, "library", None), "custom_op"):
    _torch_missing = (f"PyTorch 2.4 or later (torch.library.custom_op); this is "
                      f"{getattr(torch, '__version__', 'an unknown version')}")
    torch = None

# The torch ops register themselves with torch.library on import, so they are
# imported here (not on first attribute access): torch.compile then finds them
# in any model that uses kjit.
if torch is not None:
    from .ops import (adaln_row_gather, context, gated_residual, gated_residual_norm_modulate,
                      norm_modulate, timestep_sinusoid)

    __all__ += ["adaln_row_gather", "context", "gated_residual", "gated_residual_norm_modulate",
                "norm_modulate", "timestep_sinusoid"]
else:
    def __getattr__(name):
        # Without torch the tensor ops are absent: say why, not a bare
        # AttributeError (kjit.core works on pointers without it).
        if name in ("adaln_row_gather", "context", "gated_residual", "gated_residual_norm_modulate",
                    "norm_modulate", "timestep_sinusoid"):
            raise AttributeError(f"kjit.{name} needs {_torch_missing} "
                                 "(kjit.core works on device pointers without it)")
        raise AttributeError(f"module 'kjit' has no attribute {name!r}")
