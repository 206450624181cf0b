"""Image classification data (``task: image_classification``): the typed ``data`` section (:mod:`.config`),
the image items and scikit-learn's built-in digits (:mod:`.dataset`) and the training and
test-time views of an image (:mod:`.transforms`)."""
