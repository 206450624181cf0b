"""The Kinetics-400 class names in the order of the released models' classifier rows.

The Kinetics models released with "Non-local Neural Networks" (Wang et al., CVPR 2018,
arXiv:1711.07971; Section 5, Table 3) number the 400 classes of Kinetics by the alphabetical
order of their names (``abseiling`` = 0 ... ``zumba`` = 399), as the released data preparation
does; PySlowFast's Kinetics models use the same order. The list ships with the package
(``kinetics400_classes.txt``), so an imported model prints ``abseiling`` instead of
``class_0`` without any download.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

__all__ = ["KINETICS400_FILE", "kinetics400_classes"]

#: the package data file holding one class name per line, in classifier order
KINETICS400_FILE = "kinetics400_classes.txt"


@lru_cache(maxsize=1)
def kinetics400_classes() -> tuple[str, ...]:
    """The 400 Kinetics class names, index ``i`` naming the released classifier's row ``i``."""
    text = resources.files("nlnet.models").joinpath(KINETICS400_FILE).read_text("utf-8")
    names = tuple(line.strip() for line in text.splitlines() if line.strip())
    if len(names) != 400:
        raise RuntimeError(f"{KINETICS400_FILE}: expected 400 class names, found {len(names)}")
    return names
