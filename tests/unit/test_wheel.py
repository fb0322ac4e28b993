"""What ships: the wheel (and so the Docker image, which installs it) holds the product — protocol/,
sinks/, replica/ — and no developer tooling: no devtools/, tests/ or bench/, and no module that
provisions servers (a package installer has no place in a sidecar image)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.unit.test_dockerfile import instructions

ROOT = Path(__file__).resolve().parents[2]

#: Words only server-provisioning code uses (devtools/sandbox.py: apt-get, debootstrap, chroot).
PROVISIONING = ("apt-get", "debootstrap", "chroot", "unshare", "dpkg")


def test_the_wheel_holds_the_product_and_no_dev_tooling(tmp_path: Path) -> None:
    # build from a copy: setuptools writes build/ and *.egg-info next to the sources
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "__pycache__", "*.egg-info", "build", ".*_cache", ".hypothesis",
        ".benchmarks", "demo-lake"))
    dist = tmp_path / "dist"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "--quiet", "--wheel-dir", str(dist), str(source)],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = dist.glob("binlake-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        sources = {name: archive.read(name).decode("utf-8") for name in names
                   if name.endswith(".py")}
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"protocol", "replica", "sinks"}
    assert "replica/cli.py" in names and "protocol/binlog/stream.py" in names
    assert "sinks/parquet/writer.py" in names and "replica/commands/demo.py" in names
    provisioning = sorted(f"{name}: {word}" for name, text in sources.items()
                          for word in PROVISIONING if word in text)
    assert provisioning == []


def test_the_image_copies_no_dev_tooling() -> None:
    copied = [arguments for keyword, arguments in instructions() if keyword in ("COPY", "ADD")]
    assert copied, "the Dockerfile copies the sources it builds"
    for arguments in copied:
        words = [w for w in arguments.split() if not w.startswith("--")]
        for word in words[:-1]:  # the sources; the last word is the destination
            assert word.rstrip("/").split("/")[0] not in ("devtools", "tests", "bench", "scripts",
                                                           "."), arguments
