"""Orchestration: the one path from a request to a response, and the only place that
orders side effects (the executor, with repair and usage readings), the host-side guards,
opening a backend, and reconcile. Imports the core, the edges and the backends.
"""
