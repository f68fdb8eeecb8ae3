"""Halo Chat's inference engine. No Qt here: the app talks to it through `engine.api` and `Engine`.

Importing this package loads no GPU driver and downloads nothing.
"""
__version__ = "0.1.0"          # the one place: pyproject.toml, the installer and diagnostics read it
