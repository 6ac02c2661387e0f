"""onite: an overnight priority batch spooler."""
__version__ = "0.1.0"
