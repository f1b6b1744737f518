"""Block profiles kept on disk between processes, so a what-if on a known model needs no tracing.

A profile depends on the model's architecture, the block's signature, the
shard, and the code that traced it (this package's tracing modules, torch,
transformers): all of it goes into the key, so a changed input misses and
retraces. Entries are plain data (no code is unpickled from them: records are
rebuilt from tuples). The directory is ``$HYBRID_INTEROP_CACHE`` if set
(``off`` disables the cache), else ``~/.cache/hybrid-interop``; it is read
when a profile is asked for, never at import.

Behind the directory, the package ships the profiles of its documented
what-ifs (:mod:`planner.shipped_profiles`: one file, the same keys and
entries), so a first what-if on a named model neither imports transformers
nor traces; a key it lacks (another torch, another shard) is traced as before.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import sys
import tempfile
import zlib
from contextlib import contextmanager
from dataclasses import fields
from functools import lru_cache
from types import MappingProxyType

import devices.cost
from planner.profile import BlockProfile, Collective, SavedTensor, Shard

FORMAT = 1
"""Version of the stored layout."""

_TRACING_MODULES = ("planner/profile.py", "planner/decoder_blocks.py", "planner/rewrite.py",
                    "planner/megatron_shard.py", "planner/profile_cache.py", "devices/cost/meta_trace.py",
                    "devices/dtypes.py")
"""The code a traced profile depends on (paths from the repository root), hashed into every key."""

SHIPPED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shipped_profiles.bin")
"""The profiles that ship with the package (:mod:`planner.shipped_profiles` builds and checks the file)."""

_use_shipped = True


def directory() -> str | None:
    """The cache directory, or None when the cache is off."""
    where = os.environ.get("HYBRID_INTEROP_CACHE")
    if where is not None and where.strip().lower() in ("off", "0", "none", ""):
        return None
    root = where or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                                 "hybrid-interop")
    return os.path.join(root, "profiles")


@lru_cache(maxsize=1)
def _code_version() -> str:
    digest = hashlib.sha256()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for name in _TRACING_MODULES:
        with open(os.path.join(root, name), "rb") as f:
            digest.update(f.read())
    for dist in ("torch", "transformers"):
        digest.update(f"{dist}={_installed_version(dist)}".encode())
    return digest.hexdigest()[:16]


def _installed_version(dist: str) -> str:
    """``importlib.metadata.version(dist)`` read from the ``<dist>-<version>.dist-info`` folder name on
    ``sys.path`` ("absent" when none), without importing importlib.metadata (and the email parser it loads:
    ~45 ms of a warm what-if's start)."""
    wanted = dist.lower().replace("-", "_")
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info"):
                project, _, version = name[:-len(".dist-info")].rpartition("-")
                if project.lower().replace("-", "_").replace(".", "_") == wanted:
                    return version
    return "absent"


def code_version() -> str:
    """The hash of the tracing code and of the torch and transformers versions (part of every key)."""
    return _code_version()


def key(identity: str, signature: object, shard: Shard) -> str:
    """The file name of a profile."""
    text = json.dumps([FORMAT, _code_version(), identity, repr(signature),
                       [getattr(shard, f.name) for f in fields(shard)]])
    return hashlib.sha256(text.encode()).hexdigest()


def _plain(profile: BlockProfile) -> dict:
    def records(rs):
        return [(r.op, r.shapes, r.dtype, r.out_shapes, dict(r.args)) for r in rs]

    out = {f.name: getattr(profile, f.name) for f in fields(profile)}
    out["forward"] = records(profile.forward)
    out["backward"] = records(profile.backward)
    out["shard"] = [getattr(profile.shard, f.name) for f in fields(profile.shard)]
    out["saved"] = [(t.nbytes, t.shape, t.gemm_input, t.sequence_sharded) for t in profile.saved]
    out["collectives"] = [(c.op, c.group, c.nbytes, c.phase, c.calls, c.overlap) for c in profile.collectives]
    out["sequence_sharded"] = sorted(profile.sequence_sharded)
    return out


def _rebuild(data: dict) -> BlockProfile:
    def records(rs):
        return tuple(devices.cost.OpRecord(op, tuple(map(tuple, shapes)), dtype,
                                           None if outs is None else tuple(map(tuple, outs)), MappingProxyType(args))
                     for op, shapes, dtype, outs, args in rs)

    data = dict(data)
    data["forward"] = records(data["forward"])
    data["backward"] = records(data["backward"])
    data["shard"] = Shard(**dict(zip([f.name for f in fields(Shard)], data["shard"])))
    data["saved"] = tuple(SavedTensor(*t) for t in data["saved"])
    data["collectives"] = tuple(Collective(*c) for c in data["collectives"])
    data["sequence_sharded"] = frozenset(data["sequence_sharded"])
    return BlockProfile(**data)


class _PlainUnpickler(pickle.Unpickler):
    # Entries hold only builtins; refuse anything that would import or call code.
    _ALLOWED = {("builtins", n) for n in ("dict", "list", "tuple", "set", "frozenset", "int", "float", "str",
                                           "bool", "bytes", "NoneType")}

    def find_class(self, module, name):
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"profile cache: refusing {module}.{name}")


