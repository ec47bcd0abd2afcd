"""The seventh pass's crash and wrong numbers in a script's own lines (issue 101): a
timestamp the template cannot rebuild, runs told apart by a prefix, decimal commas,
durations in minutes, clock form and exponent form, a clock turned back, and a pattern
suggested only where it reads one plausible run. Each input is the issue's own text (its
printf lines) or the line shape it names."""

from __future__ import annotations

import re

import pytest

from dlscale.logparse.reader import compile_patterns, parse_runs
from dlscale.logparse.runs import LogError
from dlscale.logparse.templates import Template, comma_decimals


@pytest.mark.parametrize("line", [
    "I1123 16:48:32.932463: I tensorflow/core/x.cc:12] Epoch 1 start",  # a fraction, ':'
    "[16:48:32.932463:1] Epoch 1 start",
    "2021-11-23 16:48:321 Epoch 1 start",  # seconds run on into more digits
])
def test_a_timestamp_whose_digits_do_not_rebuild_it_is_read_where_it_parses(line):
    template = Template(b"", 1, line)
    values = template.values(template.findall(line))  # (AttributeError before)
    assert all(v == v for v in values)
    if template.stamp is not None:  # the stamp keeps its fraction
        assert values[template.stamp] % 60 == pytest.approx(32.932463)


def test_a_log_of_such_lines_is_read_to_its_end_without_a_traceback():
    text = "".join(f"I1123 16:{48 + k}:32.932463: I tensorflow/core/x.cc:12] step\n"
                   f"Epoch {k + 1} took: 1{k}.5s loss=0.{k}\n" for k in range(3))
    [run] = parse_runs(text, "tf.out")
    assert [r["seconds"] for r in run.rows()] == [10.5, 11.5, 12.5]


def test_two_runs_told_apart_by_a_prefix_are_two_runs_and_the_warning_names_both():
    text = "".join(f"[runA] Epoch {k} took: 10.1s loss=1.9 acc=21%\n"
                   f"[runB] Epoch {k} took: 20.1s loss=2.0 acc=11%\n" for k in (1, 2, 3))
    runs = parse_runs(text, "two.out")
    assert [[r["seconds"] for r in run.rows()] for run in runs] == [[10.1] * 3, [20.1] * 3]
    said = " ".join(w for run in runs for w in run.warnings)
    assert "[runA] Epoch <n>" in said and "[runB] Epoch <n>" in said


def test_decimal_commas_are_read_as_decimals():
    text = "".join(f"Epoch {k} took: 97,{k}s loss=1,9 acc=91,5%\n" for k in (1, 2, 3))
    [run] = parse_runs(text, "comma.out")
    assert [(r["seconds"], r["loss"], r["accuracy"]) for r in run.rows()] == [
        (97.1, 1.9, 0.915), (97.2, 1.9, 0.915), (97.3, 1.9, 0.915)]


@pytest.mark.parametrize("line, commas", [
    ("Epoch 1 took: 97,7s loss=1,9", True),
    ("Epoch 1 took 3.5s images 1,234", False),  # a decimal point: commas are thousands
    ("Epoch 1 images 1,234,567", False),        # thousands only
    ("2026-12-02 01:02:03,456 INFO Epoch 0", False),  # logging's milliseconds
])
def test_a_line_is_read_with_decimal_commas_only_where_it_writes_them(line, commas):
    assert comma_decimals(line) is commas


@pytest.mark.parametrize("times, seconds", [
    (["2m 3s", "2m 5s", "1m 59s", "2m 0s"], [123, 125, 119, 120]),
    (["1:02:03", "1:01:00", "0:59:59", "1:00:00"], [3723, 3660, 3599, 3600]),
    (["1.2e2 s", "1.3e2 s", "1.1e2 s", "1.2e2 s"], [120, 130, 110, 120]),
    (["1h 2m", "1h 1m", "0h 59m", "1h 0m"], [3720, 3660, 3540, 3600]),
])
def test_durations_in_minutes_clock_and_exponent_forms_are_read(times, seconds):
    text = "".join(f"Epoch {k} took {t} loss 0.5\n" for k, t in enumerate(times, 1))
    [run] = parse_runs(text, "took.out")
    assert [r["seconds"] for r in run.rows()] == pytest.approx(seconds)


