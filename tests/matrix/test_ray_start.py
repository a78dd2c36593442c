"""Starting Ray: a start-up that times out under load is the environment's problem (exit 3, one line,
what to try), and Ray's own INFO/WARNING lines stay off the user's stderr unless asked. Ray itself is
replaced by a stand-in here (the real cluster tests are marked ``ray``)."""

from __future__ import annotations

import logging
import sys
import types

import pytest

from deploykit.errors import EnvironmentProblem
from deploykit.matrix import ray_executor
from tests.conftest import run_cli
from tests.matrix.helpers import write_matrix, write_model

TIMEOUT = (
    "The current node timed out during startup. This could happen because some of the raylet failed to "
    "startup or the GCS has become overloaded."
)


class StandInRay(types.ModuleType):
    """A ``ray`` whose ``init`` records its options, then fails as the real one does when it cannot start."""

    def __init__(self, failure: BaseException) -> None:
        import importlib.machinery

        super().__init__("ray")
        self.__spec__ = importlib.machinery.ModuleSpec("ray", None)  # importlib.util.find_spec reads it
        self.failure, self.calls = failure, []

    def is_initialized(self) -> bool:
        return False

    def init(self, **options):  # noqa: ANN003 - Ray's own signature
        self.calls.append(options)
        raise self.failure


@pytest.mark.parametrize(
    "failure", [Exception(TIMEOUT), TimeoutError("Timed out after 30 seconds while waiting for node to startup.")]
)
def test_a_start_up_timeout_is_exit_3_with_what_to_try(failure, monkeypatch):
    ray = StandInRay(failure)
    with pytest.raises(EnvironmentProblem) as caught:
        ray_executor._connect(ray, "local", 2)
    e = caught.value
    assert e.exit_code == 3 and "\n" not in e.message
    assert e.message.startswith("--ray local: Ray did not start in time (")
    assert "retry when it is quieter" in e.hint and "without --ray" in e.hint
    assert ray.calls[0]["logging_level"] == logging.ERROR and ray.calls[0]["log_to_driver"] is False


def test_rays_own_log_lines_come_back_when_asked(monkeypatch):
    monkeypatch.setenv(ray_executor.RAY_LOGS, "1")
    ray = StandInRay(ConnectionError("refused"))
    with pytest.raises(EnvironmentProblem, match="cannot connect to a Ray cluster: refused"):
        ray_executor._connect(ray, "ray://head:10001", None)
    assert ray.calls[0]["logging_level"] == logging.INFO


def test_the_cli_says_one_line_and_exits_3(tmp_path, monkeypatch):
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'deploykit[ray]')")
    matrix = write_matrix(tmp_path / "matrix.yaml", [write_model(tmp_path / "a", "net_a", seed=1)], ["fp32"])
    monkeypatch.setitem(sys.modules, "ray", StandInRay(Exception(TIMEOUT)))
    code, out, err = run_cli("matrix", str(matrix), "--ray", "local", "-w", str(tmp_path / "store"))
    assert code == 3, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[0].startswith("error: --ray local: Ray did not start in time") and lines[1].startswith("hint:")
    assert "Traceback" not in err and "internal error" not in err
