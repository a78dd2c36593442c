"""Running the stages: the runner, what a run returns, and the exporter fallback."""
