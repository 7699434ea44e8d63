"""Assay: coding-agent desks sharing one repository safely, coordinated through the git forge."""

__version__ = "0.1.0"
DISTRIBUTION = "assay-desks"  # the name Assay is installed by (`pip install assay-desks`); the command is `assay`
