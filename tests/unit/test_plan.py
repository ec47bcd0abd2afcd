"""dlscale/plan/study.py: what the workflow plans, checked without Snakemake."""

from __future__ import annotations

import copy
import json
import re
import shlex
import sys

import pytest
from conftest import ROOT
from helpers.studies import data, study, torch_python

from dlscale.core.schema import validate
from dlscale.launch.launcher import read_plan
from dlscale.plan.sources import resolve_source
from dlscale.plan.study import PlanError, Study, check_raw_config


def test_a_local_archive_is_read_in_place_with_its_md5(tmp_path):
    archive = tmp_path / "my data" / "c.tar.gz"
    archive.parent.mkdir()
    archive.write_bytes(b"x")
    source = resolve_source(data(source=str(archive), md5="0" * 32, limit_train=10), "cifar10")
    assert (source.path, source.md5, source.downloads) == (str(archive), "0" * 32, {})
    flags = shlex.split(source.prepare_flags(data(limit_train=10), 32))
    assert flags[flags.index("--source") + 1] == str(archive)  # one word, space and all
    assert flags[flags.index("--limit-train") + 1] == "10"


def test_an_url_becomes_a_download_checked_against_the_official_md5():
    source = resolve_source(data(source="https://mirror.example/x/cifar-10-python.tar.gz"),
                            "cifar10")
    target = "resources/downloads/cifar10/cifar-10-python.tar.gz"
    assert source.path == target
    assert source.downloads == {target: ("https://mirror.example/x/cifar-10-python.tar.gz",
                                         "c58f30108f718f92721af3b95e74349a")}


@pytest.mark.parametrize("keys, words", [
    ({"source": "https://h/a b.tar.gz"}, "the file name 'a b.tar.gz' may hold only letters"),
    ({"source": "/no/such.tar.gz"}, "data.source '/no/such.tar.gz' does not exist"),
])
def test_bad_sources_are_named(keys, words):
    with pytest.raises(PlanError, match=words):
        resolve_source(data(**keys), "cifar10")


@pytest.mark.parametrize("sweep", [
    {"models": [{"from": "net.py:build", "label": "N" * 300}]},
    {"commands": {"N" * 300: "python t.py"}},
])
def test_a_label_too_long_for_a_folder_is_named_before_validation(sweep):
    with pytest.raises(PlanError) as info:
        check_raw_config({"sweep": sweep})
    assert f"the label '{'N' * 40}...' has 300 characters: expected at most 100" in str(
        info.value)


def test_an_md5_read_as_a_number_is_explained():
    with pytest.raises(PlanError, match="data.md5 was read as the number 0: put the checksum"):
        check_raw_config({"data": {"md5": 0}})


def test_flags_of_a_point_and_its_launcher(tmp_path):
    s = study(tmp_path, sweep={"models": ["SimpleCNN"], "gpus": [2], "strategy": ["horovod"]},
              horovod={"mpi_launcher": "srun --mpi=pmix"}, training={"device": "cpu"})
    p = s.points["SimpleCNN/gpus2/rep1"]
    flags = shlex.split(s.train_flags(p))
    assert flags[flags.index("--gpus") + 1] == "2" and "--no-xla" in flags
    word, text = shlex.split(s.launch_plan(p))
    plan = read_plan(text)
    assert word == "--plan" and (plan.tasks, plan.tasks_per_node, plan.nodes, plan.horovod,
                                 plan.mpi_launcher) == (2, 2, 1, True, "srun --mpi=pmix")
    assert s.python(p) == str(tmp_path / ".venv-horovod" / "bin" / "python")
    assert p.tasks_per_gpu == 1


@pytest.mark.parametrize("sweep", [
    {"models": ["SimpleCNN"], "gpus": [1, 2], "strategy": ["mirrored", "multiworker"]},
    {"models": [], "gpus": [2], "commands": {"mine": {"run": "python t.py",
                                                     "tasks": "per_gpu"}}}])
def test_the_launchers_plan_is_what_the_worker_plans_from_its_own_flags(tmp_path, sweep):
    """The launcher records a point that ended without its own record from planning's
    plan (launch_plan), never from the worker's flags: the plan's record keys are the
    ones train.py (or run_command.py) would write from the flags planning gave it."""
    from dlscale.launch import command
    from dlscale.train.settings import parse

    s = study(tmp_path, sweep=sweep, training={"device": "cpu"})
    for p in s.points.values():
        plan = read_plan(shlex.split(s.launch_plan(p))[1])
        flags = shlex.split(s.worker_command(p))[2:]
        ours = (command.planned(command.build_parser().parse_args(flags)) if p.command
                else parse(flags).planned())
        assert plan.record_keys() == ours, p.key
        assert plan.command == bool(p.command) and plan.tasks == (1 if p.command else p.tasks)


@pytest.mark.parametrize("text, words", [
    ("[1]", "expected one JSON object"), ("{", "not JSON"),
    ('{"tasks": 0}', "tasks 0: expected at least 1"),
    ('{"gpus": 2}', "unknown key(s) gpus: expected batch_file, command")])
