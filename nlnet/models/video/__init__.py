"""The video classifiers of nlnet ("Non-local Neural Networks", Wang et al., CVPR 2018,
arXiv:1711.07971, Section 4 and Table 1).

* :mod:`~nlnet.models.video.resnet3d`: ``ResNet3d`` (C2D / I3D) and ``Bottleneck3d``;
* :mod:`~nlnet.models.video.parts`: the pieces that differ between implementations (stem
  pooling, per-stage block plan, the fully-convolutional test head);
* :mod:`~nlnet.models.video.resnets`: ``build_video_resnet`` and the registered names
  (``c2d_r50_nl5``, ``i3d_r101``, ...);
* :mod:`~nlnet.models.video.transformer`: the tiny video transformers (``vivit_tiny*``).

Importing :mod:`nlnet.models` registers the names.
"""
