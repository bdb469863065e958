"""The cadence rules judge a trainer for the manifest jobs that run it, with their arguments.

``--ckpt-every`` defaults to 50000, but the job passes ``--ckpt-every 500``: the
gates judge 500, and say where it came from. Several jobs that set it apart are
judged apart: a finding on the file names the worst job and holds for the jobs
judged as badly only, so a start of a job whose own arguments pass is not refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arena_ls.gates import JobArgs, lint_trainer
from arena_ls.gates.budget import GateBudget
from arena_ls.gates.cache import TrainerGates
from arena_ls.manifest.loader import load_manifest_text
from arena_ls.trainer_facts.job_args import literal, trainer_arguments
from tests.gates.support import FIXTURES, only

DIT_LIKE = (FIXTURES / "ar005" / "passes_job_args_set_the_option.py").read_text(encoding="utf-8")
NANOGPT_LIKE = (FIXTURES / "ar005" / "passes_nanogpt_configurator_job_args.py").read_text(encoding="utf-8")


def ar005(source: str, *jobs: JobArgs) -> list[tuple[str, tuple[str, ...]]]:
    return [(f.message, f.jobs) for f in only(lint_trainer(source, fp32_only=True, jobs=jobs), "AR005")]


# --------------------------------------------------------------------------- reading the arguments


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--ckpt-every", "500"), ("--ckpt-every", "500")),
        (("--ckpt-every=500",), ("--ckpt-every", "500")),
        (("--ckpt-every", "500", "--ckpt-every=250"), ("--ckpt-every", "250")),  # the last one wins
        (("--", "--ckpt-every", "500"), None),  # after --, positionals
        (("--ckpt-every",), None),  # no value: argparse refuses it
        (("--ckpt-everyday", "500"), None),
        (("--save-every", "300"), ("--save-every", "300")),
    ],
)
def test_an_option_is_read_as_argparse_reads_it(
    args: tuple[str, ...], expected: tuple[str, str] | None
) -> None:
    assert JobArgs("j", args).option_value(("--ckpt-every", "--save-every")) == expected


def test_nanogpts_configurator_reads_only_name_equals_value() -> None:
    job = JobArgs("j", ("config/x.py", "--eval_interval=100", "--eval_interval=500", "--eval_intervals=9"))
    assert job.configurator_value("eval_interval") == "500"
    assert JobArgs("j", ("--eval_interval", "500")).configurator_value("eval_interval") is None
    # a config file after it may set it again: not taken
    after = JobArgs("j", ("--eval_interval=500", "config/train_gpt2.py"))
    assert after.configurator_value("eval_interval") is None


def test_values_are_read_as_the_trainer_reads_them() -> None:
    assert literal("500") == 500
    assert literal(" 2e3 ") == 2000.0
    assert literal("False") is False
    assert literal("out-dir") == "out-dir"


@pytest.mark.parametrize(
    ("args", "script", "expected"),
    [
        (("-u", "training/train.py", "--ckpt-every", "500"), "training/train.py", ("--ckpt-every", "500")),
        (("train.py", "--steps", "9"), "training/train.py", ("--steps", "9")),
        (("E:\\train\\train.py", "--steps", "9"), "train.py", ("--steps", "9")),
        (("-X", "utf8", "other.py", "--a"), None, ("--a",)),
        (("-m", "pkg.train", "--ckpt-every", "500"), "pkg/train.py", ("--ckpt-every", "500")),
        (("--ckpt-every", "500"), "train.py", ("--ckpt-every", "500")),
    ],
)
def test_the_trainers_arguments_are_those_after_the_script(
    args: tuple[str, ...], script: str | None, expected: tuple[str, ...]
) -> None:
    assert trainer_arguments(args, script) == expected


# --------------------------------------------------------------------------- judging


def test_no_job_judges_the_default_and_the_job_judges_its_value() -> None:
    [(message, jobs)] = ar005(DIT_LIKE)
    assert "every 50000 steps" in message and "the default of --ckpt-every" in message and jobs == ()
    assert ar005(DIT_LIKE, JobArgs("dit", ("--ckpt-every", "500"))) == []


def test_a_value_from_the_job_that_fails_says_it_came_from_the_jobs_args() -> None:
    [(message, jobs)] = ar005(DIT_LIKE, JobArgs("dit", ("--ckpt-every", "5000")))
    assert "every 5000 steps" in message
    assert "5000 from the job's args (--ckpt-every 5000)" in message
    assert jobs == ()


def test_nanogpts_globals_take_the_jobs_value_through_its_configurator() -> None:
    [(message, _jobs)] = ar005(NANOGPT_LIKE)
    assert "every 2000 steps" in message
    assert ar005(NANOGPT_LIKE, JobArgs("gpt2", ("--eval_interval=500",))) == []
    [(message, _jobs)] = ar005(NANOGPT_LIKE, JobArgs("gpt2", ("--eval_interval=4000",)))
    assert "4000 from the job's args (--eval_interval=4000)" in message


def test_a_global_without_a_configurator_is_not_set_by_the_command_line() -> None:
    source = NANOGPT_LIKE.replace('exec(open("configurator.py").read())', "pass")
    [(message, _jobs)] = ar005(source, JobArgs("gpt2", ("--eval_interval=500",)))
    assert "every 2000 steps" in message


def test_jobs_judged_apart_name_the_worst_and_hold_for_it_alone() -> None:
    fast = JobArgs("fast", ("--ckpt-every", "500"))
    plain = JobArgs("plain", ("--steps", "9000"))
    [(message, jobs)] = ar005(DIT_LIKE, fast, plain)
    assert message.endswith("(job 'plain')") and "the default of --ckpt-every" in message
    assert jobs == ("plain",)


def test_several_jobs_as_bad_are_all_held_and_counted() -> None:
    jobs = [JobArgs("a", ("--ckpt-every", "9000")), JobArgs("b", ()), JobArgs("c", ("--ckpt-every", "100"))]
    [(message, held)] = ar005(DIT_LIKE, *jobs)
    assert message.endswith("(job 'a' and 1 other job)") and "9000 from the job's args" in message
    assert held == ("a", "b")


def test_a_sweep_that_sets_the_cadence_alike_is_judged_once_and_names_no_job() -> None:
    sweep = [JobArgs(f"lr{i}", ("--lr", str(10**-i), "--ckpt-every", "8000")) for i in range(200)]
    [(message, jobs)] = ar005(DIT_LIKE, *sweep)
    assert "(job" not in message and jobs == ()
    findings = lint_trainer(DIT_LIKE, fp32_only=True, jobs=tuple(sweep))
    assert all(f.jobs == () for f in findings)


def test_a_switch_in_the_jobs_args_is_read() -> None:
    source = DIT_LIKE.replace(
        'parser.add_argument("--resume", action="store_true")',
        'parser.add_argument("--resume", action="store_true")\n'
        'parser.add_argument("--rare", action="store_true")',
    ).replace("step % args.ckpt_every == 0", "step % (args.rare * 5000 + 100) == 0")
    assert ar005(source) == []
    [(message, _jobs)] = ar005(source, JobArgs("r", ("--rare",)))
    assert "every 5100 steps" in message
    assert ar005(source, JobArgs("r", ("--rare-not",))) == []


# --------------------------------------------------------------------------- the server's cache


def manifest_for(root: Path, jobs: list[tuple[str, list[str]]]) -> object:
    text = json.dumps(
        {
            "version": 1,
            "jobs": [
                {
                    "id": job_id,
                    "kind": "train",
                    "command": "{python}",
                    "args": ["train.py", *args],
                    "resume": {"args": ["--start-step", "{step}"]},
                }
                for job_id, args in jobs
            ],
        }
    )
    return load_manifest_text(text, root / "training" / "manifest.json", root)


def test_a_start_is_judged_for_its_own_job_and_the_file_for_the_worst(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(DIT_LIKE, encoding="utf-8")
    manifest = manifest_for(tmp_path, [("fast", ["--ckpt-every", "500"]), ("plain", [])])
    gates = TrainerGates(tmp_path, lambda: manifest, lambda: True)  # type: ignore[arg-type,return-value]
    jobs = manifest.jobs  # type: ignore[attr-defined]
    assert "AR005" not in {d.code for d in gates.errors(jobs["fast"])}
    assert "AR005" not in {d.code for d in gates.verdict(jobs["fast"]).errors}
    assert "AR005" in {d.code for d in gates.errors(jobs["plain"])}
    [shown] = [d for d in gates.lint_file(str(tmp_path / "train.py")) if d.code == "AR005"]
    assert "(job 'plain')" in shown.message and shown.jobs == ("plain",)
    assert gates.lints == 1, "one lint serves the file and both jobs"


def test_a_new_manifest_with_other_arguments_is_judged_again(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(DIT_LIKE, encoding="utf-8")
    current = [manifest_for(tmp_path, [("dit", [])])]
    gates = TrainerGates(tmp_path, lambda: current[0], lambda: True)  # type: ignore[arg-type,return-value]
    assert "AR005" in {d.code for d in gates.errors(current[0].jobs["dit"])}  # type: ignore[attr-defined]
    current[0] = manifest_for(tmp_path, [("dit", ["--ckpt-every=500"])])
    assert "AR005" not in {d.code for d in gates.errors(current[0].jobs["dit"])}  # type: ignore[attr-defined]


def test_the_gates_worker_process_reads_the_jobs_too() -> None:
    budget = GateBudget()
    try:
        jobs = (JobArgs("fast", ("--ckpt-every", "500")), JobArgs("plain", ()))
        found = [f for f in budget.lint(DIT_LIKE, True, (), jobs) if f.code == "AR005"]
        assert [f.jobs for f in found] == [("plain",)]
    finally:
        budget.close()


# --------------------------------------------------------------------------- arena check


def check_workspace(root: Path, jobs: list[tuple[str, list[str]]]) -> tuple[int, str]:
    import io

    from arena_ls.client.lint import make_manifest_linter
    from arena_ls.gates.check import main_check

    (root / "training").mkdir(exist_ok=True)
    (root / "train.py").write_text(DIT_LIKE, encoding="utf-8")
    manifest = manifest_for(root, jobs)
    (root / "training" / "manifest.json").write_text(
        json.dumps(
            {
                "version": 1,
                "jobs": [
                    {
                        "id": job.id,
                        "kind": "train",
                        "command": "{python}",
                        "args": list(job.args),
                        "resume": {"args": ["--start-step", "{step}"]},
                    }
                    for job in manifest.jobs.values()  # type: ignore[attr-defined]
                ],
            }
        ),
        encoding="utf-8",
    )
    linter = make_manifest_linter(root)
    out = io.StringIO()
    code = main_check(
        [str(root / "training" / "manifest.json")], stdout=out, manifest_linter=linter, jobs_of=linter.jobs_of
    )
    return code, out.getvalue()


def test_arena_check_judges_the_manifests_scripts_for_their_jobs(tmp_path: Path) -> None:
    _code, out = check_workspace(tmp_path, [("fast", ["--ckpt-every", "500"]), ("plain", [])])
    [line] = [line for line in out.splitlines() if "AR005" in line]
    assert line.endswith("(job 'plain')")
    _code, out = check_workspace(
        tmp_path, [("fast", ["--ckpt-every", "500"]), ("also", ["--ckpt-every=200"])]
    )
    assert "AR005" not in out


def test_arena_check_of_the_script_alone_judges_its_defaults(tmp_path: Path) -> None:
    import io

    from arena_ls.gates.check import main_check

    (tmp_path / "train.py").write_text(DIT_LIKE, encoding="utf-8")
    out = io.StringIO()
    main_check([str(tmp_path / "train.py")], stdout=out)
    assert "every 50000 steps" in out.getvalue()


def test_jobs_that_differ_only_in_options_no_cadence_reads_share_one_view(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sweep of 300 jobs over ``--steps`` (declared, read by no cadence): judged by two views,
    not 300 (the defaults, and the one ``--ckpt-every 9000`` sets)."""
    from arena_ls.trainer_facts.context import TrainerContext

    made: list[object] = []
    original = TrainerContext.for_job

    def counting(self: TrainerContext, job: JobArgs | None) -> TrainerContext:
        made.append(job)
        return original(self, job)

    monkeypatch.setattr(TrainerContext, "for_job", counting)
    sweep = [JobArgs(f"s{i}", ("--steps", str(1000 + i))) for i in range(300)]
    sweep.append(JobArgs("rare", ("--steps", "5", "--ckpt-every", "9000")))
    findings = only(lint_trainer(DIT_LIKE, fp32_only=True, jobs=tuple(sweep)), "AR005")
    assert len(made) == 1, "one view: --ckpt-every 9000; the sweep is judged by the defaults"
    [finding] = findings  # every job saves too rarely: the first judged is named, all are held
    assert finding.message.endswith("(job 's0' and 300 other jobs)")
    assert len(finding.jobs) == 301 and "rare" in finding.jobs
