"""Smoke runs of every benchmark with tiny sizes, so the scripts cannot rot.

Each benchmark runs in a process of its own (tests/forkserver.py) and must exit 0,
print its table, write JSON with the expected keys and rows, and write its PNG.
Speed is never asserted: these machines are shared and the sizes are tiny.
"""

import json
import os
import sys

import numpy as np
import pytest

from keras_tpu.runtime import device_rules
from tests import forkserver
from tests.conftest import REPO
from tests.conftest import subprocess_env

# Fresh interpreters and long runs: the slow tier (`pytest -m slow`).
pytestmark = pytest.mark.slow

BENCHMARKS = os.path.join(REPO, "benchmarks")


def run_benchmark(tmp_path, name, *args, timeout=300):
    """Run benchmarks/<name> with `args`; return (parsed JSON, stdout)."""
    out_json, out_png = tmp_path / f"{name}.json", tmp_path / f"{name}.png"
    result = forkserver.run(
        [sys.executable, os.path.join(BENCHMARKS, name), f"--json={out_json}",
         f"--png={out_png}", *args],
        timeout=timeout, env=subprocess_env(), cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert out_png.stat().st_size > 1000, "no plot written"
    with open(out_json) as f:
        results = json.load(f)
    assert set(results["machine"]) >= {"cpu", "cores", "isa", "tensorflow"}
    assert len(results["load"]["load_before"]) == 3
    return results, result.stdout


def test_bench_peak(tmp_path):
    results, stdout = run_benchmark(
        tmp_path, "bench_peak.py", "--size=256", "--repeats=2", "--dtypes=float32,bfloat16"
    )
    assert set(results["peak"]) == {"float32", "bfloat16"}
    for row in results["peak"].values():
        assert row["gflops_median"] > 0 and len(row["samples"]) == 2
    assert "GFLOP/s" in stdout


def test_bench_cnn(tmp_path):
    results, stdout = run_benchmark(
        tmp_path,
        "bench_cnn.py",
        "--train_examples=2000",
        "--timed_examples=1920",
        "--batch=64",
        "--repeats=1",
    )
    sides = results["sides"]
    assert list(sides) == ["notebook", "baseline", "toolkit", "toolkit_progress"]
    assert sides["notebook"]["batch"] == 32 and sides["notebook"]["steps_per_execution"] == 1
    # The CPU "auto" value (30 steps an epoch: not capped).
    assert sides["toolkit"]["steps_per_execution"] == device_rules.AUTO_STEPS_PER_EXECUTION_CPU
    for side in sides.values():
        assert side["images_per_second"] > 0
        assert side["timed_examples_per_repeat"] == 1920
    assert set(results["ratios"]) == {
        "toolkit_vs_baseline",
        "toolkit_vs_notebook",
        "progress_vs_toolkit",
    }
    assert "toolkit_vs_notebook" in stdout
    assert "epoch 2/2 step 30/30 (60/60 overall)" in stdout  # (d)'s progress lines.


@pytest.mark.heavy  # Opt-in (`-m heavy`): benchmark smoke run.
def test_bench_cnn_precisions(tmp_path):
    results, stdout = run_benchmark(
        tmp_path,
        "bench_cnn.py",
        "--train_examples=1000",
        "--timed_examples=640",
        "--batch=64",
        "--repeats=1",
        "--sides=toolkit,toolkit_fp32,toolkit_bf16",
    )
    sides = results["sides"]
    auto = device_rules.device_defaults("cpu")  # What "auto" picks on this host.
    assert results["auto_precision"] == {
        "policy": auto.precision_policy,
        "reason": auto.precision_reason,
    }
    assert [sides[s]["precision_policy"] for s in sides] == [
        auto.precision_policy,
        "float32",
        "mixed_bfloat16",
    ]
    assert set(results["ratios"]) == {"auto_vs_fp32", "bf16_vs_fp32"}
    assert results["ratios"]["auto_vs_fp32"] == round(
        sides["toolkit"]["images_per_second"] / sides["toolkit_fp32"]["images_per_second"], 3
    )
    assert f"auto precision: {auto.precision_reason}" in stdout


@pytest.mark.heavy  # Opt-in (`-m heavy`): benchmark smoke run (a minute: four BERT builds).
def test_bench_bert(tmp_path):
    # fp32 and auto: the ratio against fp32 and the toolkit's rule on both sides. An
    # explicit bf16 run is the same code path as auto (a name looked up in PRECISIONS),
    # and "auto" is mixed_bfloat16 wherever the CPU has native bf16 (CI's does).
    results, stdout = run_benchmark(
        tmp_path,
        "bench_bert.py",
        "--presets=tiny",
        "--precisions=fp32,auto",
        "--seq_length=16",
        "--batch=8",
        "--steps_per_epoch=2",
        "--repeats=1",
        "--peak_size=256",
        "--plain_steps_per_execution=2",
    )
    assert [(r["preset"], r["precision"]) for r in results["runs"]] == [
        ("tiny", "fp32"),
        ("tiny", "auto"),
    ]
    for run in results["runs"]:
        assert run["toolkit_vs_plain"] > 0
        for side in ("toolkit", "plain"):
            assert run[side]["examples_per_second"] > 0
            assert 0 < run[side]["mfu_vs_fp32_peak"]
        # Same architecture and sequence length: the same FLOPs on both sides.
        assert run["toolkit"]["flops_per_example"] == run["plain"]["flops_per_example"]
    assert [results["runs"][0][side]["precision_policy"] for side in ("toolkit", "plain")] == [
        "float32"
    ] * 2
    auto = device_rules.device_defaults("cpu")  # Plain Keras runs what the toolkit's rule picked.
    assert [results["runs"][1][side]["precision_policy"] for side in ("toolkit", "plain")] == [
        auto.precision_policy
    ] * 2
    assert results["auto_precision"]["reason"] == auto.precision_reason
    assert results["precision_ratios"]["tiny"] == {
        "auto_vs_fp32": round(
            results["runs"][1]["toolkit"]["examples_per_second"]
            / results["runs"][0]["toolkit"]["examples_per_second"],
            3,
        )
    }
    assert "float32" in results["peak"]
    assert "MFU" in stdout


@pytest.mark.heavy  # Opt-in (`-m heavy`): benchmark smoke run.
def test_bench_steps_per_execution(tmp_path):
    results, stdout = run_benchmark(
        tmp_path,
        "bench_steps_per_execution.py",
        "--values=1,2",
        "--cnn_batches=16",
        "--cnn_steps=4",
        "--bert_seq_length=16",
        "--bert_batch=8",
        "--bert_steps=2",
        "--repeats=1",
    )
    assert results["auto_on_this_device"] == device_rules.AUTO_STEPS_PER_EXECUTION_CPU
    assert [s["model"] for s in results["sweeps"]] == ["cnn_batch16", "bert_tiny_seq16"]
    for sweep in results["sweeps"]:
        assert [r["steps_per_execution"] for r in sweep["rows"]] == [1, 2]
        assert sweep["rows"][0]["speedup_vs_first"] == 1.0
    assert "spe=2" in stdout


@pytest.mark.heavy  # Opt-in (`-m heavy`): benchmark smoke run.
def test_bench_startup(tmp_path):
    results, stdout = run_benchmark(tmp_path, "bench_startup.py", "--repeats=1")
    assert set(results["sides"]) == {"tensorflow", "tensorflow_legacy_keras", "keras_tpu"}
    for side in results["sides"].values():
        assert side["total"] > 0 and side["process"] >= side["total"]
    assert results["ratio_total"] > 0
    assert "goal <= 1.2x" in stdout


@pytest.mark.heavy  # Opt-in (`-m heavy`): benchmark smoke run.
def test_bench_sync_bn(tmp_path):
    results, stdout = run_benchmark(tmp_path, "bench_sync_bn.py", "--replica_counts=2",
                                    "--sides=toolkit,keras", "--steps=1", "--repeats=1")  # fmt: skip
    assert [(r["replicas"], r["side"]) for r in results["rows"]] == [(2, "toolkit"), (2, "keras")]
    assert all(r["first_step_seconds"] > 0 and r["step_ms"] > 0 for r in results["rows"])
    assert results["ratios"]["toolkit_vs_keras_2"] > 0
    assert "goal <= 1.5x" in stdout


@pytest.mark.parametrize("load, quiet", [(1e9, True), (0.0, False)])
def test_wait_for_quiet_is_bounded(load, quiet):
    sys.path.insert(0, BENCHMARKS)
    try:
        import _machine  # pylint: disable=g-import-not-at-top
    finally:
        sys.path.remove(BENCHMARKS)
    waited = _machine.wait_for_quiet(max_wait=0.2, threshold=load, poll=0.05)
    assert waited["quiet"] is quiet
    assert waited["waited_seconds"] <= 1.0


@pytest.mark.slow
@pytest.mark.heavy  # Opt-in (`-m heavy`): benchmark smoke run.
def test_bench_model_parallel(tmp_path):
    results, _ = run_benchmark(
        tmp_path,
        "bench_model_parallel.py",
        "--model_parallel=1,2",
        "--layers=1",
        "--hidden=128",
        "--vocab=100",
        "--seq_length=8",
        "--global_batch=8",
        "--steps=2",
        "--repeats=1",
        timeout=600,
    )
    one, two = results["rows"]
    assert (one["mesh"], two["mesh"]) == ("4x1", "2x2")
    # The sharded kernels' shards and slots halve; the replicated rest does not.
    assert one["state_bytes_per_device"] > two["state_bytes_per_device"] > one["state_bytes_per_device"] / 2
    for row in (one, two):
        assert row["state_bytes_per_device"] == row["planned_state_bytes_per_device"]
        assert row["examples_per_second"] > 0 and row["peak_rss_bytes"] > 0


def test_bench_engine(tmp_path):
    results, stdout = run_benchmark(
        tmp_path, "bench_engine.py", "--train_examples=2048", "--features=8", "--hidden=16",
        "--batch=64", "--epochs=3", "--steps_per_execution=4", "--repeats=1",
    )  # fmt: skip
    for clock in ("wall", "cpu"):
        samples = results["samples"][clock]
        assert [[len(r) for r in samples[side]] for side in ("plain", "engine")] == [[2], [2]]
        ratio = results[clock]["engine_vs_plain"]  # Epochs 2 and 3 of the one repeat, each side.
        medians = [np.median(samples[side][0]) for side in ("engine", "plain")]
        assert ratio == pytest.approx(medians[0] / medians[1], abs=1e-3) and ratio > 0
    assert "goal >= 0.97x" in stdout


@pytest.mark.heavy  # Opt-in (`-m heavy`): benchmark smoke run.
def test_bench_determinism(tmp_path):
    results, stdout = run_benchmark(
        tmp_path,
        "bench_determinism.py",
        "--cnn_steps=2",
        "--bert_seq_length=16",
        "--bert_batch=8",
        "--bert_steps=2",
        "--steps_per_execution=2",
        "--repeats=1",
    )
    assert [r["model"] for r in results["rows"]] == ["cnn", "bert_tiny_seq16"]
    for row in results["rows"]:
        assert len(row["off_samples"]) == len(row["on_samples"]) == 1
        ratio = row["on_examples_per_second"] / row["off_examples_per_second"]
        assert row["cost"] == pytest.approx(1 - ratio, abs=0.01)
    assert results["max_cost"] == max(r["cost"] for r in results["rows"])
    assert "cost" in stdout


@pytest.mark.heavy  # Opt-in (`-m heavy`): benchmark smoke run.
def test_bench_stall(tmp_path):
    results, stdout = run_benchmark(
        tmp_path, "bench_stall.py", "--paths=main", "--load=quiet", "--repeats=1", "--epochs=1",
        timeout=600,
    )
    (row,) = results["stall"]["main/quiet"]["runs"]
    assert set(row) == {"stall", "interpreter_exit", "eval", "export", "total"}
    assert row["eval"] > 0 and row["export"] > 0  # Both were stamped after the last step.
    assert "stall median s" in stdout


@pytest.mark.serial  # A loopback cluster: its peers and time-outs need the cores.
# Opt-in (`-m heavy`): the soak itself is CI's (test_multiworker.py).
@pytest.mark.heavy
def test_bench_soak(tmp_path):
    results, stdout = run_benchmark(
        tmp_path, "bench_soak.py", "--epochs=6", "--steps_per_epoch=1", timeout=600
    )
    assert [w["index"] for w in results["workers"]] == [0, 1]
    for worker in results["workers"]:
        assert sorted(worker["per_epoch"], key=int) == [str(e) for e in range(1, 7)]
        assert worker["epoch_5"]["threads"] > 0 and worker["epoch_6"]["rss_mb"] > 0
    assert "threads/epoch" in stdout and "goal: flat" in stdout


@pytest.mark.heavy  # Opt-in (`-m heavy`): benchmark smoke run.
def test_bench_scale(tmp_path):
    results, stdout = run_benchmark(
        tmp_path, "bench_scale.py", "--examples=4000", "--features=8", "--files=4",
        f"--data_dir={tmp_path / 'data'}", "--batch=256", "--resume_epochs=0,1,4",
        "--old_skip_epochs=1", "--sizes=1000,4000", "--throughput_size=2000",
    )  # fmt: skip
    rows = results["resume"]["rows"]
    assert [(r["epoch"], r["step"]) for r in rows] == [(0.0, 0), (1.0, 15), (4.0, 60)]
    assert rows[1]["old_skip"] > 0 and all(r["new"] > 0 for r in rows)
    memory = results["memory"]
    assert [(m["examples"], m["cache"]) for m in memory] == [
        (1000, "none"), (1000, "auto"), (4000, "none"), (4000, "auto")
    ]
    assert "cached in memory" in memory[1]["train_data"] and "streamed" in memory[0]["train_data"]
    assert results["throughput"]["streamed"] > 0 and "goal <= 1.5x" in stdout
    assert results["throughput"]["streamed_parsed_before_shuffling"] > 0
    assert results["throughput"]["streamed_read_in_parallel_blocks"] > 0
    costs = results["throughput"]["microseconds_per_example_on_one_thread"]
    assert sorted(costs) == ["batch", "parse", "read", "shuffle"] and costs["batch"] > 0
    assert "a streamed epoch adds read + parse" in stdout
    assert results["count"]["examples"] == 2000 and results["count"]["records_unparsed_seconds"] > 0
    assert "counting 2,000 examples without num_examples" in stdout


@pytest.mark.heavy  # Opt-in (`-m heavy`): benchmark smoke run.
def test_bench_images(tmp_path):
    results, stdout = run_benchmark(
        tmp_path, "bench_images.py", f"--data_dir={tmp_path / 'records'}", "--examples=300",
        "--shards=3", "--batch=16", "--input_batches=3", "--repeats=1", "--backbone=cnn",
        "--train_steps=3", "--train_repeats=1", "--train_files=2",
    )  # fmt: skip
    assert results["data"]["examples"] == 300 and results["data"]["written"]
    assert len(os.listdir(tmp_path / "records" / "first2")) == 2
    assert list(results["input"]) == ["toolkit", "tfmodels", "tfmodels_deterministic"]
    for side in results["input"].values():
        assert side["images_per_second"] > 0 and side["images_per_turn"] == 48
    training = results["training"]
    assert [training[s]["cache"] for s in ("streamed", "cached")] == ["none", "memory"]
    for side in (training["streamed"], training["cached"]):  # Two files: 100 examples each.
        assert side["train_examples"] == 200 and side["images_per_second"] > 0
        assert side["images_per_epoch"] == 3 * side["global_batch"]
    assert list(training) == ["streamed", "cached"]
    bound = results["training_bound"]  # What 2 shared cores allow, from streaming's CPU an image.
    assert bound["streaming_cpu_ms_per_image"] > 0 and bound["cores"] == os.cpu_count()
    cached = training["cached"]["images_per_second"]
    assert bound["streamed_vs_cached_at_most"] == pytest.approx(  # Rounded figures.
        1 / (1 + bound["streaming_cpu_ms_per_image"] / 1e3 * cached / bound["cores"]), abs=2e-3)
    assert set(results["ratios"]) == {
        "toolkit_vs_tfmodels", "deterministic_vs_not_tfmodels", "streamed_vs_cached",
        "streamed_vs_cached_bound_here",
    }
    stages = {row["stage"]: row for row in results["stages"]["rows"]}
    decode = stages["parse + decode + augment"]
    assert decode["runs"] == "parallel" and decode["num_parallel_calls"] == -1
    assert stages["read (files interleaved)"]["cycle_length"] == 3
    # The records' shuffle runs in the threads that read the files; no stage on one thread.
    assert stages["shuffle (each file's encoded records, as it is read)"]["runs"] == "parallel"
    assert "shuffle (a pass's file names)" in stages
    assert results["stages"]["on_one_thread"] == []
    assert "toolkit_vs_tfmodels" in stdout and "stages on one thread" in stdout


@pytest.mark.heavy  # Opt-in (`-m heavy`): benchmark smoke run (five fresh processes).
def test_bench_pretrain(tmp_path):
    results, stdout = run_benchmark(
        tmp_path, "bench_pretrain.py", "--max_sentences=400", "--seq_length=32", "--batch=8",
        "--steps_per_epoch=4", "--repeats=1", "--rounds=1", "--pipeline_batches=4",
        "--max_predictions_per_seq=5", "--plain_steps_per_execution=2", "--peak_size=256",
        "--precisions=fp32", "--sides=toolkit,plain_toolkit_input,plain",
    )  # fmt: skip
    runs = [(r["side"], r["precision"], r["turn"]) for r in results["runs"]]
    assert runs == [(side, "fp32", 0) for side in ("toolkit", "plain_toolkit_input", "plain")]
    sides = results["sides"]
    for name in ("toolkit_fp32", "plain_toolkit_input_fp32", "plain_fp32"):
        side = sides[name]
        assert len(side["samples"]) == 1 and side["examples_per_second"] > 0
        assert side["tokens_per_second"] == round(side["examples_per_second"] * 32, 1)
        assert 0 < side["mfu_vs_fp32_peak"] and side["precision_policy"] == "float32"
    # Each side ran in a process of its own, without glibc's malloc tuned.
    assert all(r["result"]["glibc_tunables"] is None for r in results["runs"])
    # The same model on both sides: the plain side's weights are the toolkit model's.
    for run in results["runs"][1:]:
        assert run["result"]["trainable_weights"] == results["trainable_weights"]
    # The step and the engine alone (the same input), and what masking every epoch costs.
    for a, b in (("toolkit", "plain_toolkit_input"), ("plain_toolkit_input", "plain")):
        assert results["ratios"][f"{a}_vs_{b}_fp32"] == pytest.approx(
            sides[f"{a}_fp32"]["examples_per_second"] / sides[f"{b}_fp32"]["examples_per_second"],
            abs=2e-3,
        )
    assert results["ratios"]["toolkit_vs_plain_fp32"] == pytest.approx(
        sides["toolkit_fp32"]["examples_per_second"] / sides["plain_fp32"]["examples_per_second"],
        abs=2e-3,
    )
    pipeline = results["pipeline"]
    for name in ("pack", "streamed", "cached"):
        assert pipeline[f"{name}_examples_per_second"] > 0
        assert results["ratios"][f"pipeline_{name}_vs_training"] > 0
    # In both pipelines masking and batching run in parallel and the prefetch is on (the
    # memory cache's first read put a stateful source in make_deterministic's sight: it
    # turned both off); no function runs per sequence on one thread but the unbatch of
    # each pack's rows, and tokenising runs in parallel behind the pass's function.
    for name in ("streamed", "cached"):
        stages = {}
        for row in pipeline[f"stages_{name}"]:
            stages.setdefault(row["stage"], set()).add(row["runs"])
        assert stages["mask (the Masker, a batch a call)"] == {"parallel"}
        assert stages["batch"] >= {"parallel"} and stages["prefetch"] == {
            "a background thread, a buffer"
        }
        assert stages["tokenise (WordPiece, 256 lines a call)"] == {"parallel"}
    assert set(pipeline["one_thread_stages"]) <= {
        f"unbatch (the pack's rows, a call a pack) ({name})" for name in ("streamed", "cached")
    } | {"the memory cache's first read (once, before the first step) (cached)"}
    assert results["corpus"]["sentences"] == 400 and "load_before" in results["load"]
    assert "toolkit_vs_plain_fp32" in stdout and "tokens/s" in stdout
