"""Public API: lookups, aliases, errors, SI properties, what-if copies, reports."""

from __future__ import annotations


import pytest

from mechsim.hwdb import (
    GPU,
    NIC,
    HwdbError,
    Source,
    Spec,
    System,
    UnknownHardwareError,
    describe,
    get_gpu,
    get_nic,
    get_source,
    get_system,
    list_gpus,
    list_nics,
    list_sources,
    list_systems,
    spec_table_markdown,
)

REQUIRED_GPUS = ["a100_sxm_80gb", "h100_sxm", "h100_pcie", "h800_sxm", "h200_sxm", "b200", "gb200"]
REQUIRED_SYSTEMS = ["hgx_h100", "hgx_h800", "hgx_h200", "hgx_b200", "gb200_nvl72"]
REQUIRED_NICS = ["cx7_400g_ib", "cx8_800g", "efa_p5", "efa_p5en", "efa_p6_b200",
                 "spectrum_x_roce_400g", "quantum2_ndr_switch", "quantum_x800_switch"]


def test_lists_are_sorted_and_complete():
    for lister, required in ((list_gpus, REQUIRED_GPUS), (list_systems, REQUIRED_SYSTEMS),
                             (list_nics, REQUIRED_NICS)):
        keys = lister()
        assert keys == sorted(keys)
        assert set(required) <= set(keys)
    assert "nvidia_h100_page" in list_sources()
    assert isinstance(get_source("nvidia_h100_page"), Source)


@pytest.mark.parametrize("alias", ["h100", "H100", "H100 SXM", "h100-sxm", "h100_sxm", " H100-SXM5 "])
def test_gpu_aliases_resolve(alias):
    assert get_gpu(alias).key == "h100_sxm"


@pytest.mark.parametrize("alias,key", [("A100", "a100_sxm_80gb"), ("H200", "h200_sxm"), ("h800", "h800_sxm"),
                                       ("B200", "b200"), ("GB200", "gb200"), ("H100 PCIe", "h100_pcie")])
def test_more_aliases(alias, key):
    assert get_gpu(alias).key == key


def test_unknown_gpu_lists_close_matches_and_all_keys():
    with pytest.raises(UnknownHardwareError) as exc:
        get_gpu("H10")
    msg = str(exc.value)
    assert "h100_sxm" in msg and "h100_pcie" in msg
    assert all(k in msg for k in list_gpus())
    assert isinstance(exc.value, HwdbError) and isinstance(exc.value, ValueError)


def test_unknown_system_and_nic_and_source():
    with pytest.raises(UnknownHardwareError, match="hgx_h100"):
        get_system("hgx_h10")
    with pytest.raises(UnknownHardwareError, match="cx7_400g_ib"):
        get_nic("cx77")
    with pytest.raises(UnknownHardwareError, match="nvidia_h100_page"):
        get_source("nvidia_h100_pag")


def test_categories_do_not_mix():
    with pytest.raises(UnknownHardwareError):
        get_gpu("hgx_h100")


def test_lookup_after_first_load_returns_the_cached_record():
    """Repeated lookups return the one cached record (their speed is bench/small_calls_speed.py's)."""
    assert get_gpu("H100 SXM") is get_gpu("h100")


def test_gpu_identity_fields():
    g = get_gpu("h800")
    assert isinstance(g, GPU)
    assert (g.vendor, g.arch, g.based_on) == ("NVIDIA", "hopper", "h100_sxm")
    assert get_gpu("a100").arch == "ampere" and get_gpu("gb200").arch == "blackwell"
    assert get_gpu("h100").based_on is None


def test_spec_missing_key_names_gpu_and_lists_keys():
    with pytest.raises(HwdbError) as exc:
        get_gpu("h100").spec("flops_fp4")
    msg = str(exc.value)
    assert "h100_sxm" in msg and "flops_fp4" in msg and "hbm_bandwidth" in msg


def test_specs_are_read_only():
    g = get_gpu("h100")
    with pytest.raises(TypeError):
        g.specs["tdp"] = None  # type: ignore[index]
    with pytest.raises(ValueError, match="frozen"):
        g.name = "x"  # frozen pydantic model


def test_objects_are_hashable():
    assert hash(get_gpu("h100")) == hash(get_gpu("H100"))
    assert len({get_system("hgx_h100"), get_system("DGX H100")}) == 1


