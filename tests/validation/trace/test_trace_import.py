"""mechsim trace import on the committed H200 traces and on synthetic ones."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from mechsim.model import InferenceWorkload, TrainingWorkload, from_hf_config
from mechsim.validation.trace import TraceError, load_trace
from mechsim.validation.trace import chrome
from mechsim.validation.trace.report import compare_trace, json_report, text_report
from mechsim.validation.trace.timeline import build_timeline

DATA = Path(__file__).resolve().parents[2] / "data" / "traces"
EAGER = DATA / "train_125m_eager.pt.trace.json.gz"
COMPILE = DATA / "train_125m_compile.pt.trace.json.gz"
DECODE = DATA / "decode_1b_graph.pt.trace.json.gz"


def train(stack: str, mbs: int = 8) -> TrainingWorkload:
    return TrainingWorkload(model=from_hf_config(DATA / "llama_ref_125m.config.json"), mbs=mbs, seq=1024,
                            precision="amp_bf16", stack=stack)


def decode() -> InferenceWorkload:
    return InferenceWorkload(model=from_hf_config(DATA / "llama_ref_1b.config.json"), batch=64, phase="decode",
                             prompt_len=512, context_len=513, stack="eager_graphs", sampling="none",
                             prefill_logits="all")


CASES = [(EAGER, lambda: train("eager")), (COMPILE, lambda: train("compile")), (DECODE, decode)]


@pytest.mark.parametrize("path,workload", CASES, ids=["eager", "compile", "decode_graph"])
def test_committed_traces_match_95_percent(path, workload):
    r = compare_trace(load_trace(path), workload(), "h200_sxm")
    assert r.steps == 3
    assert r.match.matched_fraction >= 0.95
    cats = {c.category: c for c in r.categories}
    for c in ("gemm", "attention", "memory"):
        assert cats[c].measured_s > 0 and abs(cats[c].error) < 0.25


def test_wrong_workload_leaves_gemms_unmatched():
    """Stating mbs=4 for an mbs=8 trace: every GEMM shape differs, so they are reported unmatched."""
    r = compare_trace(load_trace(EAGER), train("eager", mbs=4), "h200_sxm")
    assert r.match.matched_fraction < 0.95
    assert any(u.family == "gemm" for u in r.match.unmatched)


def test_phases_and_steps_of_eager_trace():
    tl = build_timeline(load_trace(EAGER))
    assert [s.name for s in tl.steps] == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]
    assert set(tl.phase.tolist()) == {0, 1, 2}
    assert all(s.span_s >= s.busy_s > 0 for s in tl.steps)
    assert len({s.kernels for s in tl.steps}) == 1   # identical steps launch identical kernels


def test_gemm_rows_are_per_shape_with_shapes_and_one_row_without():
    eager = compare_trace(load_trace(EAGER), train("eager"), "h200_sxm")
    assert any(r.group == "gemm" and r.shape == ((768, 8192), 32000, 1) for r in eager.match.rows)
    graph = compare_trace(load_trace(DECODE), decode(), "h200_sxm")
    assert [r.shape for r in graph.match.rows if r.group == "gemm"] == [None]   # graph replay: no shapes


def test_text_and_json_reports():
    r = compare_trace(load_trace(EAGER), train("eager"), "h200_sxm")
    txt = text_report(r)
    assert "matched to ops" in txt and "gemm" in txt
    d = json.loads(json_report(r))
    assert d["steps"] == 3 and d["ops"] and d["unmatched"] == []


def _write(tmp_path: Path, doc, name: str = "t.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc), encoding="utf-8")
    return p


def _events(kernels: list[tuple[str, float, float, int]]) -> list[dict]:
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 0.0, "dur": 1000.0}]
    for i, (name, ts, dur, stream) in enumerate(kernels):
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts / 10,
                   "dur": 1.0, "args": {"correlation": i + 1}})
        ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
                   "args": {"stream": stream, "device": 0, "correlation": i + 1}})
    return ev


def test_unknown_kernel_is_reported_not_dropped(tmp_path):
    ev = _events([("nvjet_sm90_tst_128x128_64x4", 10.0, 50.0, 7), ("my_custom_kernel_xyz", 70.0, 30.0, 7)])
    r = compare_trace(load_trace(_write(tmp_path, {"traceEvents": ev})), train("eager"), "h200_sxm")
    names = [u.name for u in r.match.unmatched]
    assert "my_custom_kernel_xyz" in names
    assert r.match.gpu_s == pytest.approx(80e-6)


def test_bare_array_and_gzip_forms(tmp_path):
    ev = _events([("void at::native::vectorized_elementwise_kernel<4>", 10.0, 5.0, 7)])
    a = load_trace(_write(tmp_path, ev, "a.json"))
    g = tmp_path / "b.json.gz"
    g.write_bytes(gzip.compress(json.dumps({"traceEvents": ev}).encode()))
    b = load_trace(g)
    assert a.n == b.n == 1 and a.dur_us[0] == b.dur_us[0] == 5.0


def test_streaming_in_tiny_chunks_gives_the_same_trace(monkeypatch):
    whole = load_trace(DECODE)
    monkeypatch.setattr(chrome, "CHUNK", 97)
    small = load_trace(DECODE)
    assert small.n == whole.n and (small.dur_us == whole.dur_us).all() and small.ranges == whole.ranges


def test_comm_exposed_and_hidden(tmp_path):
    """A 100 us all-reduce on stream 20, overlapped 40 us by a GEMM on stream 7: 40 hidden, 60 exposed."""
    ev = _events([("nvjet_sm90_tst_x", 0.0, 40.0, 7), ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 0.0, 100.0, 20)])
    s = build_timeline(load_trace(_write(tmp_path, {"traceEvents": ev}))).steps[0]
    assert s.comm_s == pytest.approx(100e-6)
    assert s.comm_hidden_s == pytest.approx(40e-6)
    assert s.comm_exposed_s == pytest.approx(60e-6)
    assert s.busy_s == pytest.approx(100e-6) and s.gaps_s == pytest.approx(0.0)


def test_truncated_trace_is_one_line_error(tmp_path):
    raw = gzip.decompress(DECODE.read_bytes())
    p = tmp_path / "cut.json"
    p.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(TraceError, match="truncated") as e:
        load_trace(p)
    assert "\n" not in str(e.value)


def test_truncated_gzip_is_one_line_error(tmp_path):
    p = tmp_path / "cut.json.gz"
    p.write_bytes(DECODE.read_bytes()[:20000])
    with pytest.raises(TraceError, match="truncated"):
        load_trace(p)


@pytest.mark.parametrize("text,msg", [
    ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2} {"ph": 1}]}', "malformed"),
    ('{"schemaVersion": 1, "other": []}', "without a 'traceEvents'"),
    ('{"traceEvents": []}', "empty"),
    ('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 1}]}', "no GPU kernel"),
    ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "soon", "dur": 2}]}', "lacks a valid field"),
    ("hello", "not a Chrome trace"),
])
def test_bad_traces_get_one_line_errors(tmp_path, text, msg):
    p = tmp_path / "bad.json"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(TraceError, match=msg) as e:
        load_trace(p)
    assert "\n" not in str(e.value)


def test_cli_import_and_errors(capsys, tmp_path):
    from mechsim.cli import main
    args = ["trace", "import", str(EAGER), "--model", str(DATA / "llama_ref_125m.config.json"), "--mbs", "8",
            "--seq", "1024", "--stack", "eager", "--json"]
    assert main(args) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["gpu"] == "h200_sxm" and d["matched_fraction"] >= 0.95   # GPU read from the trace
    bad = tmp_path / "x.json"
    bad.write_text("[", encoding="utf-8")
    assert main(["trace", "import", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1


def test_data_parallel_all_reduce_matches_the_collective_op(tmp_path):
    """A dp=2 step: the NCCL all-reduce kernel meets mechsim's comm/dp/grad_ar op; its exposed part
    (not overlapped by the GEMM on the compute stream) is the measured comm_exposed."""
    from mechsim.model.parallel import Parallelism
    ev = _events([("nvjet_sm90_tst_x", 0.0, 300.0, 7), ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 200.0, 400.0, 20)])
    w = train("eager").model_copy(update={"parallel": Parallelism(dp=2)})
    r = compare_trace(load_trace(_write(tmp_path, {"traceEvents": ev})), w, "hgx_h200")
    row = next(x for x in r.match.rows if x.group == "collective:all_reduce")
    assert row.ops == ("comm/dp/grad_ar",) and row.predicted_s > 0 and row.measured_s == pytest.approx(400e-6)
    cats = {c.category: c for c in r.categories}
    assert cats["comm_exposed"].measured_s == pytest.approx(300e-6)
    assert cats["comm_hidden"].measured_s == pytest.approx(100e-6)
