"""A bounded memo for what replications of a scenario build again and again."""

from __future__ import annotations


class Recent(dict):
    """A memo that keeps its ``size`` most recently used entries (:meth:`get` and
    :meth:`put` use one; the least recently used goes when a new one does not fit)."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def get(self, key, default=None):
        found = self.pop(key, default)
        if found is not default:
            self[key] = found
        return found

    def put(self, key, value):
        if len(self) >= self.size:
            del self[next(iter(self))]
        self[key] = value
        return value
