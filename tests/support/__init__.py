"""Helpers shared by the test suite (fixtures that start real clusters)."""
