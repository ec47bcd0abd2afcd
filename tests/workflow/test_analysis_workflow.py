"""Tables, plots and report through snakemake, for external logs and for a whole sweep."""

from __future__ import annotations

import json
import re
import shutil

import pandas as pd
import pytest
import yaml
from conftest import IN_CI, ROOT, TABLES, run_snakemake, write_config

from dlscale.reporting.prediction.links import FROM_STEP_TIMES

pytestmark = pytest.mark.workflow
PROFILE = ["--profile", str(ROOT / "profiles" / "local")]
# what a compared study is read from (dlscale.reporting.compare): its plots are not
COMPARED = [TABLES, "results/tables/breakdown.csv", "results/tables/prediction.csv"]
STUDY = ROOT / "tests" / "data" / "reference-study"
PLOTS = ["epoch_time", "throughput", "speedup", "efficiency", "accuracy", "overview"]


def test_external_logs_alone_reproduce_the_published_study(tmp_path):
    runs = "\n".join(
        f"  - {{log: {STUDY}/ResNet50_{g}gpu.out, model: ResNet50V2, gpus: {g}, "
        f"global_batch: {256 * g}, train_images: 50000, label: \"Bob's $5 study\"}}"
        for g in (1, 2, 4))
    config = write_config(tmp_path / "c.yaml", f"sweep: {{models: []}}\nexternal_runs:\n{runs}\n")
    proc = run_snakemake(tmp_path, *PROFILE, f"--configfile={config}")
    assert "rule train" not in proc.stdout and "prepare_dataset" not in proc.stdout
    table = pd.read_csv(tmp_path / "results/tables/scaling.csv")
    assert list(table["series"].unique()) == ["Bob's $5 study"]  # quoted for the shell
    assert list(table["epoch_time_s"]) == [45, 24, 12]
    assert list(table["speedup"]) == [1, 1.875, 3.75]
    assert list(table["efficiency"]) == [1, 0.9375, 0.9375]
    assert [round(v) for v in table["images_per_s"]] == [1111, 2083, 4167]
    for name in PLOTS:
        assert (tmp_path / f"results/plots/{name}.png").stat().st_size > 10_000
        assert (tmp_path / f"results/plots/{name}.svg").exists()


def test_a_log_without_accuracy_or_with_another_metric_name_costs_no_other_series(tmp_path):
    """tests/data/metric-names: a regression model's Keras 3 log (loss only, `0s` epochs,
    its own skip_epochs) and a tf-keras log with sparse_categorical_accuracy and a printed
    test accuracy, beside the published study's job of three runs (nodes given per run):
    every series in the tables."""
    names = ROOT / "tests" / "data" / "metric-names"
    config = write_config(tmp_path / "c.yaml", f"""sweep: {{models: []}}
external_runs:
  - {{log: {STUDY}/ResNet50_all.out, model: ResNet50V2, train_images: 50000,
     gpus: [1, 2, 4], global_batch: [256, 512, 1024], nodes: [1, 1, 2]}}
  - {{log: {names}/keras3_loss_only.log, model: Regression, gpus: 1, global_batch: 32,
     train_images: 256, skip_epochs: 0}}
  - {{log: {names}/tfkeras_sparse_metric.log, model: Sparse, gpus: 1, global_batch: 32,
     train_images: 256}}
""")
    run_snakemake(tmp_path, *PROFILE, f"--configfile={config}")
    scaling = pd.read_csv(tmp_path / "results/tables/scaling.csv")
    study = scaling[scaling["model"] == "ResNet50V2"]
    # nodes given per run of a multi-run file; the study's skip_epochs (1) for its runs
    assert list(zip(study["gpus"], study["nodes"], study["epoch_time_s"])) == [
        (1, 1, 45), (2, 1, 24), (4, 2, 12)]
    table = scaling[scaling["model"] != "ResNet50V2"].set_index("model")
    assert sorted(table.index) == ["Regression", "Sparse"]
    # Keras 3's "0s" epochs timed by ms/step x steps (12 and 24 ms x 8), not 0 (inf img/s);
    # the entry's skip_epochs 0 keeps epoch 1 in its mean
    assert table.loc["Regression", "epoch_time_s"] == pytest.approx((1 + 0.096 + 0.192) / 3)
    assert pd.isna(table.loc["Regression", "final_accuracy"])
    assert "no training accuracy logged: the accuracy check is skipped" in table.loc[
        "Regression", "flags"]
    assert (table.loc["Sparse", "final_accuracy"], table.loc["Sparse", "test_accuracy"]) == (
        0.1055, 0.0781)
    assert (tmp_path / "results/plots/accuracy.png").exists()