# ---------------------------------------------------------------- dense vs sparse, per direction
def test_h100_dense_peaks():
    g = get_gpu("h100")
    assert g.peak_flops("bf16") == pytest.approx(989.5e12, abs=1)
    assert g.peak_flops("fp16") == g.peak_flops("bf16")
    assert g.peak_flops("bfloat16") == g.peak_flops("bf16")


@pytest.mark.parametrize("key", ["h100_sxm", "h100_pcie", "h200_sxm", "h800_sxm"])
def test_fp8_is_twice_bf16_on_hopper(key):
    g = get_gpu(key)
    assert g.peak_flops("fp8") == pytest.approx(2 * g.peak_flops("bf16"), rel=1e-3)


@pytest.mark.parametrize("key", ["b200", "gb200"])
def test_blackwell_fp4_fp8_bf16_ladder(key):
    g = get_gpu(key)
    assert g.peak_flops("fp4") == pytest.approx(2 * g.peak_flops("fp8"))
    assert g.peak_flops("fp8") == pytest.approx(2 * g.peak_flops("bf16"))


def test_unsupported_dtype_lists_supported():
    with pytest.raises(HwdbError) as exc:
        get_gpu("h100").peak_flops("fp4")
    assert "h100_sxm" in str(exc.value) and "fp8" in str(exc.value) and "bf16" in str(exc.value)
    with pytest.raises(HwdbError):
        get_gpu("a100").peak_flops("fp8")
    with pytest.raises(HwdbError):
        get_gpu("h100").peak_flops("float128")
    assert get_gpu("h100").peak_flops("fp64_tc") == pytest.approx(67e12)


@pytest.mark.parametrize("key", REQUIRED_GPUS + ["h100_nvl", "h20"])
def test_per_direction_is_half_bidirectional(key):
    g = get_gpu(key)
    assert g.nvlink_bw_per_dir == pytest.approx(g.spec("nvlink_bandwidth_bidir").si / 2)
    if "pcie_bandwidth_bidir" in g.specs:
        assert g.pcie_bw_per_dir == pytest.approx(g.spec("pcie_bandwidth_bidir").si / 2)


def test_tensor_clock_matches_its_formula():
    for key in list_gpus():
        g = get_gpu(key)
        if "bf16_flops_per_sm_per_clock" in g.specs:
            implied = g.peak_flops("bf16") / (g.sm_count * g.spec("bf16_flops_per_sm_per_clock").si)
            assert g.tensor_clock_hz == pytest.approx(implied, rel=1e-3), key


def test_h100_mufu_rate_matches_fa3():
    # FA3: 16 x 132 SMs x 1830 MHz = 3.9 T exp/s
    assert get_gpu("h100").mufu_ex2_rate == pytest.approx(3.9e12, rel=0.01)


# ---------------------------------------------------------------- variants are differences
def test_h800_differs_from_h100_only_in_overridden_keys():
    h100, h800 = get_gpu("h100_sxm"), get_gpu("h800_sxm")
    own = {k for k, s in h800.specs.items() if s.inherited_from is None}
    assert {"nvlink_bandwidth_bidir", "nvlink_bandwidth_per_dir", "flops_fp64"} <= own
    for k in h100.specs:
        if k not in own:
            assert h800.specs[k].si == h100.specs[k].si and h800.specs[k].inherited_from == "h100_sxm"
    assert h800.nvlink_bw_per_dir == pytest.approx(200e9)
    assert h800.spec("nvlink_bandwidth_per_dir_usable").kind == "measured"
    assert h800.peak_flops("bf16") == h100.peak_flops("bf16")


def test_h200_memory():
    h200 = get_gpu("h200")
    assert h200.hbm_bandwidth == pytest.approx(4.8e12)
    assert h200.hbm_capacity == pytest.approx(141 * 2**30)
    assert h200.spec("hbm_capacity_visible").si == 143771 * 2**20
    assert h200.peak_flops("bf16") == get_gpu("h100").peak_flops("bf16")
    assert h200.hbm_type == "HBM3e"


def test_gb200_uses_c2c_not_pcie():
    gb = get_gpu("gb200")
    assert "pcie_bandwidth_per_dir" not in gb.specs
    with pytest.raises(HwdbError, match="gb200"):
        _ = gb.pcie_bw_per_dir
    assert gb.host_link_bw_per_dir == pytest.approx(450e9)
    assert get_gpu("b200").host_link_bw_per_dir == pytest.approx(64e9)


