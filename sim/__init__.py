if __name__ == "sim":   # imported as a top-level package from the checkout root
    raise ImportError("import mechsim.sim, not sim: the folders of a checkout are mapped into the "
                      "mechsim namespace (pip install -e . in the checkout)")
