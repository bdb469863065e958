"""The cluster back end's pure parts: manifest and settings fields, AR111/AR112, the entrypoint,
the package, the status mapping, the resource check, and the REST client's errors."""

from __future__ import annotations

import http.server
import json
import shlex
import zipfile
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest

from arena_ls.cluster.config import ClusterTarget, read_token, resolve_cluster
from arena_ls.cluster.jobsapi import ClusterError, JobsClient, normalise_address
from arena_ls.cluster.preflight import check_cluster, describe_nodes, missing_resources
from arena_ls.cluster.status import (
    code_text,
    ended_at,
    ended_text,
    exit_of,
    final_status,
    first_line,
    live_status,
    stopped_by,
)
from arena_ls.cluster.submission import (
    MAX_PACKAGE_BYTES,
    PACKAGE_LIMIT_VARIABLE,
    PackageTooLarge,
    build_package,
    entrypoint,
    entrypoint_resources,
    env_vars,
    package_files,
    package_limit,
    stop_wait_seconds,
    submit_payload,
)
from arena_ls.manifest import load_manifest_text
from arena_ls.run.rundir import ClusterSpec, RunDir, RunSpec, RunState
from arena_ls.run.states import RunStatus
from arena_ls.settings import parse_settings
from tests.helpers.serving import serve_in_thread

# -- manifest and settings ----------------------------------------------------------------------


def manifest(tmp_path: Path, jobs: list[dict[str, Any]], clusters: Any = None) -> Any:
    (tmp_path / "train.py").write_text("print('hi')\n")
    document: dict[str, Any] = {"version": 1, "jobs": jobs}
    if clusters is not None:
        document["clusters"] = clusters
    return load_manifest_text(json.dumps(document), tmp_path / "manifest.json", tmp_path)


def task(**extra: Any) -> dict[str, Any]:
    return {"id": "t", "command": "{python}", "args": ["train.py"], "status": "ready", **extra}


def codes(result: Any) -> list[str]:
    return sorted(d.code for d in result.diagnostics)


def test_run_on_and_resources_load(tmp_path: Path) -> None:
    result = manifest(
        tmp_path,
        [task(runOn="lab", resources={"gpus": 1, "cpus": 2.5, "memoryMb": 4096}, stop={"method": "signal"})],
        {"lab": {"kind": "ray", "address": "http://head:8265"}},
    )
    assert codes(result) == []
    job = result.jobs["t"]
    assert job.run_on == "lab" and job.resources.to_dict() == {"gpus": 1.0, "cpus": 2.5, "memoryMb": 4096.0}
    assert result.clusters["lab"].address == "http://head:8265"


def test_ar112_run_on_naming_no_cluster_is_an_error(tmp_path: Path) -> None:
    result = manifest(tmp_path, [task(runOn="nowhere", stop={"method": "signal"})], {"lab": {"kind": "ray"}})
    diag = next(d for d in result.diagnostics if d.code == "AR112")
    assert diag.severity == "error" and "'nowhere'" in diag.message and "lab" in diag.message
    assert "t" not in result.jobs, "a job with an error does not run"


def test_ar111_a_stop_file_on_a_cluster_is_a_warning(tmp_path: Path) -> None:
    explicit = manifest(tmp_path, [task(runOn="lab", stop={"method": "file"})], {"lab": {}})
    assert codes(explicit) == ["AR111"] and explicit.diagnostics[0].severity == "warning"
    by_default = manifest(tmp_path, [task(runOn="lab")], {"lab": {}})
    assert codes(by_default) == ["AR111"], "the default method is the file too"
    assert codes(manifest(tmp_path, [task(runOn="lab", stop={"method": "both"})], {"lab": {}})) == []
    assert codes(manifest(tmp_path, [task(stop={"method": "file"})])) == [], "not on this machine"


