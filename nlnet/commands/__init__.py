"""Sub-commands of the ``nlnet`` command line (one module per command; no imports here)."""
