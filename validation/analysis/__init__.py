"""Analysis: predictions of the measured records through the public API, their comparison,
calibration, the published at-scale comparisons and the generated figures (needs mechsim installed)."""