def test_bad_cluster_fields_are_ar102(tmp_path: Path) -> None:
    result = manifest(
        tmp_path,
        [task(runOn="lab", stop={"method": "signal"}, resources={"gpus": -1, "memoryMb": 1.5, "tpus": 1})],
        {"lab": {"kind": "slurm"}, "other": {"kind": "ray", "address": 5, "extra": 1}},
    )
    messages = [d.message for d in result.diagnostics]
    assert any("`clusters.lab.kind` must be" in m for m in messages)
    assert any("`clusters.other.address` must be a string" in m for m in messages)
    assert any("unknown field `clusters.other.extra`" in m for m in messages)
    assert any("`resources.gpus` must be" in m for m in messages)
    assert any("`resources.memoryMb` must be" in m for m in messages)
    assert sum("unknown field `resources.tpus`" in m for m in messages) == 1, "reported once"


def test_cluster_settings_nested_and_dotted() -> None:
    settings, problems = parse_settings(
        {"clusters": {"lab": {"address": "http://a:8265", "tokenFile": "/t", "python": ["/py", "-E"]}},
         "clusters.gpu.address": "http://b:8265", "clusters.gpu.tokenFile": 3}
    )  # fmt: skip
    assert settings.cluster("lab").address == "http://a:8265" and settings.cluster("lab").python == (
        "/py",
        "-E",
    )
    assert settings.cluster("gpu").address == "http://b:8265" and settings.cluster("gpu").token_file is None
    assert settings.cluster("unknown").python == ("python",)
    assert problems == ["arena.clusters.gpu.tokenFile must be a non-empty string; using the default"]


@pytest.mark.parametrize("bad", [[], [""], ["/py", 3], "", 5])
def test_a_cluster_python_that_is_not_a_path_or_a_non_empty_list_keeps_the_default(bad: Any) -> None:
    """docs/protocol.md: `clusters.NAME.python` is a path or a non-empty list of strings; a bad
    value keeps the default (`python`: the workers' own) with one problem naming the key."""
    settings, problems = parse_settings({"clusters": {"lab": {"python": bad, "address": "http://a:8265"}}})
    assert settings.cluster("lab").python == ("python",)
    assert settings.cluster("lab").address == "http://a:8265", "the cluster's other keys still apply"
    assert problems == [
        "arena.clusters.lab.python must be a path or a non-empty list of strings; using the default"
    ]
    dotted, problems = parse_settings({"clusters.lab.python": bad})
    assert dotted.cluster("lab").python == ("python",) and len(problems) == 1, problems


def test_settings_override_the_manifest_address(tmp_path: Path) -> None:
    result = manifest(
        tmp_path, [task(runOn="lab", stop={"method": "signal"})], {"lab": {"address": "http://m"}}
    )
    job = result.jobs["t"]
    plain, _ = parse_settings({})
    assert resolve_cluster(job, result.clusters, plain).address == "http://m"  # type: ignore[union-attr]
    own, _ = parse_settings({"clusters": {"lab": {"address": "http://mine"}}})
    assert resolve_cluster(job, result.clusters, own).address == "http://mine"  # type: ignore[union-attr]


