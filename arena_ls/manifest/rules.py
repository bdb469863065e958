"""The manifest rules (AR101-AR115): one registry, used by the docs generator.

The loader reports these codes; this table says what each one means, why it
matters and how to fix it, for ``docs/rules.md``.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class ManifestRule:
    code: str
    name: str
    severity: str
    fires_when: str
    why: str
    fix: str


MANIFEST_RULES: tuple[ManifestRule, ...] = (
    ManifestRule("AR101", "invalid-json", "error",
                 "the file is not valid JSON (at the error's position), or it is missing or unreadable "
                 "(the message says which)",
                 "nothing in a manifest that does not parse can run",
                 "fix the JSON at the reported position; a missing manifest: create it "
                 "(README, \"Add your own job\")"),
    ManifestRule("AR102", "wrong-field", "error",
                 "a field is missing or of the wrong type (at that value); unknown fields are warnings",
                 "a job that cannot be read must not run half-configured",
                 "give the field the type the schema asks for (see docs/protocol.md)"),
    ManifestRule("AR103", "duplicate-id", "error", "two jobs share an id",
                 "`arena/start` names jobs by id; a shared id makes the allowlist ambiguous",
                 "rename one of the jobs"),
    ManifestRule("AR104", "bare-python", "error",
                 "`command` is a bare `python` / `python3`, or the Microsoft Store stub (a `python*.exe` "
                 "under `WindowsApps`, any case, either slash)",
                 "a bare interpreter name runs whatever is first on PATH, not the workspace's environment",
                 'write `"{python}"` (quick fix): the interpreter the workspace is configured with'),
    ManifestRule("AR105", "pythonpath", "warning", "`env` sets `PYTHONPATH`",
                 "the trainer's imports then depend on the manifest instead of the project's packaging",
                 "install the project (`pip install -e .`) instead"),
    ManifestRule("AR106", "no-resume-args", "error",
                 "a `train` job has no `resume.args` with `{step}` (or `{path}`, the checkpoint's path)",
                 "without them the watchdog cannot relaunch a crashed run from its last checkpoint",
                 'add `"resume": {"args": ["--resume", "--start-step", "{step}"]}` (quick fix); a trainer '
                 'that resumes from a path: `["--resume_from_checkpoint", "{path}"]` (Hugging Face), '
                 '`["--ckpt_path", "{path}"]` (Lightning)'),
    ManifestRule("AR107", "missing-path", "error", "`script` (or `cwd`) does not exist",
                 "the job would fail at once, or its trainer could not be gated",
                 "point `script` and `cwd` at files that exist (script is relative to cwd)"),
    ManifestRule("AR108", "trainer-gates", "error",
                 "the job's trainer fails error-severity gates (related information points at them)",
                 "a trainer that would lose work is refused at start (1004)",
                 "fix the trainer's gate findings"),
    ManifestRule("AR109", "needs-approval", "information", "the job needs approval",
                 "each start must pass `approved: true`", 'set `"status": "ready"` if it should not'),
    ManifestRule("AR110", "outside-workspace", "error",
                 "a path the job names leaves the workspace and the manifest's `roots`: `cwd`, `script`, "
                 "an argument that is an existing path (for every kind of job), or a `command` written as "
                 "a path (a bare name, a folder of PATH and the server's interpreter's folder are allowed); "
                 "also the manifest or the state folder being a link that leaves the workspace (then "
                 "nothing starts)",
                 "the manifest is the trust root: it may only run, read and write what the workspace holds",
                 "keep paths inside the workspace, or name their folder in the top-level `roots`; replace "
                 "the link with a real file or folder"),
    ManifestRule("AR111", "cluster-stop-file", "warning",
                 "a job with `runOn` uses `stop.method` `file` (the default)",
                 "on a cluster there is no stop file: a stop is Ray's (SIGTERM, then SIGKILL after "
                 "`graceSeconds`), so a trainer that only polls the stop file loses its work",
                 'set `"stop": {"method": "signal"}` and save a checkpoint on SIGTERM'),
    ManifestRule("AR112", "unknown-cluster", "error", "`runOn` names no cluster of the manifest's `clusters`",
                 "the job has nowhere to run", "add the cluster under `clusters`, or fix the name"),
    ManifestRule("AR113", "loader-variables", "warning",
                 "`env` overrides `PATH`, `LD_PRELOAD`, `LD_LIBRARY_PATH` or `PYTHONHOME`",
                 "these decide which programs and libraries the job loads: a manifest that sets them can "
                 "run code from outside the workspace",
                 "leave them to the user's environment; set the interpreter with the `python` setting"),
    ManifestRule("AR114", "trainer-as-task", "warning",
                 "a job with no `kind` (or `kind: task`) whose arguments name a `.py` script and `--resume`, "
                 "`--start-step` or the seed's `<step>`",
                 "a task gets no trainer gates, no pre-flight, no watchdog, and `<step>` reaches the trainer "
                 "as it is: a resumable trainer silently loses every protection",
                 "make it a `train` job with the resume arguments in `resume.args`, `<step>` written "
                 "`{step}` (quick fix)"),
    ManifestRule("AR115", "stage-without-command", "information",
                 "a top-level `stages` entry (the seed's older manifest): listed as a job with status "
                 "`stage` that cannot run",
                 "a stage has no command, so nothing can start it",
                 "turn it into a job of `jobs` (quick fix: a `train` job with `{python}`, `train.py` and "
                 "`resume.args`; edit its script)"),
)  # fmt: skip
