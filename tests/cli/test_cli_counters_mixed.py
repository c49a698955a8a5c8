"""`mechsim op/estimate --counters`, `mechsim mixed ...` and `serve --prefill-hw/--decode-hw`."""

from mechsim.cli import main


def test_op_counters(capsys):
    assert main(["op", "gemm", "8192", "8192", "8192", "--hw", "h200", "--counters"]) == 0
    out = capsys.readouterr().out
    assert "binds tensor" in out and "hbm" in out


def test_estimate_counters_table(capsys):
    assert main(["estimate", "--model", "llama3.2-1b", "--hw", "h200", "--seq", "1024", "--counters", "--top", "5"]) == 0
    out = capsys.readouterr().out
    assert "hardware counters per op" in out and "binds" in out


def test_mixed_train_rebalance(capsys):
    assert main(["mixed", "train", "--model", "llama3-8b", "--pools", "hgx_h100:2,hgx_b200:2", "--seq", "2048",
                 "--rebalance"]) == 0
    out = capsys.readouterr().out
    assert "equal batches" in out and "rebalanced" in out and "alone" in out


def test_mixed_pipeline(capsys):
    assert main(["mixed", "pipeline", "--model", "llama3-8b", "--stages", "hgx_h100,hgx_b200", "--seq", "2048"]) == 0
    assert "layers by speed" in capsys.readouterr().out


def test_serve_prefill_and_decode_on_different_gpus(capsys):
    assert main(["serve", "--model", "llama3-8b", "--prefill-hw", "hgx_b200", "--decode-hw", "hgx_h200", "--rate", "4"]) == 0
    out = capsys.readouterr().out
    assert "prefill" in out and "hgx_b200" in out and "decode" in out and "hgx_h200" in out


def test_mixed_serve_needs_both_pools(capsys):
    assert main(["mixed", "serve", "--model", "llama3-8b", "--prefill-hw", "hgx_b200"]) == 2
    assert "--decode-hw" in capsys.readouterr().err


def test_serve_split_refuses_flags_it_does_not_use(capsys):
    assert main(["serve", "--model", "llama3-8b", "--prefill-hw", "hgx_b200", "--decode-hw", "hgx_h200",
                 "--tp", "2"]) == 2
    assert "--tp" in capsys.readouterr().err
