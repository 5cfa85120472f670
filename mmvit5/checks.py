"""Build-time range checks whose messages name the value, what was expected and what to change."""
import math
import numbers
from typing import Optional


def check_number(name: str, value, *, low: Optional[float] = None,
                 high: Optional[float] = None, low_open: bool = False, high_open: bool = False,
                 integer: bool = False, hint: str = '') -> None:
    """Raise ``ValueError`` unless ``value`` is a finite number in the given range.

    Args:
        name (str): The argument as the user spells it, e.g. ``'drop_path_rate'``.
        value: What was passed.
        low (float, optional): Lower bound; None for none.
        high (float, optional): Upper bound; None for none.
        low_open (bool): Exclude ``low`` itself.
        high_open (bool): Exclude ``high`` itself.
        integer (bool): Only integers (``bool`` is never a number here).
        hint (str): What to change, appended to the message.

    Example:
        >>> check_number('patch_size', 0, low=1, integer=True, hint='16 as released')
        Traceback (most recent call last):
        ...
        ValueError: patch_size must be an integer >= 1, got 0; 16 as released
    """
    kind = numbers.Integral if integer else numbers.Real
    ok = isinstance(value, kind) and not isinstance(value, bool) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if ok:
        return
    if low is not None and high is not None:
        bounds = f' in {"(" if low_open else "["}{low}, {high}{")" if high_open else "]"}'
    elif low is not None:
        bounds = f' {">" if low_open else ">="} {low}'
    elif high is not None:
        bounds = f' {"<" if high_open else "<="} {high}'
    else:
        bounds = ''
    raise ValueError(f'{name} must be {"an integer" if integer else "a number"}{bounds}, '
                     f'got {value!r}' + (f'; {hint}' if hint else ''))


def count(n: int, noun: str) -> str:
    """``'1 image'``, ``'2 images'``: a count in a message."""
    return f'{n} {noun}{"s" * (n != 1)}'
