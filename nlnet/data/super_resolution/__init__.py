"""Super-resolution data: the typed ``data`` section (:mod:`.config`), photographs and their
bicubic low-resolution copies (:mod:`.dataset`)."""
