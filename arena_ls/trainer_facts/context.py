"""Everything the rules read about one trainer, computed once and shared."""

from __future__ import annotations

import ast
import copy
import re
from functools import cached_property

from arena_ls.diagnostics import Span
from arena_ls.trainer_facts.cadence import Cadence, CadenceAnalyzer
from arena_ls.trainer_facts.checkpoints import SaveAnalyzer
from arena_ls.trainer_facts.facts import CallSite, ModuleFacts, collect_facts
from arena_ls.trainer_facts.job_args import JobArgs
from arena_ls.trainer_facts.kit import Kit
from arena_ls.trainer_facts.loop import TrainingLoop, find_training_loop
from arena_ls.trainer_facts.names import argument
from arena_ls.trainer_facts.patterns import lazy
from arena_ls.trainer_facts.reach import CallGraph, Path, Predicate, Root
from arena_ls.trainer_facts.sites import is_empty_cache
from arena_ls.trainer_facts.source import SourceText, comment_start
from arena_ls.trainer_facts.values import Resolver

_HOOK = lazy(r"^(training_step|on_\w+)$")
_CUDA_MENTION = lazy(r"cuda|gpu|nccl|device_map|accelerator", re.IGNORECASE)
"""``accelerator``: ``torch.accelerator.current_accelerator()`` (PyTorch 2.6+) picks the GPU too."""
_CUDA_LITERALS = ("cuda", "gpu", "nccl", "device_map", "accelerator")
_GPU_CHOOSING_PACKAGES = frozenset(
    {"lightning", "pytorch_lightning", "transformers", "trl", "accelerate", "deepspeed", "composer", "ignite"}
)
_LOAD_CALLS = frozenset({"load_state", "load", "load_checkpoint", "load_from_checkpoint"})
_RESUME_CALLS = frozenset({"resume_checkpoint", "resume_task_checkpoint"})
"""timm's loaders, ``resume_checkpoint(model, checkpoint_path, optimizer, ...)``: the path comes second,
and they return the epoch to resume from."""
_TORCH_PACKAGES = frozenset(
    {
        "torch",
        "torchvision",
        "torchaudio",
        "torchtext",
        "timm",
        "peft",
        "diffusers",
        "torchtune",
        "torchtitan",
    }
)
"""Packages that run on torch: a file importing one of them is a torch trainer."""
_CUDA_PACKAGES = frozenset({"cupy", "pycuda", "cuda", "numba", "triton", "apex", "bitsandbytes"})
_OTHER_ARRAY_PACKAGES = frozenset(
    {"jax", "flax", "optax", "tensorflow", "keras", "mlx", "paddle", "mindspore"}
)
"""Frameworks with their own device memory: ``transformers`` beside one of them is its Flax/TF side."""


