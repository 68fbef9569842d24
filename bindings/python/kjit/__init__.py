"""kjit: bitwise batch-invariant AdaLN ops for diffusion transformers, over libkjit.

kjit.core works on device pointers and needs only the library; with PyTorch
installed, the ops below take tensors, support autograd, torch.compile and
CUDA graphs (see README.md).
"""

from . import core
from .core import Context, InvalidArgument, KjitError, LibraryError

__version__ = "0.1.0"

__all__ = ["core", "Context", "KjitError", "InvalidArgument", "LibraryError"]

try:
    import torch
except ImportError:
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
            raise AttributeError(f"kjit.{name} needs PyTorch, which is not installed "
                                 "(kjit.core works on device pointers without it)")
        raise AttributeError(f"module 'kjit' has no attribute {name!r}")
