"""Segmentation data: 2D image/mask folders (:mod:`.images`) and 3D volume folders
(:mod:`.volumes`)."""