def test_a_bad_plan_is_one_line_naming_what_is_wrong(text, words):
    import argparse

    with pytest.raises(argparse.ArgumentTypeError) as info:
        read_plan(text)
    assert words in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("dataset, resize, folder", [
    ("cifar10", "on_device", "cifar10-32px"), ("cifar10", "prepare", "cifar10-128px"),
    ("fashion_mnist", "on_device", "fashion_mnist-28px")])
def test_shards_are_at_the_models_size_or_the_datasets_own(tmp_path, dataset, resize, folder):
    s = study(tmp_path, data={"dataset": dataset, "resize": resize, "image_size": 128},
              sweep={"models": ["SimpleCNN"], "gpus": [1]})
    assert s.data_dir == f"results/data/{folder}"
    flags = shlex.split(s.train_flags(s.points["SimpleCNN/gpus1/rep1"]))
    assert flags[flags.index("--image-size") + 1] == "128"  # the model's size either way


def test_a_study_with_nothing_to_run_is_refused(tmp_path):
    with pytest.raises(PlanError, match="nothing to run"):
        study(tmp_path, sweep={"models": []})


@pytest.mark.parametrize("sections, words", [
    ({"references": "no/such.yaml"}, "references: file 'no/such.yaml' does not exist"),
    ({"references": [{"model": "ResNet50V2", "gpus": 4}]},
     "references[0]: give exactly one of images_per_s or epoch_time_s or tokens_per_s or "
     "tokens_per_s_per_gpu, got neither"),
    ({"references": [{"model": "ResNet50V2", "gpus": 4, "images_per_s": 9, "lower": 0.2}]},
     "references[0]: 0.2 is greater than the maximum of 0"),
    ({"compare": [{"scaling": "/no/such.csv", "label": "x"}]},
     "compare[0]: scaling '/no/such.csv' does not exist"),
])
def test_bad_references_or_compared_studies_fail_at_planning(tmp_path, sections, words):
    with pytest.raises(PlanError, match=re.escape(words)):
        Study(_validated(sweep={"models": ["SimpleCNN"]}, **sections), tmp_path)


def test_the_shipped_course_references_load_from_the_workflow_folder(tmp_path):
    config = _validated(sweep={"models": ["SimpleCNN"]},
                        references="config/references/course-v100.yaml")
    refs = Study(config, ROOT).analysis.references
    assert [(r["gpus"], r["images_per_s"], r["lower"], r["upper"]) for r in refs] == [
        (1, 1111.1, -0.1, None), (2, 2083.3, -0.1, None), (4, 4166.7, -0.1, None)]


def test_a_compared_table_that_lacks_columns_is_named(tmp_path):
    other = tmp_path / "other.csv"
    other.write_text("series,gpus\nA,1\n")
    with pytest.raises(PlanError, match=r"compare\[0\]: .*other.csv lacks the column\(s\) nodes"):
        Study(_validated(sweep={"models": ["SimpleCNN"]},
                         compare=[{"scaling": str(other), "label": "old"}]), tmp_path)


COMPARED = "series,nodes,gpus,epoch_time_s,images_per_s,speedup,efficiency,final_accuracy\n"


@pytest.mark.parametrize("rows, words", [
    ("A,1,two,10,100,1,1,0.5\n", "other.csv line 2, column gpus: 'two' is not a number"),
    ("A,1,1,10,100,1,1,0.5\nA,1,2,fast,180,1.8,0.9,0.5\n",
     "other.csv line 3, column epoch_time_s: 'fast' is not a number"),
])
def test_a_compared_table_with_text_where_numbers_belong_is_named(tmp_path, rows, words):
    other = tmp_path / "other.csv"
    other.write_text(COMPARED + rows)
    with pytest.raises(PlanError, match=re.escape(words)):
        Study(_validated(sweep={"models": ["SimpleCNN"]},
                         compare=[{"scaling": str(other), "label": "old"}]), tmp_path)


def test_a_compared_study_cannot_be_called_this_study(tmp_path):
    other = tmp_path / "other.csv"
    other.write_text(COMPARED + "A,1,1,10,100,1,1,0.5\n")
    with pytest.raises(PlanError, match="label 'This study' is how the plots name the study"):
        Study(_validated(sweep={"models": ["SimpleCNN"]},
                         compare=[{"scaling": str(other), "label": "This study"}]), tmp_path)


def test_a_history_path_whose_folder_cannot_be_made_is_said_at_planning(tmp_path):
    (tmp_path / "afile").write_text("x")
    for path, words in ((tmp_path / "afile" / "sub" / "h.sqlite", "is a file"),
                        (tmp_path, "is a folder: expected the history's file")):
        with pytest.raises(PlanError, match=re.escape(words)):
            Study(_validated(sweep={"models": ["SimpleCNN"]},
                             history={"path": str(path)}), tmp_path)
    assert Study(_validated(sweep={"models": ["SimpleCNN"]},
                            history={"path": str(tmp_path / "new" / "h.sqlite")}), tmp_path)


