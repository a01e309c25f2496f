"""Helpers the test modules share (importable as ``tests.support``)."""
