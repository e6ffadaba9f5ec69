"""Example kernels, importable as ``tilejit.examples.<name>`` (``tilejit demo`` runs them)."""
