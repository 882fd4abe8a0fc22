"""lockgate's version, in the one place the package, the command line and the build read it."""

__version__ = "0.4.0"
