"""The video classification pipeline: config section, builder, dataset, layouts, clip sampling,
transforms, bad-video policy, items and batches.

The paper's recipe ("Non-local Neural Networks", Wang et al., CVPR 2018, arXiv:1711.07971,
Section 4.1) is split into the parts of :class:`nlnet.data.video.dataset.VideoClipDataset`;
decoding files is :mod:`nlnet.data.video_io`.
"""
