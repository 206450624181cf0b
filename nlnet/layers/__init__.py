"""nlnet.layers."""
