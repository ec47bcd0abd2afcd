"""Dataset preparation through `snakemake --profile profiles/local`, as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FASHION, ROOT, needs_fashion, run_snakemake, write_config

from dlscale.data.sources import md5sum

pytestmark = pytest.mark.workflow
PROFILE = ["--profile", str(ROOT / "profiles" / "local")]


def _config(tmp_path: Path, data: str) -> Path:
    return write_config(tmp_path / "config.yaml",
                        f"data:\n{data}\nsweep: {{models: [SimpleCNN]}}\n")


def test_local_archive_with_its_md5_gives_a_manifest_matching_the_archive(tmp_path, cifar_python):
    config = _config(tmp_path, f"  source: {cifar_python}\n  md5: '{md5sum(cifar_python)}'\n"
                               "  image_size: 32\n  shards: 2")
    run_snakemake(tmp_path, *PROFILE, f"--configfile={config}",
                  "results/data/cifar10-32px/manifest.json")
    manifest = json.loads((tmp_path / "results/data/cifar10-32px/manifest.json").read_text())
    assert manifest["source"]["md5_verified"] is True
    assert {s: v["count"] for s, v in manifest["splits"].items()} == {"train": 100, "test": 40}
    assert len(list((tmp_path / "results/data/cifar10-32px").glob("*.tfrecord"))) == 4
    assert (tmp_path / "logs/prepare_dataset/cifar10-32px.log").exists()


def test_checksum_mismatch_fails_the_rule_and_leaves_no_manifest(tmp_path, cifar_binary):
    config = _config(tmp_path, f"  source: {cifar_binary}\n  md5: '{'0' * 32}'\n  image_size: 32")
    proc = run_snakemake(tmp_path, *PROFILE, f"--configfile={config}",
                         "results/data/cifar10-32px/manifest.json", check=False)
    assert proc.returncode != 0
    log = (tmp_path / "logs/prepare_dataset/cifar10-32px.log").read_text()
    assert f"checksum mismatch for {cifar_binary}" in log
    assert not (tmp_path / "results/data/cifar10-32px/manifest.json").exists()


def test_a_source_that_does_not_exist_fails_before_any_job(tmp_path):
    config = _config(tmp_path, "  source: /no/such/cifar.tar.gz")
    proc = run_snakemake(tmp_path, *PROFILE, "-n", f"--configfile={config}", check=False)
    assert proc.returncode != 0
    assert "data.source '/no/such/cifar.tar.gz' does not exist" in proc.stdout
    # at planning, as a WorkflowError's one line: not an InputFunctionException with a
    # traceback when the DAG is built
    assert "InputFunctionException" not in proc.stdout and "Traceback" not in proc.stdout
    assert not (tmp_path / "results").exists()


def test_an_unquoted_numeric_md5_is_explained(tmp_path, cifar_python):
    config = _config(tmp_path, f"  source: {cifar_python}\n  md5: {'0' * 32}")
    proc = run_snakemake(tmp_path, "-n", f"--configfile={config}", check=False)
    assert proc.returncode != 0
    assert "data.md5 was read as the number 0: put the checksum in quotes" in proc.stdout


def test_a_download_with_the_wrong_checksum_is_not_kept(tmp_path, cifar_python):
    config = _config(tmp_path, f"  source: file://{cifar_python}\n  md5: '{'1' * 32}'\n"
                               "  image_size: 32")
    proc = run_snakemake(tmp_path, *PROFILE, f"--configfile={config}",
                         "results/data/cifar10-32px/manifest.json", check=False)
    assert proc.returncode != 0
    downloads = tmp_path / "resources/downloads/cifar10"
    assert not (downloads / cifar_python.name).exists()
    assert not list(downloads.glob(".*"))  # no temporary file left behind
    log = (tmp_path / f"logs/download_dataset/cifar10/{cifar_python.name}.log").read_text()
    assert "checksum mismatch" in log


@needs_fashion
def test_real_fashion_mnist_from_debian(tmp_path):
    config = write_config(tmp_path / "config.yaml",
                          "data: {dataset: fashion_mnist, image_size: 32, shards: 4}\n"
                          "sweep: {models: [SimpleCNN]}\n")
    run_snakemake(tmp_path, *PROFILE, f"--configfile={config}",
                  "results/data/fashion_mnist-32px/manifest.json")
    manifest = json.loads((tmp_path / "results/data/fashion_mnist-32px/manifest.json").read_text())
    assert manifest["source"]["path"] == str(FASHION)
    assert manifest["splits"]["train"]["count"] == 60000
    assert manifest["splits"]["test"]["count"] == 10000
    # Fashion-MNIST is balanced: 6,000 training and 1,000 test images per class
    assert manifest["splits"]["train"]["per_class"] == [6000] * 10
    assert manifest["splits"]["test"]["per_class"] == [1000] * 10
    assert manifest["classes"][9] == "Ankle boot"
    assert manifest["image_shape"] == [32, 32, 3]
