"""Per-case region metrics of 3D segmentation, scored as the BraTS challenge scores them.

BraTS does not score its labels one by one over the whole dataset; it scores three nested
*regions* per case and averages each over the cases:

* whole tumour ``wt`` = labels {1, 2, 4} (necrosis / non-enhancing core, oedema, enhancing),
* tumour core ``tc`` = labels {1, 4},
* enhancing tumour ``et`` = label {4},

with ``Dice = 2 |P & T| / (|P| + |T|)`` of the predicted region ``P`` and the true one ``T``
of a case, and the challenge's convention for a region absent from both the prediction and the
truth: Dice 1 (and Hausdorff 0). The 95th-percentile Hausdorff distance (HD95, in voxels) is
MONAI's ``monai.metrics.compute_hausdorff_distance(percentile=95)`` (optional: ``pip install
'nlnet[medical]'``); a region present in only one of the two gets the volume's diagonal, which
is BraTS's 373.13 for its 240x240x155 grid.

Regions are given in the *raw* label values of the masks (BraTS's 1/2/4) and mapped through
``data.label_map`` to the class ids the network predicts (``{4: 3}``: ``et`` = class 3).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch

__all__ = [
    "BRATS_REGIONS",
    "Evaluators",
    "RegionEvaluator",
    "case_region_metrics",
    "hausdorff95",
    "mapped_regions",
    "monai_hausdorff",
    "region_dice",
]

#: BraTS's evaluated regions in its raw labels (1 necrosis/NCR, 2 oedema/ED, 4 enhancing/ET)
BRATS_REGIONS: dict[str, tuple[int, ...]] = {"wt": (1, 2, 4), "tc": (1, 4), "et": (4,)}

HD95_HINT = "pip install 'nlnet[medical]'"


def mapped_regions(
    regions: Mapping[str, Sequence[int]], label_map: Mapping[int, int] | None = None
) -> dict[str, tuple[int, ...]]:
    """The class ids of each region after ``label_map`` (raw labels not in it are kept)."""
    label_map = dict(label_map or {})
    return {
        name: tuple(sorted({label_map.get(int(v), int(v)) for v in labels}))
        for name, labels in regions.items()
    }


def region_dice(pred: torch.Tensor, true: torch.Tensor) -> float:
    """Dice of two boolean masks; 1.0 when both are empty (BraTS's convention)."""
    total = int(pred.sum()) + int(true.sum())
    if total == 0:
        return 1.0
    return 2.0 * int((pred & true).sum()) / total


def monai_hausdorff() -> Any:
    """MONAI's ``compute_hausdorff_distance``.

    Raises:
        ModuleNotFoundError: MONAI is missing (``name="monai"``, the message names the extra).
    """
    try:
        from monai.metrics import compute_hausdorff_distance
    except ImportError:
        raise ModuleNotFoundError(
            f"data.hd95: the Hausdorff distance needs MONAI: {HD95_HINT}", name="monai"
        ) from None
    return compute_hausdorff_distance


def hausdorff95(pred: torch.Tensor, true: torch.Tensor) -> float:
    """95th-percentile symmetric Hausdorff distance (voxels) of two boolean masks, by MONAI.

    Both empty: 0; one empty: the diagonal of the grid (BraTS's value for a missed or
    hallucinated region).

    Raises:
        ModuleNotFoundError: MONAI is missing (``name="monai"``).
    """
    p, t = bool(pred.any()), bool(true.any())
    if not p and not t:
        return 0.0
    if p != t:
        return math.sqrt(sum(n**2 for n in pred.shape))
    compute_hausdorff_distance = monai_hausdorff()
    with warnings.catch_warnings():  # MONAI's own deprecation notices about its internals
        warnings.simplefilter("ignore", FutureWarning)
        d = compute_hausdorff_distance(
            pred[None, None].float().cpu(), true[None, None].float().cpu(),
            include_background=True, percentile=95,
        )  # fmt: skip
    return float(d.view(-1)[0])


def case_region_metrics(
    pred: torch.Tensor,
    target: torch.Tensor,
    regions: Mapping[str, Sequence[int]],
    ignore_index: int = 255,
    hd95: bool = False,
) -> dict[str, float]:
    """``dice_<region>`` (and ``hd95_<region>``) of one case.

    Args:
        pred: predicted class ids ``(D, H, W)``.
        target: true class ids ``(D, H, W)``; ``ignore_index`` voxels (unlabelled, or the pad
            of a batch) belong to no region in either.
        regions: region name -> class ids (:func:`mapped_regions`).
        ignore_index: label of unlabelled voxels.
        hd95: also the 95th-percentile Hausdorff distance (needs MONAI).
    """
    if pred.shape != target.shape:
        raise ValueError(
            f"pred: shape {tuple(pred.shape)} differs from target {tuple(target.shape)}"
        )
    valid = target != ignore_index
    out: dict[str, float] = {}
    for name, ids in regions.items():
        ids_t = torch.as_tensor(list(ids), device=pred.device)
        p = torch.isin(pred, ids_t) & valid
        t = torch.isin(target, ids_t) & valid
        out[f"dice_{name}"] = 100.0 * region_dice(p, t)
        if hd95:
            out[f"hd95_{name}"] = hausdorff95(p, t)
    return out


class RegionEvaluator:
    """Per-case region Dice (and HD95) averaged over cases: ``reset`` / ``process`` /
    ``evaluate`` over batches ``(volumes, masks, ...)`` and the logits ``(B, K, D, H, W)``.

    Args:
        regions: region name -> class ids (after ``label_map``: :func:`mapped_regions`).
        ignore_index: label of unlabelled voxels and of the batch's pad.
        hd95: also report ``hd95_<region>`` (MONAI).
    """

    def __init__(
        self, regions: Mapping[str, Sequence[int]], ignore_index: int = 255, hd95: bool = False
    ) -> None:
        self.regions = {k: tuple(v) for k, v in regions.items()}
        self.ignore_index, self.hd95 = ignore_index, hd95
        self.reset()

    def reset(self) -> None:
        self.cases: list[dict[str, float]] = []
        self.present: set[str] = set()  # regions found in some case's ground truth

    def process(self, batch: Mapping[str, Any], outputs: torch.Tensor | None) -> None:
        if outputs is None:
            return
        pred, masks = outputs.argmax(1).cpu(), batch["mask"].cpu()
        for p, t in zip(pred, masks):
            self.cases.append(case_region_metrics(p, t, self.regions, self.ignore_index, self.hd95))
            self.present.update(
                name for name, ids in self.regions.items() if torch.isin(t, torch.tensor(ids)).any()
            )  # fmt: skip

    def evaluate(self) -> dict[str, float]:
        """The mean over cases of each ``dice_<region>`` / ``hd95_<region>``, and ``cases``.

        A region that no case's ground truth holds is not reported (with one warning): its Dice
        would be 100 for predicting nothing, a score of data that are not the region's (e.g.
        BraTS's ``et`` on masks without label 4)."""
        out: dict[str, float] = {"cases": float(len(self.cases))}
        absent = [name for name in self.regions if name not in self.present]
        if self.cases and absent:
            warnings.warn(
                f"data.regions: {', '.join(absent)} never occur(s) in the evaluated masks (labels "
                f"{', '.join(str(list(self.regions[n])) for n in absent)} after data.label_map): "
                "not reported", stacklevel=2,
            )  # fmt: skip
        for key in self.cases[0] if self.cases else ():
            if key.split("_", 1)[1] in absent:
                continue
            out[key] = sum(c[key] for c in self.cases) / len(self.cases)
        return out


class Evaluators:
    """Several evaluators fed the same batches, their metrics merged (detectron2's
    ``DatasetEvaluators``); a key reported twice is an error."""

    def __init__(self, *evaluators: Any) -> None:
        self.evaluators = evaluators

    def reset(self) -> None:
        for e in self.evaluators:
            e.reset()

    def process(self, batch: Any, outputs: Any) -> None:
        for e in self.evaluators:
            e.process(batch, outputs)

    def evaluate(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for e in self.evaluators:
            metrics = e.evaluate()
            clash = set(out) & set(metrics)
            if clash:
                raise ValueError(f"evaluators: metric {sorted(clash)[0]!r} reported twice")
            out.update(metrics)
        return out
