"""Project hygiene that a reviewer would otherwise check by hand."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

# test and lint tools: in requirements.txt, not in the rules' env
DEV_ONLY = {"pytest", "pytest-xdist", "execnet", "snakefmt", "ruff"}


def pins(lines) -> dict[str, str]:
    found = {}
    for line in lines:
        match = re.match(r"^\s*([A-Za-z0-9_.\-\[\]]+)==([^\s#]+)", line)
        if match:
            found[match.group(1).lower()] = match.group(2)
    return found


def conda_pip_pins(path: Path) -> dict[str, str]:
    env = yaml.safe_load(path.read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    return pins(pip)


@pytest.mark.parametrize("env, requirements", [("envs/dlscale.yaml", "requirements.txt")])
def test_conda_envs_pin_what_pip_pins(env, requirements):
    wanted = {k: v for k, v in pins((ROOT / requirements).read_text().splitlines()).items()
              if k not in DEV_ONLY}
    assert conda_pip_pins(ROOT / env) == wanted


def test_snakemake_lint_is_clean():
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--lint", "-s",
                           str(ROOT / "Snakefile"), "-d", str(ROOT)],
                          capture_output=True, text=True, timeout=120)
    lints = [line for line in (proc.stdout + proc.stderr).splitlines()
             if line.startswith("Lints for") or line.startswith("    * ")]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]  # a crash is no pass
    assert lints == []


def test_snakefmt_leaves_the_workflow_unchanged():
    snakefmt = Path(sys.executable).with_name("snakefmt")
    if not snakefmt.exists():
        pytest.skip("snakefmt is not installed in this environment")
    proc = subprocess.run([str(snakefmt), "--check", str(ROOT / "Snakefile"),
                           str(ROOT / "rules")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_every_script_with_a_shebang_is_executable_in_git():
    # the README shows `scripts/parse_logs.py ...`: it must run as written from a clone
    listed = subprocess.run(["git", "ls-files", "-s", "scripts"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.splitlines()
    modes = {line.split()[3]: line.split()[0] for line in listed}
    shebang = [p for p in modes if p.endswith(".py")
               and (ROOT / p).read_text().startswith("#!")]
    assert shebang and [p for p in shebang if modes[p] != "100755"] == []


def test_a_non_editable_install_finds_its_schema_and_plans_a_dry_run(tmp_path):
    # the package as pip installs it (no source tree beside it), and a copy of the
    # workflow without scripts/dlscale: planning must use the installed package alone
    site, source = tmp_path / "site", tmp_path / "source"
    # from a copy: setuptools builds in the source tree (build/), which is not ours to litter
    source.mkdir()
    for part in ("pyproject.toml", "requirements.txt", "README.md"):
        shutil.copy(ROOT / part, source / part)
    shutil.copytree(ROOT / "scripts" / "dlscale", source / "scripts" / "dlscale",
                    ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--target", str(site), str(source)],
                   check=True, capture_output=True, timeout=300)
    assert (site / "dlscale" / "core" / "schema.yaml").is_file()
    assert (site / "dlscale" / "core" / "models.csv").is_file()
    flow = tmp_path / "flow"
    flow.mkdir()
    for part in ("Snakefile", "rules", "config", "report", "profiles"):
        source = ROOT / part
        if source.is_dir():
            shutil.copytree(source, flow / part, symlinks=False)
        else:
            shutil.copy(source, flow / part)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-s", str(flow / "Snakefile"),
                           "--directory", str(tmp_path / "work"), "--configfile",
                           str(flow / "config" / "demo.yaml")],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    where = subprocess.run([sys.executable, "-c", "import dlscale; print(dlscale.__file__)"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, check=True)
    assert where.stdout.startswith(str(site))


def test_the_readme_describes_the_demo_as_its_config_runs_it():
    demo = yaml.safe_load((ROOT / "config" / "demo.yaml").read_text())
    train, epochs = demo["data"]["limit_train"], demo["training"]["epochs"]
    steps = train // demo["training"]["batch_per_gpu"] * epochs  # on 1 replica
    readme = (ROOT / "README.md").read_text()
    quick_start = readme.split("## Quick start")[1].split("\n## ")[0]
    words = " ".join(quick_start.split())
    assert f"on {train} images for {epochs} epochs" in words
    assert f"{steps} steps" in words
    assert ", ".join(map(str, demo["sweep"]["gpus"][:-1])) + f" and {demo['sweep']['gpus'][-1]}" \
        " replicas" in words


def test_every_column_of_scaling_csv_and_the_accounted_ones_is_defined_in_the_docs():
    """docs/analysis.md defines each column of scaling.csv (and runs.csv's sacct_*) in
    the first cell of a table row: a column added to the code needs its line there."""
    from dlscale.jobs.slurm import ACCOUNTED
    from dlscale.reporting.analysis import EXTRA_COLUMNS, SCALING_COLUMNS

    prose = (ROOT / "docs" / "analysis.md").read_text().split("## Columns and units")[0]
    rows = [line.split("|")[1] for line in prose.splitlines() if line.startswith("| `")]
    defined = {name for cell in rows for name in re.findall(r"`([a-z_0-9]+)`", cell)}
    missing = [c for c in (*SCALING_COLUMNS, *EXTRA_COLUMNS, *ACCOUNTED) if c not in defined]
    assert missing == []


PACKAGE = ROOT / "scripts" / "dlscale"
# the subpackages, each importing only those after it (and itself): dlscale/__init__.py
LAYERS = ("plan", "reporting", "launch", "train", "measure", "logparse", "data", "jobs",
          "core")


def package_modules() -> dict[str, Path]:
    """{"group.module": path} of every module of the package ("console" at its top), a
    package inside a group by its own name ("logparse.formats")."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if path.name == "__init__.py":
            parts = parts[:-1]
            if len(parts) < 2:  # the package's and its groups' own: nothing in them
                continue
        found[".".join(parts)] = path
    return found


def package_imports() -> dict[str, set[str]]:
    """Each dlscale module's dlscale imports ("group.module"), at any depth in the module:
    lazy ones and those for type checkers only (`if TYPE_CHECKING:`) too."""
    import ast

    modules = package_modules()
    graph = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                parts = node.module.split(".")
                if parts[0] != "dlscale":
                    continue
                inner = ".".join(parts[1:])
                if inner in modules:
                    found.add(inner)
                else:  # from dlscale.group import module, ...
                    found |= {f"{inner}.{a.name}" for a in node.names
                              if f"{inner}.{a.name}" in modules}
                    assert inner in LAYERS or not inner, (name, node.module)
            elif isinstance(node, ast.Import):
                found |= {a.name.split(".", 1)[1] for a in node.names
                          if a.name.startswith("dlscale.")}
        graph[name] = found - {name}
    return graph


def test_the_package_has_no_import_cycle():
    graph = package_imports()
    cycles = []

    def visit(module, trail):
        for imported in sorted(graph.get(module, ())):
            if imported in trail:
                cycles.append(trail[trail.index(imported):] + [imported])
            elif imported not in done:
                visit(imported, trail + [imported])
        done.add(module)

    done: set[str] = set()
    for module in graph:
        visit(module, [module])
    assert cycles == []


def test_the_subpackages_import_only_those_below_them():
    """plan -> reporting -> launch -> train -> measure -> logparse, data, jobs -> core: no arrow
    up, and the shared vocabulary (core) talks to nothing outside (no subprocess, no SLURM)."""
    graph = package_imports()
    assert {name.split(".")[0] for name in graph} == {*LAYERS, "console"}
    up = sorted(f"{name} -> {imported}" for name, imports in graph.items()
                if not name.startswith("console") for imported in imports
                if LAYERS.index(imported.split(".")[0]) < LAYERS.index(name.split(".")[0]))
    assert up == []
    core = [path.name for name, path in package_modules().items()
            if name.startswith("core.") and "subprocess" in path.read_text()]
    assert core == []


def test_a_framework_imports_no_other_framework():
    """Each framework's folder under dlscale/train/frameworks (tensorflow, keras3, torch,
    horovod) imports the run's shared modules, the base and the measuring side, never
    another framework's folder: adding a framework touches its own folder, the strategies'
    registry and a test."""
    graph = package_imports()

    def framework(name: str) -> str | None:
        parts = name.split(".")
        return parts[2] if parts[:2] == ["train", "frameworks"] and len(parts) > 3 else None

    folders = {framework(name) for name in graph} - {None}
    assert folders == {"tensorflow", "keras3", "torch", "horovod"}
    wrong = sorted(f"{name} -> {imported}" for name, imports in graph.items()
                   if framework(name) for imported in imports
                   if framework(imported) not in (None, framework(name)))
    assert wrong == []


def test_a_log_format_imports_no_other_format_and_the_reader_is_four_modules():
    """Each log format (a module, or a package, under dlscale/logparse/formats) imports only
    the shared machinery (logparse.lines, logparse.runs, logparse.templates: a line's
    template and its fields), never another format; the reader and the formats share no
    module beyond those and the reader itself; and the registry lists every format: a new
    format is its module, its line there, its test."""
    from dlscale.logparse import formats

    graph = package_imports()
    shared = ("logparse.lines", "logparse.runs", "logparse.templates")

    def format_of(name: str) -> str:
        return ".".join(name.split(".")[:3])

    inside = [name for name in graph if name.startswith("logparse.formats.")]
    wrong = sorted(f"{name} -> {imported}" for name in inside for imported in graph[name]
                   if format_of(imported) != format_of(name)
                   and imported not in shared)
    assert wrong == []
    used = {imported for name in [*inside, "logparse.reader", "logparse.formats"]
            for imported in graph[name] if imported.startswith("logparse.")
            and not imported.startswith("logparse.formats")}
    assert used | {"logparse.reader"} == {"logparse.reader", *shared}
    registered = {fmt.__name__.removeprefix("dlscale.") for fmt in
                  (*formats.LOG, *formats.STREAM, formats.LAUNCH)}
    assert registered == {format_of(name) for name in inside}


def test_only_dlscale_slurm_calls_slurms_commands():
    """squeue, scontrol, sacct, sbatch and srun are run, and their answers read, in one
    module; the rest ask it."""
    word = re.compile(r"""["'](squeue|scontrol|sacct|sbatch|srun)["']""")
    callers = {path.relative_to(ROOT).as_posix()
               for path in (ROOT / "scripts").rglob("*.py") if word.search(path.read_text())}
    assert callers == {"scripts/dlscale/jobs/slurm.py"}


def test_the_readmes_config_snippets_are_valid_config():
    """Each YAML block of the README, put into the demo's config, passes the schema."""
    from dlscale.core.schema import validate

    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert len(blocks) == 5
    for block in blocks:
        config = yaml.safe_load((ROOT / "config" / "demo.yaml").read_text())
        for key, value in yaml.safe_load(block).items():
            config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) else value
        validate(config)


