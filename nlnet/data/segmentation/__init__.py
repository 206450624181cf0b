"""Segmentation data: 2D image/mask folders (:mod:`.images`), the Cityscapes layout
(:mod:`.cityscapes`), joint image/mask training transforms (:mod:`.transforms`) and 3D volume
folders (:mod:`.volumes`)."""
