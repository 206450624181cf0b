"""nlnet.demo: the demos (``nlnet demo``): typed settings and a runner each, on the library's
public API.  Their built-in digits tasks are data (:mod:`nlnet.data.digits`), their tiny models
(``c2d_tiny*``, ``i3d_tiny*`` and the controls) a family of the registry
(:mod:`nlnet.models.video.tiny`).

Outside the library core: nothing below this package imports it. Modules:

* :mod:`nlnet.demo.video` (task set-up, training), :mod:`nlnet.demo.video_report` (figures,
  table), :mod:`nlnet.demo.video_run` (the command): C2D vs. non-local C2D on the video task;
* :mod:`nlnet.demo.dense`, :mod:`nlnet.demo.sr`, :mod:`nlnet.demo.unet`: the dense, super-resolution
  and U-Net demos.
"""
