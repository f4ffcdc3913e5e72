"""Dense part of DLRM with hand-written, vectorized forward and backward passes.

Shapes: ``B`` batch size, ``T`` embedding tables, ``d`` embedding dim, ``F = T + 1`` vectors
entering the interaction (bottom-MLP output first), ``P = F*(F-1)/2`` pairs.

All work arrays are preallocated per batch size and reused (``out=``), so a training step
allocates almost nothing; they come from a :class:`Workspace`, which models can share.
Outputs returned by ``forward``/``backward`` are views of those buffers: they stay valid
until the next call with the same batch size on a model of the same workspace.
"""

from __future__ import annotations

import numpy as np

from ftsim.trainer.optim import pack


def _relu_mask_(grad: np.ndarray, act: np.ndarray) -> None:
    """In place: zero ``grad`` where the ReLU output ``act`` is 0 (derivative of ReLU)."""
    np.multiply(grad, act > 0, out=grad)


def _times_transposed(a: np.ndarray, w: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``a @ wᵀ`` into ``out``. A product over one term (``a`` of one column, as the gradient
    of a one-output layer) is not a BLAS call in NumPy: it sets each element to 0 and adds
    ``a[i, 0] * w[j, 0]``, one rounding per element; the same rounding broadcast, then ``+ 0``
    (which turns a product of -0 into +0 as that sum does) gives the same bits 2x faster."""
    if a.shape[1] != 1:
        return np.matmul(a, w.T, out=out)
    np.multiply(a, w.T, out=out)
    return np.add(out, 0, out=out)


class Workspace:
    """Work arrays by role and shape, lent to every model that shares this workspace.

    A training step or forward pass writes each work array it uses before reading it, and
    nothing outlives the call but its returned views, so models that never run at the same
    time (a replication's trainers, one thread) can share their work arrays. A trainer
    cloned from another shares its workspace: its first evaluation then finds the held-out
    set's work arrays (22 MB at prod50h's shapes) mapped already, not fresh pages to fault
    in (~12 ms a fork).
    """

    def __init__(self) -> None:
        self._arrays: dict[tuple, np.ndarray] = {}

    def array(self, role: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """The (uninitialised) work array of ``role``, ``shape`` and ``dtype``."""
        key = (role, shape, dtype)
        found = self._arrays.get(key)
        if found is None:
            found = self._arrays[key] = np.empty(shape, dtype)
        return found


class MLP:
    """Affine layers ``a_l = relu(a_{l-1} @ W_l + b_l)``; ReLU on the last layer optional.

    ``W_l`` has shape (in, out) and is initialised like facebookresearch/dlrm: normal with
    std sqrt(2/(in+out)); biases normal with std sqrt(1/out).
    """

    def __init__(
        self,
        sizes: list[int],
        relu_last: bool,
        rng: np.random.Generator,
        dtype: np.dtype,
        workspace: Workspace | None = None,
        name: str = "mlp",
    ) -> None:
        """``workspace``: where the work arrays come from (default: a new one), under roles
        starting with ``name``."""
        self.workspace = Workspace() if workspace is None else workspace
        self.name = name
        self.sizes = list(sizes)
        self.relu_last = relu_last
        self.dtype = np.dtype(dtype)
        self.weights: list[np.ndarray] = []
        self.biases: list[np.ndarray] = []
        for n_in, n_out in zip(sizes[:-1], sizes[1:], strict=True):
            w = rng.normal(0.0, np.sqrt(2.0 / (n_in + n_out)), size=(n_in, n_out))
            self.weights.append(w.astype(self.dtype))
            self.biases.append(rng.normal(0.0, np.sqrt(1.0 / n_out), size=n_out).astype(self.dtype))
        self.grad_weights = [np.zeros_like(w) for w in self.weights]
        self.grad_biases = [np.zeros_like(b) for b in self.biases]
        self._relu = [relu_last or i < len(self.weights) - 1 for i in range(len(self.weights))]
        self._acts: dict[int, list[np.ndarray]] = {}
        self._grads: dict[int, list[np.ndarray]] = {}
        self._last_input: np.ndarray | None = None

    @property
    def params(self) -> list[np.ndarray]:
        """Parameter arrays in a fixed order (W_0, b_0, W_1, b_1, ...)."""
        return [p for wb in zip(self.weights, self.biases, strict=True) for p in wb]

    @property
    def grads(self) -> list[np.ndarray]:
        """Gradient arrays matching :attr:`params` (filled by :meth:`backward`)."""
        return [g for gb in zip(self.grad_weights, self.grad_biases, strict=True) for g in gb]

    def bind(self, params: list[np.ndarray], grads: list[np.ndarray]) -> None:
        """Hold the parameters and gradients in the given arrays (same order, shapes and
        values as :attr:`params` and :attr:`grads`, e.g. views into packed buffers)."""
        self.weights, self.biases = list(params[0::2]), list(params[1::2])
        self.grad_weights, self.grad_biases = list(grads[0::2]), list(grads[1::2])

    def forward(self, x: np.ndarray) -> np.ndarray:
        """(B, sizes[0]) -> (B, sizes[-1]); caches activations for :meth:`backward`."""
        b = x.shape[0]
        acts = self._acts.get(b)
        if acts is None:
            work = self.workspace.array
            acts = [
                work(f"{self.name} act {i}", (b, n), self.dtype)
                for i, n in enumerate(self.sizes[1:])
            ]
            self._acts[b] = acts
        a = x
        for w, bias, relu, z in zip(self.weights, self.biases, self._relu, acts, strict=True):
            np.matmul(a, w, out=z)
            z += bias
            if relu:
                np.maximum(z, 0, out=z)
            a = z
        self._last_input = x
        return a

    def backward(self, grad_out: np.ndarray) -> np.ndarray:
        """Backward from the gradient w.r.t. the last output (B, sizes[-1]).

        Fills :attr:`grad_weights`/:attr:`grad_biases` and returns the gradient w.r.t. the
        first layer's pre-activation ``x @ W_0 + b_0`` (B, sizes[1]), not w.r.t. the input:
        that is ``result @ W_0ᵀ``, left to the caller, which may not need it (bottom MLP) or
        fuse it with its own backward (:meth:`DotInteraction.backward`). ``grad_out`` is
        overwritten.
        """
        b = grad_out.shape[0]
        acts = self._acts[b]
        grads = self._grads.get(b)
        if grads is None:  # grads[l - 1]: gradient w.r.t. the input of layer l >= 1
            work = self.workspace.array
            grads = [
                work(f"{self.name} grad {i}", (b, n), self.dtype)
                for i, n in enumerate(self.sizes[1:-1])
            ]
            self._grads[b] = grads
        dz = grad_out
        for layer in range(len(self.weights) - 1, -1, -1):
            if self._relu[layer]:
                _relu_mask_(dz, acts[layer])
            a_prev = acts[layer - 1] if layer > 0 else self._last_input
            np.matmul(a_prev.T, dz, out=self.grad_weights[layer])
            np.add.reduce(dz, axis=0, out=self.grad_biases[layer])  # np.sum, without its wrapper
            if layer > 0:
                dz = _times_transposed(dz, self.weights[layer], out=grads[layer - 1])
        return dz


GRAM_BLOCK = 256
"""Samples whose Gram matrices :meth:`DotInteraction.forward` computes at a time."""


class DotInteraction:
    """Pairwise dot products of F vectors: output ``[z, <f_i, f_j> for i > j]`` (B, d + P).

    The pairs are the strict lower triangle of ``Fm @ Fm^T`` in row-major order, as in
    facebookresearch/dlrm (``arch_interaction_itself=False``).
    """

    def __init__(
        self, n_vectors: int, dim: int, dtype: np.dtype, workspace: Workspace | None = None
    ) -> None:
        """``workspace``: where the work arrays come from (default: a new one)."""
        self.workspace = Workspace() if workspace is None else workspace
        self.n_vectors = n_vectors
        self.dim = dim
        self.dtype = np.dtype(dtype)
        li, lj = np.tril_indices(n_vectors, -1)
        self.pair_index = (li * n_vectors + lj).astype(np.intp)
        self.n_pairs = len(self.pair_index)
        self.out_dim = dim + self.n_pairs
        self._buf: dict[int, dict[str, np.ndarray]] = {}
        self._wsym: dict[int, np.ndarray] = {}  # by n: weight pair rows at (i, j) and (j, i)
        # wsym row i*F + j is weight row d + pair(i, j) (either order); rows (i, i) are zeroed
        pair_of = np.zeros((n_vectors, n_vectors), np.intp)
        pair_of[li, lj] = pair_of[lj, li] = np.arange(len(li))
        self._wsym_rows = (dim + pair_of).reshape(-1)
        self._diagonal = np.arange(n_vectors) * (n_vectors + 1)
        self._pair_rows: dict[tuple[int, int], list] = {}  # by (batch size, first sample)
        self._feat: np.ndarray | None = None  # input of the last forward

    def buffers(self, b: int) -> dict[str, np.ndarray]:
        """Work arrays for batch size ``b``; ``feat`` (B, F, d) holds the interacting vectors."""
        buf = self._buf.get(b)
        if buf is None:
            f, d = self.n_vectors, self.dim
            # the forward's Gram matrices and Xᵀ are not needed after it: the backward's
            # symmetric pair gradients and input gradients are written over them (1 MB less
            # to keep in cache at prod50h's shapes)
            work = self.workspace.array
            square = work("interaction gram, dsym", (b, f, f), self.dtype)
            vectors = work("interaction feat_t, dfeat", (b * f * d,), self.dtype)
            buf = {
                "feat": work("interaction feat", (b, f, d), self.dtype),
                "feat_t": vectors.reshape(b, d, f),
                "gram": square,
                "out": work("interaction out", (b, self.out_dim), self.dtype),
                "dsym": square,
                "dfeat": vectors.reshape(b, f, d),
            }
            self._buf[b] = buf
        return buf

    def forward(self, feat: np.ndarray) -> np.ndarray:
        """(B, F, d) -> (B, d + P). ``feat[:, 0]`` is the bottom-MLP output.

        Each sample's Gram matrix is a product of its own, the same whatever the batch: a
        larger batch (the held-out set's chunks of 4096) goes through them
        :data:`GRAM_BLOCK` samples at a time, in that batch size's work arrays (a 12 MB
        Gram array would not stay in cache until its pairs are copied out).
        """
        b = feat.shape[0]
        out = self.buffers(b)["out"]
        out[:, : self.dim] = feat[:, 0]
        for start in range(0, b, GRAM_BLOCK):
            part = feat[start : start + GRAM_BLOCK]
            work = self.buffers(len(part))
            # X Xᵀ per sample, with Xᵀ copied contiguous first: with the transposed view as
            # operand the (27, 8) x (8, 27) products were 5x slower (OpenBLAS 0.3.31
            # SkylakeX, 1 thread: 280 µs instead of 50 at B = 256), more than the copy (20 µs)
            np.copyto(work["feat_t"], part.transpose(0, 2, 1))
            np.matmul(part, work["feat_t"], out=work["gram"])
            # the pairs: 26 row copies take 34 µs at prod50h's shapes, one np.take of the
            # 351 columns 53 µs, fancy indexing 30 µs plus a copy into place (OpenBLAS 0.3.31
            # Haswell)
            for dst, src in self._pairs(b, start, len(part)):
                dst[...] = src  # np.copyto, without its dispatcher
        self._feat = feat
        return out

    def _pairs(self, b: int, start: int, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Row ``i`` of the strict lower triangle of the Gram matrices of samples
        ``start .. start + n - 1`` of a batch of ``b`` (in the work arrays of batch size
        ``n``), ``gram[:, i, :i]``, goes to output columns ``d + i(i-1)/2 ...`` of those
        samples: one strided copy per row, views made once."""
        found = self._pair_rows.get((b, start))
        if found is None:
            d, gram = self.dim, self.buffers(n)["gram"]
            out = self.buffers(b)["out"][start : start + n]
            found = self._pair_rows[b, start] = [
                (out[:, d + i * (i - 1) // 2 : d + i * (i + 1) // 2], gram[:, i, :i])
                for i in range(1, self.n_vectors)
            ]
        return found

    def backward(self, dz: np.ndarray, weight: np.ndarray) -> np.ndarray:
        """Gradient w.r.t. the input vectors (B, F, d) of a loss that sees the output only
        through ``out @ weight``, given ``dz``, its gradient w.r.t. ``out @ weight`` (B, n).

        ``weight`` (d + P, n) is the first top-MLP layer. With ``g = dz @ weight[d:]ᵀ`` the
        pair gradients, ``d/d x_i = sum_j s_ij x_j`` where ``s`` is symmetric with ``g_ij`` at
        (i, j) and (j, i) and 0 on the diagonal. Instead of forming ``g`` and scattering it
        twice per sample, the pair rows of ``weight`` are scattered once to an (F*F, n) matrix
        and one GEMM writes every sample's ``s``: more flops, fewer passes over memory (with
        the top MLP's backward, about a quarter less time on prod50h's shapes). Then one
        batched matmul, plus ``dz @ weight[:d]ᵀ`` for the bottom-MLP vector. The result is a
        view of a work buffer.
        """
        b = dz.shape[0]
        buf = self.buffers(b)
        wsym = self._wsym.get(weight.shape[1])
        if wsym is None:
            shape = (self.n_vectors**2, weight.shape[1])
            wsym = self._wsym[shape[1]] = self.workspace.array(
                "interaction wsym", shape, self.dtype
            )
        weight.take(self._wsym_rows, axis=0, out=wsym)
        wsym[self._diagonal] = 0
        dsym = buf["dsym"]
        np.matmul(dz, wsym.T, out=dsym.reshape(b, -1))
        dfeat = np.matmul(dsym, self._feat, out=buf["dfeat"])
        dfeat[:, 0] += dz @ weight[: self.dim].T
        return dfeat


class DenseDLRM:
    """Bottom MLP + dot interaction + top MLP; the embedding lookups live outside (sharded).

    Usage per step: fill ``feature_buffer(B)[:, 1:]`` with the looked-up embeddings
    (``[:, 0]`` may hold anything: :meth:`forward` writes it), call :meth:`forward` with the
    dense features, then :meth:`backward` with the labels; the gradient w.r.t. the embeddings
    is ``[:, 1:]`` of the (B, T+1, d) array it returns.
    """

    def __init__(
        self,
        n_dense: int,
        n_tables: int,
        embedding_dim: int,
        bottom_mlp: list[int],
        top_mlp: list[int],
        rng: np.random.Generator,
        dtype: np.dtype = np.float32,
        workspace: Workspace | None = None,
    ) -> None:
        """``workspace``: where the work arrays come from (default: a new one; see
        :class:`Workspace`)."""
        self.dtype = np.dtype(dtype)
        self.workspace = work = Workspace() if workspace is None else workspace
        self.bottom = MLP([n_dense, *bottom_mlp], True, rng, self.dtype, work, "bottom")
        self.interaction = DotInteraction(n_tables + 1, embedding_dim, self.dtype, work)
        self.top = MLP([self.interaction.out_dim, *top_mlp], False, rng, self.dtype, work, "top")
        # every parameter and every gradient in one buffer each: the dense optimizer updates
        # all of them in one pass (elementwise, so with the same result per element)
        self.flat_params, params = pack(self.bottom.params + self.top.params)
        self.flat_grads, grads = pack(self.bottom.grads + self.top.grads)
        n = len(self.bottom.params)
        self.bottom.bind(params[:n], grads[:n])
        self.top.bind(params[n:], grads[n:])
        self._dlogit: dict[int, np.ndarray] = {}

    @property
    def params(self) -> list[np.ndarray]:
        """All dense parameter arrays (bottom then top)."""
        return self.bottom.params + self.top.params

    @property
    def grads(self) -> list[np.ndarray]:
        """Gradient arrays matching :attr:`params`."""
        return self.bottom.grads + self.top.grads

    def feature_buffer(self, b: int) -> np.ndarray:
        """(B, T+1, d) interaction input; write the embeddings into ``[:, 1:]``."""
        return self.interaction.buffers(b)["feat"]

    def forward(self, dense: np.ndarray) -> np.ndarray:
        """Dense features (B, n_dense) -> logits (B,). Embeddings must already be in place."""
        feat = self.feature_buffer(dense.shape[0])
        feat[:, 0] = self.bottom.forward(dense)
        return self.top.forward(self.interaction.forward(feat))[:, 0]

    def backward(self, logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """Backward of the mean binary cross-entropy over the batch.

        Fills the parameter gradients (:attr:`grads`) and returns the gradient w.r.t. the
        interaction input (B, T+1, d): ``[:, 1:]`` is d loss / d embeddings (``[:, 0]`` was
        consumed by the bottom MLP).
        """
        b = logits.shape[0]
        dlogit = self._dlogit.get(b)
        if dlogit is None:
            dlogit = self._dlogit[b] = self.workspace.array("dlogit", (b, 1), self.dtype)
        d = dlogit[:, 0]
        sigmoid(logits, out=d)
        d -= labels
        d *= self.dtype.type(1.0 / b)
        dfeat = self.interaction.backward(self.top.backward(dlogit), self.top.weights[0])
        self.bottom.backward(dfeat[:, 0])
        return dfeat


def sigmoid(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Numerically safe logistic function, elementwise."""
    negative = x < 0
    out = np.abs(x, out=out)
    np.negative(out, out=out)
    np.exp(out, out=out)  # e = exp(-|x|) in (0, 1]
    # x >= 0: 1/(1+e);  x < 0: e/(1+e) = 1 - 1/(1+e)
    np.divide(1.0, np.add(out, 1.0, out=out), out=out)
    np.subtract(1.0, out, out=out, where=negative)
    return out


def bce_with_logits(logits: np.ndarray, labels: np.ndarray) -> float:
    """Mean binary cross-entropy of logits (B,) against 0/1 labels (B,), in nats."""
    x = logits.astype(np.float64)
    return float(np.mean(np.logaddexp(0.0, x) - labels * x))