# ---------------------------------------------------------------- SI conversions
def test_si_conversions():
    h100 = get_gpu("h100")
    assert h100.hbm_capacity == 80 * 2**30           # GiB is binary
    assert h100.l2_bytes == 50 * 2**20               # MiB
    assert h100.smem_per_sm_bytes == 228 * 2**10     # KiB
    assert h100.hbm_bandwidth == pytest.approx(3.35e12)
    assert h100.boost_clock_hz == pytest.approx(1.98e9)
    assert h100.tdp_w == 700
    assert h100.sm_count == 132 and isinstance(h100.sm_count, int)
    assert get_nic("cx7").bandwidth_per_dir == pytest.approx(50e9)   # 400 Gb/s = 50 GB/s
    assert get_gpu("gb200").spec("grace_memory_capacity").si == 480e9  # GB is decimal


def test_spec_from_si_round_trip():
    s = Spec.from_si(2.5e12, "TB/s", source="user", kind="assumed")
    assert s.value == pytest.approx(2.5) and s.si == 2.5e12


# ---------------------------------------------------------------- what-if
def test_with_spec_returns_new_object_and_leaves_original():
    h100 = get_gpu("h100")
    fast = h100.with_spec("hbm_bandwidth", 5e12)
    assert fast is not h100 and fast.hbm_bandwidth == 5e12
    assert h100.hbm_bandwidth == pytest.approx(3.35e12)
    assert get_gpu("h100").hbm_bandwidth == pytest.approx(3.35e12)
    s = fast.spec("hbm_bandwidth")
    assert (s.kind, s.source, s.unit, s.note) == ("assumed", "user", "TB/s", "what-if")
    assert s.value == pytest.approx(5.0)


def test_with_spec_keeps_bidir_and_per_dir_consistent():
    g = get_gpu("h100").with_spec("nvlink_bandwidth_bidir", 1.8e12, note="NVLink5 on Hopper?")
    assert g.nvlink_bw_per_dir == pytest.approx(900e9)
    g2 = get_gpu("h100").with_spec("nvlink_bandwidth_per_dir", 100e9)
    assert g2.spec("nvlink_bandwidth_bidir").si == pytest.approx(200e9)


def test_with_spec_unknown_key():
    with pytest.raises(HwdbError, match="hbm_bandwith"):
        get_gpu("h100").with_spec("hbm_bandwith", 1.0)


# ---------------------------------------------------------------- systems and NICs
def test_systems():
    s = get_system("hgx_h100")
    assert isinstance(s, System) and isinstance(s.gpu, GPU) and isinstance(s.nic, NIC)
    assert (s.gpus, s.nvlink_domain_size, s.nics_per_node) == (8, 8, 8)
    assert s.gpu.key == "h100_sxm" and s.nic.key == "cx7_400g_ib"
    assert s.scaleout_bw_per_gpu_per_dir == pytest.approx(50e9)
    nvl = get_system("NVL72")
    assert (nvl.gpus, nvl.nvlink_domain_size, nvl.nodes) == (72, 72, 18)
    assert nvl.gpu.key == "gb200"
    assert get_system("hgx_h800").gpu.key == "h800_sxm"
    assert get_system("hgx_h200").gpu.key == "h200_sxm"
    assert get_system("hgx_b200").spec("nvswitch_chips").value == 2


def test_aws_instances_give_400gbps_per_gpu():
    for key in ("aws_p5", "aws_p5en", "aws_p6_b200"):
        assert get_system(key).scaleout_bw_per_gpu_per_dir == pytest.approx(50e9), key


# ---------------------------------------------------------------- reports
def test_spec_table_markdown_contains_each_gpu():
    table = spec_table_markdown()
    for key in list_gpus():
        assert f"| {key} |" in table
    assert "989.5" in table and "BF16 dense" in table and "Sources" in table
    header = table.splitlines()[0]
    for col in ("SMs", "FP8", "FP4", "HBM GiB", "HBM TB/s", "L2 MiB", "NVLink GB/s per dir", "TDP W"):
        assert col in header


def test_describe_lists_specs_and_sources():
    text = describe("H800")
    assert "nvlink_bandwidth_per_dir_usable" in text and "deepseek_v3_report" in text
    assert "https://arxiv.org/abs/2412.19437" in text
    assert "from h100_sxm" in text
    assert "cx7_400g_ib" in describe("hgx_h100")
    with pytest.raises(UnknownHardwareError, match="h100_sxm"):
        describe("h10")