def test_job_outputs_of_every_launcher_and_a_crashed_job_end_in_tables_plots_report(
        tmp_path):
    """tests/data/job-streams (srun -l, plain srun, mpirun --tag-output: 2 workers each;
    8 unprefixed copies), tests/data/benchmark-outputs (Horovod's synthetic benchmark on 1
    and 2 ranks, the tf_cnn_benchmarks figure in Horovod's docs), PyTorch Lightning under
    torchrun, a Hugging Face Trainer's closing total, NVIDIA DLLogger and a job
    that died before its first epoch, through external_runs."""
    streams = ROOT / "tests" / "data" / "job-streams"
    bench = ROOT / "tests" / "data" / "benchmark-outputs"
    crashed = tmp_path / "crashed.out"
    crashed.write_bytes(b"Number of devices: 4\nEpoch 1/2\n"
                        b"slurmstepd: error: Detected 1 oom_kill event in StepId=7.0.\n"
                        b"srun: error: n1: task 0: Out Of Memory\n")
    data = ROOT / "tests" / "data"
    entries = [f"{{log: {streams}/srun_plain.out, model: MW, label: MW, gpus: 1}}",
               f"{{log: {streams}/srun_label.out, model: MW, label: MW}}",
               f"{{log: {streams}/mpirun_tag.out, model: MW2}}",
               f"{{log: {crashed}, model: MW, label: MW}}",
               # 8 unprefixed copies; PyTorch Lightning's bars under torchrun
               f"{{log: {streams}/srun_copies.out, model: Copies}}",
               f"{{log: {data}/pytorch/torchrun_lightning.out, model: Lit}}"]
    benchmarks = [f"{{log: {bench}/horovod_synthetic_1rank.out, model: MobileNetV2}}",
                  f"{{log: {bench}/horovod_synthetic_2ranks.out, model: MobileNetV2}}",
                  f"{{log: {bench}/horovod_docs_benchmarks.rst, model: ResNet101, gpus: 16}}",
                  f"{{log: {data}/hf-trainer/trainer.out, model: Bert, gpus: 1, "
                  "global_batch: 16}",
                  # NVIDIA DLLogger: a Keras run's stdout (its PARAMETER lines give the
                  # batch and the world size; its README the 1,024 images of an epoch)
                  f"{{log: {data}/dllogger/dllogger_keras_stdout.txt, model: DLKeras, "
                  "train_images: 1024}"]
    config = write_config(tmp_path / "c.yaml", "sweep: {models: []}\n"
                          "analysis: {skip_epochs: 0}\nexternal_runs:\n" + "".join(
                              f"  - {e[:-1]}, global_batch: 64, train_images: 512}}\n"
                              for e in entries) + "".join(f"  - {e}\n" for e in benchmarks))
    # exit 0: a crashed external job is data (listed as failed), not a failed point of ours
    proc = run_snakemake(tmp_path, *PROFILE, f"--configfile={config}")
    assert "crashed.out: no finished epoch found" in proc.stdout
    assert "srun_copies.out:1: 8 copies of one training print their lines" in proc.stdout
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv").set_index("run")
    assert runs["streams"].dropna().tolist() == [2, 2, 2, 8, 1, 1, 1, 1, 1, 1]
    crashed_run = runs.loc["external/MW/crashed"]
    assert crashed_run["status"] == "failed" and not crashed_run["counted"]
    assert crashed_run["gpus"] == 4  # stated by the log before it ended
    failed = pd.read_csv(tmp_path / "results/tables/failed.csv")
    assert "its last lines: Epoch 1/2 | slurmstepd: error: Detected 1 oom_kill" in failed[
        "problem"].iloc[0]
    table = pd.read_csv(tmp_path / "results/tables/scaling.csv").set_index(["series", "gpus"])
    assert table.loc[("MW", 1), "epoch_time_s"] == 1.0  # the slower worker's line
    assert table.loc[("MW", 2), "epoch_time_s"] == pytest.approx((0.744 + 0.152) / 2)
    assert table.loc[("MW", 1), "test_accuracy"] == 0.0938  # evaluate()'s line
    assert "the log states 2 GPU(s), counted as 1" in table.loc[("MW", 1), "flags"]
    assert "super-linear: efficiency 1.12" in table.loc[("MW", 2), "flags"]
    assert pd.isna(table.loc[("MW2 (external)", 2), "speedup"])  # no 1-GPU point: none
    # benchmarks: throughput only, speedup from images/s, no epoch time
    hvd = table.loc["MobileNetV2 (external)"]
    assert list(hvd["images_per_s"]) == [11.0, 13.6] and hvd["epoch_time_s"].isna().all()
    assert list(hvd["speedup"]) == pytest.approx([1.0, 13.6 / 11.0], rel=1e-4)
    assert list(hvd["efficiency"]) == pytest.approx([1.0, 13.6 / 22.0], rel=1e-4)
    assert table.loc[("ResNet101 (external)", 16), "images_per_s"] == 1656.82
    # the copies: one run of 3 epochs timed by the slowest copy; Lightning's 2 epochs; the
    # Trainer's closing throughput
    assert table.loc[("Copies (external)", 8), "epoch_time_s"] == pytest.approx(
        (2.0 + 0.072 + 0.068) / 3)
    assert table.loc[("Lit (external)", 2), "epoch_time_s"] == pytest.approx(
        (8 / 119.04 + 8 / 159.81) / 2)
    assert table.loc[("Bert (external)", 1), "images_per_s"] == 1182.0
    # the Trainer's logged dicts are its 2 epochs, timed by its train_runtime, shared
    runtime = float(re.search(r"'train_runtime': '([\d.]+)'", (
        data / "hf-trainer" / "trainer.out").read_text(encoding="utf-8"))[1])
    assert table.loc[("Bert (external)", 1), "epoch_time_s"] == pytest.approx(runtime / 2)
    assert runs.loc["external/Bert/trainer", "epoch_time_from"].startswith(
        f"the Trainer's train_runtime ({runtime:g} s, line 13)")
    # DLLogger (tests/data/dllogger/README.md): each epoch's time between its entries
    assert table.loc[("DLKeras (external)", 1), "epoch_time_s"] == pytest.approx(
        (1.288 + 0.357) / 2, abs=1e-3)
    assert table.loc[("DLKeras (external)", 1), "global_batch"] == 32
    assert table.loc[("DLKeras (external)", 1), "images_per_s"] == pytest.approx(
        1024 / ((1.288 + 0.357) / 2), rel=1e-3)
    assert runs.loc["external/DLKeras/dllogger_keras_stdout", "status"] == "completed"
    read = pd.read_csv(tmp_path / "results/external/DLKeras/dllogger_keras_stdout/epochs.csv")
    assert set(read["log_format"]) == {"dllogger"} and list(read["epoch"]) == [1, 2]
    assert pd.isna(table.loc[("ResNet101 (external)", 16), "speedup"])
    assert (tmp_path / "results/plots/overview.png").stat().st_size > 10_000
    run_snakemake(tmp_path, *PROFILE, f"--configfile={config}", "--report",
                  str(tmp_path / "report.html"))
    assert "super-linear" in (tmp_path / "report.html").read_text(errors="replace")


