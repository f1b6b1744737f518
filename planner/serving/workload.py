"""What a serving what-if is asked to serve: request lengths and how requests arrive.

:class:`Workload` holds the (input, output) token lengths of every request and the
arrival process: ``rate`` (Poisson arrivals at that many requests per second, as
MLPerf's Server scenario), ``concurrency`` (a closed loop of that many clients, each
sending its next request when the previous one completes, as AIPerf and
``trtllm-bench --concurrency``), or neither (offline: every request queued at time 0,
the engine at its maximum load, as MLPerf Offline and ``trtllm-bench throughput``).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Sequence

DEFAULT_REQUESTS = 1000
"""Requests of a fixed-length workload when none are given."""


def _positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    return value


def _pairs(input_tokens, output_tokens) -> tuple[tuple[int, int], ...]:
    if isinstance(input_tokens, int) and not isinstance(input_tokens, bool):
        if output_tokens is None:
            raise ValueError("output_tokens: give the output length beside a fixed input length "
                             "(or input_tokens as a list of (input, output) pairs)")
        return ((_positive_int(input_tokens, "input_tokens"), _positive_int(output_tokens, "output_tokens")),)
    if not isinstance(input_tokens, Sequence) or isinstance(input_tokens, str) or not input_tokens:
        raise ValueError(f"input_tokens: expected a positive integer, a non-empty list of (input, output) pairs, "
                         f"or a list of input lengths beside a list of output lengths; got {input_tokens!r}")
    if output_tokens is None:
        out = []
        for i, pair in enumerate(input_tokens):
            if not isinstance(pair, Sequence) or len(pair) != 2:
                raise ValueError(f"input_tokens[{i}]: expected an (input, output) pair, got {pair!r}")
            out.append((_positive_int(pair[0], f"input_tokens[{i}][0]"),
                        _positive_int(pair[1], f"input_tokens[{i}][1]")))
        return tuple(out)
    if isinstance(output_tokens, int) and not isinstance(output_tokens, bool):
        output_tokens = [output_tokens] * len(input_tokens)
    if not isinstance(output_tokens, Sequence) or len(output_tokens) != len(input_tokens):
        raise ValueError(f"output_tokens: expected one output length per input length ({len(input_tokens)}), "
                         f"got {output_tokens!r}")
    return tuple((_positive_int(a, f"input_tokens[{i}]"), _positive_int(b, f"output_tokens[{i}]"))
                 for i, (a, b) in enumerate(zip(input_tokens, output_tokens)))


@dataclass(frozen=True, eq=False)
class Workload:
    """Requests to serve: their lengths and their arrivals (see the module doc).

    ``Workload(1000, 1000, requests=3000)``: fixed lengths; ``Workload([(128, 32), (2048, 256)])``:
    one request per pair (cycled when ``requests`` asks for more); ``rate``: Poisson arrivals,
    requests/s (seeded by ``seed``, so a what-if is reproducible); ``concurrency``: that many
    requests in flight. ``requests``: default 1,000 for fixed lengths, one per pair for a list.
    """

    input_tokens: object
    output_tokens: object = None
    requests: int | None = None
    concurrency: int | None = None
    rate: float | None = None
    seed: int = 0
    max_output_tokens: int | None = None
    lengths: tuple[tuple[int, int], ...] = field(init=False, repr=False, compare=False)

    def __init__(self, input_tokens, output_tokens=None, *, requests: int | None = None,
                 concurrency: int | None = None, rate: float | None = None, seed: int = 0,
                 max_output_tokens: int | None = None) -> None:
        pairs = _pairs(input_tokens, output_tokens)
        if requests is None:
            requests = DEFAULT_REQUESTS if len(pairs) == 1 else len(pairs)
        _positive_int(requests, "requests")
        if concurrency is not None:
            _positive_int(concurrency, "concurrency")
        if rate is not None:
            if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate <= 0:
                raise ValueError(f"rate: expected a positive number of requests per second, got {rate!r}")
        if concurrency is not None and rate is not None:
            raise ValueError("concurrency and rate: give one arrival process (requests in flight, or requests/s), "
                             "not both")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed: expected an integer, got {seed!r}")
        if max_output_tokens is not None:
            _positive_int(max_output_tokens, "max_output_tokens")
            longest_out = max(b for _, b in pairs)
            if max_output_tokens < longest_out:
                raise ValueError(f"max_output_tokens: {max_output_tokens} is below the longest output asked for "
                                 f"({longest_out} tokens)")
        for name, value in (("input_tokens", input_tokens), ("output_tokens", output_tokens),
                            ("requests", requests), ("concurrency", concurrency), ("rate", rate), ("seed", seed),
                            ("max_output_tokens", max_output_tokens)):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "lengths", pairs)

    @property
    def mode(self) -> str:
        """``offline``, ``rate`` or ``concurrency``."""
        return "rate" if self.rate is not None else "concurrency" if self.concurrency is not None else "offline"

    def request_lengths(self, count: int | None = None) -> list[tuple[int, int]]:
        """(input, output) of the first ``count`` requests (all of them by default), pairs cycled."""
        n = self.requests if count is None else count
        pairs = self.lengths
        if len(pairs) == 1:
            return [pairs[0]] * n
        return [pairs[i % len(pairs)] for i in range(n)]

    def arrivals(self, count: int | None = None, rate: float | None = None) -> list[float] | None:
        """Arrival times (s) under ``rate`` (Poisson, seeded), or None for offline and closed-loop workloads."""
        rate = self.rate if rate is None else rate
        if rate is None:
            return None
        n = self.requests if count is None else count
        rng = random.Random(self.seed)
        t, out = 0.0, []
        for _ in range(n):
            out.append(t)
            t += rng.expovariate(rate)
        return out

    def mean_lengths(self) -> tuple[float, float]:
        """Mean input and output tokens per request."""
        pairs = self.request_lengths()
        return (sum(p[0] for p in pairs) / len(pairs), sum(p[1] for p in pairs) / len(pairs))

    def longest(self) -> int:
        """The longest sequence (input + output reserved) of any request."""
        return max(a + self.reserved(b) for a, b in self.lengths)

    def reserved(self, output: int) -> int:
        """Output tokens a request of ``output`` tokens reserves KV cache for."""
        return self.max_output_tokens or output

    def split(self, replicas: int) -> "Workload":
        """The share of one of ``replicas`` identical replicas: requests, concurrency and rate divided
        (rounded up, so no replica is given less than its share)."""
        if replicas == 1:
            return self
        count = math.ceil(self.requests / replicas)
        share = self.lengths if len(self.lengths) == 1 else self.request_lengths(count)
        return Workload(list(share), requests=count,
                        concurrency=None if self.concurrency is None else math.ceil(self.concurrency / replicas),
                        rate=None if self.rate is None else self.rate / replicas, seed=self.seed,
                        max_output_tokens=self.max_output_tokens)

    def describe(self) -> str:
        """``1,000 requests of 1000 in / 1000 out tokens, offline``."""
        if len(self.lengths) == 1:
            a, b = self.lengths[0]
            text = f"{self.requests:,} requests of {a} in / {b} out tokens"
        else:
            a, b = self.mean_lengths()
            text = f"{self.requests:,} requests, mean {a:,.0f} in / {b:,.0f} out tokens"
        if self.rate is not None:
            return f"{text}, Poisson arrivals at {self.rate:g} requests/s"
        if self.concurrency is not None:
            return f"{text}, {self.concurrency} in flight"
        return f"{text}, offline (all queued at once)"


__all__ = ["DEFAULT_REQUESTS", "Workload"]
