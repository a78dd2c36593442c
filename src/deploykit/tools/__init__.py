"""Developer tools that check the code base itself (``python -m deploykit.tools.layers``)."""