def test_the_readme_is_a_front_page():
    readme = (ROOT / "README.md").read_text().splitlines()
    assert len(readme) <= 200
    first = "\n".join(readme[:40])
    assert "make demo" in first and "make test" in first
    for link in re.findall(r"\]\((docs/[^)#]+)", "\n".join(readme)):
        assert (ROOT / link).exists(), link


def test_the_benchmarks_are_by_topic_each_opening_with_its_current_figure():
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    headings = re.findall(r"^#+ .*$", text, re.M)
    assert not [h for h in headings if re.search(r"\bissues?\s+\d", h, re.I)]
    topics = re.split(r"^## ", text, flags=re.M)[1:]
    assert len(topics) >= 7
    for topic in topics:
        opening = topic.split("\n\n", 2)[1]
        assert opening.startswith(("**Now", "No GPU")), topic.splitlines()[0]


def test_scripts_are_command_lines_and_modules_have_one_job():
    """scripts/*.py parse flags and call the package (at most 150 lines); no package
    module over 450 lines; rules/common.smk stays glue (at most 130 lines)."""
    sizes = {path.relative_to(ROOT).as_posix(): len(path.read_text().splitlines())
             for path in [*(ROOT / "scripts").glob("*.py"), *PACKAGE.rglob("*.py")]}
    too_long = {name: n for name, n in sizes.items()
                if n > (450 if "/dlscale/" in name else 150)}
    assert too_long == {}
    assert len((ROOT / "rules" / "common.smk").read_text().splitlines()) <= 130


