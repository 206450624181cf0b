"""Neural-network modules: the non-local block and the self-attention layers."""

from nlnet.layers.nonlocal_block import NonLocal1d, NonLocal2d, NonLocal3d, NonLocalNd

__all__ = ["NonLocal1d", "NonLocal2d", "NonLocal3d", "NonLocalNd"]