def test_missing_external_log_fails_before_any_job(tmp_path):
    config = write_config(tmp_path / "c.yaml", "sweep: {models: []}\nexternal_runs:\n"
                          "  - {log: /no/such.out, model: M, gpus: 1, global_batch: 8, "
                          "train_images: 80}\n")
    proc = run_snakemake(tmp_path, "-n", f"--configfile={config}", check=False)
    assert proc.returncode != 0
    assert "external_runs[0]: log '/no/such.out' does not exist" in proc.stdout


def test_whole_sweep_ends_with_tables_plots_and_report(tmp_path, cifar_python):
    """A strong-scaling sweep: every point keeps the global batch and the learning rate."""
    config = write_config(tmp_path / "c.yaml", f"""
data: {{source: {cifar_python}, image_size: 32, shards: 2}}
sweep: {{models: [SimpleCNN], gpus: [1, 2], repeats: 2, scaling: strong}}
training: {{epochs: 3, global_batch: 16, base_lr: 0.02, device: cpu}}
resources: {{cpus_per_gpu: 1, mem_mb_per_gpu: 1000, runtime_min: 10}}
analysis: {{accuracy_tolerance: 1.0}}
""")
    run_snakemake(tmp_path, *PROFILE, f"--configfile={config}")
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv")
    assert len(runs) == 4 and runs["counted"].all()
    assert set(runs["run"]) == {f"SimpleCNN/gpus{g}/rep{r}" for g in (1, 2) for r in (1, 2)}
    table = pd.read_csv(tmp_path / "results/tables/scaling.csv")
    assert list(table["gpus"]) == [1, 2] and list(table["repeats"]) == [2, 2]
    assert list(table["epochs_used"]) == [4, 4]  # 2 repeats x (3 epochs - 1 skipped)
    assert table["epoch_time_ci95"].notna().all()
    assert list(table["scaling"]) == ["strong"] * 2 and list(table["global_batch"]) == [16, 16]
    for gpus in (1, 2):
        run = json.loads((tmp_path / f"results/runs/SimpleCNN/gpus{gpus}/rep1/run.json")
                         .read_text())
        assert (run["global_batch"], run["lr"]) == (16, pytest.approx(0.02))
    epochs = pd.read_csv(tmp_path / "results/tables/epochs.csv")
    assert len(epochs) == 12
    svg = (tmp_path / "results/plots/speedup.svg").read_text()
    # what the runs used, read from the runs: dataset, device, batch, epochs, size ...
    assert ("cifar10; device cpu; SimpleCNN: 8/16 per GPU, 3 epochs; 32 px; float32; "
            "mirrored; strong scaling") in svg
    assert "ideal (linear, strong scaling)" in svg
    run_snakemake(tmp_path, *PROFILE, f"--configfile={config}", "--report",
                  str(tmp_path / "report.html"))
    html = (tmp_path / "report.html").read_text(errors="replace")
    assert "speedup" in html and "scaling.csv" in html


