"""Validation: GPU benchmark runners (validation/runners, torch + stdlib only)
and the measured records they write (validation/records.py, stdlib only)."""
