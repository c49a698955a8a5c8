"""Every page under Streamlit's AppTest: the numbers shown are the Python API's, formatted the
same way; inputs live in the URL; bad input shows st.error next to the inputs, never an exception.

This file: the Validation and Hardware pages; their references are the session's comparisons
(``measured``, ``published``: tests/conftest.py). The other pages: test_pages_estimate.py (Estimate,
router), test_pages_plans.py (Scale-out, Serving, Procurement); shared helpers in page_kit.py."""

import pytest

from mechsim import hwdb

from page_kit import clean, metrics, settle

pytestmark = pytest.mark.slow      # whole pages under AppTest: seconds per file


# ---- Validation -----------------------------------------------------------------------------

def test_validation_counts_and_filter(page_test, measured):
    at = page_test("page_validation.py")
    clean(at)
    rows, summary, limits, bad = measured.rows, measured.summary, measured.limits, measured.failures
    m = metrics(at)
    assert m["Cases compared"] == str(len(rows)) and m["Over threshold"] == str(len(bad))
    at.selectbox(key="validation.kind").set_value("gemm")
    settle(at.run())
    clean(at)
    table = at.dataframe[0].value
    assert set(table["kind"]) == {"gemm"}
    held = summary[("gemm", "held_out")]
    row = table[table["split"] == "held_out"].iloc[0]
    assert row["MAPE"] == pytest.approx(held["mape"]) and row["limit_MAPE"] == limits["gemm"]["mape"]


def test_validation_shows_the_published_at_scale_rows(page_test, published):
    from mechsim.validation.api import published_by_system
    at = page_test("page_validation.py")
    clean(at)
    rows, sources = published.rows, published.sources
    m = metrics(at)
    for system, (_n, mape, _mx) in published_by_system(rows).items():
        assert m[f"{system} MAPE"] == f"{mape:.1%}"
    tables_shown = [d.value for d in at.dataframe]
    pub = next(t for t in tables_shown if "published_tokens_per_s_per_gpu" in t.columns)
    assert len(pub) == len(rows)
    worst = max(rows, key=lambda r: abs(r.error))
    assert pub.iloc[0]["row"] == worst.row_id and pub.iloc[0]["error"] == pytest.approx(worst.error)
    assert set(pub["source"]) <= set(sources)
    flagged = pub[pub["source_flag"] != ""]
    assert len(flagged) == sum(1 for r in rows if r.source_flag)


# ---- Hardware -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["h100_sxm", "gb200_nvl72", "cx7_400g_ib"])
def test_hardware_lists_every_spec_with_source(page_test, name):
    at = page_test("page_hardware.py", name=name)
    clean(at)
    obj = hwdb.default_db().find(name)
    assert metrics(at)["Specs shown"] == str(len(obj.specs))
    table = at.dataframe[0].value
    assert set(table["item"]) == set(obj.specs) and table["source"].astype(bool).all()
    assert set(table["kind"]) <= set(hwdb.schema.KINDS)


def test_hardware_kind_filter(page_test):
    at = page_test("page_hardware.py", name="h100_sxm", kind="datasheet")
    clean(at)
    n = sum(1 for s in hwdb.get_gpu("h100_sxm").specs.values() if s.kind == "datasheet")
    assert metrics(at)["Specs shown"] == str(n)
