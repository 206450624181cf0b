"""One table row per instantiation of the non-local operation (Sec. 3.2, Eqs. 2-5, and the
Euclidean Gaussian that Sec. 3.2 names beside Eq. 2).

Wang et al., "Non-local Neural Networks", CVPR 2018, arXiv 1711.07971. Every place that needs to
know how an instantiation behaves -- how its pairwise scores are normalised, whether ``theta`` and
``phi`` are learned embeddings, which fast path avoids the ``N x N'`` matrix and which of the
block's projections may be re-associated around that matrix -- reads its :class:`Form` here
instead of comparing the instantiation's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Form", "FORMS", "INSTANTIATIONS", "form"]

Scores = Literal["softmax", "distance", "dot", "concat"]
FastPath = Literal["sdpa", "associativity", "sorted_scores"]


@dataclass(frozen=True)
class Form:
    """How one instantiation computes ``y_i = 1/C(x) sum_j f(x_i, x_j) g(x_j)`` (Eq. 1).

    Attributes:
        name: the instantiation's name (``"embedded_gaussian"``...).
        equation: where the paper defines ``f`` (``"Eq. 3"``).
        scores: ``"softmax"`` (``f = exp(.)``, ``C = sum_j f``: a softmax over the logits
            ``theta_i^T phi_j``), ``"distance"`` (``f = exp(-||x_i - x_j||^2)``, ``C = sum_j f``:
            a softmax over minus the squared distances), ``"dot"`` (``f = theta_i^T phi_j``, ``C = N'``) or ``"concat"``
            (``f = ReLU(w_f^T [theta_i, phi_j])``, ``C = N'``).
        embedded: ``theta``/``phi`` are learned 1x1 projections (``False``: ``f`` on ``x``
            itself, the Gaussian of Eq. 2).
        fast_path: how :func:`nlnet.functional.non_local` avoids the matrix: ``"sdpa"`` (fused
            attention kernels), ``"associativity"`` (``theta (phi^T g) / N'``) or
            ``"sorted_scores"`` (sorted key scores and prefix sums).
        query_side: the logits are ``theta_i^T phi_j`` with a learned ``theta``, so ``W_theta``
            may move onto the keys (:mod:`nlnet.functional.reassociated`).
        value_side: the weights multiply ``g`` linearly through an explicit softmax/dot matrix,
            so ``W_z`` may move onto the values (every form but ``concat``, whose fast path is
            its own).
    """

    name: str
    equation: str
    scores: Scores
    embedded: bool
    fast_path: FastPath
    query_side: bool
    value_side: bool

    @property
    def softmax(self) -> bool:
        """Whether ``C = sum_j f`` (the Gaussian forms): a softmax over the logits."""
        return self.scores in ("softmax", "distance")

    @property
    def reassociates(self) -> bool:
        """Whether the block's explicit path can be re-associated for this form at all."""
        return self.value_side


FORMS: dict[str, Form] = {
    f.name: f
    for f in (
        Form("gaussian", "Eq. 2", "softmax", False, "sdpa", False, True),
        Form("embedded_gaussian", "Eq. 3", "softmax", True, "sdpa", True, True),
        Form("dot_product", "Eq. 4", "dot", True, "associativity", True, True),
        Form("concatenation", "Eq. 5", "concat", True, "sorted_scores", False, False),
        # Sec. 3.2: "the Gaussian with Euclidean distance ... is also applicable"; on x itself,
        # as the distance of non-local means and bilateral filters compares the raw signal
        Form("euclidean", "Sec. 3.2", "distance", False, "sdpa", False, False),
    )
}

#: The instantiation names, in the paper's order.
INSTANTIATIONS: tuple[str, ...] = tuple(FORMS)


def form(instantiation: str) -> Form:
    """The :class:`Form` of ``instantiation`` (``ValueError`` naming the valid ones)."""
    try:
        return FORMS[instantiation]
    except (KeyError, TypeError):
        raise ValueError(
            f"instantiation must be one of {INSTANTIATIONS}, got {instantiation!r}"
        ) from None