def test_a_token_file_is_read_stripped_and_its_problems_never_show_the_token(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("  s3cret\n")
    assert read_token("lab", str(path)) == "s3cret"
    assert read_token("lab", None) is None
    target = ClusterTarget("lab", "ray", "http://head:8265", str(path), ("python",))
    client = target.client()
    assert "s3cret" not in repr(client) and "s3cret" not in repr(target), "the token is read, not kept"
    problems = []
    for content, where in (("\n", str(path)), ("", str(tmp_path / "missing")), ("", str(tmp_path))):
        if content:
            path.write_text(content)
        with pytest.raises(ClusterError) as problem:
            read_token("lab", where)
        problems.append(str(problem.value))
    assert "is empty" in problems[0] and "No such file" in problems[1] and "directory" in problems[2]
    for message in problems:
        assert "arena.clusters.lab.tokenFile" in message, message
        assert "s3cret" not in message and str(tmp_path) not in message, message
    target = ClusterTarget("lab", "ray", None, None, ("python",))
    with pytest.raises(ClusterError, match="has no address"):
        target.client()


# -- submission ---------------------------------------------------------------------------------


def spec(**extra: Any) -> RunSpec:
    fields: dict[str, Any] = {
        "run_id": "r-1", "job_id": "j", "job_name": "J", "kind": "train",
        "argv": ["/py", "train.py", "--name", "it's a test; rm -rf /"], "cwd": "/ws",
        "env": {"OMP_NUM_THREADS": "1"}, "grace_seconds": 7.5,
        "cluster": ClusterSpec("lab", "ray", "http://h", None, {"gpus": 1, "memoryMb": 512}),
    }  # fmt: skip
    fields.update(extra)
    return RunSpec(**fields)


def test_the_entrypoint_is_exec_and_the_quoted_argv() -> None:
    argv = ["/py", "train.py", "--name", "it's a test; rm -rf /", "$HOME", ""]
    line = entrypoint(argv)
    assert line.startswith("exec ")
    assert shlex.split(line)[1:] == argv, "/bin/sh -c gets back exactly the argv"


def test_env_vars_carry_the_contract_variables_and_the_stop_wait() -> None:
    env = env_vars(spec())
    assert env["ARENA_RUN_ID"] == "r-1" and env["ARENA_JOB_ID"] == "j" and env["PYTHONUNBUFFERED"] == "1"
    assert env["OMP_NUM_THREADS"] == "1" and env["RAY_JOB_STOP_WAIT_TIME_S"] == "8"
    assert "ARENA_STOP_FILE" not in env, "a cluster has no stop file"
    assert stop_wait_seconds(0) == 1 and stop_wait_seconds(120) == 120


def test_resources_map_to_the_entrypoint_reservation() -> None:
    assert entrypoint_resources({"gpus": 1, "cpus": 2, "memoryMb": 512}) == {
        "entrypoint_num_gpus": 1,
        "entrypoint_num_cpus": 2,
        "entrypoint_memory": 512 * 1024 * 1024,
    }
    assert entrypoint_resources({}) == {}
    payload = submit_payload(spec(), ["/py", "t.py"], "arena-r-1-1", "gcs://_ray_pkg_x.zip")
    assert payload["submission_id"] == "arena-r-1-1" and payload["entrypoint"] == "exec /py t.py"
    assert payload["runtime_env"]["working_dir"] == "gcs://_ray_pkg_x.zip"
    assert payload["entrypoint_num_gpus"] == 1 and "entrypoint_num_cpus" not in payload


def tree(root: Path) -> Path:
    for name in ("train.py", "data/corpus.txt", ".aide/training/runs/x/output.log", ".git/HEAD",
                 "checkpoints/ckpt.pt", "env312/pyvenv.cfg", "env312/lib/x.py", ".venv/bin/python",
                 "pkg/__pycache__/m.pyc", "pkg/m.py", "state/runs/y",
                 "node_modules/left-pad/index.js", "web/node_modules/x/index.js",
                 "venv-old/lib/x.py", "venv311/pyvenv.cfg", "venv311/bin/python",
                 "myvenv/notes.txt", "venv_setup.py", "pkg/venvs.py"):  # fmt: skip
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)
    return root


def test_the_package_leaves_out_state_history_checkpoints_and_environments(tmp_path: Path) -> None:
    """docs/clusters.md: out go `.aide/`, `.git`, `checkpoints`, `__pycache__`, `node_modules` (at any
    depth) and virtual environments: a folder holding `pyvenv.cfg` (any name), or one named `.venv` or
    `venv*` (with or without `pyvenv.cfg`). Files named like `venv*`, and folders that only end in
    `venv`, stay in."""
    root = tree(tmp_path / "ws")
    names = sorted(name for name, _ in package_files(root, [Path("state")]))
    assert names == ["data/corpus.txt", "myvenv/notes.txt", "pkg/m.py", "pkg/venvs.py", "train.py",
                     "venv_setup.py"]  # fmt: skip


