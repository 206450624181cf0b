"""Super-resolution data: photographs and their bicubic low-resolution copies (:mod:`.dataset`)."""
