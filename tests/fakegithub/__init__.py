"""A fake GitHub on loopback for testing the GitHub forge adapter: `from tests.fakegithub import FakeGitHub`."""

from tests.fakegithub.faults import Fault
from tests.fakegithub.server import FakeGitHub

__all__ = ["Fault", "FakeGitHub"]