def test_the_same_tree_makes_the_same_package(tmp_path: Path) -> None:
    root = tree(tmp_path / "ws")
    uri, data = build_package(root)
    again, _ = build_package(root)
    assert uri == again and uri.startswith("gcs://_ray_pkg_") and uri.endswith(".zip")
    assert sorted(zipfile.ZipFile(BytesIO(data)).namelist())[0] == "data/corpus.txt", "no top-level folder"
    (root / "train.py").write_text("changed")
    assert build_package(root)[0] != uri


def test_a_package_over_the_limit_is_refused_before_sending(tmp_path: Path) -> None:
    root = tree(tmp_path / "ws")
    (root / "big.bin").write_bytes(b"x" * 4096)
    with pytest.raises(PackageTooLarge, match=r"big\.bin"):
        build_package(root, limit=4000)
    with pytest.raises(PackageTooLarge, match=r"over 4096 bytes .*: at big\.bin"):
        build_package(root, limit=4096)  # Ray refuses a package of exactly its limit too


def test_the_package_limit_is_rays_own() -> None:
    assert MAX_PACKAGE_BYTES == 512 * 1024 * 1024 == package_limit({})
    assert package_limit({PACKAGE_LIMIT_VARIABLE: "1048576"}) == 1024 * 1024
    assert package_limit({PACKAGE_LIMIT_VARIABLE: "lots"}) == MAX_PACKAGE_BYTES


# -- status -------------------------------------------------------------------------------------


def test_ray_statuses_map_onto_ours() -> None:
    assert live_status("PENDING", False) is RunStatus.STARTING
    assert live_status("RUNNING", False) is RunStatus.RUNNING
    assert live_status("RUNNING", True) is RunStatus.STOPPING
    assert live_status("SUCCEEDED", False) is None
    assert final_status("STOPPED", True) is RunStatus.STOPPED
    assert final_status("SUCCEEDED", True) is RunStatus.SUCCEEDED
    assert final_status("FAILED", True) is RunStatus.RESTARTING
    assert final_status("FAILED", False) is RunStatus.CRASHED
    assert final_status("RUNNING", False) is None


def test_the_exit_code_and_signal_come_from_rays_message() -> None:
    assert exit_of("Job entrypoint command failed with exit code 1, last available logs") == (1, None)
    assert exit_of("Job entrypoint command failed with exit code -9, last") == (None, "SIGKILL")
    assert exit_of("runtime env setup failed") == (None, None)
    assert exit_of(None) == (None, None)
    assert first_line("first\nsecond") == "first" and len(first_line("x" * 900)) == 301
    assert stopped_by(2.0, 10) == "signal" and stopped_by(10.5, 10) == "kill"
    seen = 1_000_010.47  # a loaded machine saw the end 10.47 s after the stop was sent at 1_000_000
    assert ended_at({"end_time": 1_000_002_500}, seen) == 1_000_002.5, "Ray's own end time"
    assert ended_at({"end_time": None}, seen) == seen and ended_at({}, seen) == seen
    assert ended_at({"end_time": 9e15}, seen) == seen, "never later than seen"


def test_a_crash_is_written_as_a_local_run_writes_it() -> None:
    assert code_text(*exit_of("failed with exit code -9, last")) == "code -9"
    assert code_text(*exit_of("failed with exit code -64, last")) == "code -64"
    assert code_text(3, None) == "code 3" and code_text(None, None) == "with no exit status"
    assert ended_text(None, "SIGKILL") == "job was killed by SIGKILL"
    assert ended_text(3, None) == "job exited with code 3"


def test_resources_must_fit_on_one_node() -> None:
    nodes = [
        {"resources": {"CPU": 8.0, "GPU": 1.0, "memory": 2**34}},
        {"resources": {"CPU": 2.0, "GPU": 2.0}},
    ]
    assert missing_resources(nodes, {"gpus": 2, "cpus": 2}) is None
    assert missing_resources(nodes, {"gpus": 2, "cpus": 4}) == "2 GPUs, 4 CPUs"
    assert missing_resources(nodes, {"memoryMb": 1024}) is None
    assert missing_resources([], {}) is None
    assert describe_nodes(nodes) == "2 nodes, 10 CPUs, 3 GPUs"