def test_the_column_registry_is_what_scaling_csv_holds_and_what_the_docs_list():
    """dlscale.core.columns declares each column once (name, unit, meaning): scaling.csv is
    built in its order, and docs/analysis.md carries its table as `make docs` writes it."""
    from dlscale.core import columns, columns_docs
    from dlscale.reporting import analysis

    # both paths of analysis.scaling select these, in this order
    assert analysis.SCALING_COLUMNS + analysis.EXTRA_COLUMNS == [c.name for c in columns.SCALING]
    assert set(analysis.MEASURED) < set(analysis.SCALING_COLUMNS + analysis.EXTRA_COLUMNS)
    text = (ROOT / "docs" / "analysis.md").read_text()
    assert text.split(columns_docs.BEGIN)[1].split(columns_docs.END)[0] == columns_docs.render()
    declared = columns.SCALING + columns.RUNS + columns.ACCOUNTED
    assert len({c.name for c in declared}) == len(declared)


def test_every_column_of_runs_csv_is_declared_with_its_unit(tmp_path):
    """runs.csv, as aggregate.py writes it from the published study's log: each column is
    in the registry (scaling.csv's per run, runs.csv's own, the accounting), so in the
    table docs/analysis.md carries. (The demo's test checks a dlscale study's runs.csv.)"""
    import aggregate
    import pandas as pd
    import parse_logs

    from dlscale.core import columns

    study = ROOT / "tests" / "data" / "reference-study"
    out = tmp_path / "epochs.csv"
    assert parse_logs.main([str(study / "ResNet50_1gpu.out"), "--meta", "gpus=1",
                            "--meta", "global_batch=256", "--meta", "images_per_epoch=50000",
                            "--meta", "run=external/study", "--meta", "model=ResNet50V2",
                            "-o", str(out)]) == 0
    assert aggregate.main([str(out), "--out-dir", str(tmp_path / "t")]) == 0

    written = list(pd.read_csv(tmp_path / "t" / "runs.csv", nrows=0).columns)
    declared = {c.name for c in columns.SCALING + columns.RUNS + columns.ACCOUNTED}
    assert [c for c in written if c not in declared] == []


