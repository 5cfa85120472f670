"""RoPE's rotation of channel pairs: the PyTorch code that attention and the QK-Norm + RoPE
kernel's fallback share (:mod:`..rope` builds the tables it reads)."""
import torch


def apply_rope(x: torch.Tensor, rope: torch.Tensor, inverse: bool = False,
               complex_product: bool = False) -> torch.Tensor:
    """Rotate ``x`` (..., head_dim) by the table ``rope`` (..., head_dim // 2, 2) of (cos, sin)
    per channel pair (:func:`rotations`), broadcast over ``x``'s leading dimensions: (T, D / 2,
    2) for (..., T, D) tokens, (T, 1, D / 2, 2) for (B, T, heads, D). ``inverse`` rotates by
    the opposite angles (the transpose of the rotation: RoPE's backward pass).

    Channel pairs (0, 1), (2, 3), ... are one complex number each, so the released
    ``x * cos + rotate_half(x) * sin`` is the complex product ``(x0 + i x1) (cos + i sin)``:
    ``complex_product=True`` (for eager callers) makes it one complex multiply that reads and
    writes ``x`` once instead of five elementwise passes. Inductor generates no code for
    complex ops and ONNX has no complex type, so compiled and exported graphs (torch.export,
    and the TorchScript ONNX exporter that mmdeploy drives) take the default, the same product
    in real arithmetic, which Inductor fuses into one kernel. Half-precision
    inputs rotate in float32 and are rounded back once. Tokens without a position (the class
    token) have cos 1 and sin 0, which leaves them bit-exact.
    """
    pairs = x.to(rope.dtype).unflatten(-1, (-1, 2))
    if not complex_product:
        (x0, x1), (cos, sin) = pairs.unbind(-1), rope.unbind(-1)
        sin = -sin if inverse else sin
        out = torch.stack((x0 * cos - x1 * sin, x1 * cos + x0 * sin), dim=-1)
    else:
        if pairs.stride(-1) != 1:  # complex views need adjacent pairs (a gradient may be
            pairs = pairs.contiguous()  # a transposed matmul output)
        turn = torch.view_as_complex(rope)
        out = torch.view_as_real(torch.view_as_complex(pairs) * (turn.conj() if inverse else turn))
    return out.flatten(-2).type_as(x)
