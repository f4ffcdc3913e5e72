"""Streaming loader for raw Criteo TSV files (Kaggle ``train.txt``, Terabyte ``day_N``).

Line format: ``label \\t I1..I13 \\t C1..C26``; label 0/1, integer features (may be negative
or empty), categorical features as hex strings (up to 8 digits, may be empty). Transform, as in
facebookresearch/dlrm: dense ``log1p(max(x, 0))`` with missing = 0; categorical value ``v`` of
feature ``t`` goes to row ``1 + mix(v, t) % (rows_t - 1)`` where ``mix`` is a fixed 64-bit
integer mixer (stable across processes), and missing goes to the reserved row 0.

The file is read ``chunk_lines`` lines at a time and parsed vectorized; the byte offset of
every chunk is remembered, so any sample range can be re-read later (replay after a restore)
without keeping the file in memory.
"""

from __future__ import annotations

from itertools import islice

import numpy as np

from ftsim.trainer.config import CRITEO_N_DENSE, CriteoDataConfig
from ftsim.trainer.data import Batch

N_FIELDS = 1 + CRITEO_N_DENSE + 26
_HEX = np.full(256, 255, dtype=np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX[_c] = 10 + _i
_HEX[0] = 16  # NUL padding of fixed-width byte strings: "no character"


class CriteoFormatError(ValueError):
    """A malformed line of a Criteo file: bad input, not a bug (the command line reports it
    in one line, exit status 2). ``line_no`` is 1-based within the file ``path`` (empty
    when the lines did not come from a file)."""

    def __init__(self, line_no: int, reason: str, path: str = "") -> None:
        where = f"{path}: " if path else ""
        hint = " (trainer.data.on_error: skip drops such lines)" if path else ""
        super().__init__(f"{where}malformed Criteo line {line_no}: {reason}{hint}")
        self.line_no = line_no
        self.reason = reason
        self.path = path

    def __reduce__(self):  # raised in a worker process, it crosses back by pickling
        return type(self), (self.line_no, self.reason, self.path)


def _mix64(v: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer on uint64 (wrapping arithmetic)."""
    v = v ^ (v >> np.uint64(30))
    v *= np.uint64(0xBF58476D1CE4E5B9)
    v ^= v >> np.uint64(27)
    v *= np.uint64(0x94D049BB133111EB)
    v ^= v >> np.uint64(31)
    return v


def hash_categories(values: np.ndarray, missing: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Raw categorical values (n, 26) uint64 -> row ids (n, 26) int64; missing -> row 0."""
    salted = values + np.arange(values.shape[1], dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    rows = (_mix64(salted) % (sizes - 1).astype(np.uint64)).astype(np.int64) + 1
    rows[missing] = 0
    return rows


def _line_error(fields: list[bytes]) -> str | None:
    """Reason why one split line is malformed, or None (slow path, only for bad chunks)."""
    if len(fields) != N_FIELDS:
        return f"expected {N_FIELDS} tab-separated fields, got {len(fields)}"
    if fields[0] not in (b"0", b"1"):
        return f"label must be 0 or 1, got {fields[0][:20]!r}"
    for j, f in enumerate(fields[1 : 1 + CRITEO_N_DENSE], start=1):
        try:
            if f:
                int(f)
        except ValueError:
            return f"integer feature I{j} is not an integer: {f[:20]!r}"
    for j, f in enumerate(fields[1 + CRITEO_N_DENSE :], start=1):
        if len(f) > 8 or (f and np.any(_HEX[np.frombuffer(f, np.uint8)] > 15)):
            return f"categorical feature C{j} is not a hex string of <= 8 digits: {f[:20]!r}"
    return None


def parse_lines(
    lines: list[bytes], first_line_no: int, sizes: np.ndarray, on_error: str
) -> tuple[Batch, int]:
    """Parse raw lines into a Batch; returns (batch, number of skipped lines).

    Raises :class:`CriteoFormatError` on the first malformed line when ``on_error='fail'``.
    """
    fields = [ln.rstrip(b"\r\n").split(b"\t") for ln in lines]
    arr, ok = _to_array(fields)
    if not ok.all():
        bad = np.flatnonzero(~ok)
        if on_error == "fail":
            i = int(bad[0])
            raise CriteoFormatError(first_line_no + i, _line_error(fields[i]) or "unparsable")
        keep = np.flatnonzero(ok)
        arr, _ = _to_array([fields[i] for i in keep])
        skipped = len(bad)
    else:
        skipped = 0
    n = len(arr)
    if n == 0:
        empty = np.zeros((0, 26), np.int64)
        return Batch(np.zeros((0, CRITEO_N_DENSE), np.float32), empty, np.zeros(0, np.float32)), 0
    label = (arr[:, 0] == b"1").astype(np.float32)
    dense = np.where(arr[:, 1 : 1 + CRITEO_N_DENSE] == b"", b"0", arr[:, 1 : 1 + CRITEO_N_DENSE])
    dense = np.log1p(np.maximum(dense.astype(np.int64), 0)).astype(np.float32)
    values, missing = _hex_values(arr[:, 1 + CRITEO_N_DENSE :])
    return Batch(dense, hash_categories(values, missing, sizes), label), skipped


def _hex_values(cat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Byte strings (n, 26) of <= 8 hex digits -> (values uint64, missing bool)."""
    nib = _HEX[np.ascontiguousarray(cat.astype("S8")).view(np.uint8).reshape(*cat.shape, 8)]
    present = nib < 16
    values = np.zeros(cat.shape, dtype=np.uint64)
    for k in range(8):
        v = nib[..., k].astype(np.uint64)
        values = np.where(present[..., k], (values << np.uint64(4)) | v, values)
    return values, ~present[..., 0]


def _to_array(fields: list[list[bytes]]) -> tuple[np.ndarray, np.ndarray]:
    """Split lines -> (array (n_ok, 40) of byte strings, per-line validity of the input)."""
    ok = np.fromiter((len(f) == N_FIELDS for f in fields), dtype=bool, count=len(fields))
    good = [f for f, k in zip(fields, ok, strict=True) if k]
    arr = np.array(good, dtype=bytes).reshape(len(good), N_FIELDS)
    valid = np.isin(arr[:, 0], [b"0", b"1"])
    cat = arr[:, 1 + CRITEO_N_DENSE :]
    valid &= (np.char.str_len(cat) <= 8).all(axis=1)
    nib = _HEX[np.ascontiguousarray(cat.astype("S8")).view(np.uint8).reshape(len(arr), 26, 8)]
    valid &= (nib <= 16).all(axis=(1, 2))
    dense = arr[:, 1 : 1 + CRITEO_N_DENSE]
    try:
        np.where(dense == b"", b"0", dense).astype(np.int64)
    except ValueError:
        valid &= [all(_is_int(x) for x in row) for row in dense]
    ok[np.flatnonzero(ok)] = valid
    return (arr if valid.all() else arr[valid]), ok


def _is_int(x: bytes) -> bool:
    try:
        if x:
            int(x)
    except ValueError:
        return False
    return True


class CriteoData:
    """Batches of a Criteo TSV file by index; the first ``eval_samples`` valid lines are the
    held-out set. Training batch ``i`` is valid samples ``[i*B, (i+1)*B)`` after those; past
    the end of the file the batches wrap around (epochs; a final partial batch is dropped)."""

    def __init__(self, cfg: CriteoDataConfig, batch_size: int, eval_samples: int) -> None:
        self.cfg = cfg
        self.batch_size = batch_size
        self.eval_samples = eval_samples
        self.table_sizes = cfg.table_sizes()
        self.n_dense = CRITEO_N_DENSE
        self._sizes = np.asarray(self.table_sizes, dtype=np.int64)
        # chunk c starts at byte _chunk_start[c][0], line _chunk_start[c][1] (1-based), and its
        # first valid sample has index _chunk_start[c][2]
        self._chunk_start: list[tuple[int, int, int]] = [(0, 1, 0)]
        self._n_valid: int | None = None  # total valid samples, known once EOF was seen
        self._cache: tuple[int, Batch] | None = None
        self.skipped_lines = 0

    def _chunk(self, c: int) -> Batch | None:
        """Parsed chunk ``c`` (None past the end of the file)."""
        if self._cache is not None and self._cache[0] == c:
            return self._cache[1]
        while len(self._chunk_start) <= c:  # discover chunk starts sequentially
            if self._chunk(len(self._chunk_start) - 1) is None:
                return None
        if self._n_valid is not None and c >= len(self._chunk_start) - 1:
            return None
        offset, line_no, first = self._chunk_start[c]
        with open(self.cfg.path, "rb") as f:
            f.seek(offset)
            lines = list(islice(f, self.cfg.chunk_lines))
            end = f.tell()
        if not lines:
            self._n_valid = first
            return None
        try:
            batch, skipped = parse_lines(lines, line_no, self._sizes, self.cfg.on_error)
        except CriteoFormatError as exc:
            raise CriteoFormatError(exc.line_no, exc.reason, str(self.cfg.path)) from None
        if c == len(self._chunk_start) - 1:
            self._chunk_start.append((end, line_no + len(lines), first + len(batch)))
            self.skipped_lines += skipped
        self._cache = (c, batch)
        return batch

    def samples(self, start: int, stop: int) -> Batch:
        """Valid samples ``[start, stop)`` of the file (fewer if the file ends first)."""
        parts: list[Batch] = []
        c = 0
        while start < stop:
            while c + 1 < len(self._chunk_start) and self._chunk_start[c + 1][2] <= start:
                c += 1
            chunk = self._chunk(c)
            if chunk is None:
                break
            first = self._chunk_start[c][2]
            if start >= first + len(chunk):
                c += 1
                continue
            a, b = start - first, min(stop - first, len(chunk))
            parts.append(Batch(chunk.dense[a:b], chunk.cat[a:b], chunk.label[a:b]))
            start = first + b
        if not parts:
            return Batch(np.zeros((0, self.n_dense), np.float32), np.zeros((0, 26), np.int64),
                         np.zeros(0, np.float32))  # fmt: skip
        return Batch(
            np.concatenate([p.dense for p in parts]),
            np.concatenate([p.cat for p in parts]),
            np.concatenate([p.label for p in parts]),
        )

    def eval_set(self, n: int) -> Batch:
        """The first ``n`` valid samples of the file (held out from training)."""
        return self.samples(0, n)

    def batches(self, start: int, stop: int) -> list[Batch]:
        """Training batches ``start .. stop - 1`` (:meth:`batch` of each)."""
        return [self.batch(i) for i in range(start, stop)]

    def batch(self, index: int) -> Batch:
        """Training batch ``index``; wraps around at the end of the file."""
        b = self.batch_size
        start = self.eval_samples + index * b
        out = self.samples(start, start + b)
        if len(out) == b:
            return out
        assert self._n_valid is not None  # a short read only happens at the end of the file
        n_batches = (self._n_valid - self.eval_samples) // b
        if n_batches <= 0:
            raise ValueError("file has fewer training samples than one batch")
        start = self.eval_samples + (index % n_batches) * b
        return self.samples(start, start + b)
