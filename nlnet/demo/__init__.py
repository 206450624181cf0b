"""nlnet.demo: the demos (``nlnet demo``): typed settings and a runner each, on the library's
public API.  Their built-in digits tasks are data (:mod:`nlnet.data.digits`), their tiny models
(``c2d_tiny*``, ``i3d_tiny*`` and the controls) a family of the registry
(:mod:`nlnet.models.video.tiny`).

Outside the library core: nothing below this package imports it. Modules:

* :mod:`nlnet.demo.video` (recipe, training), :mod:`nlnet.demo.pretrain` (the 2D
  pre-training), :mod:`nlnet.demo.video_report` (attention picture, table),
  :mod:`nlnet.demo.video_run` (the command): C2D vs. non-local C2D on the video task;
* :mod:`nlnet.demo.dense` (segmentation and U-Net: one runner, two recipes) and
  :mod:`nlnet.demo.sr` (super-resolution);
* :mod:`nlnet.demo.seeds`: every demo's seed table (``nlnet demo --seeds``);
  :mod:`nlnet.demo.settings`: ``--set KEY=VALUE`` on any demo's settings.

The machinery they share is the library's: :mod:`nlnet.engine.jobs` (trainings side by side),
:mod:`nlnet.analysis.seeds` (tables over seeds), :mod:`nlnet.engine.hooks.curves` and
:mod:`nlnet.analysis.curves` (Figure 4), :mod:`nlnet.data.digits.decoded` (clips in memory).
"""
