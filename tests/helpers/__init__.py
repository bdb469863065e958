"""Helpers shared by the test suites (fakes of hardware that is not here, launchers)."""
