"""The rank of a process in a distributed job, and output names per rank.

A process has a rank under torchrun (or any launcher that sets ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``) or once ``torch.distributed`` is
initialised.  Its traces are then named "rank N" and carry
``{"backend", "rank", "world_size", "local_rank", "local_world_size"}``
(``distributed`` in ``otherData.frametrace.metadata``, and the top-level
``distributedInfo`` of the Chrome JSON, where Holistic Trace Analysis
reads a torch.profiler trace's rank).  torch is never imported here: it is
looked at only if the program imported ``torch.distributed`` itself.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Optional

# What torch.distributed said the last time it was initialised: a trace
# written after destroy_process_group() still knows its rank.
_last_seen: Optional[dict] = None


def _env_int(name: str) -> Optional[int]:
    text = os.environ.get(name)
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        return None  # not a rank: a launcher's would be an integer
    return value if value >= 0 else None


def _from_torch() -> Optional[dict]:
    global _last_seen
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return _last_seen
    try:
        if dist.is_available() and dist.is_initialized():
            info = {"backend": str(dist.get_backend()), "rank": int(dist.get_rank()),
                    "world_size": int(dist.get_world_size())}
            get_pg_count = getattr(dist, "get_pg_count", None)
            if get_pg_count is not None:
                info["pg_count"] = int(get_pg_count())
            _last_seen = info
    except Exception:  # noqa: BLE001 - a half-torn-down torch: the environment decides
        pass
    return _last_seen


def distributed_info() -> Optional[dict]:
    """This process's place in a distributed job, or None when it has none:
    ``{"backend", "rank", "world_size", "local_rank", "local_world_size"}``
    (values None where unknown), from torch.distributed if the program
    initialised it, else from ``RANK`` (or ``LOCAL_RANK``), ``WORLD_SIZE``,
    ``LOCAL_WORLD_SIZE`` in the environment."""
    torch_info = _from_torch()
    rank = _env_int("RANK")
    local_rank = _env_int("LOCAL_RANK")
    if rank is None:
        rank = local_rank
    if torch_info is None and rank is None:
        return None
    info = {"backend": None, "rank": rank, "world_size": _env_int("WORLD_SIZE"),
            "local_rank": local_rank, "local_world_size": _env_int("LOCAL_WORLD_SIZE")}
    if torch_info is not None:
        info.update(torch_info)
    return info


def rank_of(info: Optional[dict]) -> Optional[int]:
    rank = info.get("rank") if isinstance(info, dict) else None
    return rank if isinstance(rank, int) and not isinstance(rank, bool) else None


def process_name(info: Optional[dict], default: Optional[str] = None) -> Optional[str]:
    """ "rank N" for a process with a rank, else default."""
    rank = rank_of(info)
    return default if rank is None else f"rank {rank}"


_EXTENSIONS = (".json.gz", ".pftrace.gz", ".json", ".pftrace", ".gz")


def numbered(path: str, number: Any) -> str:
    """path with .number before its extension (trace.json -> trace.3.json);
    a .parquet dataset as it is."""
    if path.rstrip(os.sep).endswith(".parquet"):
        return path  # a dataset: ranks, pids and cycles are its partitions and file names
    for suffix in _EXTENSIONS:
        if path.endswith(suffix):
            return f"{path[: -len(suffix)]}.{number}{suffix}"
    return f"{path}.{number}"


def output_name(path: str, info: Any = "auto", pid: Optional[int] = None) -> str:
    """The file a trace goes to: ``{rank}`` and ``{pid}`` in path replaced
    (``{rank}`` is 0 without a rank), and, for a process with a rank whose
    path has no ``{rank}``, ``.rankN`` before the extension
    (trace.json -> trace.rank1.json), so that no two ranks write one file
    (a .parquet dataset is shared: see numbered).
    info: distributed_info() (default: read now)."""
    if info == "auto":
        info = distributed_info()
    rank = rank_of(info)
    path = path.replace("{pid}", str(os.getpid() if pid is None else pid))
    if "{rank}" in path:
        return path.replace("{rank}", str(rank if rank is not None else 0))
    return path if rank is None else numbered(path, f"rank{rank}")