class TrainerContext:
    """A parsed trainer and the analyses the rules share."""

    def __init__(
        self,
        source: SourceText,
        tree: ast.Module,
        *,
        fp32_only: bool | None,
        checkpoint_patterns: tuple[str, ...] = (),
        jobs: tuple[JobArgs, ...] = (),
    ) -> None:
        self.source = source
        self.tree = tree
        self.fp32_only = fp32_only
        self.checkpoint_patterns = checkpoint_patterns
        """The ``checkpoint.pattern`` of the jobs that run this trainer (AR014)."""
        self.jobs = jobs
        """The manifest jobs that run this trainer, with their arguments (the cadence rules judge each)."""
        self.job: JobArgs | None = None
        """The job this context judges for (its options resolve to the job's values): set in the
        views of ``for_job``, which the cadence rules judge each job with; None: the defaults."""
        self.facts: ModuleFacts = collect_facts(tree)
        self.graph = CallGraph(self.facts)
        self.resolver = Resolver(self.facts, self.job)

    def for_job(self, job: JobArgs | None) -> TrainerContext:
        """The same trainer judged for ``job``: its options resolve to the job's values.

        Shares the parse and every analysis that does not resolve values (the
        loop, the call graph, the saves); only the resolver and the cadences are its own.
        """
        self.training  # noqa: B018 (computed once, shared by every job's view)
        view = copy.copy(self)
        view.job = job
        view.jobs = (job,) if job is not None else ()
        view.resolver = self.resolver.for_job(job)
        view.__dict__.pop("cadences", None)
        return view

    def job_view(self, job: JobArgs, settings: tuple[tuple[str, str], ...]) -> TrainerContext:
        """The view judging ``job``, shared by every job (and rule) with the same ``settings``."""
        views: dict[tuple[tuple[str, str], ...], TrainerContext] = self.__dict__.setdefault("_job_views", {})
        view = views.get(settings)
        if view is None:
            view = views[settings] = self.for_job(job)
        return view

    @cached_property
    def training(self) -> TrainingLoop:
        return find_training_loop(self.facts, self.graph, self.source)

    @cached_property
    def kit(self) -> Kit:
        """Which calls are the trainer kit's (``arena_trainer``, contract 8.1)."""
        return Kit(self.facts)

    @cached_property
    def torch_free(self) -> bool:
        """The file imports neither torch (nor a package that runs on it) nor a CUDA library.

        A Flax, JAX or TensorFlow trainer has its own device memory: no CUDA rule
        (AR001-AR003, AR011) applies to it, even when it imports ``transformers``
        for its Flax models. A file with no import at all is a snippet, and a file
        with no training loop of its own (a loop in a class it imports from the
        project): nothing shows what they run on, so they are not judged torch-free.
        """
        imports = self.facts.imports
        if not imports or imports & (_TORCH_PACKAGES | _CUDA_PACKAGES):
            return False
        if imports & _OTHER_ARRAY_PACKAGES:
            return True
        if imports & _GPU_CHOOSING_PACKAGES or self.training.kind == "none":
            return False  # with no loop here, the loop is in a module this file imports
        return not mentions_in_code(self.source, self.facts, _CUDA_MENTION, _CUDA_LITERALS)

    @cached_property
    def cuda_free(self) -> bool:
        """The trainer never uses CUDA: AR001-AR003 and AR011 do not apply to it.

        That is a file with a training loop that imports torch and never mentions CUDA (no ``cuda``
        device or string, no ``.cuda()``, no ``torch.cuda``, no ``gpu`` device, no
        ``torch.accelerator``),
        and hands no device choice to a library that picks the GPU itself
        (Lightning, Hugging Face, Accelerate, DeepSpeed). A snippet without
        imports is not judged CUDA-free: nothing shows where it runs.
        """
        imports = self.facts.imports
        if self.torch_free:
            return True
        if "torch" not in imports or imports & _GPU_CHOOSING_PACKAGES:
            return False
        if self.training.kind != "loop":
            return False  # no training loop here: nothing to exempt
        return not mentions_in_code(self.source, self.facts, _CUDA_MENTION, _CUDA_LITERALS)

    @cached_property
    def resumes_from_option(self) -> bool:
        """The framework resumes from a checkpoint path the command line gives (a ``{path}`` resume).

        ``LightningCLI`` (``--ckpt_path``), or the resume argument of ``train(...)`` /
        ``fit(...)`` is not a constant and does not resolve to None/False in the
        file (``TrainingArguments(resume_from_checkpoint=None)`` passed on is not an option).
        """
        framework = self.training.framework
        if framework is None:
            return False
        if framework.cli:
            return True
        value = framework.resume_argument()
        if value is None or isinstance(value, ast.Constant):
            return False
        resolved = self.resolver.resolve(value, framework.call.scope)
        if resolved.origin.startswith("the default of "):
            return True  # an option's (or a parsed dataclass field's) default: the command line sets it
        return not (resolved.known and resolved.value in (None, False, ""))

    @cached_property
    def path_resume_option(self) -> str | None:
        """The option whose value is the checkpoint a trainer loads (a ``{path}`` resume), or None.

        ``accelerator.load_state(args.resume_from)``, ``torch.load(args.ckpt, ...)``,
        ``load_checkpoint(args.checkpoint)``, timm's ``resume_checkpoint(model,
        args.resume, optimizer)``: the relaunch gives the announced checkpoint's
        path, and the trainer reads its step from what it loads.
        """
        options = self.resolver.options
        if not options:
            return None
        for site in self.facts.calls:
            path: ast.expr | None
            if site.name in _LOAD_CALLS and site.node.args:
                path = site.node.args[0]
            elif site.name in _RESUME_CALLS:
                path = argument(site.node, 1, "checkpoint_path")
            else:
                continue
            if path is None:
                continue
            for node in ast.walk(path):
                if isinstance(node, ast.Attribute) and node.attr in options:
                    option = options[node.attr]
                    return next((flag for flag in option.flags if flag.startswith("--")), option.flags[0])
        return None

    def empties_cache(self, site: CallSite) -> bool:
        """``torch.cuda.empty_cache()`` or the kit's ``empty_cache(step)`` however it was imported."""
        return is_empty_cache(site) or self.kit.function(site) == "empty_cache"

    @cached_property
    def saves(self) -> SaveAnalyzer:
        return SaveAnalyzer(self.facts, self.graph)

    @cached_property
    def cadences(self) -> CadenceAnalyzer:
        return CadenceAnalyzer(self.facts, self.graph, self.resolver)

    @property
    def roots(self) -> list[Root]:
        """Where per-step code runs: the training loop, or a framework's hook methods."""
        training = self.training
        if training.loop is not None:
            return [training.loop]
        if training.framework is not None:
            return [
                scope
                for scope in self.facts.scopes
                if scope.kind == "function" and scope.class_name and _HOOK.match(scope.name)
            ]
        return []

    def paths(self, key: str, predicate: Predicate) -> list[tuple[Root, Path]]:
        """Paths from the training roots to calls matching ``predicate``, in source order."""
        found = [(root, path) for root in self.roots for path in self.graph.paths(root, key, predicate)]
        found.sort(key=lambda item: _position(item[1].first))
        return found

    def cadence(self, root: Root, path: Path) -> Cadence:
        return self.cadences.cadence(root, path)

    def span(self, node: ast.AST) -> Span:
        return self.source.span(node)

    def first_call(self, predicate: Predicate) -> CallSite | None:
        matches = [site for site in self.facts.calls if predicate(site)]
        return min(matches, key=_position) if matches else None


