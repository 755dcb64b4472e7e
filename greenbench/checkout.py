"""greenbench run from a source checkout: ``greenbench.workloads`` is that checkout's top-level
``workloads/`` folder, as an install would place it.

An install (a wheel, or ``pip install -e``) maps the repository's ``workloads/`` folder to the
package ``greenbench.workloads`` (setup.py's ``package_dir``). A checkout used without installing
it (``PYTHONPATH=checkout``, ``streamlit run dashboard/app.py``, a worker started inside the
checkout) has no such mapping: ``greenbench/`` lies beside ``workloads/``, not around it, and
the mapping of an editable install made from another checkout would lend that checkout's
workloads. `map_workloads` gives the import system the mapping for the checkout ``greenbench``
itself was imported from.

A finder of our own, because the other way to add a folder to a package, extending its
``__path__``, would make every folder beside ``workloads/`` (tests, benchmarks, …) a
subpackage of greenbench as well.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from importlib.util import spec_from_file_location
from pathlib import Path
from types import ModuleType

#: the mapped package, and the folder beside ``greenbench/`` that a checkout holds it in
PACKAGE = "greenbench.workloads"
FOLDER = "workloads"


class CheckoutWorkloads(MetaPathFinder):
    """Finds ``greenbench.workloads`` in a checkout's ``workloads/`` folder; its submodules
    are then found in that folder as any package's are."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != PACKAGE:
            return None
        return spec_from_file_location(
            fullname, self.folder / "__init__.py", submodule_search_locations=[str(self.folder)]
        )


def map_workloads(package_dir: Path) -> None:
    """Where ``package_dir`` (greenbench's own folder) lies in a checkout, find
    ``greenbench.workloads`` in the checkout's ``workloads/``, ahead of any other finder.
    An installed greenbench holds ``greenbench/workloads/`` itself and is left alone."""
    if (package_dir / FOLDER).is_dir():
        return
    folder = package_dir.parent / FOLDER
    if not (folder / "__init__.py").is_file():
        return
    if not any(isinstance(finder, CheckoutWorkloads) for finder in sys.meta_path):
        sys.meta_path.insert(0, CheckoutWorkloads(folder))