@pytest.mark.skipif(not shutil.which("dot") and not IN_CI,
                    reason="graphviz's dot is missing (make sysdeps)")
def test_dag_and_rulegraph_pictures_from_a_dry_run(tmp_path):
    import subprocess

    for kind in ("--dag", "--rulegraph"):
        graph = run_snakemake(tmp_path, kind, "dot", f"--configfile={ROOT}/config/demo.yaml")
        dot_text = graph.stdout[graph.stdout.index("digraph"):]
        svg = subprocess.run(["dot", "-Tsvg"], input=dot_text, capture_output=True, text=True,
                             check=True).stdout
        assert "<svg" in svg and "train" in svg and "plot_scaling" in svg
    assert not (tmp_path / "results").exists()  # nothing ran


def test_the_studys_one_job_output_with_per_run_values_reproduces_it(tmp_path):
    config = write_config(tmp_path / "c.yaml", f"""
sweep: {{models: []}}
external_runs:
  - {{log: {STUDY}/ResNet50_all.out, model: ResNet50V2, train_images: 50000,
     gpus: [1, 2, 4], global_batch: [256, 512, 1024], label: V100 study}}
""")
    proc = run_snakemake(tmp_path, *PROFILE, f"--configfile={config}", TABLES)
    log = (tmp_path / "logs/parse_external_log/ResNet50V2/ResNet50_all.log").read_text()
    assert "ResNet50_all.out: 3 run(s)" in log
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv")
    assert len(runs) == 3 and runs["counted"].all()
    table = pd.read_csv(tmp_path / "results/tables/scaling.csv")
    assert list(table["gpus"]) == [1, 2, 4]
    assert list(table["epoch_time_s"]) == [45, 24, 12]
    assert [round(v) for v in table["images_per_s"]] == [1111, 2083, 4167]
    assert list(table["speedup"]) == [1, 1.875, 3.75]
    epochs = pd.read_csv(tmp_path / "results/tables/epochs.csv")
    assert sorted(epochs["log_run"].unique()) == [1, 2, 3] and len(epochs) == 15
    assert "warning" not in proc.stdout.lower().split("parse_external_log")[0]


