"""ECRM/ECRec erasure-coded embeddings: real parity of rows and optimizer state, kept current.

A systematic (n, k) code over floats, r = n - k parity rows per stripe, on top of a
:class:`ShardedEmbeddings` with ``row_round_robin`` placement over N shards (k + r <= N):

* **Stripes** (:class:`ftsim.stripes.StripeLayout`, shared with the time model). ``rotating``
  (default): stripe ``j`` holds the k consecutive global rows ``j*k .. j*k + k - 1`` on shards
  ``(j*k + i) % N``, parity rotating RAID-5 style over the N - k shards holding none of its
  data (with ``s = j*k % N``, ``g = gcd(N, k)``, ``P = N / g``, ``o = (j // P) * r``, slot m is
  on shard ``(s + k + (o + m) % (N - k)) % N``; over every ``P * g / gcd(g, r)`` consecutive
  stripes each shard holds exactly the same number of parity rows, and in any prefix the
  counts differ by at most r rows). ``grouped``: every stripe, data and parity, inside one
  group of ``group_size`` consecutive shards (N a multiple of it), parity rotating within the
  group. Short stripes (past the last row) count their missing members as zero rows.
* **Code** (r = 1 or 2). ``p_m = sum_i c[m, i] * x_i``: ``c[0, i] = 1`` (sum parity) and
  ``c[1, i] = i - k // 2 + 0.5`` (distinct, non-zero, centred nodes: -0.5, 0.5 for k = 2;
  -1.5 .. 1.5 for k = 4). Any 2 erasures among the k + 2 members are decodable: two data rows
  give the 2x2 Vandermonde system ``[[1, 1], [c_a, c_b]]`` (c_a != c_b); a data row and one
  parity slot leave a non-zero coefficient. Centred nodes keep the second parity small, which
  makes two-row decoding about 3x more accurate than nodes 1..k.
* **What is coded.** Row values (R, d) and every optimizer-state array of the rows: momentum
  (R, d) -> parity (n_stripes, r, d); row-wise Adagrad accumulator (R,) -> (n_stripes, r).
  Dense parameters are not coded: they are replicated on every trainer and recovered from a
  replica.
* **Incremental update** (listener :meth:`ParityCode.on_update`). ``mode="delta"``: the data
  servers forward the change ``new - old`` of every touched row (values and state) and the
  parity servers add ``c[m, i] * delta``; parity is a linear function of the stored data, so
  this is exact for every optimizer, row-wise Adagrad included. ``mode="gradient"`` (ECRec's
  shortcut): the parity server receives ``sum_i c[m, i] * g_i`` per stripe and applies the
  update rule itself; valid only when the rule is linear in (state, gradient) for every member
  of the stripe, i.e. plain SGD here (see ``docs/ecrm_parity.md``).

Parity is stored in the embedding dtype (float32); updates and decoding are computed in
float64 and rounded once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np

from ftsim.stripes import LayoutKind, StripeLayout
from ftsim.trainer.embeddings import RowData, ShardedEmbeddings, SparseUpdate
from ftsim.trainer.optim import put_rows

if TYPE_CHECKING:
    from ftsim.trainer.trainer import Trainer

VALUES = "values"  # key of the row values among the coded arrays (the others: state names)
_BLOCK = 1 << 16  # stripes encoded per block by rebuild_parity / consistency_error


class UnrecoverableError(RuntimeError):
    """More than r members of some stripes were lost: fall back to a checkpoint.

    ``stripes``: sorted ids of the unrecoverable stripes; ``rows``: sorted global ids of their
    data rows that lived on the failed shards (the rows a checkpoint must supply).
    """

    def __init__(self, stripes: np.ndarray, rows: np.ndarray) -> None:
        self.stripes = stripes
        self.rows = rows
        super().__init__(
            f"{len(stripes)} stripe(s) lost more members than the code tolerates "
            f"(first: {stripes[:5].tolist()}); {len(rows)} data rows need a checkpoint"
        )


def _unique(values: np.ndarray, is_sorted: bool) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)``, without a sort when ``values`` are
    already sorted."""
    if not is_sorted or len(values) == 0:
        return np.unique(values, return_inverse=True)
    first = np.empty(len(values), dtype=bool)
    first[0] = True
    np.not_equal(values[1:], values[:-1], out=first[1:])
    index = np.cumsum(first)
    index -= 1
    return values[first], index


