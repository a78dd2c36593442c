"""The ``deploykit`` command line: the typer app (:mod:`.app`), its shared options (:mod:`.args`) and
its sub-apps (:mod:`.plugins`, :mod:`.inspect`)."""


def main() -> None:
    """The console script's entry point (``deploykit = deploykit.cli.app:main``)."""
    from deploykit.cli.app import main as run

    run()