def mentions_in_code(
    source: SourceText,
    facts: ModuleFacts,
    pattern: re.Pattern[str],
    literals: tuple[str, ...],
    skip_lines: range = range(0),
) -> bool:
    """Whether ``pattern`` occurs in the code: not in a comment, not in a docstring.

    ``literals`` are lowercase strings every match contains: they are found
    with ``str.find`` over the lowercased text, and only their lines are
    matched against ``pattern`` (a regex scan of a big file costs more than
    the rest of a rule). No walk over the tree. Matches on ``skip_lines``
    (1-based) do not count.
    """
    text = source.text
    lowered = text.lower()
    positions: list[int] = []
    for literal in literals:
        at = lowered.find(literal)
        while at >= 0:
            positions.append(at)
            at = lowered.find(literal, at + 1)
    if not positions:
        return False
    docstring_lines = _docstring_lines(facts)
    counted_to, line = 0, 1
    for position in sorted(positions):
        line += text.count("\n", counted_to, position)
        counted_to = position
        if line in docstring_lines or line in skip_lines:
            continue
        code = source.line(line - 1)
        cut = comment_start(code) if "#" in code else -1
        if pattern.search(code if cut < 0 else code[:cut]):
            return True
    return False


def _docstring_lines(facts: ModuleFacts) -> set[int]:
    """1-based lines of the module's, classes' and functions' docstrings (cached in the facts)."""
    if facts.docstring_lines is not None:
        return facts.docstring_lines
    lines: set[int] = set()
    facts.docstring_lines = lines
    for scope in facts.scopes:
        body = getattr(scope.node, "body", [])
        if (
            body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and (isinstance(body[0].value.value, str))
        ):
            lines.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    return lines


def _position(site: CallSite) -> tuple[int, int]:
    return site.node.lineno, site.node.col_offset
