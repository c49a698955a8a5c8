if __name__ == "app":   # imported as a top-level package from the checkout root
    raise ImportError("import mechsim.app, not app: the folders of a checkout are mapped into the "
                      "mechsim namespace (pip install -e . in the checkout)")
