"""Prices and power data: every number has a source, kind and date; bad data and overrides fail loudly."""

from __future__ import annotations

import shutil

import pytest
from mechsim.hwdb import get_gpu, get_system
from mechsim.hwdb.prices import (
    POWER_FILE,
    PRICES_FILE,
    all_records,
    get_price,
    load_prices,
    parse_book,
)

BOOK = load_prices()
RECORDS = all_records(BOOK)
KINDS = {"datasheet", "derived", "measured", "assumed"}


def test_there_is_data_for_the_four_default_options():
    for system in ("hgx_h100", "hgx_h200", "hgx_b200", "gb200_nvl72"):
        assert BOOK.purchase_of(system).all_in.value > 0
    for gpu in ("h100_sxm", "h200_sxm", "b200", "gb200"):
        assert BOOK.cloud_offer(gpu).price.value > 0


@pytest.mark.parametrize("path", sorted(RECORDS))
def test_every_record_has_source_kind_date(path):
    rec = RECORDS[path]
    assert rec.source in BOOK.sources, f"{path}: source {rec.source!r} missing"
    assert rec.kind in KINDS and rec.unit and rec.date, path
    if rec.kind != "datasheet":
        assert rec.note, f"{path} is {rec.kind} but has no note saying why/how"


def test_secondary_sources_back_only_assumed_or_measured():
    for path, rec in RECORDS.items():
        tier = BOOK.sources[rec.source].tier
        if tier in ("secondary", "assumption"):
            assert rec.kind in ("assumed", "measured"), f"{path}: {tier} source as {rec.kind}"


def test_sources_are_complete_and_all_cited():
    cited = {r.source for r in RECORDS.values()}
    # cited by formulas (sim/reliability.py docstring) or in notes only, listed explicitly
    by_formula_or_note = {"young_1974", "daly_2006", "meta_rsc_reliability", "inworld_b200"}
    assert set(BOOK.sources) - cited <= by_formula_or_note, "uncited sources"
    for sid, src in BOOK.sources.items():
        assert src.title and src.locator and src.date, sid
        if src.tier == "primary":
            assert (src.url or "").startswith("http"), f"{sid}: primary source without url"


def test_offers_and_purchases_name_real_hardware():
    for o in BOOK.cloud.values():
        assert get_gpu(o.gpu).key == o.gpu
        assert o.system is None or get_system(o.system).gpu.key == o.gpu
        assert o.price.unit == "USD/GPU-h"
    for key, p in BOOK.purchase.items():
        assert int(get_system(key).spec("gpus").si) == p.gpus, key


def test_per_gpu_purchase_is_all_in_over_gpus():
    p = BOOK.purchase_of("gb200_nvl72")
    assert p.per_gpu == pytest.approx(3.9e6 / 72)


def test_get_price_and_overrides():
    assert get_price("finance.electricity").value == pytest.approx(0.0806)
    book = BOOK.with_overrides({"cloud.h100_sxm": 2.5, "finance.interest_rate": 0.05, "purchase.hgx_h100": 3e5})
    offer = book.cloud_offer("h100_sxm")
    assert offer.price.value == 2.5 and offer.price.source == "user" and offer.price.kind == "assumed"
    assert book.value("finance.interest_rate") == 0.05
    assert book.purchase_of("hgx_h100").all_in.value == 3e5
    assert BOOK.value("finance.interest_rate") != 0.05  # the original is unchanged


def test_cheapest_offer_is_chosen_and_provider_filters():
    offers = BOOK.cloud_offers("h100_sxm", "on_demand")
    assert [o.price.value for o in offers] == sorted(o.price.value for o in offers)
    assert BOOK.cloud_offer("h100_sxm", provider="AWS").provider == "AWS"


@pytest.mark.parametrize("overrides,exc,word", [
    ({"cloud.h100": -1.0}, ValueError, "cloud.h100"),
    ({"finance.hosting": "cheap"}, ValueError, "finance.hosting"),
    ({"finance.nothing": 1.0}, KeyError, "finance.nothing"),
])
def test_bad_overrides(overrides, exc, word):
    with pytest.raises(exc, match=word):
        BOOK.with_overrides(overrides)


def test_missing_cloud_price_says_how_to_give_one():
    with pytest.raises(KeyError, match="cloud.a100_sxm_80gb="):
        BOOK.cloud_offer("a100_sxm_80gb")


def _copy(tmp_path):
    p, q = tmp_path / "prices.toml", tmp_path / "power.toml"
    shutil.copy(PRICES_FILE, p)
    shutil.copy(POWER_FILE, q)
    return p, q


def test_negative_price_in_data_is_rejected(tmp_path):
    p, q = _copy(tmp_path)
    p.write_text(p.read_text().replace("value = 6.88,", "value = -6.88,", 1))
    with pytest.raises(ValueError, match=">= 0"):
        parse_book(p, q)


def test_unknown_source_in_data_is_rejected(tmp_path):
    p, q = _copy(tmp_path)
    q.write_text(q.read_text().replace('source = "latif_node_power"', 'source = "nowhere"', 1))
    with pytest.raises(ValueError, match="nowhere"):
        parse_book(p, q)