def test_a_log_with_run_headers_needs_no_per_run_values(tmp_path):
    headers = ROOT / "tests" / "data" / "course-headers"
    config = write_config(tmp_path / "c.yaml", f"""
sweep: {{models: []}}
external_runs:
  - {{log: {headers}/ResNet50_headers.out, err_log: {headers}/ResNet50_headers.err,
     model: ResNet50, train_images: 512}}
analysis: {{accuracy_tolerance: 1.0}}
""")
    run_snakemake(tmp_path, *PROFILE, f"--configfile={config}", TABLES)
    table = pd.read_csv(tmp_path / "results/tables/scaling.csv")
    assert list(table["gpus"]) == [1, 2, 4] and list(table["global_batch"]) == [64, 128, 256]


@pytest.mark.parametrize("entry, words", [
    ("gpus: [1, 2], global_batch: 256",
     "external_runs[0].gpus lists 2 value(s) but {log} holds 3 run(s) "
     "(starting at lines 1, 11, 21)"),
    ("global_batch: [256, 512, 1024]",
     "external_runs[0]: run 1 of {log} (line 1) states no gpus: give gpus in the entry"),
    ("gpus: [1, 2, 4], global_batch: 256, patterns: {global_batch: 'Batch \\d+'}",
     "external_runs[0].patterns.global_batch: 'Batch \\d+' has no group"),
])
def test_external_runs_that_do_not_fit_their_log_fail_before_any_job(tmp_path, entry, words):
    log = STUDY / "ResNet50_all.out"
    config = write_config(tmp_path / "c.yaml", f"sweep: {{models: []}}\nexternal_runs:\n"
                          f"  - {{log: {log}, model: ResNet50V2, train_images: 50000, {entry}}}\n")
    proc = run_snakemake(tmp_path, "-n", f"--configfile={config}", check=False)
    assert proc.returncode != 0 and words.format(log=log) in proc.stdout
    assert not (tmp_path / "results").exists()


def test_config_and_log_disagreeing_is_a_warning_naming_both(tmp_path):
    headers = ROOT / "tests" / "data" / "course-headers" / "ResNet50_headers.out"
    config = write_config(tmp_path / "c.yaml", f"sweep: {{models: []}}\nexternal_runs:\n"
                          f"  - {{log: {headers}, model: ResNet50, train_images: 512, "
                          f"gpus: [1, 2, 8]}}\n")
    proc = run_snakemake(tmp_path, "-n", f"--configfile={config}")
    assert (f"run 3 of {headers} (line 19): the config says gpus 8, the log says 4; using 8"
            in proc.stdout)


def course_config(path, references: str = "config/references/course-v100.yaml",
                  extra: str = ""):
    """The published study's one job output as external runs (MirroredStrategy, float32)."""
    return write_config(path, f"""
sweep: {{models: []}}
external_runs:
  - {{log: {STUDY}/ResNet50_all.out, model: ResNet50V2, train_images: 50000,
     gpus: [1, 2, 4], global_batch: [256, 512, 1024], label: V100 study, strategy: mirrored}}
references: {references}
{extra}
""")


