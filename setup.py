"""Packaging beyond pyproject.toml: the plugin sources (``plugins/``) ship inside the package as
``deploykit/_plugin_sources``, so an installed deploykit (a wheel, ``pip install .``) has the op
descriptions a plugin model needs and the sources ``deploykit plugins build`` compiles."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PLUGINS = Path(__file__).resolve().parent / "plugins"


class BuildWithPluginSources(build_py):
    def run(self) -> None:
        super().run()
        if PLUGINS.is_dir():  # an sdist carries plugins/ (MANIFEST.in), a checkout has it
            target = Path(self.build_lib) / "deploykit" / "_plugin_sources"
            shutil.copytree(PLUGINS, target, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("build", "__pycache__", "*.o", "*.so"))


setup(cmdclass={"build_py": BuildWithPluginSources})
