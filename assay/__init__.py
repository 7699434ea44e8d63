"""Assay: coding-agent desks sharing one repository safely, coordinated through the git forge."""

__version__ = "0.1.0"