def test_a_clock_turned_back_is_flagged_and_never_an_epoch():
    # daylight saving: the clock goes back an hour at 03:00; epochs begin at 02:10, 02:40,
    # 02:10 (an hour later) and 02:40
    stamps = ["02:10", "02:39", "02:40", "03:00", "02:10", "02:39", "02:40", "03:09"]
    text = "".join(f"2026-10-25 {stamps[2 * k]}:00,000 INFO Epoch {k + 1} begin\n"
                   f"2026-10-25 {stamps[2 * k + 1]}:00,000 INFO loss 1.0\n" for k in range(4))
    [run] = parse_runs(text, "dst.out")
    seconds = [r["seconds"] for r in run.rows()]
    assert seconds[0] == 1800 and seconds[2] == 1800 and seconds[3] == 1740
    assert seconds[1] is None or seconds[1] != seconds[1]  # (84,600 s before)
    assert run.facts["clock_back"] is True
    assert any("clock was turned back" in w for w in run.warnings)


def refusal(text: str) -> str:
    with pytest.raises(LogError) as refused:
        parse_runs(text, "odd.out")
    return str(refused.value)


def test_no_pattern_is_suggested_for_runs_interleaved_without_prefixes():
    # two runs' lines, each epoch of one printed before the other's, no prefix
    text = "".join(f"Epoch {k} took: {t}s loss=1.9\n" for k in range(1, 7)
                   for t in ("10.1", "20.1"))
    with pytest.raises(LogError) as refused:
        runs = parse_runs(text, "odd.out")
        assert all(len(run.rows()) <= 6 for run in runs)  # never one 12-epoch run
        raise LogError("read", {})
    message = str(refused.value)
    assert message == "read" or ("{epoch_time" not in message
                                 and "does not rise by one" in message)


def test_no_pattern_is_suggested_from_a_line_without_a_time():
    text = "".join(f"config epoch_size={n} and more words\n" for n in (513, 511, 515))
    message = refusal(text)
    assert "epoch_size=([" not in message and "no pattern is suggested" in message


def test_the_pattern_suggested_for_one_plausible_run_still_reads_it(tmp_path):
    text = ("loading\nep 3 of training lasted 2.5 s, loss 0.3\n"
            "ep 4 of training lasted 2.4 s, loss 0.2\n")
    example = re.search(r"epoch_time: '(.*?)'", refusal(text))[1]
    [run] = parse_runs(text, "odd.out", compile_patterns({"epoch_time": example}))
    assert [r["seconds"] for r in run.rows()] == [2.5, 2.4]


@pytest.mark.parametrize("line", [
    "+ srun torchrun --nnodes 2 --nproc-per-node 2 train.py",
    "+ torchrun --nnodes 2 --nproc-per-node 2 train.py",
    "srun -N 2 --ntasks-per-node 1 torchrun --nnodes 2 --nproc-per-node 2 train.py -n 9",
])
def test_torchrun_under_srun_gives_its_nodes_as_without_srun(line):
    [run] = parse_runs(line + "\nEpoch 1 took: 1.0s loss=1\nEpoch 2 took: 1.0s loss=1\n",
                       "torchrun.out")
    assert (run.settings["gpus"], run.settings["nodes"]) == (4, 2)  # (4 and 1 before)


def test_strong_scaling_is_not_extrapolated_to_less_than_an_image_a_gpu():
    """A strong-scaling series whose global batch is its largest GPU count (4 images on 4
    GPUs): 8 and 16 GPUs would train half and a quarter of an image a GPU: not predicted,
    and a note says why (issue 101, item 7: 0.5 and 0.25 images a GPU were extrapolated)."""
    import pandas as pd

    from dlscale.reporting.prediction import series as predict

    steps = {1: 0.8, 2: 0.45, 4: 0.3}
    points = pd.DataFrame({"gpus": [1, 2, 4], "global_batch": [4, 4, 4], "nodes": 1,
                           "scaling": "strong"})
    points["images_per_s"] = points["global_batch"] / points["gpus"].map(steps)
    points["efficiency"] = points["images_per_s"] / points["gpus"] / (4 / 0.8)
    empty = pd.DataFrame(columns=["series", "gpus", "communication_share"])
    rows = predict.series_prediction("Net", points, empty, {}, known_size=1_000_000)
    assert sorted(r["gpus"] for r in rows) == [1, 2, 4]  # (8 and 16 before)
    assert all("less than an image a step" in r["note"] for r in rows)


