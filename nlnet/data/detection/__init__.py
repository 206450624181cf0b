"""Detection data: COCO-format datasets (:mod:`.coco`) and COCO's run-length encoding
(:mod:`.rle`)."""
