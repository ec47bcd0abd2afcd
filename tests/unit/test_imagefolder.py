"""dlscale/data/imagefolder.py: how a folder of your own images is listed (never decoded here)."""

from __future__ import annotations

import collections
import os
import re

import pytest

from dlscale.data.datasets import DatasetError
from dlscale.data.imagefolder import scan


def tree(root, names) -> str:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(name.encode())
    return str(root)


def per_class(files) -> dict:
    return dict(sorted(collections.Counter(label for _, label in files).items()))


def test_limits_keep_a_seeded_subset_of_every_class(tmp_path):
    source = tree(tmp_path, [f"{c}/{i:03d}.png" for c in ("cat", "dog", "frog")
                             for i in range(40)])
    listing = scan(source, 0.25, {"train": 10, "test": 6})
    assert per_class(listing.files["train"]) == {0: 4, 1: 3, 2: 3}  # not the first class
    assert per_class(listing.files["test"]) == {0: 2, 1: 2, 2: 2}
    assert listing.available == {"train": 90, "test": 30}
    assert scan(source, 0.25, {"train": 10, "test": 6}).files == listing.files  # seeded
    train = {f for f, _ in listing.files["train"]}
    assert not train & {f for f, _ in listing.files["test"]}
    assert train <= {f for f, _ in scan(source, 0.25).files["train"]}  # from the train split
    # the training files in a seeded shuffle: every shard gets every class
    assert len({label for _, label in scan(source, 0.25).files["train"][:15]}) == 3


@pytest.mark.parametrize("limits, words", [
    ({"test": 2}, "data.limit_test is 2, which leaves class 'frog' without a test image: "
                  "expected at least 3 (one per class)"),
    ({"train": 1}, "data.limit_train is 1, which leaves class 'dog' without a training image"),
    ({"train": 500}, "data.limit_train is 500 but the folder has 30 train images"),
])
def test_a_limit_that_leaves_a_class_out_or_exceeds_the_folder_is_named(tmp_path, limits,
                                                                         words):
    source = tree(tmp_path, [f"{c}/{i}.png" for c in ("cat", "dog", "frog") for i in range(12)])
    with pytest.raises(DatasetError, match=re.escape(words)):
        scan(source, 0.2, limits)


@pytest.mark.parametrize("test_folder", ["val", "validation"])
def test_imagenets_train_and_val_folders_are_the_split(tmp_path, test_folder):
    source = tree(tmp_path, [f"{split}/{c}/{i}.JPEG" for split in ("train", test_folder)
                             for c in ("n01440764", "n01443537") for i in range(3)])
    listing = scan(source, 0.2)
    assert listing.classes == ("n01440764", "n01443537")  # not ("train", "val")
    assert listing.available == {"train": 6, "test": 6}
    assert {f.split(os.sep)[-3] for f, _ in listing.files["test"]} == {test_folder}
    assert listing.notes == [f"data.source {source}: train/ is the training split and "
                             f"{test_folder}/ the test split"]


def test_the_digest_follows_every_image_and_nothing_else(tmp_path):
    source = tree(tmp_path, [f"{c}/{i}.png" for c in ("cat", "dog") for i in range(5)])
    first = scan(source, 0.2).digest
    (tmp_path / "cat" / "notes.txt").write_text("not an image")
    (tmp_path / "README.md").write_text("not an image")
    assert scan(source, 0.2).digest == first
    image = tmp_path / "dog" / "3.png"
    image.write_bytes(b"edited, same name")
    edited = scan(source, 0.2).digest
    assert edited != first
    image.unlink()
    assert scan(source, 0.2).digest not in (first, edited)


def test_class_names_equal_after_unicode_normalisation_are_one_class(tmp_path):
    """train/ written on Linux (NFC), val/ copied from macOS (NFD): one class 'café'. Names
    that do differ are shown escaped, so the difference can be seen."""
    nfc, nfd = "caf\u00e9", "cafe\u0301"
    source = tree(tmp_path / "a", [f"train/{nfc}/{i}.png" for i in range(2)]
                  + [f"val/{nfd}/{i}.png" for i in range(2)]
                  + [f"{split}/dog/{i}.png" for split in ("train", "val") for i in range(2)])
    listing = scan(source, 0.2)
    assert listing.classes == (nfc, "dog")
    assert per_class(listing.files["test"]) == {0: 2, 1: 2}
    assert all(os.path.exists(f) for f, _ in listing.files["test"])
    other = tree(tmp_path / "b", [f"train/{nfc}/0.png", "train/dog/0.png",
                                  "val/cafe/0.png", "val/dog/0.png"])
    with pytest.raises(DatasetError) as error:
        scan(other, 0.2)
    assert "has classes ['caf\\xe9', 'dog'] but val/ has ['cafe', 'dog']" in str(error.value)


def test_a_symbolic_link_loop_is_one_line_naming_the_link(tmp_path):
    source = tree(tmp_path, [f"{c}/{i}.png" for c in ("cat", "dog") for i in range(3)])
    os.symlink(tmp_path / "cat", tmp_path / "cat" / "again")
    with pytest.raises(DatasetError) as error:
        scan(source, 0.2)
    message = str(error.value)
    assert message.startswith(f"{tmp_path / 'cat' / 'again'} is a symbolic link to "
                              f"{os.path.realpath(tmp_path / 'cat')}") and "\n" not in message
    os.remove(tmp_path / "cat" / "again")
    outside = tree(tmp_path.parent / f"{tmp_path.name}-more", ["x.png", "y.png"])
    os.symlink(outside, tmp_path / "dog" / "more")  # a folder linked in once: followed
    assert scan(source, 0.5).available == {"train": 4, "test": 4}


def test_images_outside_any_class_folder_are_left_out_with_a_note(tmp_path):
    source = tree(tmp_path, [f"{c}/{i}.png" for c in ("cat", "dog") for i in range(3)]
                  + ["loose.jpg", "other.PNG", "README.txt"])
    listing = scan(source, 0.2)
    assert listing.available == {"train": 4, "test": 2}
    assert listing.notes == [f"data.source: 2 image(s) directly in {tmp_path} (e.g. loose.jpg) "
                             "are in no class folder and are left out"]


@pytest.mark.parametrize("links", [
    [("a.png", "b.png"), ("b.png", "a.png")],  # a loop of file links
    [("gone.png", "nowhere/gone.png")]])       # a link to nothing
def test_a_file_link_that_leads_nowhere_is_one_line_naming_it(tmp_path, links):
    """A loop of file links stopped planning with a raw OSError and its stack, and a
    dangling link was skipped without a word (issue 78, 10)."""
    source = tree(tmp_path, [f"{c}/{i}.png" for c in ("cat", "dog") for i in range(3)])
    for name, target in links:
        os.symlink(tmp_path / "cat" / target, tmp_path / "cat" / name)
    with pytest.raises(DatasetError) as error:
        scan(source, 0.2)
    message = str(error.value)
    assert any(message.startswith(f"{tmp_path / 'cat' / name} is a symbolic link that "
                                  "leads nowhere") for name, _ in links)
    assert "\n" not in message