def test_the_course_figures_pass_as_references_and_a_regression_fails_the_verdicts(tmp_path):
    good = course_config(tmp_path / "good.yaml", extra="analysis: {target_accuracy: 0.4}")
    run_snakemake(tmp_path, *PROFILE, f"--configfile={good}")
    verdicts = pd.read_csv(tmp_path / "results/tables/verdicts.csv")
    assert list(verdicts["verdict"]) == ["pass"] * 3 and list(verdicts["gpus"]) == [1, 2, 4]
    table = pd.read_csv(tmp_path / "results/tables/scaling.csv")
    assert list(table["time_to_target_s"]) == [139, 74, 38]
    amdahl = pd.read_csv(tmp_path / "results/tables/amdahl.csv")
    assert list(amdahl["series"]) == ["V100 study"] and list(amdahl["gpus_4x"]) == [16]
    # the published logs have no window: ResNet50V2's gradient, and the bandwidth their
    # 1- and 2-GPU step times imply, predict the 4-GPU step
    prediction = pd.read_csv(tmp_path / "results/tables/prediction.csv")
    assert list(prediction["role"]) == ["fit", "fit", "held out", "extrapolated",
                                        "extrapolated"]
    assert prediction["note"].str.contains(FROM_STEP_TIMES, regex=False).all()
    assert prediction.loc[2, "error"] == pytest.approx(
        prediction.loc[2, "predicted_step_s"] / prediction.loc[2, "measured_step_s"] - 1,
        abs=1e-4)  # the table holds 6 digits
    assert prediction["gradient_bytes"].iloc[0] > 90e6  # ResNet50V2: 23.5 M float32 weights

    # the site's 4-GPU node is slower than its reference: the verdicts target fails
    slow = "[{model: ResNet50V2, gpus: 4, images_per_s: 5000, lower: -0.1, upper: null}]"
    bad = course_config(tmp_path / "bad.yaml", references=slow)
    proc = run_snakemake(tmp_path, *PROFILE, f"--configfile={bad}", check=False)
    assert proc.returncode != 0
    assert ("fail: V100 study on 4 GPU(s), 1 node(s): images_per_s 4167, expected 4500 to inf"
            in proc.stdout)
    assert not (tmp_path / "results/tables/verdicts.csv").exists()
    table = pd.read_csv(tmp_path / "results/tables/scaling.csv")
    assert list(table["verdict"]) == ["none", "none", "fail"]
    assert list(pd.read_csv(tmp_path / "results/tables/references.csv")["verdict"]) == ["fail"]
    assert (tmp_path / "results/plots/overview.png").stat().st_size > 10_000
    alone = run_snakemake(tmp_path, *PROFILE, f"--configfile={bad}",
                          "results/tables/verdicts.csv", check=False)
    assert alone.returncode != 0 and "1 of 1 point(s) outside" in alone.stdout


@pytest.fixture(scope="module")
def last_year(tmp_path_factory):
    """The published study's job output as a study of its own, to its tables: the other
    study the comparing tests draw beside theirs (read only)."""
    first = tmp_path_factory.mktemp("last-year")
    run_snakemake(first, *PROFILE, f"--configfile={course_config(first / 'c.yaml')}", *COMPARED)
    return first


def test_another_study_is_drawn_beside_this_one_and_listed_in_the_report(tmp_path, last_year):
    first = last_year
    config = course_config(tmp_path / "c.yaml", extra=(
        f"compare: [{{scaling: {first}/results/tables/scaling.csv, label: \"2025's V100s\"}}]"))
    run_snakemake(tmp_path, *PROFILE, f"--configfile={config}")
    compared = pd.read_csv(tmp_path / "results/tables/compared.csv")
    # each study's 1, 2 and 4 measured GPUs, then the 8 and 16 its model extrapolates to
    assert list(zip(compared["study"], compared["role"], compared["gpus"])) == [
        (study, role, gpus) for study in ("this study", "2025's V100s")
        for role, gpus in (("measured", 1), ("measured", 2), ("measured", 4),
                           ("extrapolated", 8), ("extrapolated", 16))]
    measured = compared[compared["role"] == "measured"]
    assert measured["predicted_efficiency"].notna().all()
    # no log says how many GPUs the course's node held: the 4-GPU point's node is taken, and
    # no link between nodes is known past it: 8 and 16 GPUs are rows, predicted nowhere
    assert compared.loc[compared["role"] == "extrapolated", "predicted_efficiency"].isna().all()
    run_snakemake(tmp_path, *PROFILE, f"--configfile={config}", "--report",
                  str(tmp_path / "report.html"))
    html = (tmp_path / "report.html").read_text(errors="replace")
    for name in ("compared.csv", "amdahl.csv", "references.csv", "cost.png"):
        assert name in html, name
    svg = (tmp_path / "results/plots/speedup.svg").read_text()
    assert "2025's V100s: V100 study" in svg and "Amdahl model" in svg


def script_elements(path) -> int:
    """How many <script> elements an HTML parser finds in a page."""
    from html.parser import HTMLParser

    class Counter(HTMLParser):
        count = 0

        def handle_starttag(self, tag, attrs):
            self.count += tag == "script"

    counter = Counter()
    counter.feed(path.read_text(errors="replace"))
    return counter.count


