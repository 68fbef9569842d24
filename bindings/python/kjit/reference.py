"""The same ops in plain PyTorch, written as diffusers writes them.

In the tensors' own dtype these are the prior art that kjit replaces (each
op rounds after every step; index_select's backward is index_add, with
floating-point atomics); fed float64 tensors they are the references that
SPEC.md's accuracy contract is measured against. Used by the tests,
bench/conformance.py and examples/h3_block.py.
"""

import math

import torch
import torch.nn.functional as F


def timestep_sinusoid(t, dim, flip_sin_to_cos=False, downscale_freq_shift=1.0, scale=1.0,
                      max_period=10000.0, out_dtype=None):
    """diffusers.models.embeddings.get_timestep_embedding; float64 t gives
    the float64 reference."""
    half = dim // 2
    ftype = torch.float64 if t.dtype == torch.float64 else torch.float32
    exponent = -math.log(max_period) * torch.arange(half, dtype=ftype, device=t.device)
    freqs = torch.exp(exponent / (half - downscale_freq_shift))
    emb = scale * (t[:, None].to(ftype) * freqs[None, :])
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=-1)
    if flip_sin_to_cos:
        emb = torch.cat([emb[:, half:], emb[:, :half]], dim=-1)
    if dim % 2 == 1:
        emb = F.pad(emb, (0, 1, 0, 0))
    return emb if out_dtype is None else emb.to(out_dtype)


def adaln_row_gather(tables, index):
    return [t.index_select(0, index) for t in tables]


def norm_modulate(x, weight, shift, scale, index, eps=1e-5):
    normed = F.rms_norm(x, (x.shape[-1],), weight, eps)
    return normed * (1 + scale.index_select(0, index)) + shift.index_select(0, index)


def gated_residual(res, y, gate, index):
    return res + gate.index_select(0, index) * y


def gated_residual_norm_modulate(res, y, gate, weight, shift, scale, index, eps=1e-5,
                                 h_dtype=None):
    """h_dtype (float64 references): h is an output in the activation dtype
    and the norm reads that rounded h, in kjit as in the composition above.
    The reference rounds h's value to h_dtype and passes its gradient
    through unchanged, so it differentiates the op as it is computed."""
    h = gated_residual(res, y, gate, index)
    if h_dtype is not None:
        h = h + (h.detach().to(h_dtype).to(h.dtype) - h.detach())
    return h, norm_modulate(h, weight, shift, scale, index, eps)


def to_double(*tensors):
    """Detached float64 leaves (requires_grad as the originals'); None stays None."""
    return [None if t is None else
            t.detach().double().requires_grad_(t.requires_grad) if t.is_floating_point() else t
            for t in tensors]


def rel_err(a, ref):
    """max|a - ref| / max|ref| (the prior-art reports' measure), as a float."""
    ref = ref.detach().double()
    return ((a.detach().double() - ref).abs().max() / ref.abs().max().clamp_min(1e-300)).item()


def spec_rel_err(a, ref):
    """||a - ref|| / ||ref|| (docs/SPEC.md's measure, contract 4), as a float;
    NaN stays NaN."""
    ref = ref.detach().double()
    return ((a.detach().double() - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def worst_rel_err(a, ref):
    """The larger of spec_rel_err and rel_err (NaN if either is): a check
    against a SPEC bound with it holds under both measures, neither of
    which bounds the other."""
    e1, e2 = spec_rel_err(a, ref), rel_err(a, ref)
    return e1 if e1 != e1 or e1 >= e2 else e2


def same_bits(a, b):
    """Bitwise equality of two tensors (torch.equal takes -0.0 for +0.0 and
    fails on equal NaNs): the same shape and dtype, the same bits."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        as_int = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return torch.equal(a.contiguous().view(as_int), b.contiguous().view(as_int))
    return torch.equal(a, b)
