"""nlnet.models."""