def _validated(**sections) -> dict:
    config = copy.deepcopy(sections)
    validate(config)
    return config


@pytest.mark.parametrize("text, builder, words", [
    (None, "nets.py:build", "nets.py does not exist or is not a file"),
    ("def other(input_shape, num_classes): ...\n", "nets.py:build",
     "nets.py defines no function build at its top level"),
    ("def build(input_shape, num_classes:\n", "nets.py:build", "nets.py is not valid Python"),
    (None, "no_such_package.nets:build",
     "no module no_such_package.nets in the working directory or on the Python path"),
])
def test_your_own_models_builder_is_checked_at_planning(tmp_path, monkeypatch, text, builder,
                                                         words):
    monkeypatch.chdir(tmp_path)  # a builder's path is relative to the working directory
    if text is not None:
        (tmp_path / "nets.py").write_text(text)
    with pytest.raises(PlanError) as info:
        study(tmp_path, sweep={"models": [builder]})
    message = str(info.value)
    assert message.startswith(f"sweep.models: '{builder}': ") and words in message
    assert "\n" not in message


def test_your_own_model_plans_its_builder_into_the_training_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nets.py").write_text("import nothing_at_planning\n\n"
                                      "def build(input_shape, num_classes):\n    pass\n")
    plan = study(tmp_path, sweep={"models": [{"from": "nets.py:build", "label": "Net"},
                                             "operator:add"], "gpus": [2]})
    assert list(plan.points) == ["Net/gpus2/rep1", "add/gpus2/rep1"]  # a module of the stdlib
    words = shlex.split(plan.train_flags(plan.points["Net/gpus2/rep1"]))
    assert words[words.index("--model") + 1] == "Net"
    assert words[words.index("--model-from") + 1] == "nets.py:build"


@pytest.mark.parametrize("sections, words", [
    ({"sweep": {"models": ["nets.py:build"]}, "training": {"batch_per_gpu": "auto"}},
     "batch_per_gpu auto searches built-in models only"),
    ({"sweep": {"models": ["nets.py:build"]}, "models": {"Build": {"batch_per_gpu": 8}}},
     "models.Build: no model of sweep.models is labelled 'Build'"),
])
def test_settings_that_do_not_fit_your_own_model_are_named(tmp_path, monkeypatch, sections,
                                                           words):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nets.py").write_text("def build(input_shape, num_classes):\n    pass\n")
    with pytest.raises(PlanError, match=re.escape(words)):
        study(tmp_path, **sections)


@pytest.mark.parametrize("run, words", [
    ("python t.py --gpu-count {ngpus}", "sweep.commands.mine: unknown placeholder {ngpus}: "
                                        "expected one of {gpus}, {nodes}, {tasks}"),
    ("python t.py --lr {lr:.3f}", "sweep.commands.mine: {lr} takes no format or conversion"),
    ("python -c 'print({\"a\": 1})'", "sweep.commands.mine: "),
    ("python t.py", None),
])
def test_a_commands_placeholders_are_checked_at_planning(tmp_path, run, words):
    sections = {"sweep": {"models": [], "commands": {"mine": run}}}
    if words is None:
        assert list(study(tmp_path, **sections).points)[0] == "mine/gpus1/rep1"
        return
    with pytest.raises(PlanError) as info:
        study(tmp_path, **sections)
    assert str(info.value).startswith(words) and "\n" not in str(info.value)


@pytest.mark.parametrize("run", ["srun -n ${SLURM_NTASKS} python t.py",
                                 "python t.py | awk '{print $1}'"])
def test_a_shell_brace_in_a_command_is_refused_with_how_to_write_it(tmp_path, run):
    with pytest.raises(PlanError) as info:
        study(tmp_path, sweep={"models": [], "commands": {"mine": run}})
    assert str(info.value).endswith("; a literal brace is written twice, as in "
                                    "${{SLURM_NTASKS}} or awk '{{print $1}}'")
    # written so, the command plans, and the shell gets single braces
    fixed = run.replace("{", "{{").replace("}", "}}")
    point = study(tmp_path, sweep={"models": [], "commands": {"mine": fixed}}).points[
        "mine/gpus1/rep1"]
    from dlscale.launch.command import render

    assert render(point.command, {}) == run


def test_a_commands_values_reach_the_shell_quoted(tmp_path):
    from dlscale.launch.command import render

    plan = study(tmp_path, sweep={"models": [], "gpus": [2], "commands": {"mine": {
        "run": "python t.py --gpus {gpus} --lr {lr} --out {out_dir}", "tasks": "per_gpu"}}},
        training={"batch_per_gpu": 8, "base_lr": 0.1})
    p = plan.points["mine/gpus2/rep1"]
    assert (p.strategy, p.tasks, p.command) == ("command", 2, "python t.py --gpus {gpus} "
                                                "--lr {lr} --out {out_dir}")
    words = shlex.split(plan.command_flags(p))
    assert words[words.index("--lr") + 1] == "0.2"  # base x GPUs, as train.py scales it
    hostile = "runs/a b; touch x $(id)"
    line = render(p.command, {"gpus": 2, "lr": "0.2", "out_dir": hostile})
    assert shlex.split(line) == ["python", "t.py", "--gpus", "2", "--lr", "0.2", "--out",
                                 hostile]


