"""The native extensions' ABI versions: each C source, its build and its Python loader agree, and
a build of another version is not used at all, said once, with the same output."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from protocol import frozen, native_frames, native_switch
from protocol.binlog import native
from sinks.parquet import commit, native_batch, small_file

ROOT = Path(__file__).resolve().parents[2]

#: Every extension setup.py builds, with the version its loader expects.
LOADERS = {
    "protocol.binlog._native_rows": native.ABI,
    "protocol._native_slots": frozen.ABI,
    "protocol._native_frames": native_frames.ABI,
    "sinks.parquet._native_fs": commit.NATIVE_FS_ABI,
    "sinks.parquet._native_parquet": small_file.ABI,
    "sinks.parquet._native_batch": native_batch.ABI,
}


def test_every_extension_setup_builds_has_a_loader() -> None:
    built = re.findall(r'"((?:protocol|sinks)\.[\w.]+)"', (ROOT / "setup.py").read_text())
    assert sorted(built) == sorted(LOADERS)


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_the_c_source_and_its_loader_name_one_version(name: str) -> None:
    source = (ROOT / (name.replace(".", "/") + ".c")).read_text()
    defined = re.findall(r"^#define ABI_VERSION (\d+)$", source, re.M)
    assert defined == [str(LOADERS[name])]
    assert source.count('PyModule_AddIntConstant(m, "ABI_VERSION", ABI_VERSION)') == 1


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_a_build_reports_its_version(name: str) -> None:
    try:
        module = importlib.import_module(name)
    except ImportError:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"{name} is not built")
    assert module.ABI_VERSION == LOADERS[name]
    assert native_switch.load(name, LOADERS[name], "it") == (module, "")


def test_load_refuses_another_version_whole(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "binlake_old_ext.py").write_text("ABI_VERSION = 3\ndef f(): pass\n")
    (tmp_path / "binlake_bare_ext.py").write_text("def f(): pass\n")
    (tmp_path / "binlake_broken_ext.py").write_text("import binlake_nowhere_at_all\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert native_switch.load("binlake_old_ext", 4, "the old one") == (
        None, "the old one is not used: its build has ABI version 3, this binlake needs "
              "version 4 (a build older or newer than the code)")
    assert native_switch.load("binlake_bare_ext", 1, "the bare one") == (
        None, "the bare one is not used: its build has no ABI version, this binlake needs "
              "version 1 (a build older or newer than the code)")
    assert native_switch.load("binlake_absent_ext", 1, "the absent one") == (
        None, "the absent one is not built")
    assert native_switch.load("binlake_broken_ext", 1, "the broken one") == (
        None, "the broken one is not built (No module named 'binlake_nowhere_at_all')")


def test_decode_with_a_stale_build_says_so_once_and_prints_the_same(tmp_path: Path) -> None:
    """``binlake decode`` with ``_native_slots`` swapped for a build of another version (its
    functions all there): none of it is used, one warning, the same lines."""
    if frozen.NATIVE_SLOTS_MISSING:
        pytest.skip("protocol._native_slots is not built")
    paths = sorted(str(p) for p in (ROOT / "fixtures" / "binlogs" / "mariadb-10.11").glob(
        "mysql-bin.0*"))
    (tmp_path / "sitecustomize.py").write_text(
        "import sys, types, importlib\n"
        "real = importlib.import_module('protocol._native_slots')\n"
        "old = types.ModuleType(real.__name__)\n"
        "old.__dict__.update({k: v for k, v in vars(real).items() if k != '__name__'})\n"
        "old.ABI_VERSION = 0\n"
        "sys.modules[real.__name__] = old\n")
    env = {k: v for k, v in os.environ.items() if k != "BINLAKE_NATIVE"}
    runs = [subprocess.run([sys.executable, "-m", "replica.cli", "decode", *paths],
                           capture_output=True, text=True, timeout=120, env=with_env)
            for with_env in (env, {**env, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"})]
    assert [run.returncode for run in runs] == [0, 0]
    assert [run.stderr for run in runs] == ["", (
        "binlake decode: warning: protocol._native_slots is not used: its build has "
        f"ABI version 0, this binlake needs version {frozen.ABI} (a build older or newer than "
        "the code): events are made by their Python classes (same events, slower); reinstall "
        "binlake (or `python setup.py build_ext --inplace` in a checkout) to build it\n")]
    assert runs[0].stdout == runs[1].stdout != ""
