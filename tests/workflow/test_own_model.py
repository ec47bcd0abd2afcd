"""Your own model, images and training script through `snakemake --profile profiles/local`."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from conftest import ROOT, TABLES, run_snakemake, write_config

pytestmark = pytest.mark.workflow
PROFILE = ["--profile", str(ROOT / "profiles" / "local")]


def test_your_own_model_is_a_series_with_tables_and_an_edit_trains_it_again(tmp_path):
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    config = f"--configfile={ROOT / 'tests' / 'configs' / 'own-model.yaml'}"
    run_snakemake(tmp_path, *PROFILE, config)
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv")
    assert sorted(zip(runs["series"], runs["gpus"], runs["status"])) == [
        ("SmallResNet", 1, "completed"), ("SmallResNet", 2, "completed")]
    run = json.loads((tmp_path / "results/runs/SmallResNet/gpus2/rep1/run.json").read_text())
    assert (run["model"], run["model_from"], run["replicas"]) == (
        "SmallResNet", "examples/my_model.py:small_resnet", 2)
    scaling = pd.read_csv(tmp_path / "results/tables/scaling.csv")
    assert list(scaling["gpus"]) == [1, 2] and scaling["speedup"].notna().all()
    assert (tmp_path / "results/plots/speedup.png").exists()

    # the model file is an input of its points: an edit plans both again, nothing else
    model = tmp_path / "examples/my_model.py"
    model.write_text(model.read_text().replace("width=16", "width=8"))
    dry = run_snakemake(tmp_path, *PROFILE, config, "-n")
    stats = dry.stdout.split("Job stats:")[1].split("total")[0]
    assert [line.split() for line in stats.splitlines() if line.startswith("train")] == [
        ["train", "2"]]


def test_your_own_script_is_scaled_and_a_failing_command_is_a_failed_row(tmp_path):
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    config = f"--configfile={ROOT / 'tests' / 'configs' / 'own-command.yaml'}"
    first = run_snakemake(tmp_path, *PROFILE, config, check=False)
    assert first.returncode != 0  # check_points: broken's points failed
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv")
    assert sorted(zip(runs["series"], runs["gpus"], runs["status"])) == [
        ("broken", 1, "failed"), ("broken", 2, "failed"),
        ("my_train", 1, "completed"), ("my_train", 2, "completed")]
    run = json.loads((tmp_path / "results/runs/my_train/gpus2/rep1/run.json").read_text())
    assert (run["strategy"], run["global_batch"], run["images_per_epoch"]) == (
        "command", 32, 128)  # 4 steps printed by Keras x the global batch
    assert "--gpus 2 --batch-size 16 --epochs 2 --lr 0.02" in run["command"]
    epochs = (tmp_path / "results/runs/my_train/gpus2/rep1/epochs.jsonl").read_text()
    assert [json.loads(line)["epoch"] for line in epochs.splitlines()] == [1, 2]
    failed = pd.read_csv(tmp_path / "results/tables/failed.csv")
    for problem in failed.loc[failed["series"] == "broken", "problem"]:
        assert "the command exited with status 3; its last lines:" in problem
        assert "cannot open the data" in problem  # what the command said on stderr
    scaling = pd.read_csv(tmp_path / "results/tables/scaling.csv")
    mine = scaling[scaling["series"] == "my_train"]
    assert list(mine["gpus"]) == [1, 2] and mine["speedup"].notna().all()

    dry = run_snakemake(tmp_path, *PROFILE, config, "-n")  # only the failed points again
    stats = dry.stdout.split("Job stats:")[1].split("total")[0]
    assert [line.split() for line in stats.splitlines() if line.startswith("train")] == [
        ["train", "2"]]


def folder_config(path, source, **data) -> str:
    extra = "".join(f", {k}: {v}" for k, v in data.items())
    text = f"""