def image_tree(root, layout: dict) -> str:
    """Files named in `layout` ({"cat/a.png": b"..."}), bytes as given (never decoded here)."""
    for name, content in layout.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(content)
    return str(root)


@pytest.mark.parametrize("layout, words", [
    ({"cat/a.png": b"x", "notes.txt": b"x"}, "found 1 class folder(s) ['cat']: expected one "
                                             "sub-folder per class, at least two"),
    ({"cat/a.png": b"x", "cat/b.png": b"x", "dog/readme.txt": b"x"},
     "class folder 'dog' holds no training image"),
    ({"train/cat/a.png": b"x", "train/dog/b.png": b"x", "test/cat/c.png": b"x"},
     "train/ has classes ['cat', 'dog'] but test/ has ['cat']"),
    ({"cat/a.png": b"x", "cat/b.png": b"x", "dog/c.png": b"x"},
     "class folder 'dog' holds 1 image: expected at least 2, one to train on and one to test"),
    ({"train/cat/a.png": b"x", "train/dog/b.png": b"x"},  # ImageNet's train/ alone
     "holds train/ but no test/, val/ or validation/ beside it: add it, or point "
     "data.source at"),
    ({f"{g}/{c}/{i}.png": b"x" for g in ("2019", "2020") for c in ("cat", "dog")
      for i in range(3)},
     "the class folders 2019, 2020 each hold the same folders (cat, dog) rather than images"),
    (None, "is not a folder"),
])
def test_a_folder_of_images_is_checked_at_planning_without_reading_it(tmp_path, layout,
                                                                        words):
    source = image_tree(tmp_path / "imgs", layout) if layout else str(tmp_path / "missing")
    with pytest.raises(PlanError) as info:
        study(tmp_path, data={"dataset": "folder", "source": source, "image_size": 32},
              sweep={"models": ["SimpleCNN"], "gpus": [1]}, training={"batch_per_gpu": 1})
    assert str(info.value).startswith(f"data.source: {source}") and words in str(info.value)


def test_a_folder_of_images_plans_its_own_size_and_count(tmp_path):
    files = {f"{c}/{i}.JPG": b"x" for c in ("cat", "dog") for i in range(10)}
    source = image_tree(tmp_path / "imgs", files)
    plan = study(tmp_path, data={"dataset": "folder", "source": source, "image_size": 48},
                 sweep={"models": ["SimpleCNN"], "gpus": [1]}, training={"batch_per_gpu": 8})
    assert plan.data_dir == "results/data/folder-48px"  # resized at preparation
    words = shlex.split(plan.source("folder").prepare_flags(plan.data, 48))
    assert words[words.index("--test-fraction") + 1] == "0.2"
    with pytest.raises(PlanError, match="larger than the 16 training images"):
        study(tmp_path, data={"dataset": "folder", "source": source, "image_size": 48},
              sweep={"models": ["SimpleCNN"], "gpus": [4]}, training={"batch_per_gpu": 8})


def test_a_folder_of_images_under_home_is_listed_once_at_planning(tmp_path, monkeypatch):
    import dlscale.data.imagefolder

    image_tree(tmp_path / "imgs", {f"{c}/{i}.png": b"x" for c in ("cat", "dog")
                                   for i in range(10)})
    monkeypatch.setenv("HOME", str(tmp_path))
    listed = []
    scan = dlscale.data.imagefolder.scan
    monkeypatch.setattr(dlscale.data.imagefolder, "scan",
                        lambda *args: listed.append(args) or scan(*args))
    plan = study(tmp_path, data={"dataset": "folder", "source": "~/imgs", "image_size": 32},
                 sweep={"models": ["SimpleCNN"], "gpus": [1]}, training={"batch_per_gpu": 8})
    assert plan.source("folder").path == str(tmp_path / "imgs")
    assert len(listed) == 1


def test_two_logs_of_the_same_name_in_two_folders_are_two_entries(tmp_path):
    for folder in ("week1", "week2", "week2 again"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "job.out").write_text(
            "Epoch 1/1\n10/10 - 3s - loss: 1.2 - accuracy: 0.5\n")
    entry = {"model": "Net", "gpus": 1, "global_batch": 64, "train_images": 640}
    plan = study(tmp_path, sweep={"models": []}, external_runs=[
        {**entry, "log": str(tmp_path / f / "job.out")} for f in ("week1", "week2")])
    assert len(plan.analysis.external) == 2 and "Net/job" in plan.analysis.external
    with pytest.raises(PlanError, match=r"external_runs\[1\]: a second entry for model Net "
                                        r"and log .*week1/job.out \(set repeat"):
        study(tmp_path, sweep={"models": []}, external_runs=[
            {**entry, "log": str(tmp_path / "week1" / "job.out")}] * 2)