def test_what_a_study_writes_is_not_tracked_and_is_ignored():
    """make demo writes the results history (history.path's default, history.sqlite in the
    working directory): a tracked copy was rewritten by every demo run in a checkout."""
    tracked = subprocess.run(["git", "ls-files", "*.sqlite", "results", "logs"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    assert tracked == []
    ignored = subprocess.run(["git", "check-ignore", "history.sqlite", "results/x", ".whl/x"],
                             cwd=ROOT, capture_output=True, text=True).stdout.split()
    assert ignored == ["history.sqlite", "results/x", ".whl/x"]


def test_every_module_of_the_package_is_named_in_the_developers_guide():
    """docs/development.md, "What is where": one row for each module of the package."""
    text = (ROOT / "docs" / "development.md").read_text()
    table = text.split("| module | its job |", 1)[1].split("\n\n", 1)[0]
    named = set(re.findall(r"`(\w+)`", table))
    modules = {name.split(".")[-1] for name in package_modules()}
    assert sorted(modules - named) == []


def test_no_module_is_imported_under_the_name_of_the_keras_backend_module():
    """`K` is what every Keras reader takes for keras.backend: the Keras choice is
    imported by its own name (dlscale.train.keraschoice)."""
    sources = [*(ROOT / "scripts").rglob("*.py"), *(ROOT / "tests").rglob("*.py"),
               *(ROOT / "bench").rglob("*.py")]
    assert [str(p) for p in sources if re.search(r"\bimport \w+ as K\b", p.read_text())] == []


def test_make_docs_refuses_a_document_that_lost_a_marker_and_writes_nothing(tmp_path):
    from dlscale.core import columns_docs

    doc = tmp_path / "analysis.md"
    text = f"# Analysis\n\n{columns_docs.BEGIN}old table\n\n## After the table\n\nkept\n"
    doc.write_text(text)
    with pytest.raises(SystemExit) as stop:
        columns_docs.write(str(doc))
    assert "lacks <!-- columns: end -->" in str(stop.value) and "\n" not in str(stop.value)
    assert doc.read_text() == text


def test_each_recipe_of_the_developers_guide_cites_files_and_names_that_exist():
    """docs/development.md, "Where to change what": every path a recipe cites exists, and
    every name it cites (`RUNS_CSV`, `simple_cnn` ...) is written in one of the files the
    same recipe cites, so a renamed or moved thing fails here, not in the next engineer's
    hands."""
    text = (ROOT / "docs" / "development.md").read_text()
    section = text.split("## Where to change what", 1)[1].split("\n## ", 1)[0]
    recipes = re.findall(r"\*\*(.+?)\*\*(.+?)(?=\n\*\*|\Z)", section, re.S)
    assert {title for title, _ in recipes} >= {"A log format.", "A column from run.json.",
                                               "A built-in model.", "A backend (strategy)."}
    for title, body in recipes:
        cited = re.findall(r"`([^`\s]+)`", body.replace("\n", " "))
        paths = [c for c in cited if "/" in c and "." in c.rsplit("/", 1)[-1]
                 and not c.endswith("/")]
        names = [c for c in cited if re.fullmatch(r"[A-Za-z_]\w*", c)]
        assert paths, f"{title} cites no file"
        assert [p for p in paths if not (ROOT / p).exists()] == [], title
        texts = [(ROOT / p).read_text() for p in paths]
        assert [n for n in names if not any(re.search(rf"\b{n}\b", t) for t in texts)] \
            == [], title


def test_a_finder_that_a_test_s_import_installed_stays_for_the_tests_after_it(tmp_path):
    """xprof's converter imports six, whose import finder serves six.moves; the tests' own
    clean-up (conftest's process_as_found) removed it, and every later TensorFlow import on
    that pytest worker failed ("No module named 'six.moves'": CI of 2026-12-02, four tests
    of test_usermodel.py). The two real tests in that order, in a pytest of their own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n0", "-p", "no:cacheprovider",
         "--basetemp", str(tmp_path / "base"),
         "tests/unit/test_stepsplit.py::test_xprofs_own_step_breakdown_agrees_and_leaves_no_cache",
         "tests/unit/test_usermodel.py::test_a_model_that_cannot_take_the_images_is_a_one_line_reason"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:]
    assert re.search(r"\b4 passed\b", done.stdout), done.stdout[-2000:]


def test_no_test_module_imports_another():
    """What tests share lives in tests/helpers (issue 102): a test module imported by
    another runs its module-level code twice and hides where a helper lives."""
    found = [f"{path.relative_to(ROOT)}:{number}"
             for path in sorted((ROOT / "tests").rglob("test_*.py"))
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if re.match(r"\s*(from|import)\s+test_\w+", line)]
    assert found == []


def test_the_reader_re_exports_nothing_and_reaches_the_miner_through_the_registry():
    """Names are imported from the module they live in (issue 102: reader.py re-exported
    about fifteen, `noqa: F401`); the reader asks every format's reader for its line shapes
    (`line_shapes`), never formats.mined by name."""
    text = (PACKAGE / "logparse" / "reader.py").read_text()
    assert "F401" not in text and "formats.mined" not in text.split('"""', 2)[2].replace(
        "# 10: a script's own epoch lines (formats.mined)", "")
    assert "mined" not in re.findall(r"from dlscale\.logparse\.formats import ([^\n]+)",
                                     text)[0]
    # nor any format's module: the GPU count a run's settings give is shared machinery
    # (runs.job_gpus), not formats.stated's
    assert re.findall(r"from dlscale\.logparse\.formats\.\w+", text) == []
