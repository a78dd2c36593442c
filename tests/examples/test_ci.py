"""examples/ci: parse the GitHub Actions workflow and the GitLab CI job and run their shell lines here.

Every ``run:`` / ``script:`` line runs as written, in bash, with the file's own environment; only the
model differs (``DEPLOYKIT_CONFIG`` / ``DEPLOYKIT_RUN`` point at the tiny test model, whose converted
store is copied in, so the run takes seconds). The package install is the one step not run: it needs
the network; its spec is checked against pyproject.toml instead. GitHub's and GitLab's own machinery
(``uses:`` actions, ``artifacts:``) cannot run here: the test checks the paths they are given are the
paths the commands write.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CI = ROOT / "examples" / "ci"
BIN = Path(sys.executable).parent


def github() -> dict:
    workflow = yaml.safe_load((CI / "github-actions.yml").read_text())
    workflow["on"] = workflow.pop(True, workflow.get("on"))  # YAML 1.1 reads the key `on` as true
    return workflow


def gitlab() -> dict:
    return yaml.safe_load((CI / "gitlab-ci.yml").read_text())


def expand(value: str, env: dict) -> str:
    """A ``with:`` value with the workflow's ``${{ env.NAME }}`` expressions filled in."""
    import re

    return re.sub(r"\$\{\{\s*env\.(\w+)\s*\}\}", lambda m: str(env[m[1]]), value)


def is_install(line: str) -> bool:
    return "pip install" in line


def shell(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def base_env(extra: dict[str, str]) -> dict[str, str]:
    """This machine's environment with deploykit's console script first on PATH and this checkout's sources."""
    env = {**os.environ, **extra}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT / "src")
    env["COLUMNS"] = "160"
    return env


def workspace(tiny: tuple[Path, Path], tmp_path: Path, store: str) -> tuple[Path, dict[str, str]]:
    """A checkout-like folder holding the tiny model's converted store where the CI file caches it."""
    config, populated = tiny
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copytree(populated, ws / store)
    return ws, {"DEPLOYKIT_CONFIG": str(config), "DEPLOYKIT_RUN": "tiny"}


def test_the_install_spec_names_extras_that_exist() -> None:
    import tomllib

    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    for spec in (github()["env"]["DEPLOYKIT_SPEC"], gitlab()["deploykit"]["variables"]["DEPLOYKIT_SPEC"]):
        wanted = set(spec.split("[", 1)[1].split("]", 1)[0].split(","))
        assert wanted <= extras, (spec, extras)
    install = [s["run"] for s in github()["jobs"]["convert"]["steps"] if "run" in s and is_install(s["run"])]
    assert len(install) == 1 and "$DEPLOYKIT_SPEC" in install[0] and "torch==2.13.0" in install[0]


@pytest.mark.e2e
def test_github_workflow_run_steps(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    workflow = github()
    env = workflow["env"]
    steps = workflow["jobs"]["convert"]["steps"]
    assert set(workflow["on"]) == {"push", "pull_request"}
    assert not any("${{" in s.get("run", "") for s in steps), "run: lines must use plain environment variables"
    ws, model = workspace(tiny, tmp_path, env["DEPLOYKIT_STORE"])
    summary = tmp_path / "step_summary.md"
    assert "secrets.DEPLOYKIT_STORE_KEY" in env["DEPLOYKIT_STORE_KEY"]
    env = {**env, "DEPLOYKIT_STORE_KEY": "a-ci-secret-for-the-test-0123456789"}  # what GitHub puts there
    run_env = base_env({**{k: str(v) for k, v in env.items()}, **model, "GITHUB_STEP_SUMMARY": str(summary)})
    ran = []
    for step in steps:
        if "run" not in step or is_install(step["run"]):
            continue
        done = shell(step["run"], ws, run_env)
        assert done.returncode == 0, f"step {step['name']!r}:\n{done.stdout}\n{done.stderr}"
        ran.append(step["name"])
    assert ran == ["Check the environment", "Convert and gate", "HTML report", "Job summary"]
    reports = ws / env["DEPLOYKIT_REPORTS"]
    assert summary.read_text() == (reports / "summary.md").read_text() and "fps" in summary.read_text().lower()
    assert (reports / "report.html").read_text().startswith("<!DOCTYPE html>")
    uses = {s["uses"].split("@")[0]: s for s in steps if "uses" in s}
    junit = ws / expand(uses["mikepenz/action-junit-report"]["with"]["report_paths"], env)
    assert junit.is_file() and "<testsuite" in junit.read_text()
    assert expand(uses["actions/cache"]["with"]["path"], env) == env["DEPLOYKIT_STORE"]  # the store used is cached
    assert (ws / expand(uses["actions/upload-artifact"]["with"]["path"], env)).resolve() == reports.resolve()
    assert all(s.get("if") == "always()" for s in steps if s.get("name") in ("Job summary", "Publish test results"))
    # no path the env block names is written out again: changing DEPLOYKIT_REPORTS moves everything
    for step in steps:
        for value in (step.get("with") or {}).values():
            assert str(value).split("/")[0] not in ("reports", ".deploykit"), (step.get("name"), value)


def test_github_workflow_asks_only_for_what_it_uses() -> None:
    workflow = github()
    assert workflow["permissions"] == {"contents": "read", "checks": "write"}  # checks: the JUnit check run
    setup = next(
        s for s in workflow["jobs"]["convert"]["steps"] if s.get("uses", "").startswith("actions/setup-python")
    )
    if setup["with"].get("cache") == "pip":  # setup-python's pip cache fails without a file to key it by
        assert (ROOT / setup["with"]["cache-dependency-path"]).is_file()


@pytest.mark.parametrize(
    ("file", "schema"), [("github-actions.yml", "vendor.github-workflows"), ("gitlab-ci.yml", "vendor.gitlab-ci")]
)
def test_ci_files_validate_against_their_published_schemas(file: str, schema: str) -> None:
    """check-jsonschema ships the schemas it validates against (SchemaStore's github-workflows and
    gitlab-ci): no network. A proxy that refuses every connection proves it."""
    pytest.importorskip("check_jsonschema", reason="check-jsonschema is not installed (pip install -e '.[dev]')")
    offline = {**os.environ, "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": ""}
    done = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, str(CI / file)],
        capture_output=True,
        text=True,
        timeout=120,
        env=offline,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "validation done" in done.stdout


