"""Node identities: trainers first, then embedding parameter servers.

Node ``i`` of a cluster with T trainers and E embedding PS is trainer ``i`` for
``i < T`` and embedding PS ``i - T`` otherwise; names are ``trainer3`` and ``emb_ps7``.
"""

from __future__ import annotations

import re
from typing import Literal

Role = Literal["trainer", "emb_ps", "any"]
ROLES: tuple[str, ...] = ("trainer", "emb_ps", "any")
_NAME = re.compile(r"^(trainer|emb_ps)(\d+)$")


def role_range(trainers: int, emb_ps: int, role: str) -> range:
    """Global indices of the nodes with ``role``."""
    if role == "trainer":
        return range(trainers)
    if role == "emb_ps":
        return range(trainers, trainers + emb_ps)
    return range(trainers + emb_ps)


def node_name(trainers: int, index: int) -> str:
    return f"trainer{index}" if index < trainers else f"emb_ps{index - trainers}"


def parse_node(trainers: int, emb_ps: int, name: str) -> int:
    """Global index of ``trainer3`` / ``emb_ps7``; ValueError when no such node exists."""
    match = _NAME.match(name.strip())
    if not match:
        raise ValueError(f"node names look like 'trainer3' or 'emb_ps7' (got {name!r})")
    role, number = match.group(1), int(match.group(2))
    limit = trainers if role == "trainer" else emb_ps
    if number >= limit:
        raise ValueError(f"{name!r} does not exist: the cluster has {limit} {role} nodes")
    return number if role == "trainer" else trainers + number


def failed_shards(trainers: int, nodes) -> tuple[int, ...]:
    """Embedding-PS (shard) indices among the global node indices ``nodes``, sorted."""
    return tuple(sorted({n - trainers for n in nodes if n >= trainers}))


def any_trainer(trainers: int, nodes) -> bool:
    """Whether the global node indices ``nodes`` include a trainer."""
    return any(n < trainers for n in nodes)
