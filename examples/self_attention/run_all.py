"""Run the four self-attention worked examples in the article's order.

Run: ``python examples/self_attention/run_all.py``.
"""

from __future__ import annotations

import multi_head_window
import patch_attention
import pytorch_agreement
import sqrt_dk_digits


def main() -> None:
    for i, module in enumerate(
        (patch_attention, multi_head_window, sqrt_dk_digits, pytorch_agreement)
    ):
        if i:
            print()
        module.main()


if __name__ == "__main__":
    main()