@pytest.mark.parametrize("entry, analysis, words", [
    ("{gpus: 8, nodes: 16}", "{}", "8 GPU(s) on 16 nodes: a node holds at least one GPU"),
    ("{gpus: 8, nodes: 1}", "{gpus_per_node: 3}",
     "8 GPU(s) on 1 node(s) need 8 a node, but analysis.gpus_per_node is 3"),
    ("{gpus: 1000000000000}", "{}", "external_runs[0].gpus"),
])
def test_a_runs_gpus_and_nodes_that_contradict_are_refused_at_planning(tmp_path, entry,
                                                                        analysis, words):
    import yaml
    from conftest import ROOT

    from dlscale.core.schema import validate
    from dlscale.plan.study import PlanError, Study

    log = ROOT / "tests" / "data" / "own-scripts" / "took.out"
    config = yaml.safe_load(f"sweep: {{models: []}}\nanalysis: {analysis}\n"
                            f"external_runs: [{{log: {log}, model: Net, train_images: 64, "
                            f"global_batch: 64, {entry[1:-1]}}}]\n")
    with pytest.raises(PlanError) as refused:
        validate(config)
        Study(config, tmp_path)
    assert words in str(refused.value) and "\n" not in str(refused.value)


def test_a_history_path_that_is_a_symlink_loop_is_refused_at_planning(tmp_path):
    from dlscale.core.schema import validate
    from dlscale.plan.study import PlanError, Study

    loop = tmp_path / "history.sqlite"
    loop.symlink_to(loop)
    config = {"sweep": {"models": ["SimpleCNN"]}, "history": {"path": str(loop)}}
    validate(config)
    with pytest.raises(PlanError) as refused:  # (planned before; ended 0 unrecorded)
        Study(config, tmp_path)
    assert f"history.path '{loop}' is a symbolic link that cannot be followed" in str(
        refused.value)


def test_a_threshold_is_printed_as_given_not_rounded_to_one():
    import pandas as pd

    from dlscale.reporting.firstpage import holds_until

    rows = pd.DataFrame({"series": "Net", "gpus": [1, 2, 4], "nodes": 1,
                         "predicted_efficiency": [1.0, 0.99995, 0.9],
                         "predicted_efficiency_low": [1.0, 0.99, 0.8],
                         "predicted_efficiency_high": [1.0, 1.0, 0.95],
                         "measured_efficiency": [1.0, float("nan"), float("nan")]})
    assert "at or above 0.9999 up to" in holds_until(rows, "Net", 0.9999)  # ("1" before)


def test_no_predicted_efficiency_is_above_one_at_either_end_of_its_band():
    import pandas as pd

    from dlscale.reporting.prediction import series as predict

    steps = {1: 0.20, 2: 0.25, 4: 0.30}
    points = pd.DataFrame({"gpus": [1, 2, 4], "global_batch": [32, 64, 128],
                           "scaling": "weak", "efficiency": [1.0, 0.8, 2 / 3]})
    points["images_per_s"] = points["global_batch"] / points["gpus"].map(steps)
    empty = pd.DataFrame(columns=["series", "gpus", "communication_share"])
    rows = predict.series_prediction("Net", points, empty, {}, known_size=1_000_000)
    highs = [r["predicted_efficiency_high"] for r in rows]
    assert max(h for h in highs if h == h) <= 1.0  # (1.18 on base rows before)


def test_a_warning_every_run_of_a_log_gives_is_printed_once(tmp_path):
    import subprocess
    import sys

    from conftest import ROOT

    log = ROOT / "tests" / "data" / "own-scripts" / "interleaved.out"
    proc = subprocess.run([sys.executable, "-m", "dlscale.console", "parse-log", str(log),
                           "-o", str(tmp_path / "t.csv")], capture_output=True, text=True,
                          check=True)
    assert proc.stderr.count("epoch lines interleave") == 1


def test_an_external_runs_label_is_capped_as_a_models_is():
    from dlscale.core.schema import validate
    from dlscale.plan.study import PlanError

    with pytest.raises(PlanError, match="external_runs.0..label"):
        validate({"external_runs": [{"log": "x.out", "model": "M", "label": "L" * 5000}]})


