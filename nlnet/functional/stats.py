"""Dataset statistics that inputs are normalised with (the models' and the data's one source).

torchvision's ImageNet statistics on the [0, 1] scale: the 2D initialisation of the video
networks expects them ("Non-local Neural Networks", Wang et al., CVPR 2018, arXiv:1711.07971,
Sec. 4.1: the networks start from ImageNet-trained weights). Public as ``nlnet.data.IMAGENET_MEAN``
and ``nlnet.data.IMAGENET_STD``.
"""

from __future__ import annotations

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD"]

#: Per-channel mean of ImageNet images (RGB, [0, 1] scale).
IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
#: Per-channel standard deviation of ImageNet images (RGB, [0, 1] scale).
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)
