"""Edges: where raw input becomes typed values (or a typed error), and state reaches disk.

Bounded file reads, stderr, the Kata configuration, the host probe, memory cgroups, Pod/OCI
sources, and the journal. Imports only the core.
"""
