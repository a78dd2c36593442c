"""A real two-node Ray cluster on this machine, for the tests marked ``ray``.

``ray start --head`` and ``ray start --address`` run as separate process groups, each node with its
own DEPLOYKIT_NODE_DIR (its store and model bundles): cells scheduled on the far node (custom
resource ``far``) can only get their inputs through Ray's object store. Every node and the driver
bind to 127.0.0.1, so no traffic leaves the machine. Teardown stops exactly the process groups
started here.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import deploykit

SRC = str(Path(deploykit.__file__).resolve().parents[1])


@dataclass
class Cluster:
    address: str
    head_dir: Path
    far_dir: Path
    logs: Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(args: list[str], node_dir: Path, log: Path, env: dict[str, str]) -> subprocess.Popen:
    ray_bin = str(Path(sys.executable).with_name("ray"))
    with open(log, "w") as out:
        return subprocess.Popen(
            [ray_bin, "start", *args, "--node-ip-address=127.0.0.1", "--disable-usage-stats", "--block"],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**env, "DEPLOYKIT_NODE_DIR": str(node_dir)},
        )


def _stop(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)  # the group this fixture started, nothing else
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'deploykit[ray]')")
    root = tmp_path_factory.mktemp("ray")
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "disabled",
        "PYTHONPATH": os.pathsep.join(
            [SRC, str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]
        ),
    }
    old_auth = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"  # this driver joins without a token, like the nodes
    port = _free_port()
    address = f"127.0.0.1:{port}"
    procs = [
        _start(
            [
                "--head",
                f"--port={port}",
                f"--ray-client-server-port={_free_port()}",
                "--num-cpus=1",
                "--include-dashboard=false",
                f"--temp-dir={root / 'tmp'}",
            ],
            root / "head",
            root / "head.log",
            env,
        )
    ]
    try:
        time.sleep(3)
        procs.append(
            _start(
                [f"--address={address}", "--num-cpus=1", '--resources={"far": 4}'], root / "far", root / "far.log", env
            )
        )
        ray.init(address=address, log_to_driver=False, _node_ip_address="127.0.0.1")
        deadline = time.monotonic() + 120
        while sum(n["Alive"] for n in ray.nodes()) < 2:
            if time.monotonic() > deadline:
                pytest.fail(f"the second Ray node did not join; see {root / 'far.log'}")
            time.sleep(1)
        yield Cluster(address, root / "head", root / "far", root)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for proc in reversed(procs):
            _stop(proc)
        if old_auth is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = old_auth
