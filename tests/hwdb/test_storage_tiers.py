"""hwdb storage tiers: every file loads, aliases resolve, bandwidths combine per node / aggregate."""

from __future__ import annotations

import shutil

import pytest

from mechsim.hwdb import DEFAULT_DATA_DIR, HwdbError, UnknownHardwareError
from mechsim.hwdb.storage import get_storage, list_storage, load_storage


def test_every_category_has_a_tier_and_aliases_resolve():
    cats = {get_storage(k).category for k in list_storage()}
    assert {"local_nvme", "local_disk", "parallel_fs", "object_store"} <= cats
    assert get_storage("S3").key == "aws_s3" and get_storage("Lustre").key == "superpod_parallel_fs"
    with pytest.raises(UnknownHardwareError, match="aws_s3"):
        get_storage("s4")


def test_published_figures_in_si():
    assert get_storage("meta_tectonic").job_bandwidth("write", 2048) == 2e12          # 2 TB/s sustained
    assert get_storage("aws_s3").job_bandwidth("read", 1) == pytest.approx(12.5e9)    # 100 Gb/s
    assert get_storage("3fs").job_bandwidth("read", 1000) == pytest.approx(6.6 * 2**40)
    assert get_storage("3fs").job_bandwidth("read", 1) == pytest.approx(40 * 2**30)
    nvme = get_storage("dgx_h100_local_nvme")
    assert nvme.job_bandwidth("read", 4) == 4 * nvme.job_bandwidth("read", 1) and nvme.gpudirect_storage
    with pytest.raises(HwdbError, match="no write bandwidth"):
        get_storage("3fs").job_bandwidth("write", 1)


def test_broken_tier_file_names_file_and_field(tmp_path):
    root = tmp_path / "data"
    shutil.copytree(DEFAULT_DATA_DIR, root)
    f = root / "storage" / "aws_s3.toml"
    f.write_text(f.read_text().replace('category = "object_store"', 'category = "tape"'))
    with pytest.raises(HwdbError, match="aws_s3.toml.*category"):
        load_storage(root)
    f.write_text(f.read_text().replace('key = "aws_s3"', 'key = "s3x"'))
    with pytest.raises(HwdbError, match="key"):
        load_storage(root)