data: {{dataset: folder, source: "{source}", image_size: 32, shards: 2{extra}}}
sweep: {{models: [SimpleCNN], gpus: [1, 2]}}
training: {{epochs: 2, batch_per_gpu: 8, device: cpu}}
resources: {{cpus_per_gpu: 1, mem_mb_per_gpu: 1000, runtime_min: 10}}
analysis: {{accuracy_tolerance: 1.0}}
"""
    return f"--configfile={write_config(path, text)}"


def test_your_own_images_are_prepared_once_and_scaled(tmp_path):
    import image_folder

    source = image_folder.write_folder(tmp_path / "my images")  # PNG, JPEG, BMP; sizes vary
    run_snakemake(tmp_path, *PROFILE, folder_config(tmp_path / "c.yaml", source), TABLES)
    manifest = json.loads((tmp_path / "results/data/folder-32px/manifest.json").read_text())
    assert manifest["classes"] == ["cat", "dog", "frog"] and manifest["image_shape"] == [
        32, 32, 3]
    assert {s: v["count"] for s, v in manifest["splits"].items()} == {"train": 48, "test": 12}
    assert manifest["splits"]["test"]["per_class"] == [4, 4, 4]  # test_fraction 0.2
    assert len(manifest["source"]["files_md5"]) == 60  # README.txt is not an image
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv")
    assert sorted(zip(runs["gpus"], runs["status"])) == [(1, "completed"), (2, "completed")]
    assert (runs["images_per_epoch"] == 48).all()


def test_an_image_that_does_not_decode_is_named_and_nothing_is_written(tmp_path):
    import image_folder

    source = image_folder.write_folder(tmp_path / "imgs", per_class=12, split=True)
    bad = source / "train" / "dog" / "scan_0042.jpg"
    bad.write_bytes(b"<html>404 Not Found</html>")  # a failed download saved as .jpg
    proc = run_snakemake(tmp_path, *PROFILE, folder_config(tmp_path / "c.yaml", source),
                         check=False)
    assert proc.returncode != 0 and "Error in rule prepare_dataset" in proc.stdout, proc.stdout
    log = (tmp_path / "logs/prepare_dataset/folder-32px.log").read_text()
    [line] = [x for x in log.splitlines() if x.startswith("error:")]
    # the decoder's own reason, not TensorFlow's wrapping of it cut at 160 characters
    assert line == (f"error: {bad}: cannot be decoded as an image (Unknown image file "
                    "format. One of JPEG, JPEG XL, PNG, GIF, BMP, WebP required.)")
    # no shard, manifest or staging folder: only the listing planning wrote (and the
    # images' stats and digests it keeps beside it, to read only those that change)
    assert sorted(p.name for p in (tmp_path / "results/data").rglob("*")) == [
        ".folder-32px.listing.stats.json", "folder-32px.listing.json"]


def planned_jobs(proc) -> dict:
    """{rule: count} of a dry run's job stats."""
    if "Job stats:" not in proc.stdout:
        return {}
    stats = proc.stdout.split("Job stats:")[1].split("total")[0]
    return {w[0]: int(w[1]) for w in map(str.split, stats.splitlines())
            if len(w) == 2 and w[1].isdigit()}