def test_ci_never_reuses_a_gate_measurement_from_the_cache() -> None:
    """A cache a pull request's job could have written never supplies the gate's numbers."""
    steps = github()["jobs"]["convert"]["steps"]
    lines = [s["run"] for s in steps if "deploykit convert" in s.get("run", "")]
    lines += [line for line in gitlab()["deploykit"]["script"] if "deploykit convert" in line]
    assert len(lines) == 2 and all("--remeasure" in line for line in lines), lines


def fake_curl(folder: Path) -> Path:
    """A `curl` that records its arguments and the note body it was asked to post."""
    folder.mkdir()
    script = folder / "curl"
    script.write_text(
        '#!/bin/sh\nprintf "%s\\n" "$@" > "$FAKE_CURL_LOG"\n'
        'for a in "$@"; do case "$a" in body@*) cat "${a#body@}" > "$FAKE_CURL_BODY";; esac; done\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return folder


@pytest.mark.e2e
def test_gitlab_job_script_and_merge_request_note(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    job = gitlab()["deploykit"]
    variables = dict(job["variables"])
    ws, model = workspace(tiny, tmp_path, variables["DEPLOYKIT_STORE"])
    assert job["cache"]["paths"][0].rstrip("/") == variables["DEPLOYKIT_STORE"]
    merge_request = {
        "CI_MERGE_REQUEST_IID": "7",
        "CI_PROJECT_ID": "42",
        "CI_API_V4_URL": "https://gitlab.example/api/v4",
        "DEPLOYKIT_NOTE_TOKEN": "token-for-the-test",
    }
    extra = {
        **{k: str(v) for k, v in variables.items()},
        **model,
        **merge_request,
        "CI_PROJECT_DIR": str(ws),
        "FAKE_CURL_LOG": str(tmp_path / "curl.args"),
        "FAKE_CURL_BODY": str(tmp_path / "curl.body"),
    }
    run_env = base_env(extra)
    run_env["PATH"] = f"{fake_curl(tmp_path / 'bin')}{os.pathsep}{run_env['PATH']}"
    assert all(is_install(line) for line in job["before_script"])  # the one part not run here
    outputs = []
    for line in job["script"] + job["after_script"]:
        done = shell(line, ws, run_env)
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
        outputs.append(done.stdout)
    reports = ws / variables["DEPLOYKIT_REPORTS"]
    assert (ws / job["artifacts"]["reports"]["junit"]).is_file() and job["artifacts"]["when"] == "always"
    assert (reports / "report.html").is_file()
    assert "posted summary.md to merge request !7" in outputs[-1]
    assert (tmp_path / "curl.body").read_text() == (reports / "summary.md").read_text()
    args = (tmp_path / "curl.args").read_text().splitlines()
    assert "https://gitlab.example/api/v4/projects/42/merge_requests/7/notes" in args
    assert "PRIVATE-TOKEN: token-for-the-test" in args
    # A branch pipeline (no merge request) and a merge request without the token post nothing.
    (tmp_path / "curl.args").unlink()
    for unset, said in (
        ("CI_MERGE_REQUEST_IID", "not a merge-request pipeline"),
        ("DEPLOYKIT_NOTE_TOKEN", "DEPLOYKIT_NOTE_TOKEN is not set"),
    ):
        done = shell(job["after_script"][-1], ws, {k: v for k, v in run_env.items() if k != unset})
        assert done.returncode == 0 and said in done.stdout and not (tmp_path / "curl.args").exists()


@pytest.mark.slow
def test_github_workflow_on_the_example_it_names(tmp_path: Path) -> None:
    """The workflow's own model (the example detector), from an empty store: the first CI run."""
    workflow = github()
    ws = tmp_path / "ws"
    ws.mkdir()
    for folder in ("examples", "calibration"):
        (ws / folder).symlink_to(ROOT / folder)
    env = base_env({**{k: str(v) for k, v in workflow["env"].items()}, "GITHUB_STEP_SUMMARY": str(tmp_path / "s.md")})
    for step in workflow["jobs"]["convert"]["steps"]:
        if "run" in step and not is_install(step["run"]):
            done = shell(step["run"], ws, env)
            assert done.returncode == 0, f"{step['name']}:\n{done.stdout}\n{done.stderr}"
    assert (ws / "reports" / "junit.xml").is_file() and (tmp_path / "s.md").read_text()
