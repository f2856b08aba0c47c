"""This release's version, in a module of its own: pyproject.toml, the package, the command
line and the engine registry read it without importing the rest of voxcache."""

__version__ = "0.2.0"
"""This release (what each release changed: CHANGELOG.md)."""
