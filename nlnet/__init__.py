"""nlnet: non-local neural networks and self-attention for vision."""

__version__ = "0.1.0"