def test_labels_and_notes_from_shared_files_never_reach_the_reports_html(tmp_path, last_year):
    first = last_year

    def report_of(name: str, text: str):
        folder = tmp_path / name
        folder.mkdir()
        shared = folder / "references.yaml"  # a file someone else wrote
        shared.write_text(yaml.safe_dump({"references": [
            {"model": "ResNet50V2", "gpus": 1, "images_per_s": 1111.1, "note": text}]}))
        config = course_config(folder / "c.yaml", references=str(shared), extra=(
            f"compare: [{{scaling: {first}/results/tables/scaling.csv, "
            f"label: {json.dumps(text)}}}]"))
        run_snakemake(folder, *PROFILE, f"--configfile={config}")
        run_snakemake(folder, *PROFILE, f"--configfile={config}", "--report",
                      str(folder / "report.html"))
        return folder / "report.html"

    clean = report_of("clean", "plain words")
    hostile = report_of("hostile", "</script><script>alert(4)</script>")
    assert script_elements(hostile) == script_elements(clean) > 0
    compared = pd.read_csv(tmp_path / "hostile/results/tables/compared.csv")
    assert "</script><script>alert(4)</script>" in set(compared["study"])  # kept as data


def test_a_study_over_an_mlperf_series_scales_as_its_files_throughputs(tmp_path):
    """Three MLPerf results of one system on 8, 16 and 24 GPUs (tests/data/mlperf): the
    GPU counts and batches come from the files, and the speedups are the ratios of the
    throughputs the files' own epoch times give (read here from their JSON)."""
    mlperf = ROOT / "tests" / "data" / "mlperf"
    names = ["Dell_DSS8440x8A100-PCIE-40GB.txt", "Dell_2xDSS8440x8A100-PCIE-40GB.txt",
             "Dell_3xDSS8440x8A100-PCIE-40GB.txt"]
    runs = "\n".join(f"  - {{log: {mlperf / n}, model: ResNet50, train_images: 1281167, "
                     "label: Dell DSS8440}" for n in names)
    # the network as a user gives it where nothing measured it: the figures of a PCIe
    # node and of HDR InfiniBand (assumed, not the Dell system's)
    network = ("analysis: {network: {within_node: {latency_us: 10, bus_bandwidth_gbs: 20}, "
               "between_nodes: {latency_us: 10, bus_bandwidth_gbs: 24}}}")
    config = write_config(tmp_path / "c.yaml", f"sweep: {{models: []}}\n{network}\n"
                          f"external_runs:\n{runs}\n")
    run_snakemake(tmp_path, *PROFILE, f"--configfile={config}", TABLES,
                  "results/tables/prediction.csv")
    table = pd.read_csv(tmp_path / "results/tables/scaling.csv")
    assert list(table["gpus"]) == [8, 16, 24]
    # one series over its three node counts, its 3-node point predicted on the links given
    prediction = pd.read_csv(tmp_path / "results/tables/prediction.csv")
    assert list(zip(prediction["gpus"], prediction["nodes"], prediction["role"])) == [
        (8, 1, "fit"), (16, 2, "fit"), (24, 3, "held out"), (48, 6, "extrapolated"),
        (96, 12, "extrapolated")]
    assert set(prediction["series"]) == {"Dell DSS8440"}
    assert (prediction["link_source"] == "given").all()
    assert prediction["predicted_step_s"].gt(0).all() and prediction["error"].notna().sum() == 3
    assert prediction["bus_bandwidth_inter_gbs"].eq(24).all()
    speed = []
    for name in names:
        events = [json.loads(line.split(":::MLLOG", 1)[1])
                  for line in (mlperf / name).read_text().splitlines()
                  if line.startswith(":::MLLOG")]
        times = {(e["key"], e["metadata"].get("epoch_num")): e["time_ms"] for e in events}
        seconds = [(times["epoch_stop", n] - times["epoch_start", n]) / 1000
                   for (key, n) in times if key == "epoch_start"]
        speed.append(1281167 / (sum(seconds[1:]) / len(seconds[1:])))  # skip_epochs 1
    # scaling.csv keeps 6 significant digits
    assert list(table["images_per_s"]) == pytest.approx(speed, rel=1e-5)
    assert list(table["speedup"]) == pytest.approx([s / speed[0] for s in speed], rel=1e-5)
    assert list(zip(table["nodes"], table["base_gpus"])) == [(1, 8), (2, 8), (3, 8)]
