"""Video I/O: the decoding backends (PyAV, torchcodec), their common reader interface, the clip
decoder with its decoded-clip cache, the frame-count index, and writing videos."""
