"""Validation: GPU benchmark runners (validation/runners, torch + stdlib only)
and the measured records they write (validation/records.py, stdlib only)."""
if __name__ == "validation":   # imported as a top-level package from the checkout root
    raise ImportError("import mechsim.validation, not validation: the folders of a checkout are mapped into the "
                      "mechsim namespace (pip install -e . in the checkout)")

