"""Interfaces: what users and runtimes call. The command line (click), the shim (stdin and
stdout, no click), the node service (HTTP on a unix socket) and its metrics, and rendering
to text and JSON. Each parses its input once and renders the typed response once.
"""
