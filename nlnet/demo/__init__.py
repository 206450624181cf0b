"""nlnet.demo: the demos (``nlnet demo``) and their tiny models; their built-in digits tasks
are data (:mod:`nlnet.data.digits`).

Outside the library core: nothing below this package imports it. Modules:

* :mod:`nlnet.demo.models`: the tiny C2D family (``c2d_tiny``, ``c2d_tiny_nl1``, ...), a plugin
  of the registry (entry point group ``nlnet.models`` in ``pyproject.toml``, loaded on the first
  lookup), also registered when this package is imported;
* :mod:`nlnet.demo.video` (task set-up, training), :mod:`nlnet.demo.video_report` (figures,
  table), :mod:`nlnet.demo.video_run` (the command): C2D vs. non-local C2D on the video task;
* :mod:`nlnet.demo.dense`, :mod:`nlnet.demo.sr`, :mod:`nlnet.demo.unet`: the dense, super-resolution
  and U-Net demos.

Importing this package imports only :mod:`nlnet.demo.models` (models layer and below), so the
registry's plugin loading pulls in no engine code.
"""

from nlnet.demo import models as models  # registers the tiny models (c2d_tiny*)
