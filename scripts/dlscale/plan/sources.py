"""Where a study's data comes from, as planning sees it: each dataset's source (the path
prepare_data.py reads, the md5 it checks, the downloads that must happen first), the
shards' image size and folder, your image folder's listing (the input that prepares it
again when it changes), and what the data rules ask by wildcard value. `StudyData` is
the part of `Study` (dlscale.plan.study) that answers them, from its `data` section.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

from dlscale.core.contract import DATA, DOWNLOADS, MANIFEST
from dlscale.core.errors import PlanError
from dlscale.core.files import write_json_atomic
from dlscale.data.datasets import DATASETS, FOLDER, find_cached

LISTING_SUFFIX = ".listing.json"  # beside results/data/folder-NNpx/: record_listing
URL_FILE_NAME = re.compile(r"[A-Za-z0-9._+-]+")


@dataclass(frozen=True)
class Source:
    """Where a dataset comes from: the path prepare_data.py reads, the md5 it checks,
    and the downloads (target -> (url, md5)) that must happen first."""
    dataset: str
    path: str
    md5: str | None = None
    downloads: dict[str, tuple[str, str | None]] = field(default_factory=dict)

    def prepare_flags(self, data: dict, size: int | str) -> str:
        flags = [f"--dataset {self.dataset}", f"--source {shlex.quote(self.path)}",
                 f"--image-size {size}", f"--shards {data['shards']}"]
        if self.md5:
            flags.append(f"--md5 {shlex.quote(self.md5)}")
        if self.dataset == data["dataset"]:
            for key in ("limit_train", "limit_test"):
                if data[key]:
                    flags.append(f"--{key.replace('_', '-')} {data[key]}")
            if self.dataset == FOLDER:
                flags.append(f"--test-fraction {data['test_fraction']}")
        return " ".join(flags)


def resolve_source(data: dict, dataset: str) -> Source:
    """The configured source for the configured dataset ('auto' for any other)."""
    spec = DATASETS[dataset]
    configured = dataset == data["dataset"]
    source = data["source"] if configured else "auto"
    md5 = data["md5"] if configured else None
    if dataset == FOLDER:  # your own images: a folder here (listed by sweep.check_batches)
        return Source(dataset, str(Path(source).expanduser()))
    if source == "auto":
        cached = find_cached(spec)
        if cached is not None:
            return Source(dataset, str(cached))
        targets = {f"{DOWNLOADS}/{dataset}/{f.name}": (f.url, f.md5) for f in spec.files}
        path = next(iter(targets)) if len(targets) == 1 else f"{DOWNLOADS}/{dataset}"
        return Source(dataset, path, None, targets)
    if "://" in source:
        name = PurePosixPath(urlparse(source).path).name
        if not URL_FILE_NAME.fullmatch(name):
            raise PlanError(f"data.source '{source}': the file name '{name}' may hold only "
                            "letters, digits and . _ + - (it names the downloaded file)")
        official = {f.name: f.md5 for f in spec.files}
        target = f"{DOWNLOADS}/{dataset}/{name}"
        return Source(dataset, target, None, {target: (source, md5 or official.get(name))})
    path = Path(source).expanduser()
    if not path.exists():
        raise PlanError(f"data.source '{source}' does not exist: expected 'auto', an URL, or a "
                        f"local {dataset} archive or folder")
    if md5 and not path.is_file():
        raise PlanError(f"data.md5 is set but data.source '{source}' is a folder: a checksum "
                        "applies to an archive file (leave md5 null for a folder)")
    return Source(dataset, str(path), md5)


class StudyData:
    """The data side of a Study: what it reads of `self.data` (the config's data section),
    `self.folder` (your image folder's listing, or None) and `self.data_dir`, and the
    sources it resolved, each once (`self._sources`)."""

    def shard_size(self) -> int:
        """The shards' image size: data.image_size when preparation resizes, the dataset's
        own size when the model does (data.resize: on_device)."""
        if self.data["resize"] == "on_device" and self.data["dataset"] != FOLDER:
            # a folder's images differ in size: preparation brings them to one
            return DATASETS[self.data["dataset"]].native_shape[0]
        return self.data["image_size"]

    def source(self, dataset: str) -> Source:
        """Resolved once per dataset (it looks at the file system)."""
        if dataset not in self._sources:
            self._sources[dataset] = resolve_source(self.data, dataset)
        return self._sources[dataset]

    def listing_file(self, size: int | str) -> str:
        """The rule input that stands for an image folder's content (see record_listing)."""
        return f"{DATA}/{FOLDER}-{size}px{LISTING_SUFFIX}"

    def record_listing(self) -> str | None:
        """Write what the image folder holds (a digest of every image's path and bytes,
        imagefolder.content_digest) to listing_file, only when it changed: the data is
        prepared again when an image is added, deleted or edited, not when one is touched.
        A note names what changed after a preparation; a job's planning writes nothing."""
        if self.folder is None:
            return None
        from dlscale.data.imagefolder import content_digest

        path = Path(self.listing_file(self.shard_size()))
        source = Path(self.data["source"]).expanduser().resolve()
        digest, changes = content_digest(source, self.folder.stats,
                                         path.with_name(f".{path.stem}.stats.json"))
        listing = {"source": str(source), "images": self.folder.available, "digest": digest}
        try:
            before = json.loads(path.read_text())
        except (OSError, ValueError):
            before = None
        if before == listing:
            return None
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, listing)
        if before is None or not (Path(self.data_dir) / MANIFEST).exists():
            return None
        said = "; ".join(f"{len(v)} {k} (e.g. {v[0]})" for k, v in changes.items() if v)
        return (f"note: the images in {listing['source']} changed since they were listed "
                f"({said or 'the listing was of another form'}): the data is prepared again")

    def download(self, dataset: str, filename: str) -> tuple[str, str | None]:
        target = f"{DOWNLOADS}/{dataset}/{filename}"
        downloads = self.source(dataset).downloads
        if target not in downloads:
            raise PlanError(f"{target} is not a download of the configured data source")
        return downloads[target]

    # --- what the rules ask, by wildcard value (rules/common.smk: by_wildcards) -----------
    def download_url(self, dataset: str, filename: str) -> str:
        return self.download(dataset, filename)[0]

    def download_md5_flag(self, dataset: str, filename: str) -> str:
        md5 = self.download(dataset, filename)[1]
        return f"--md5 {md5}" if md5 else ""  # checked hex (schema) or official

    def prepare_inputs(self, dataset: str, size: str) -> list[str]:
        if dataset == FOLDER:  # what the folder holds, not its top folder's mtime
            return [self.listing_file(size)]
        source = self.source(dataset)
        return list(source.downloads) or [source.path]

    def prepare_flags_of(self, dataset: str, size: str) -> str:
        return self.source(dataset).prepare_flags(self.data, size)
