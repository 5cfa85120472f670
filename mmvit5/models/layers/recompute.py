"""Backward passes that recompute the normalised, rotated q and k instead of keeping them.

Autograd of ``apply_rope(q_norm(q), rope)`` followed by attention keeps, per block, the input of
QK-Norm (a view of the ``qkv`` output, which attention's ``v`` keeps alive anyway), 1/rms, and
the rotated q and k that the attention kernel saves for its own backward: two (B, T, C) tensors
that timm's ViT does not have, since its attention saves views of the ``qkv`` output. Both
rotated tensors are one elementwise pass away from what is kept anyway, so
:class:`RecomputeSaved` keeps a recipe instead and recomputes them when backward unpacks them,
whatever attention kernel saved them (flash, memory-efficient, cuDNN, math, CPU).
"""
from typing import Callable, List, Tuple

import torch


def _same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride()
            and a.dtype == b.dtype and a.device == b.device and a._version == b._version)


class _Recompute:
    """A saved tensor left out: the function that makes it again."""

    def __init__(self, make: Callable[[], torch.Tensor]) -> None:
        self.make = make


class RecomputeSaved(torch.autograd.graph.saved_tensors_hooks):
    """Saved-tensor hooks: a registered tensor that an op saves for backward is recomputed.

    Inside the context, :meth:`register` names a tensor and a function that recomputes it
    exactly (same inputs, same kernels, hence the same bits) from tensors that stay alive
    anyway. When an op inside the context saves that very tensor (same storage, shape,
    strides, dtype and version), autograd keeps the function instead; backward calls it when
    it needs the tensor. Every other saved tensor is kept as usual.

    Only for eager training: compiled graphs cannot trace saved-tensor hooks (and Inductor
    chooses what to recompute itself), and under activation checkpointing the hooks belong to
    the checkpoint, which recomputes everything anyway.
    """

    def __init__(self) -> None:
        self._entries: List[Tuple[torch.Tensor, Callable[[], torch.Tensor]]] = []
        super().__init__(self._pack, self._unpack)

    def __enter__(self) -> 'RecomputeSaved':
        super().__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._entries.clear()  # the registered tensors may be freed once backward is built
        super().__exit__(*exc)

    def register(self, tensor: torch.Tensor, make: Callable[[], torch.Tensor]) -> torch.Tensor:
        """Let ops inside the context save ``tensor`` as ``make`` (returns ``tensor``)."""
        self._entries.append((tensor, make))
        return tensor

    def _pack(self, tensor: torch.Tensor):
        make = next((make for registered, make in self._entries
                     if _same_view(tensor, registered)), None)
        return tensor if make is None else _Recompute(make)

    @staticmethod
    def _unpack(packed) -> torch.Tensor:
        if isinstance(packed, _Recompute):
            with torch.no_grad():
                return packed.make()
        return packed