def test_run_info_names_the_cluster_and_a_local_run_has_none(tmp_path: Path) -> None:
    from arena_ls.lifecycle.runview import RunView
    from arena_ls.protocol.wire import run_info

    run_dir = RunDir(tmp_path / "r-1")
    run_dir.path.mkdir()
    view = RunView(run_dir, spec())
    view.state = RunState(run_id="r-1", job_id="j")
    assert run_info(view)["cluster"] == {
        "name": "lab",
        "kind": "ray",
        "address": "http://h",
        "submissionId": None,
    }
    assert run_info(RunView(run_dir, spec(cluster=None)))["cluster"] is None


# -- the REST client against a stand-in for the dashboard ---------------------------------------


class _Dashboard(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path.startswith("/echo/"):  # a debugging proxy: its error page shows the request
            echo = "".join(f"{name}: {value}\n" for name, value in self.headers.items())
            self.send_response(500)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(f"{self.command} {self.path}\n{echo}".encode())
            return
        if self.headers.get("Authorization") != "Bearer right":
            code = 401 if "Authorization" not in self.headers else 403
            self.send_response(code)
            self.end_headers()
            return
        alive = {"raylet": {"state": "ALIVE", "resourcesTotal": {"CPU": 2.0}}}
        dead = {"raylet": {"state": "DEAD", "resourcesTotal": {"GPU": 8.0}}}
        body = json.dumps({"data": {"summary": [alive, dead]}})
        if self.path.startswith("/api/jobs/"):
            body = "[]"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def dashboard() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Dashboard)
    serve_in_thread(server)
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_client_sends_the_token_and_never_shows_it_or_the_address(dashboard: str, tmp_path: Path) -> None:
    assert normalise_address(dashboard + "/") == f"http://{dashboard}"
    assert JobsClient("lab", dashboard, "right").nodes() == [{"resources": {"CPU": 2.0}}], (
        "dead nodes skipped"
    )
    with pytest.raises(ClusterError) as wrong:
        JobsClient("lab", dashboard, "wrong").list_jobs()
    assert wrong.value.kind == "unauthenticated" and "refused" in str(wrong.value)
    assert "wrong" not in str(wrong.value).replace("'lab'", "") and dashboard not in str(wrong.value)
    assert "right" not in repr(JobsClient("lab", dashboard, "right"))
    with pytest.raises(ClusterError) as echoed:
        JobsClient("lab", f"http://{dashboard}/echo", "tok-4c7e1f").list_jobs()
    shown = str(echoed.value)
    assert echoed.value.kind == "refused" and "answered 500 to /api/jobs/" in shown, shown
    assert "Bearer <token>" in shown and "Host: <address>" in shown, f"the page is quoted, blanked: {shown}"
    assert "tok-4c7e1f" not in shown and dashboard not in shown, shown
    token = tmp_path / "token"
    token.write_text("right")
    target = ClusterTarget("lab", "ray", dashboard, str(token), ("python",))
    assert check_cluster(target, {}) == {
        "name": "cluster",
        "ok": True,
        "message": "cluster 'lab': 1 node, 2 CPUs, 0 GPUs",
    }
    assert "no node with 1 GPU" in check_cluster(target, {"gpus": 1})["message"]


def test_neither_the_server_nor_the_follower_imports_ray() -> None:
    """The Jobs API is spoken with the standard library: a laptop needs no Ray install to use a cluster."""
    import subprocess
    import sys

    code = (
        "import sys, arena_ls.protocol.server, arena_ls.cluster.agent, arena_ls.cluster.backend\n"
        "sys.exit(1 if any(m == 'ray' or m.startswith('ray.') for m in sys.modules) else 0)\n"
    )
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
