"""Training tasks: what the engine's loop needs to know about one kind of problem.

A task object provides ``build_datasets(cfg) -> (train, val)``, ``collate(batch)``,
``loss(model, batch) -> (loss, n)`` and ``evaluate(model, loader) -> dict[str, float]``; the
engine selects it by the config's ``task`` field. Modules: ``segmentation`` (semantic
segmentation, mIoU), ``detection`` (COCO detection / instance segmentation / keypoints).
"""
