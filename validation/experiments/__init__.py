"""Device experiments: run from validation/ as modules (`cd validation && python -m experiments.NAME`)
when they use the GPU runners (`from runners import timing`), or by their path otherwise."""
