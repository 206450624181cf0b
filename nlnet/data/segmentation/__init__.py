"""Segmentation data: the typed ``data`` section and its checks (:mod:`.config`), 2D image/mask
folders (:mod:`.images`), the Cityscapes layout (:mod:`.cityscapes`), joint image/mask training
transforms (:mod:`.transforms`), the 2D dataset a section describes (:mod:`.builder`) and 3D
volume folders (:mod:`.volumes`)."""