def test_inside_a_job_the_plan_is_made_again_without_reading_what_planning_read(tmp_path):
    """Snakemake's SLURM job step parses the Snakefile again for the job's one rule: the
    points and their flags are the same, the planning process's reading is not redone."""
    log = tmp_path / "job.out"
    log.write_text("Epoch 1/1\n10/10 - 3s - loss: 1.2 - accuracy: 0.5\n")
    sections = {"sweep": {"models": ["SimpleCNN"], "gpus": [1, 2]},
                "external_runs": [{"log": str(log), "model": "Theirs", "gpus": 1,
                                   "global_batch": 64, "train_images": 640}],
                "training": {"batch_per_gpu": 16}}
    main = study(tmp_path, **sections)
    log.unlink()  # read by the planning process only: the job step never opens it
    config = copy.deepcopy(sections)
    validate(config)
    step = Study(config, tmp_path, job_step=True)
    assert list(main.analysis.external) == ["Theirs/job"] and step.analysis.external == {}
    assert step.notes() == []
    assert {k: main.train_flags(p) for k, p in main.points.items()} == {
        k: step.train_flags(p) for k, p in step.points.items()}
    with pytest.raises(PlanError, match="job.out"):  # the planning process does read it
        study(tmp_path, **sections)


COUNT_SIGNATURES = """
import inspect, runpy, sys
calls = [0]
signature = inspect.signature
def counted(*args, **kwargs):
    calls[0] += 1
    return signature(*args, **kwargs)
inspect.signature = counted
sys.argv = ["snakemake", *sys.argv[1:]]
try:
    runpy.run_module("snakemake", run_name="__main__")
except SystemExit as end:
    print("inspections", calls[0], "exit", end.code)
"""


def test_planning_reads_the_rules_functions_once_not_per_job(tmp_path, cifar_python):
    """Snakemake reads a rule function's parameters (inspect.signature) for each function
    of each job; rules/common.smk keeps them read once, so the 12 jobs that 6 more points
    add (train, tabulate_run) add at most one inspection each, Snakemake's own (before:
    220 for the 12)."""
    import subprocess

    counts = []
    for gpus in ("[1, 2]", "[1, 2, 3, 4, 5, 6, 7, 8]"):
        work = tmp_path / str(gpus.count(","))
        work.mkdir()
        config = work / "c.yaml"
        config.write_text(f"data: {{source: {cifar_python}, image_size: 32}}\n"
                          f"sweep: {{models: [SimpleCNN], gpus: {gpus}}}\n"
                          "training: {device: cpu}\n")
        proc = subprocess.run(
            [sys.executable, "-c", COUNT_SIGNATURES, "-s", str(ROOT / "Snakefile"),
             "--directory", str(work), "--configfile", str(config), "-n", "--cores", "1"],
            capture_output=True, text=True, timeout=300)
        found = re.search(r"inspections (\d+) exit (\S+)", proc.stdout)
        assert found and found[2] in ("0", "None"), proc.stdout[-3000:] + proc.stderr[-3000:]
        counts.append(int(found[1]))
    assert counts[1] - counts[0] <= 12, counts


