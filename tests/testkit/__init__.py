"""Helpers shared by the test suites (tests/ is on sys.path through pytest's `pythonpath`)."""
