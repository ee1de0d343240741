"""The package version, importable from anywhere without importing the package."""

__version__ = "0.1.0"