def test_planning_a_study_without_references_or_compared_tables_imports_no_pandas(tmp_path):
    """pandas is the analysis's and numpy the data's; planning, which every Snakemake start
    and every SLURM job's step does, imported both (0.15 and 0.05 s). Snakemake imports
    numpy itself (through yte), and its SLURM plugin pandas (bench/upstream). The modules
    are those rules/common.smk imports."""
    import subprocess

    code = ("import sys, yaml\n"
            "import dlscale.data.datasets, dlscale.plan.pluginfix, dlscale.plan.rulefunctions\n"
            "from dlscale.plan.study import Study\n"
            "from dlscale.core.schema import validate\n"
            f"config = yaml.safe_load(open({str(ROOT / 'config/demo.yaml')!r}))\n"
            "validate(config)\n"
            f"Study(config, {str(ROOT)!r}).announce()\n"
            "print(sorted(m for m in ('pandas', 'numpy', 'matplotlib') if m in sys.modules))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout


def test_two_models_logs_under_one_label_are_refused_naming_both_entries(tmp_path):
    """ResNet50V2's and ResNet152V2's logs with one label were drawn as one series (repeats
    2, the speedups of neither model); a series of one model's logs at several GPU counts
    under one label stays allowed."""
    study_logs = ROOT / "tests" / "data" / "reference-study"
    one_model = [{"log": str(study_logs / f"ResNet50_{n}gpu.out"), "model": "ResNet50V2",
                  "gpus": n, "label": "course", "train_images": 50000} for n in (1, 2)]
    planned = study(tmp_path, sweep={"models": []}, external_runs=one_model)
    assert len(planned.analysis.external) == 2
    two_models = [one_model[0], {**one_model[1], "model": "ResNet152V2"}]
    with pytest.raises(PlanError) as error:
        study(tmp_path, sweep={"models": []}, external_runs=two_models)
    assert str(error.value) == (
        "external_runs[1]: label 'course' is external_runs[0]'s too, a log of ResNet50V2, and "
        "this is one of ResNet152V2: a series is one model; give each its own label")


def test_a_touched_image_with_the_same_bytes_prepares_nothing(tmp_path, monkeypatch):
    """The folder's listing followed every image's modification time: a touch, or an
    rsync without times, prepared the folder again and retrained every point. Now a
    changed stat has the image's bytes read again, and only new bytes change the listing;
    the note names what changed."""
    import os
    from pathlib import Path

    from dlscale.core.contract import MANIFEST

    source = tmp_path / "images"
    for c in ("cat", "dog"):
        (source / c).mkdir(parents=True)
        for i in range(4):
            (source / c / f"{i}.png").write_bytes(f"{c}{i}".encode())
    monkeypatch.chdir(tmp_path)

    def plan():
        s = study(tmp_path, data={"dataset": "folder", "source": str(source),
                                  "image_size": 32},
                  sweep={"models": ["SimpleCNN"], "gpus": [1]},
                  training={"batch_per_gpu": 2, "device": "cpu"})
        return s, s.record_listing()

    first, note = plan()
    listing = Path(first.listing_file(first.shard_size()))
    assert note is None and listing.exists()
    Path(first.data_dir).mkdir(parents=True)
    (Path(first.data_dir) / MANIFEST).write_text("{}")  # the folder was prepared
    written = listing.stat().st_mtime_ns
    os.utime(source / "cat" / "1.png", ns=(1, 1))  # touched: same bytes
    assert plan()[1] is None and listing.stat().st_mtime_ns == written
    (source / "dog" / "2.png").write_bytes(b"another picture")
    assert plan()[1] == (f"note: the images in {source} changed since they were listed "
                         "(1 edited (e.g. dog/2.png)): the data is prepared again")


@pytest.mark.parametrize(("tasks", "gpus", "wanted"), [
    ("per_gpu", 2, ["--ntasks-per-gpu=1", "--ntasks=2"]),
    ("per_gpu", 8, ["--ntasks-per-gpu=1", "--ntasks=8"]),
    ("one", 2, []),
])
def test_a_commands_tasks_on_gpu_gres_reach_sbatch_as_it_means_them(tmp_path, tasks, gpus,
                                                                     wanted):
    """The SLURM plugin's own submit string for a command point with GPU gres: one task per
    GPU, not `tasks` tasks per GPU (the plugin reads `tasks` as that when `tasks_per_gpu`
    is unset)."""
    from types import SimpleNamespace

    from snakemake_executor_plugin_slurm.submit_string import get_submit_command

    plan = study(tmp_path, sweep={"models": [], "gpus": [gpus], "commands": {
        "mine": {"run": "srun python t.py --gpus {gpus}", "tasks": tasks}}},
        resources={"gres": "gpu:{gpus}", "max_gpus_per_node": 8})
    [point] = plan.points.values()
    resources = {"gres": point.gres, "cpus_per_task": point.cpus_per_task,
                 "mem_mb": point.mem_mb, "nodes": point.nodes,
                 "tasks": point.tasks if point.tasks > 1 else None,
                 "tasks_per_gpu": point.tasks_per_gpu,
                 "mpi": "srun" if point.tasks > 1 else None}

    class Resources(SimpleNamespace):
        def get(self, name, default=None):
            value = getattr(self, name, default)
            return default if value is None else value

    job = SimpleNamespace(resources=Resources(**resources), threads=1)
    call = get_submit_command(job, {"run_uuid": "u", "slurm_logfile": "l", "comment_str": "c",
                                    "account": "", "partition": "", "workdir": str(tmp_path)})
    flags = re.findall(r"--ntasks[-\w]*=\d+", call)
    assert flags == wanted, call


@pytest.mark.parametrize(("settings", "forced_points"), [
    ({"forceall": True}, {"A/gpus1/rep1", "B/gpus2/rep1"}),
    ({"forcetargets": True}, {"A/gpus1/rep1", "B/gpus2/rep1"}),
    ({"forcerun": {"train"}}, {"A/gpus1/rep1", "B/gpus2/rep1"}),
    ({"forcerun": {"results/runs/A/gpus1/rep1/run.json"}}, {"A/gpus1/rep1"}),
    ({"forcerun": {"aggregate_runs"}}, set()),
    ({}, set()),
])
def test_a_forced_rerun_reaches_the_points_launcher(monkeypatch, settings, forced_points):
    """snakemake -F, -f, -R train or -R <a point's file>: the launcher of each forced point
    trains it again even where its record completed while Snakemake was away."""
    from pathlib import Path
    from types import SimpleNamespace

    from dlscale.core.vocabulary import FORCED_ENV
    from dlscale.launch.launcher import forced
    from dlscale.plan.rulefunctions import note_forced

    monkeypatch.setenv(FORCED_ENV, "*")  # a value inherited from elsewhere is replaced
    dag = SimpleNamespace(**{"forceall": False, "forcetargets": False, "forcerun": set(),
                             **settings})
    note_forced(SimpleNamespace(dag_settings=dag, is_main_process=True))
    assert {k for k in ("A/gpus1/rep1", "B/gpus2/rep1")
            if forced(Path("results/runs") / k)} == forced_points
    monkeypatch.delenv(FORCED_ENV)
    note_forced(SimpleNamespace(dag_settings=dag, is_main_process=False))  # a job step
    assert FORCED_ENV not in __import__("os").environ


@pytest.mark.parametrize("keep", [True, False])
def test_a_studys_jax_points_share_one_compile_cache_unless_it_is_off(tmp_path, keep):
    """training.compile_cache: every Keras 3 JAX point gets results/compile_cache (JAX's
    persistent compilation cache), a TensorFlow point none; false: none at all."""
    s = study(tmp_path, sweep={"models": ["SimpleCNN"], "gpus": [1, 2],
                               "backend": ["tensorflow", "jax"]},
              training={"keras": 3, "device": "cpu", "compile_cache": keep})
    caches = {}
    for point in s.points.values():
        flags = shlex.split(s.train_flags(point))
        caches[point.backend, point.gpus] = (flags[flags.index("--compile-cache") + 1]
                                             if "--compile-cache" in flags else None)
    assert caches == {("tensorflow", 1): None, ("tensorflow", 2): None,
                      ("jax", 1): "results/compile_cache" if keep else None,
                      ("jax", 2): "results/compile_cache" if keep else None}


NCCL = ROOT / "tests" / "data" / "nccl-tests" / "a3mega-2x8-h100-all_reduce_perf.markdown"


def test_the_network_given_is_read_at_planning_and_handed_to_the_prediction(tmp_path):
    """analysis.network: an nccl-tests output is read at planning (it measured the level
    between nodes: 16 ranks on 2 hosts), and the prediction rule gets it as one flag."""
    s = study(tmp_path, sweep={"models": ["SimpleCNN"], "gpus": [1]}, analysis={"network": {
        "within_node": {"latency_us": 5, "bus_bandwidth_gbs": 150},
        "nccl_tests": [str(NCCL)]}})
    assert s.analysis.network_files == [str(NCCL)]
    word, text = shlex.split(s.analysis.network_flags())
    assert word == "--network" and json.loads(text)["nccl_tests"] == [str(NCCL)]
    assert study(tmp_path, sweep={"models": ["SimpleCNN"], "gpus": [1]}
                 ).analysis.network_flags() == ""


@pytest.mark.parametrize("network, words", [
    ({"nccl_tests": ["nowhere.out"]}, "analysis.network.nccl_tests[0]: 'nowhere.out' does "
                                      "not exist"),
    ({"nccl_tests": [str(ROOT / "README.md")]}, "holds no nccl-tests table"),
    ({"between_nodes": {"latency_us": 5, "bus_bandwidth_gbs": 25}, "nccl_tests": [str(NCCL)]},
     "measured the level between nodes, which analysis.network.between_nodes gives too"),
    ({"within_node": {"latency_us": 5}}, "bus_bandwidth_gbs")])
def test_a_network_that_cannot_be_used_is_refused_at_planning_in_one_line(
        tmp_path, network, words):
    with pytest.raises(PlanError) as info:
        study(tmp_path, sweep={"models": ["SimpleCNN"], "gpus": [1]},
              analysis={"network": network})
    assert words in str(info.value) and "\n" not in str(info.value)


def test_an_outside_log_labelled_as_a_series_of_the_study_is_refused(tmp_path):
    """A ResNet50V2 log labelled SimpleCNN was pooled into the sweep's SimpleCNN series: one
    row, repeats 2, a 36.5 s "epoch" averaged from 2 s and 45 s (issue 78, 2)."""
    log = ROOT / "tests" / "data" / "reference-study" / "ResNet50_1gpu.out"
    with pytest.raises(PlanError) as info:
        study(tmp_path, sweep={"models": ["SimpleCNN"], "gpus": [1]}, external_runs=[
            {"log": str(log), "model": "ResNet50V2", "gpus": 1, "global_batch": 256,
             "label": "SimpleCNN"}])
    assert ("external_runs[0]: label 'SimpleCNN' is a series this study trains"
            in str(info.value))


def test_no_skipped_epoch_with_the_window_on_is_refused_at_planning(tmp_path):
    """skip_epochs 0 let the traced epoch, profiler start and stop included, into
    epoch_time_s silently (issue 78, 6); with the window off, or with no training of
    dlscale's own, it is a study like any."""
    with pytest.raises(PlanError, match="analysis.skip_epochs 0 with analysis.breakdown 5: "
                                        "the first epoch holds the profiled window"):
        study(tmp_path, sweep={"models": ["SimpleCNN"], "gpus": [1]},
              analysis={"skip_epochs": 0})
    study(tmp_path, sweep={"models": ["SimpleCNN"], "gpus": [1]},
          analysis={"skip_epochs": 0, "breakdown": 0})


def test_a_torch_point_runs_one_process_per_gpu_with_the_pytorch_environments_python(
        tmp_path):
    """backend torch: strategy ddp by default, one task per GPU (as Horovod's ranks), the
    point's python the PyTorch environment's (torch.python), its flags name the backend."""
    torch_python(tmp_path)
    s = study(tmp_path, sweep={"models": ["SimpleCNN", "resnet18"], "gpus": [1, 2]},
              training={"device": "cpu", "keras": 3, "backend": "torch"})
    p = s.points["resnet18/gpus2/rep1"]
    assert (p.strategy, p.tasks, p.tasks_per_node, p.tasks_per_gpu) == ("ddp", 2, 2, 1)
    assert s.python(p) == str(tmp_path / ".venv-torch" / "bin" / "python")
    flags = shlex.split(s.train_flags(p))
    assert flags[flags.index("--backend") + 1] == "torch"
    assert flags[flags.index("--strategy") + 1] == "ddp"
    assert s.python(s.points["SimpleCNN/gpus1/rep1"]) == str(
        tmp_path / ".venv-torch" / "bin" / "python")


@pytest.mark.parametrize(("training", "sweep", "said"), [
    ({"keras": 2, "backend": "torch"}, {},
     "backend torch runs Keras 3 only: set training.keras (or sweep.keras) to 3"),
    ({"keras": 3, "backend": "jax"}, {"strategy": ["ddp"]},
     "strategy ddp is PyTorch's DistributedDataParallel: it needs keras 3 and backend torch"),
    ({"keras": 3, "backend": "torch"}, {"strategy": ["mirrored"]},
     "strategy mirrored is not PyTorch's: backend torch trains with DistributedDataParallel"),
    ({"keras": 3, "backend": "tensorflow"}, {"models": ["resnet50"]},
     "model resnet50 is torchvision's: it trains on backend torch only")])
def test_what_cannot_train_on_torch_is_refused_at_planning_with_the_reason(
        tmp_path, training, sweep, said):
    with pytest.raises(PlanError, match=re.escape(said)):
        study(tmp_path, sweep={"models": ["SimpleCNN"], "gpus": [1], **sweep},
              training={"device": "cpu", **training})


def test_a_backend_sweep_leaves_torchvisions_models_to_its_torch_series(tmp_path):
    torch_python(tmp_path)
    s = study(tmp_path, sweep={"models": ["SimpleCNN", "mobilenet_v2"], "gpus": [1],
                               "backend": ["jax", "torch"]},
              training={"device": "cpu", "keras": 3})
    assert sorted(s.points) == ["SimpleCNN/jax/gpus1/rep1", "SimpleCNN/torch/gpus1/rep1",
                                "mobilenet_v2/torch/gpus1/rep1"]
    assert any("model mobilenet_v2 is torchvision's" in n for n in s.notes())


def test_torch_points_without_the_pytorch_environment_are_refused_at_planning(tmp_path):
    with pytest.raises(PlanError, match=re.escape(
            f"backend torch points run with torch.python {tmp_path}/.venv-torch/bin/python, "
            "which is not there: `make setup-torch` builds it (or set torch.python to "
            "PyTorch's python)")):
        study(tmp_path, sweep={"models": ["SimpleCNN"], "gpus": [1]},
              training={"device": "cpu", "keras": 3, "backend": "torch"})
    # a site's modules or container may hold it: not judged
    study(tmp_path, sweep={"models": ["SimpleCNN"], "gpus": [1]},
          training={"device": "cpu", "keras": 3, "backend": "torch"},
          software={"modules": ["pytorch/2.14"]})


def test_a_torch_python_without_torch_is_refused_at_planning(tmp_path):
    """torch.python naming a python that has no torch (the main .venv's) passed planning,
    and every point failed at its import: one line at planning, naming the value and
    what was expected; so does one that cannot run."""
    python = torch_python(tmp_path, torch=False)
    torch = {"device": "cpu", "keras": 3, "backend": "torch"}
    with pytest.raises(PlanError, match=re.escape(
            f"backend torch points run with torch.python {python}, which has no torch "
            "(import torch fails): expected a python that imports torch; `make setup-torch` "
            "builds it")) as refused:
        study(tmp_path, sweep={"models": ["SimpleCNN"], "gpus": [1]}, training=torch)
    assert "\n" not in str(refused.value)
    python.write_text("not a program")
    with pytest.raises(PlanError, match=re.escape(
            f"torch.python {python}, which cannot be run (")):
        study(tmp_path, sweep={"models": ["SimpleCNN"], "gpus": [1]}, training=torch)
