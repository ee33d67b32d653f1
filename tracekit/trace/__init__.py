"""The trace file: format and schema, load/write, tensor sidecar, derived perf, export, diff, ncu.

Everything here reads or writes trace files and their derived views; it imports nothing from
the runner or the model (tests/test_layout.py), so the dashboard depends on this package only.
"""
