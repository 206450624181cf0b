"""Former home of multi-clip testing; kept so existing imports work.

Multi-clip testing now lives with the video task (:mod:`nlnet.engine.tasks.video_eval`) and
the task-agnostic evaluation driver in :mod:`nlnet.engine.evaluation`.
"""

from __future__ import annotations

from nlnet.engine.evaluation import autocast_context
from nlnet.engine.tasks.video_eval import (
    build_eval_loader,
    run_evaluation,
    scores_from_logits,
    unpack_batch,
)

__all__ = ["run_evaluation", "build_eval_loader", "scores_from_logits", "autocast_context",
           "unpack_batch"]  # fmt: skip
