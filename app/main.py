"""mechsim web app: a thin router over one module per page (`mechsim app` starts it).

    streamlit run app/main.py --server.address 127.0.0.1

Each page module renders itself when Streamlit runs it as a script (``render()``), so
tests can also run a single page with streamlit.testing's AppTest.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

HERE = Path(__file__).parent

# (title, module file, url path, icon); the first is the default page.
PAGES = (
    ("Estimate", "page_estimate.py", "estimate", ":material/speed:"),
    ("Scale-out planner", "page_scaleout.py", "scaleout", ":material/hub:"),
    ("Serving", "page_serving.py", "serving", ":material/dns:"),
    ("Procurement", "page_procure.py", "procurement", ":material/payments:"),
    ("Validation", "page_validation.py", "validation", ":material/fact_check:"),
    ("Your trace", "page_trace.py", "trace", ":material/timeline:"),
    ("Hardware database", "page_hardware.py", "hardware", ":material/memory:"),
)


def pages() -> list:
    return [st.Page(f, title=t, url_path=u, icon=i, default=(n == 0))
            for n, (t, f, u, i) in enumerate(PAGES) if (HERE / f).exists()]


def main() -> None:
    st.set_page_config(page_title="mechsim", page_icon=str(HERE / "static" / "favicon.png"), layout="wide")
    nav = st.navigation(pages())
    st.sidebar.caption("mechsim: a hardware-aware performance model for transformer training and "
                       "inference. Every number on these pages comes from the Python API; the panel "
                       "'Assumptions and sources' lists what each estimate used.")
    try:
        nav.run()
    except Exception as e:  # noqa: BLE001 -- a bug must not show users a traceback
        st.error(f"Internal error ({type(e).__name__}): {e}. Please report it with the page's URL.")


if __name__ == "__main__":
    main()