def test_what_you_change_in_your_images_is_what_is_prepared(tmp_path):
    """ImageNet's train/ + val/ layout with limits, prepared through the local profile; an
    image edited, added or deleted in a class folder prepares it again, nothing else does."""
    import image_folder

    source = image_folder.write_folder(tmp_path / "imgs", per_class=16, split=True)
    (source / "test").rename(source / "val")
    config = folder_config(tmp_path / "c.yaml", source, limit_train=18)
    manifest_path = tmp_path / "results/data/folder-32px/manifest.json"
    target = str(manifest_path.relative_to(tmp_path))
    first = run_snakemake(tmp_path, *PROFILE, config, target)
    assert "train/ is the training split and val/ the test split" in first.stdout
    manifest = json.loads(manifest_path.read_text())
    assert manifest["classes"] == ["cat", "dog", "frog"]  # not ["train", "val"]
    assert [manifest["splits"][s]["per_class"] for s in ("train", "test")] == [
        [6, 6, 6], [4, 4, 4]]  # balanced, not the first class's twelve
    assert all(name.startswith(("train/", "val/")) for name in manifest["source"]["files_md5"])

    (source / "train/dog/notes.txt").write_text("not an image")  # nothing to prepare for
    (source / "LICENSE").write_text("CC-BY")
    assert planned_jobs(run_snakemake(tmp_path, *PROFILE, config, target, "-n")) == {}

    edited = source / "val/cat/cat_0000.png"
    edited.write_bytes((source / "train/cat/cat_0003.PNG").read_bytes())  # same name, new pixels
    dry = run_snakemake(tmp_path, *PROFILE, config, target, "-n")
    assert planned_jobs(dry) == {"prepare_dataset": 1}
    assert "changed since they were listed" in dry.stdout
    run_snakemake(tmp_path, *PROFILE, config, target)
    assert json.loads(manifest_path.read_text())["source"]["files_md5"] != manifest[
        "source"]["files_md5"]
    assert planned_jobs(run_snakemake(tmp_path, *PROFILE, config, target, "-n")) == {}

    (source / "train/frog/frog_0001.JPG").unlink()
    assert planned_jobs(run_snakemake(tmp_path, *PROFILE, config, target, "-n")) == {
        "prepare_dataset": 1}


def test_your_package_model_is_read_not_run_at_planning_and_its_edit_trains_it_again(
        tmp_path):
    """A package's builder re-exported by its __init__ (which does work when imported), a
    keras.Sequential without Input, keras.applications' parameter names, a path with a
    space: planned without running any of it, trained, and retrained when edited."""
    import image_folder

    ran = "import pathlib\npathlib.Path(__file__).with_name('RAN').write_text('imported')\n"
    files = {
        "mynets/__init__.py": ran + "from .net import build\n",
        "mynets/net.py": ("from tensorflow import keras\n\n\n"
                          "def build(input_shape=None, classes=1000):\n"
                          "    return keras.Sequential([keras.layers.Conv2D(8, 3),\n"
                          "                             keras.layers.GlobalAveragePooling2D(),\n"
                          "                             keras.layers.Dense(classes)])\n"),
        "my nets/flat.py": ("from tensorflow import keras\n\n\n"
                            "def build(shape, n):\n"
                            "    return keras.Sequential([keras.layers.Flatten(),\n"
                            "                             keras.layers.Dense(n)])\n"),
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    source = image_folder.write_folder(tmp_path / "imgs", per_class=8)
    config = "--configfile=" + str(write_config(tmp_path / "c.yaml", f"""
data: {{dataset: folder, source: "{source}", image_size: 32, shards: 1}}
sweep:
  models: [{{from: "mynets:build", label: Pkg}}, {{from: "my nets/flat.py:build", label: Flat}}]
  gpus: [1]
training: {{epochs: 1, batch_per_gpu: 8, device: cpu}}
resources: {{cpus_per_gpu: 1, mem_mb_per_gpu: 1000, runtime_min: 10}}
analysis: {{accuracy_tolerance: 1.0}}
"""))
    dry = run_snakemake(tmp_path, *PROFILE, config, "-n")
    assert planned_jobs(dry)["train"] == 2
    assert not (tmp_path / "mynets" / "RAN").exists()  # planning ran none of the package
    run_snakemake(tmp_path, *PROFILE, config, TABLES)
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv")
    assert sorted(zip(runs["series"], runs["status"])) == [
        ("Flat", "completed"), ("Pkg", "completed")]

    net = tmp_path / "mynets/net.py"
    net.write_text(net.read_text().replace("Conv2D(8, 3)", "Conv2D(4, 3)"))
    dry = run_snakemake(tmp_path, *PROFILE, config, "-n")
    assert planned_jobs(dry)["train"] == 1 and "Pkg/gpus1/rep1" in dry.stdout
