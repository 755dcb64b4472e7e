"""The package layout setuptools cannot read from pyproject.toml: the repository's top-level
``workloads/`` folder (the standard workloads and the suites greenbench ships) is installed as
the package ``greenbench.workloads``, through a ``package_dir`` mapping that pyproject.toml's
package discovery cannot express beside the discovered ``greenbench*`` packages. Everything else
about the project is in pyproject.toml.

A checkout used without installing it finds the same package through `greenbench.checkout`.
"""

from setuptools import find_packages, setup

#: the packages that live outside greenbench/, and the folders that hold them
PACKAGE_DIR = {"greenbench.workloads": "workloads"}

#: each mapped package with its subpackages (``greenbench.workloads.suites``)
MAPPED = [
    f"{package}.{sub}" if sub else package
    for package, folder in PACKAGE_DIR.items()
    for sub in ["", *find_packages(folder)]
]

setup(
    packages=[*find_packages(include=["greenbench", "greenbench.*"]), *MAPPED],
    package_dir=PACKAGE_DIR,
    package_data={
        "greenbench": [
            "store_schema.sql",
            "store/migrations/*.sql",
            "models/mamba/scan_kernel.c",
        ],
        "greenbench.workloads.suites": ["*.toml"],
    },
)
