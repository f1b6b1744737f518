"""Where a slot's bytes live: the backing grammar ``auto | emulated | cuda:N``, parsed once.

A :class:`Backing` is the parsed value. It is a ``str`` (``"emulated"``,
``"cuda:1"``), so it prints, compares, hashes and travels (TOML, a
torch.distributed store) as the text it was written as, and it carries what the
text means (:attr:`Backing.cuda_index`), so nothing downstream parses it again.
"""

from __future__ import annotations

import re

BACKINGS: tuple[str, ...] = ("auto", "emulated", "cuda:N")
"""The grammar, as error messages show it (N a non-negative integer)."""

_CUDA = re.compile(r"cuda:(0|[1-9][0-9]*)")


class Backing(str):
    """A parsed backing: ``auto`` (decided when the rack is made live), ``emulated``
    (host memory, CPU kernels) or ``cuda:N`` (memory of real CUDA device N).

    Build one with :meth:`parse`; the constants :data:`AUTO` and :data:`EMULATED`
    and :meth:`cuda` name the common ones.
    """

    cuda_index: int | None
    """N for ``cuda:N``; None for ``auto`` and ``emulated``."""

    def __new__(cls, value: str = "auto"):
        if isinstance(value, Backing):
            return value
        text = value if isinstance(value, str) else None
        match = _CUDA.fullmatch(text) if text is not None else None
        if text not in ("auto", "emulated") and match is None:
            raise ValueError(f"unknown backing {value!r}; accepted: {', '.join(BACKINGS)}")
        self = super().__new__(cls, text)
        self.cuda_index = int(match.group(1)) if match else None
        return self

    @classmethod
    def parse(cls, value: object, where: str = "backing") -> Backing:
        """The backing ``value`` names, else ValueError naming ``where`` and the accepted values."""
        try:
            return cls(value)  # type: ignore[arg-type]
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None

    @classmethod
    def cuda(cls, index: int) -> Backing:
        """``cuda:<index>``."""
        return cls(f"cuda:{int(index)}")

    @property
    def is_auto(self) -> bool:
        """True for ``auto``: the rack picks emulated or a real GPU when it is made live."""
        return self == "auto"

    @property
    def is_emulated(self) -> bool:
        """True for ``emulated``: host memory, the CPU's kernels."""
        return self == "emulated"

    @property
    def is_cuda(self) -> bool:
        """True for ``cuda:N``: memory of real CUDA device N (:attr:`cuda_index`)."""
        return self.cuda_index is not None

    def __reduce__(self):
        return (Backing, (str(self),))


AUTO = Backing("auto")
EMULATED = Backing("emulated")
