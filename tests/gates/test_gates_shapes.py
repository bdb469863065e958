"""What the messages say about the shapes of issue 15: guards that are not cadences,
retry loops, framework defaults (the fixtures pin codes and lines; these pin the words)."""

from __future__ import annotations

from arena_ls.gates import lint_trainer
from tests.gates.support import FIXTURES, only


def _messages(relative: str, code: str) -> list[str]:
    source = (FIXTURES / relative).read_bytes()
    return [finding.message for finding in only(lint_trainer(source, fp32_only=True), code)]


def test_a_rank_guard_is_not_a_cadence_and_the_save_is_per_epoch() -> None:
    [message] = _messages("ar005/fires_rank_modulo_guard_per_epoch.py", "AR005")
    assert "once per epoch" in message
    assert "ngpus_per_node" not in message
    assert not _messages("ar005/fires_rank_modulo_guard_per_epoch.py", "AR006")


def test_guards_that_hold_for_the_whole_run_are_not_cited() -> None:
    for name in (
        "passes_is_not_none_guard_on_name_set_once",
        "passes_local_rank_in_guard",
        "passes_is_main_process_guard",
        "passes_hasattr_guard",
        "passes_rank_modulo_guard_around_step_cadence",
    ):
        assert not _messages(f"ar005/{name}.py", "AR005"), name


def test_a_save_on_stop_is_not_taken_for_the_cadence() -> None:
    source = (FIXTURES / "ar005/fires_rank_modulo_guard_per_epoch.py").read_text()
    only_on_stop = source.replace("    if args.rank % ngpus_per_node == 0:\n        save(step)\n", "")
    [finding] = only(lint_trainer(only_on_stop, fp32_only=True), "AR005")
    assert "asked to stop" in finding.message


def test_lightning_defaults_are_read() -> None:
    [default] = _messages("ar005/fires_lightning_default_per_epoch.py", "AR005")
    assert "Lightning's default checkpoint is saved once per epoch" in default
    [epochs] = _messages("ar005/fires_lightning_every_n_epochs.py", "AR005")
    assert "every_n_epochs=2" in epochs
    [steps] = _messages("ar005/fires_lightning_every_n_train_steps_5000.py", "AR005")
    assert "every_n_train_steps=5000" in steps
    assert not _messages("ar005/passes_lightning_modelcheckpoint.py", "AR005")


def test_retry_loops_leave_cadences_to_the_step_loop() -> None:
    for shape in (
        "retry_for_attempt_in_step_loop",
        "retry_while_true_in_while_true_counter_loop",
        "retry_around_micro_steps_in_epoch_loop",
        "retry_inside_each_micro_step",
        "retry_break_after_try_in_while_counter",
    ):
        [message] = _messages(f"ar012/fires_eval_every_5_{shape}.py", "AR012")
        assert "every 5 steps" in message, shape
        [message] = _messages(f"ar005/fires_save_every_2000_{shape}.py", "AR005")
        assert "every 2000 steps" in message, shape