def load(name: str) -> BlockProfile | None:
    """The stored profile (the cache directory's, else the package's shipped one), or None (absent,
    unreadable, or from another layout)."""
    where = directory()
    if where is not None:
        path = os.path.join(where, name[:2], name)
        try:
            with open(path, "rb") as f:
                return _rebuild(_PlainUnpickler(f).load())
        except (OSError, pickle.UnpicklingError, EOFError, TypeError, ValueError, KeyError):
            pass
    packed = _shipped().get(name) if _use_shipped else None
    if packed is None:
        return None
    try:
        return _rebuild(unpack_entry(packed))
    except (pickle.UnpicklingError, EOFError, TypeError, ValueError, KeyError, zlib.error):
        return None


def read_pack(path: str = SHIPPED) -> dict | None:
    """The shipped file's contents (``format``, ``code``: :func:`code_version` of its build, ``entries``: key ->
    compressed entry), or None when it is absent or unreadable."""
    try:
        with open(path, "rb") as f:
            pack = _PlainUnpickler(f).load()
    except (OSError, pickle.UnpicklingError, EOFError, TypeError, ValueError):
        return None
    return pack if isinstance(pack, dict) else None


def unpack_entry(packed: bytes) -> dict:
    """A shipped entry as the plain data a cache file holds."""
    return _PlainUnpickler(io.BytesIO(zlib.decompress(packed))).load()


@lru_cache(maxsize=1)
def _shipped() -> dict[str, bytes]:
    # Read once, on the first profile asked for; each entry is inflated only when its key is asked for.
    pack = read_pack()
    return pack.get("entries", {}) if pack is not None and pack.get("format") == FORMAT else {}


@contextmanager
def without_shipped():
    """Profiles come from the cache directory or a trace only (building the shipped file)."""
    global _use_shipped
    before, _use_shipped = _use_shipped, False
    try:
        yield
    finally:
        _use_shipped = before


def read_entry(path: str) -> bytes:
    """The stored bytes of a cache file, as the shipped file keeps them (compressed plain data)."""
    with open(path, "rb") as f:
        _PlainUnpickler(io.BytesIO(f.read())).load()  # plain data only, checked before it ships
    with open(path, "rb") as f:
        return zlib.compress(f.read(), 9)


def store(name: str, profile: BlockProfile) -> None:
    """Keep ``profile`` (atomically; a cache that cannot be written is skipped silently)."""
    where = directory()
    if where is None:
        return
    folder = os.path.join(where, name[:2])
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(_plain(profile), f, protocol=4)
        os.replace(tmp, os.path.join(folder, name))
    except OSError:
        return


__all__ = ["FORMAT", "SHIPPED", "code_version", "directory", "key", "load", "read_entry", "read_pack", "store", "unpack_entry", "without_shipped"]