def test_where_nothing_is_predicted_past_the_data_the_first_page_says_the_data_ends():
    import pandas as pd

    from dlscale.reporting.firstpage import holds_until

    rows = pd.DataFrame({"series": "Net", "gpus": [1, 4, 8], "nodes": 1,
                         "role": ["fit", "fit", "held out"],
                         "predicted_efficiency": [1.0, 0.95, 0.9],
                         "predicted_efficiency_low": [1.0, 0.9, 0.85],
                         "predicted_efficiency_high": [1.0, 0.97, 0.93],
                         "measured_efficiency": [1.0, 0.95, 0.9],
                         "note": ["", "", "no link between nodes was given"]})
    said = holds_until(rows, "Net", 0.8)
    assert "up to 8 GPUs on 1 node(s), where the data ends" in said  # ("band: 8 to 8")
    assert "no link between nodes was given" in said and "band" not in said


def test_a_super_linear_series_blames_swapped_links_only_where_they_are_swapped():
    import pandas as pd

    from dlscale.reporting.prediction import links
    from dlscale.reporting.prediction import series as predict

    steps = {1: 0.20, 2: 0.19, 4: 0.18}  # faster with more GPUs (weak scaling)
    points = pd.DataFrame({"gpus": [1, 2, 4], "global_batch": [32, 64, 128],
                           "scaling": "weak", "nodes": 1})
    points["images_per_s"] = points["global_batch"] / points["gpus"].map(steps)
    points["efficiency"] = points["images_per_s"] / points["gpus"] / (32 / 0.2)
    empty = pd.DataFrame(columns=["series", "gpus", "communication_share"])

    def notes(network):
        rows = predict.series_prediction("Net", points, empty, {}, known_size=100 * 2**20,
                                         network=network)
        return " ".join(r["note"] for r in rows)

    fast, slow = links.Link(5e-6, 100e9), links.Link(5e-6, 1e9)
    plain = notes({"within_node": (fast, "given"), "between_nodes": (slow, "given")})
    assert "super-linearly" in plain and "swapped" not in plain  # ("swapped?" before)
    assert "swapped?" in notes({"within_node": (slow, "given"),
                                "between_nodes": (fast, "given")})


def test_a_point_on_one_node_without_a_link_within_a_node_names_that_level():
    """The network given is between nodes only (an nccl-tests output of two hosts): the
    one-node points' note names the missing level within a node (it blamed the link
    between nodes)."""
    import pandas as pd

    from dlscale.reporting.prediction import links
    from dlscale.reporting.prediction import series as predict

    steps = {1: 0.20, 2: 0.22, 4: 0.24, 8: 0.26}
    points = pd.DataFrame({"gpus": [1, 2, 4, 8], "global_batch": [32, 64, 128, 256],
                           "scaling": "weak", "nodes": 1})
    points["images_per_s"] = points["global_batch"] / points["gpus"].map(steps)
    points["efficiency"] = points["images_per_s"] / points["gpus"] / (32 / 0.2)
    empty = pd.DataFrame(columns=["series", "gpus", "communication_share"])
    rows = predict.series_prediction(
        "Net", points, empty, {}, known_size=100 * 2**20,
        network={"between_nodes": (links.Link(5e-6, 10e9), "given")})
    notes = " ".join(r["note"] for r in rows if r["gpus"] == 8 and r["nodes"] == 1)
    assert "no link within a node" in notes and "no link between nodes" not in notes


def test_a_count_measured_with_less_than_an_image_a_gpu_is_not_also_extrapolated():
    import pandas as pd

    from dlscale.reporting.prediction import links
    from dlscale.reporting.prediction import series as predict

    # 1 image a GPU on 1, 2 and 4 GPUs, then a global batch of 4 on 8 GPUs
    points = pd.DataFrame({"gpus": [1, 2, 4, 8], "nodes": 1, "global_batch": [1, 2, 4, 4]})
    steps = {1: 0.10, 2: 0.11, 4: 0.12, 8: 0.12}
    points["images_per_s"] = points["global_batch"] / points["gpus"].map(steps)
    points["efficiency"] = points["images_per_s"] / points["gpus"] / 10.0
    empty = pd.DataFrame(columns=["series", "gpus", "nodes", "communication_share"])
    network = {"within_node": (links.Link(5e-6, 20e9), "given"),
               "between_nodes": (links.Link(5e-6, 10e9), "given")}
    rows = predict.series_prediction("S", points, empty, {}, known_size=10 * 2**20,
                                     gpus_per_node=4, network=network)
    eight = [r for r in rows if r["gpus"] == 8]
    assert [r["role"] for r in eight] == ["measured"] and "not data-parallel" in eight[0][
        "note"]
    assert [r["gpus"] for r in rows if r["role"] == "extrapolated"] == [16]