class ParityCode:
    """Parity of all embedding rows and their optimizer state for one :class:`ShardedEmbeddings`.

    ``values`` (n_stripes, r, d) and ``state[name]`` (n_stripes, r, ...) hold the parity rows
    in the embedding dtype; ``coeffs`` (r, k) float64 is the code. Construction encodes the
    current rows; call :meth:`on_update` after every step (see :meth:`attach`).
    """

    def __init__(
        self,
        embeddings: ShardedEmbeddings,
        k: int,
        r: int = 1,
        mode: Literal["delta", "gradient"] = "delta",
        layout: LayoutKind = "rotating",
        group_size: int | None = None,
    ) -> None:
        n = embeddings.n_shards
        if embeddings.placement != "row_round_robin":
            raise ValueError(
                "ECRM parity needs row_round_robin placement: table_wise puts whole tables on "
                "one shard with unequal shard sizes, so stripes of k rows on k distinct shards "
                "cannot cover the rows at r/k overhead"
            )
        if k < 1 or r not in (1, 2) or k + r > n:
            raise ValueError(f"need k >= 1, r in (1, 2), k + r <= n_shards ({n}); got k={k}, r={r}")
        if mode not in ("delta", "gradient"):
            raise ValueError(f"unknown mode {mode!r}")
        if mode == "gradient" and embeddings.optimizer.cfg.kind != "sgd":
            raise ValueError(
                f"gradient-applied parity is exact only for sgd, not "
                f"{embeddings.optimizer.cfg.kind!r}: lazy momentum leaves untouched stripe members "
                "undecayed and row-wise Adagrad scales each row by its own accumulator, so the "
                "parity server needs each touched row's state; use mode='delta'"
            )
        self.layout = StripeLayout(n, k, r, layout, group_size)
        self.emb = embeddings
        self.k, self.r, self.mode = k, r, mode
        self.n_stripes = self.layout.n_stripes(embeddings.n_rows)
        self.coeffs = np.stack([np.ones(k), np.arange(k) - k // 2 + 0.5])[:r]
        self.values = np.zeros((self.n_stripes, r, embeddings.dim), embeddings.dtype)
        self.state = {
            name: np.zeros((self.n_stripes, r, *a.shape[1:]), embeddings.dtype)
            for name, a in embeddings.state.items()
        }
        self.rebuild_parity()

    @classmethod
    def attach(
        cls,
        trainer: Trainer,
        k: int,
        r: int = 1,
        mode: Literal["delta", "gradient"] = "delta",
        layout: LayoutKind = "rotating",
        group_size: int | None = None,
    ) -> ParityCode:
        """Encode ``trainer``'s embeddings and register :meth:`on_update` as its listener.

        Undo with ``trainer.remove_update_listener(code.on_update)``.
        """
        code = cls(trainer.embeddings, k, r, mode, layout, group_size)
        trainer.add_update_listener(code.on_update)
        return code

    # ------------------------------------------------------------------ layout
    def stripe_of(self, rows: np.ndarray) -> np.ndarray:
        """Stripe id of each global row."""
        return self.layout.stripe_of(rows)

    def offset_of(self, rows: np.ndarray) -> np.ndarray:
        """Offset (0..k-1) of each global row inside its stripe."""
        return self.layout.offset_of(rows)

    def stripe_rows(self, stripes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Data members of ``stripes`` (n,): global rows (n, k) and a mask (n, k) of the ones
        that exist (False only in short stripes; those entries hold ids >= R)."""
        rows = self.layout.data_rows(stripes)
        return rows, rows < self.emb.n_rows

    def parity_shards(self, stripes: np.ndarray) -> np.ndarray:
        """Shard of every parity slot of ``stripes`` (n,): (n, r), distinct from the data shards."""
        return self.layout.parity_shards(stripes)

    def parity_slots(self, shard: int) -> tuple[np.ndarray, np.ndarray]:
        """Parity rows held by ``shard``: (stripe ids, slot m), each (n_held,)."""
        return np.nonzero(self.parity_shards(np.arange(self.n_stripes)) == shard)

    def ranges(self, shard: int, n_ranges: int) -> list[np.ndarray]:
        """The rows of ``shard`` split into ``n_ranges`` contiguous, near-equal sorted pieces
        (for range-by-range rebuild with :meth:`degraded_read`)."""
        return np.array_split(self.emb.shard_rows(shard), n_ranges)

    # ---------------------------------------------------------------- encoding
    def _coded_arrays(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Per coded array: (data viewed as (R, w), parity viewed as (n_stripes, r, w))."""
        emb = self.emb
        out = {VALUES: (emb.weights, self.values)}
        for name, a in emb.state.items():
            out[name] = (a.reshape(emb.n_rows, -1), self.state[name])
        return {
            name: (data, par.reshape(self.n_stripes, self.r, -1))
            for name, (data, par) in out.items()
        }

    def _gather(self, data: np.ndarray, stripes: np.ndarray, keep: np.ndarray) -> np.ndarray:
        """Members of ``stripes`` as float64 (n, k, w); entries where ``keep`` is False are 0
        (never read through, so garbage or NaN in lost rows cannot leak in)."""
        rows, _ = self.stripe_rows(stripes)
        x = np.take(data, np.minimum(rows, self.emb.n_rows - 1), axis=0).astype(np.float64)
        x[~keep] = 0.0
        return x

    def coded_sum(self, stripes: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Parity recomputed from the current rows, float64: name -> (n, r, w) for ``stripes``
        (default all). ``w`` = d for values and momentum, 1 for the Adagrad accumulator."""
        stripes = np.arange(self.n_stripes) if stripes is None else np.asarray(stripes)
        _, present = self.stripe_rows(stripes)
        return {
            name: np.einsum("mi,siw->smw", self.coeffs, self._gather(data, stripes, present))
            for name, (data, _) in self._coded_arrays().items()
        }

    def _blocks(self, stripes: np.ndarray) -> list[np.ndarray]:
        """``stripes`` in pieces of at most ``_BLOCK`` (bounds the float64 work arrays)."""
        return np.split(stripes, np.arange(_BLOCK, len(stripes), _BLOCK))

    def rebuild_parity(self, failed_shards: np.ndarray | list[int] | None = None) -> None:
        """Recompute from the data the parity rows held by ``failed_shards`` (after their data
        rows were restored); ``None`` re-encodes every parity row (also resets rounding drift)."""
        lost = np.ones((self.n_stripes, self.r), dtype=bool)
        if failed_shards is not None:
            lost = np.isin(self.parity_shards(np.arange(self.n_stripes)), failed_shards)
        arrays = self._coded_arrays()
        for stripes in self._blocks(np.flatnonzero(lost.any(axis=1))):
            s, m = np.nonzero(lost[stripes])
            for name, fresh in self.coded_sum(stripes).items():
                arrays[name][1][stripes[s], m] = fresh[s, m]

    def consistency_error(self) -> dict[str, float]:
        """Per coded array, max over stripes of ``|p - p*|_inf / |p*|_inf`` (the stored parity
        p against the float64 coded sum p* of the current rows, both over the stripe's r slots;
        stripes whose p* is all zero count their absolute error)."""
        arrays = self._coded_arrays()
        out = dict.fromkeys(arrays, 0.0)
        for stripes in self._blocks(np.arange(self.n_stripes)):
            for name, fresh in self.coded_sum(stripes).items():
                err = np.abs(arrays[name][1][stripes] - fresh).max(axis=(1, 2))
                scale = np.abs(fresh).max(axis=(1, 2))
                worst = np.max(err / np.where(scale > 0, scale, 1.0), initial=0.0)
                out[name] = max(out[name], float(worst))
        return out

    # ------------------------------------------------------------------ updates
    def on_update(self, update: SparseUpdate) -> None:
        """Fold one training step into the parity of the touched rows' stripes."""
        rows = update.rows
        if len(rows) == 0:
            return
        # segment sum without np.add.at: rows are unique, so each (touched stripe, offset)
        # slot of a dense (n_touched, k, w) buffer receives at most one row
        touched, index = _unique(self.stripe_of(rows), self.layout.kind == "rotating")
        offset = self.offset_of(rows)
        if self.mode == "gradient":  # sgd: delta p_m = -lr * sum_i c[m, i] * g_i
            changes = {VALUES: update.grad.astype(np.float64) * -self.emb.optimizer.cfg.lr}
        else:
            changes = {VALUES: update.new.values.astype(np.float64) - update.old.values}
            for name in self.state:
                new = update.new.state[name].reshape(len(rows), -1).astype(np.float64)
                changes[name] = new - update.old.state[name].reshape(len(rows), -1)
        arrays = self._coded_arrays()
        for name, delta in changes.items():
            par = arrays[name][1]
            # float64 add, one rounding to the storage dtype
            total = np.take(par, touched, axis=0) + self._encode(index, offset, len(touched), delta)
            put_rows(
                par.reshape(len(par), -1),
                touched,
                total.astype(par.dtype).reshape(len(touched), -1),
            )

    def _encode(
        self, stripe: np.ndarray, offset: np.ndarray, n: int, delta: np.ndarray
    ) -> np.ndarray:
        """``coeffs @ members`` for ``n`` stripes whose members are the rows ``delta`` (m, w)
        float64 at (``stripe``, ``offset``) and zero elsewhere: (n, r, w) float64.

        With k <= 2 the coefficients are ±1 and ±0.5, so each product is exact (on values
        that come from float32 data or float64 products of them) and a parity value is one
        rounding of their sum, in whatever order BLAS adds them; BLAS adds that to a zeroed
        output (a sum of -0 comes out +0). Computed so, elementwise on contiguous members,
        it is the same bits as the per-stripe matrix product, which NumPy makes one BLAS
        call per stripe (~80 µs for the ~1,800 stripes a prod50h step touches).
        """
        w = delta.shape[1]
        if self.k > 2:
            members = np.zeros((n, self.k, w))
            members[stripe, offset] = delta
            return np.matmul(self.coeffs, members)
        members = np.zeros((self.k, n, w))  # by offset: each member's rows contiguous
        put_rows(members.reshape(-1, w), offset * n + stripe, delta)  # one row per slot
        out = np.empty((n, self.r, w))
        for m in range(self.r):
            acc = out[:, m]
            np.multiply(members[0], self.coeffs[m, 0], out=acc)
            if self.k == 2:
                acc += members[1] * self.coeffs[m, 1]
        out += 0.0
        return out

    # ----------------------------------------------------------------- recovery
    def _losses(self, stripes: np.ndarray, failed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Masks of the lost data members (n, k) and lost parity slots (n, r) of ``stripes``."""
        rows, present = self.stripe_rows(stripes)
        shard = self.emb.shard_of_global(np.minimum(rows, self.emb.n_rows - 1))
        return present & np.isin(shard, failed), np.isin(self.parity_shards(stripes), failed)

    def _stripes_of_shards(self, failed: np.ndarray) -> np.ndarray:
        """Sorted stripes with a data row or a parity row on one of the ``failed`` shards."""
        all_stripes = np.arange(self.n_stripes)
        data_lost, parity_lost = self._losses(all_stripes, failed)
        return np.flatnonzero(data_lost.any(axis=1) | parity_lost.any(axis=1))

    def _classify(
        self, stripes: np.ndarray, failed: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Members (n, k), lost data (n, k), lost parity (n, r) and unrecoverable (n,) — more
        than r members lost — of ``stripes``."""
        rows, _ = self.stripe_rows(stripes)
        data_lost, parity_lost = self._losses(stripes, failed)
        bad = data_lost.sum(axis=1) + parity_lost.sum(axis=1) > self.r
        return rows, data_lost, parity_lost, bad

    def unrecoverable_stripes(self, failed_shards: np.ndarray | list[int]) -> np.ndarray:
        """Sorted stripes that lost more than r members (data or parity) if ``failed_shards``
        fail together (empty: the failure is decodable)."""
        failed = np.unique(np.asarray(failed_shards, dtype=np.int64))
        stripes = self._stripes_of_shards(failed)
        return stripes[self._classify(stripes, failed)[3]]

    def _check(
        self, stripes: np.ndarray, failed: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Members (n, k), lost data (n, k) and lost parity (n, r) of ``stripes``; raises
        :class:`UnrecoverableError` naming every stripe that lost more than r members."""
        rows, data_lost, parity_lost, bad = self._classify(stripes, failed)
        if bad.any():
            raise UnrecoverableError(stripes[bad], np.sort(rows[bad][data_lost[bad]]))
        return rows, data_lost, parity_lost

    def _decode_stripes(self, stripes: np.ndarray, failed: np.ndarray) -> RowData:
        """All data rows of ``stripes`` held by ``failed`` shards (sorted by row), decoded from
        the surviving members and parity; raises :class:`UnrecoverableError`."""
        rows, data_lost, parity_lost = self._check(stripes, failed)
        out_rows = rows[data_lost]  # stripe-major; sorted at the end
        pos = np.cumsum(data_lost).reshape(data_lost.shape) - 1  # (n, k) -> index in out_rows
        pattern = data_lost @ (1 << np.arange(self.k)) + (
            parity_lost @ (1 << np.arange(self.r)) << self.k
        )
        arrays = self._coded_arrays()
        out = {name: np.empty((len(out_rows), par.shape[2])) for name, (_, par) in arrays.items()}
        for code in np.unique(pattern):
            sel = np.flatnonzero(pattern == code)
            lost = np.flatnonzero(data_lost[sel[0]])
            if len(lost) == 0:
                continue
            use = np.flatnonzero(~parity_lost[sel[0]])[: len(lost)]  # any |lost| slots will do
            inv = np.linalg.inv(self.coeffs[np.ix_(use, lost)])
            keep = ~data_lost[sel] & (rows[sel] < self.emb.n_rows)
            for name, (data, par) in arrays.items():
                known = np.einsum(
                    "mi,siw->smw", self.coeffs[use], self._gather(data, stripes[sel], keep)
                )
                rhs = par[stripes[sel][:, None], use].astype(np.float64) - known
                solved = np.einsum("lm,smw->slw", inv, rhs)  # (n_sel, |lost|, w)
                out[name][pos[sel][:, lost].ravel()] = solved.reshape(-1, par.shape[2])
        return self._row_data(out_rows, out)

    def _row_data(self, rows: np.ndarray, coded: dict[str, np.ndarray]) -> RowData:
        """Decoded float64 arrays (name -> (n, w)) of ``rows`` (any order) as a
        :class:`RowData` sorted by row, rounded once to the embedding dtype."""
        order = np.argsort(rows, kind="stable")
        dtype = self.emb.dtype
        state = {
            name: coded[name][order].astype(dtype).reshape(len(rows), *a.shape[1:])
            for name, a in self.emb.state.items()
        }
        return RowData(rows[order], coded[VALUES][order].astype(dtype), state)

    def _decode_all(self, stripes: np.ndarray, failed: np.ndarray) -> RowData:
        """:meth:`_decode_stripes` over ``stripes`` in blocks (bounded work memory)."""
        parts = [self._decode_stripes(block, failed) for block in self._blocks(stripes)]
        rows = np.concatenate([p.rows for p in parts])
        coded = {VALUES: np.concatenate([p.values for p in parts])}
        for name in self.state:
            coded[name] = np.concatenate([p.state[name] for p in parts])
        return self._row_data(rows, coded)  # blocks interleave under the grouped layout

    def decode(self, failed_shards: np.ndarray | list[int]) -> RowData:
        """Every row (values and optimizer state) held by ``failed_shards``, decoded from the
        survivors' current rows and the parity not held by failed shards.

        Raises :class:`UnrecoverableError` if some stripe lost more than r members.
        """
        failed = np.unique(np.asarray(failed_shards, dtype=np.int64))
        stripes = self._stripes_of_shards(failed)
        self._check(stripes, failed)  # one error naming all unrecoverable stripes
        return self._decode_all(stripes, failed)

    def decode_recoverable(
        self, failed_shards: np.ndarray | list[int]
    ) -> tuple[RowData, np.ndarray]:
        """Decode what can be decoded after losing ``failed_shards``: the rows (values and
        optimizer state) of theirs in stripes that lost at most r members, and the sorted
        global ids of the others (data rows of unrecoverable stripes on failed shards; they
        need a checkpoint)."""
        failed = np.unique(np.asarray(failed_shards, dtype=np.int64))
        stripes = self._stripes_of_shards(failed)
        rows, data_lost, _, bad = self._classify(stripes, failed)
        return self._decode_all(stripes[~bad], failed), np.sort(rows[bad][data_lost[bad]])

    def degraded_read(self, rows: np.ndarray, failed_shards: np.ndarray | list[int]) -> RowData:
        """The given global rows (sorted, unique in the result): rows on surviving shards are
        read, rows on ``failed_shards`` are decoded (only their stripes are touched)."""
        failed = np.unique(np.asarray(failed_shards, dtype=np.int64))
        result = self.emb.read_rows(rows)
        lost = np.isin(self.emb.shard_of_global(result.rows), failed)
        if lost.any():
            decoded = self._decode_stripes(np.unique(self.stripe_of(result.rows[lost])), failed)
            part = decoded.subset(result.rows[lost])
            result.values[lost] = part.values
            for name, a in result.state.items():
                a[lost] = part.state[name]
        return result

    # ---------------------------------------------------------------- byte counts
    @property
    def parity_row_bytes(self) -> int:
        """Bytes of one parity row: values plus optimizer state (= a data row's bytes)."""
        return self.emb.row_bytes

    @property
    def parity_bytes_total(self) -> int:
        """Bytes of all parity rows (n_stripes * r * row bytes)."""
        return int(self.values.nbytes + sum(a.nbytes for a in self.state.values()))

    @property
    def memory_overhead(self) -> float:
        """Parity bytes / data bytes: r/k exactly when R % k == 0, else r*ceil(R/k) / R."""
        return self.parity_bytes_total / (self.emb.n_rows * self.emb.row_bytes)

    @property
    def parity_bytes_per_shard(self) -> np.ndarray:
        """Parity bytes held by each shard, int64 (n_shards,)."""
        held = np.bincount(
            self.parity_shards(np.arange(self.n_stripes)).ravel(), minlength=self.emb.n_shards
        )
        return held * self.parity_row_bytes

    def traffic_bytes(self, update: SparseUpdate) -> int:
        """Bytes sent to parity servers for one step: delta mode, every touched row's change
        (values + state) to each of its r parity servers; gradient mode, one coded gradient
        row (d floats) per touched stripe and parity slot."""
        if self.mode == "gradient":
            n_stripes = len(np.unique(self.stripe_of(update.rows)))
            return n_stripes * self.r * self.emb.dim * self.emb.dtype.itemsize
        return len(update.rows) * self.emb.row_bytes * self.r

    def rebuild_read_bytes(self, shard: int, include_parity: bool = True) -> int:
        """Bytes the survivors send to rebuild ``shard`` alone: per stripe with a data row on
        it, the other existing data rows plus one parity row (k-fold read amplification);
        with ``include_parity``, per parity row it held, all existing data rows of the stripe."""
        stripes = np.unique(self.stripe_of(self.emb.shard_rows(shard)))
        reads = int(self.stripe_rows(stripes)[1].sum())  # (members - 1) + 1 parity per stripe
        if include_parity:
            held, _ = self.parity_slots(shard)
            reads += int(self.stripe_rows(held)[1].sum())
        return reads * self.emb.row_bytes
