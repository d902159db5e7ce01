"""Strict fake servers for the outside world (real HTTP on 127.0.0.1), used by the tests."""
