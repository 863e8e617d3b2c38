"""The architecture the tree shows is the one the imports obey: no import cycle among the project's
modules (imports inside functions included), every edge points down the layers of qtts.core
(jobs -> synthesis -> engine -> model) and down the folders inside a layer, the jobs layer works
with torch missing altogether, a call of six or more positional arguments (a splat counted) is
one of a few known custom-op calls, a SamplingParams is built by keyword, no module but the
output layouts' own asks which layout it has, and the other layers reach the job layer through
its face (a few public modules)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = {"cli": "qtts.cli", "core": "qtts.core", "kernels": "qtts.kernels", "pkg": "qtts"}

# qtts doctor judges the vocoder by the cost qtts plan counts, and its bf16 audio on the lively
# weights the checkpoint maker draws.
DOCTOR_ALSO = {"capacity.vocoder_cost", "tiny.checkpoint"}
# layer -> layers it may import (besides itself). "qtts.core.X" modules are in layer X.
ALLOWED = {
    "errors": set(),  # qtts.core.errors: the ground floor every layer may raise from
    "model": {"errors"},
    "kernels": {"errors"},
    "engine": {"model", "kernels", "errors"},
    "synthesis": {"engine", "model", "kernels", "errors"},
    # the torch-free contract types, and the voice file's header (validation reads it)
    "jobs": {"synthesis.requests", "model.config", "model.voice_file", "errors"},
    "tiny": {"model", "synthesis", "errors"},
    "bench": {"engine", "model", "synthesis", "jobs", "kernels", "errors"},
    "capacity": {"bench", "engine", "model", "synthesis", "jobs", "errors"},  # qtts plan
    "doctor": {"bench", "engine", "model", "synthesis", "kernels", "errors"} | DOCTOR_ALSO,
    "quality": {"jobs", "model", "errors"},  # qtts score: reads out dirs through the jobs layer
    "voices": {"jobs", "synthesis", "model", "errors"},  # qtts voice: a job speaks a design
    "cli": {
        "jobs",
        "synthesis",
        "model",
        "bench",
        "capacity",
        "doctor",
        "quality",
        "voices",
        "engine",
        "kernels",
        "pkg",
        "errors",
    },  # fmt: skip
    "pkg": {"cli"},
}


def _modules() -> dict[str, Path]:
    out = {}
    for folder, package in PACKAGES.items():
        for path in (REPO / folder).rglob("*.py"):
            parts = [p for p in path.relative_to(REPO / folder).with_suffix("").parts]
            out[".".join([package, *[p for p in parts if p != "__init__"]])] = path
    return out


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found.update(n for n in names if n in modules)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {m: _imports(p, modules) - {m} for m, p in modules.items()}


def _layer(module: str) -> str:
    parts = module.split(".")
    if parts[:2] == ["qtts", "core"] and len(parts) > 2:
        return parts[2]
    if parts[:2] in (["qtts", "cli"], ["qtts", "kernels"]):
        return parts[1]
    return "pkg"


def test_no_import_cycles():
    graph, state, cycles = _graph(), {}, []

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for dep in sorted(graph[node]):
            if state.get(dep) == "open":
                cycles.append(path[path.index(dep) :] + [dep])
            elif dep not in state:
                visit(dep, [*path, dep])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == [], "\n".join(" -> ".join(c) for c in cycles)


def test_imports_point_down_the_layers():
    bad = []
    for module, deps in _graph().items():
        layer = _layer(module)
        for dep in deps:
            target = _layer(dep)
            sub = ".".join(dep.split(".")[2:4])  # e.g. "synthesis.requests"
            if target != layer and target not in ALLOWED[layer] and sub not in ALLOWED[layer]:
                bad.append(f"{module} -> {dep}")
    assert bad == [], "\n".join(sorted(bad))


# Inside a layer, its folders in order, bottom first: a module imports from its own folder or a
# folder before it, never after (docs/architecture.md, "What each layer may know").
FOLDER_ORDER = {
    "qtts.core.engine": ["device", "step", "loop", "vocoder", "plan"],
    "qtts.core.jobs": ["contract", "state", "rows", "output", "long_text", "work", "execution"],
}


def _folder_order_violations(package: str, order: list[str]) -> list[str]:
    rank = {folder: i for i, folder in enumerate(order)}
    depth = len(package.split("."))

    def folder(module: str) -> str | None:
        parts = module.split(".")
        return parts[depth] if parts[:depth] == package.split(".") and len(parts) > depth else None

    bad = []
    for module, deps in _graph().items():
        own = folder(module)
        if own is None:
            continue
        assert own in rank, f"{module}: folder {own!r} is not in FOLDER_ORDER[{package!r}]"
        for dep in deps:
            theirs = folder(dep)
            if theirs is not None and rank.get(theirs, -1) > rank[own]:
                bad.append(f"{module} -> {dep}")
    return bad


def test_folders_inside_a_layer_import_down_their_order():
    for package, order in FOLDER_ORDER.items():
        bad = _folder_order_violations(package, order)
        assert bad == [], f"{package}:\n" + "\n".join(sorted(bad))


def test_a_folder_order_violation_is_seen():
    """The check can fail: the engine's order reversed finds the imports that go down it."""
    assert _folder_order_violations("qtts.core.engine", FOLDER_ORDER["qtts.core.engine"][::-1])


def test_a_jobs_folder_order_violation_is_seen():
    """The check can fail for the jobs layer too: its order reversed finds imports that go down
    it, and so does each neighbouring pair of its folders swapped (each folder imports from the
    one just below it), but the bottom two: contract and state need nothing of each other."""
    order = FOLDER_ORDER["qtts.core.jobs"]
    assert _folder_order_violations("qtts.core.jobs", order[::-1])
    for i in range(1, len(order) - 1):
        swapped = [*order[:i], order[i + 1], order[i], *order[i + 2 :]]
        assert _folder_order_violations("qtts.core.jobs", swapped), (order[i], order[i + 1])


# The job layer's face: the only modules of core/jobs/ that another layer (cli/, quality/, bench/,
# capacity/, voices/, doctor/) imports, each with what it is for; the rest of core/jobs/ is its
# own (docs/architecture.md, "The job layer's face").
JOBS_FACE = {
    "qtts.core.jobs.contract.spec": "what a job is asked: its option groups and their choices",
    "qtts.core.jobs.contract.interfaces": "what a job needs of a model and of a progress sink",
    "qtts.core.jobs.execution.run": "a job's entry points: run_job, prepare_job, job_work",
    "qtts.core.jobs.execution.interrupt": "how a long pass stops on a signal",
    "qtts.core.jobs.work.chunks": "a job's work: an input's requests, its budget, split, chunks",
    "qtts.core.jobs.output.recorder": "a finished row's record: why it fails, its measures",
    "qtts.core.jobs.output.writer": "the audio encodings every layout writes",
    "qtts.core.jobs.output.results": "the out dir as its readers see it: views, rows, audio",
    "qtts.core.jobs.output.stores.registry": "the output layouts (--output)",
    "qtts.core.jobs.state.paths": "the names of an out dir's state files",
    "qtts.core.jobs.state.atomic_files": "a file written into an out dir whole or not at all",
    "qtts.core.jobs.state.lock": "one process at a time on a lock of the out dir",
}
MAX_FACE = 12


def _past_the_face(graph: dict[str, set[str]], face) -> list[str]:
    """Imports of a core/jobs/ module from outside it that is not on its face."""
    return sorted(f"{module} -> {dep}" for module, deps in graph.items()
                  if not module.startswith("qtts.core.jobs.") for dep in deps
                  if dep.startswith("qtts.core.jobs.") and dep not in face)  # fmt: skip


def test_the_job_layer_is_reached_through_its_face():
    """Every other layer imports the job layer through a few public modules, not its internals:
    at most MAX_FACE of them, each one imported."""
    graph = _graph()
    assert _past_the_face(graph, JOBS_FACE) == []
    used = {dep for module, deps in graph.items() if not module.startswith("qtts.core.jobs.")
            for dep in deps}  # fmt: skip
    assert set(JOBS_FACE) <= used, set(JOBS_FACE) - used  # no stale entry
    assert len(JOBS_FACE) <= MAX_FACE


def test_an_import_past_the_face_is_seen():
    """The check can fail: an import of the job layer's internals from the CLI is found."""
    cli, jobs = "qtts.cli.results_command", "qtts.core.jobs"
    graph = {cli: {f"{jobs}.state.records", f"{jobs}.contract.spec"},
             f"{jobs}.work.decide": {f"{jobs}.state.records"}}  # fmt: skip
    assert _past_the_face(graph, JOBS_FACE) == [
        "qtts.cli.results_command -> qtts.core.jobs.state.records"
    ]


def test_jobs_modules_are_all_in_folders():
    """qtts.core.jobs holds folders and its __init__ only: a module at the top would sit outside
    the folder order."""
    loose = [p.name for p in (REPO / "core" / "jobs").glob("*.py") if p.name != "__init__.py"]
    assert loose == []


# Calls of six or more positional arguments outside kernels/: a keyword names what each value is,
# so only custom-op calls on the graphed path keep positions (torch.library custom ops take
# their tensors positionally; a keyword there costs the dispatcher's argument parsing each step).
POSITIONAL_CALLS = {
    ("core/engine/step/fused_stack.py", "ops.qk_norm_rope_cache"): "custom op, every decode step",
    ("core/engine/step/fused_stack.py", "ops.qk_norm_rope_prefill"): "custom op, every prefill",
    ("core/engine/step/token_choice.py", "sample_tokens_op"): "custom op, every sampled token",
}
MANY_POSITIONAL = 6


def _positional_calls(paths, root: Path = REPO) -> dict[tuple[str, str], int]:
    found: dict[tuple[str, str], int] = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Call):
                if len(node.args) >= MANY_POSITIONAL:  # a splat counts, as one at least
                    key = (str(path.relative_to(root)), ast.unparse(node.func))
                    found[key] = found.get(key, 0) + 1
    return found


def test_many_positional_arguments_only_in_custom_op_calls():
    """Outside kernels/, splats counted: one call of each custom op, three calls in all."""
    paths = [p for p in _modules().values() if p.relative_to(REPO).parts[0] != "kernels"]
    assert _positional_calls(paths) == dict.fromkeys(POSITIONAL_CALLS, 1)
    assert len(POSITIONAL_CALLS) <= 3


def test_a_call_of_many_positional_arguments_is_seen(tmp_path):
    """The check can fail: six positional arguments are counted, a splat among them (as one: it
    holds one or more); a keyword is not."""
    probe = tmp_path / "probe.py"
    probe.write_text("f(1, 2, 3, 4, 5, 6)\ng(*models, 2, 3, 4, 5, 6)\nh(1, 2, 3, 4, 5, x=6)\n")
    assert _positional_calls([probe], root=tmp_path) == {("probe.py", "f"): 1, ("probe.py", "g"): 1}


def _sampling_params_by_position(paths, root: Path = REPO) -> list[str]:
    return [
        f"{path.relative_to(root)}:{node.lineno}"
        for path in paths
        for node in ast.walk(ast.parse(path.read_text("utf-8")))
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("SamplingParams")
        and node.args
    ]  # fmt: skip


def test_sampling_params_are_built_by_keyword():
    """Five numbers in a row read alike (is 0.9 top_p or the temperature?): a SamplingParams is
    built by keyword, in the source, its tools and its tests."""
    paths = [*_modules().values(), *(REPO / "tools").rglob("*.py"), *(REPO / "tests").rglob("*.py")]
    assert _sampling_params_by_position(paths) == []


def test_a_sampling_params_by_position_is_seen(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("SamplingParams(True, 0.9)\nconfig.SamplingParams(do_sample=True)\n")
    assert _sampling_params_by_position([probe], root=tmp_path) == ["probe.py:1"]


# Only a layout's own module (core/jobs/output/stores/formats/) and the registry that finds them
# name a layout: everything else asks the layout (a Layout's attributes and methods) what to do,
# never which one it is (docs/architecture.md, "Adding a layout").
LAYOUT_OWNERS = ("core/jobs/output/stores/formats/", "core/jobs/output/stores/registry.py")
NOT_A_LAYOUT = {("core/jobs/rows/manifest.py", "'parquet'"): "an input manifest's kind"}


def _layout_name_tests(paths, names: set[str], root: Path = REPO) -> list[str]:
    """Where a module compares a value with a layout's name, matches on one, keys a table by
    one, or names a layout's class or constant (FILES, ..._LAYOUT, FilesLayout)."""

    def named(expr: ast.AST) -> list[str]:
        out = []
        for n in ast.walk(expr):
            ident = n.id if isinstance(n, ast.Name) else getattr(n, "attr", None)
            if isinstance(n, ast.Constant) and n.value in names:
                out.append(repr(n.value))
            elif ident is not None and (ident in ("FILES", "FilesLayout") or
                                        ident.endswith("_LAYOUT")):  # fmt: skip
                out.append(ident)
        return out

    found = []
    for path in paths:
        rel = str(path.relative_to(root))
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Compare):
                hits = [h for e in (node.left, *node.comparators) for h in named(e)]
            elif isinstance(node, ast.match_case):
                hits = named(node.pattern)
            elif isinstance(node, ast.Dict):
                hits = [h for k in node.keys if k is not None for h in named(k)]
            elif isinstance(node, ast.Call) and ast.unparse(node.func) == "isinstance":
                hits = named(node.args[1]) if len(node.args) == 2 else []
            else:
                continue
            line = getattr(node, "lineno", None) or node.pattern.lineno  # a case: its pattern's
            found += [f"{rel}:{line} {h}" for h in hits if (rel, h) not in NOT_A_LAYOUT]
    return found


def test_no_module_but_the_layouts_asks_which_layout_it_has():
    """No module outside the layouts' own and the registry compares or branches on a layout's
    name: the files layout is asked as the archive formats are."""
    from qtts.core.jobs.output.stores.registry import layout_names

    names = set(layout_names())
    assert {"files", "webdataset", "parquet", "shar"} <= names
    paths = [p for p in _modules().values()
             if not str(p.relative_to(REPO)).startswith(LAYOUT_OWNERS)]  # fmt: skip
    assert _layout_name_tests(paths, names) == []


def test_a_question_on_a_layouts_name_is_seen(tmp_path):
    """The check can fail: a comparison, a match, a table and a type test on a layout."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        'if layout == "files": pass\n'
        "if spec.layout != FILES: pass\n"
        "match layout:\n    case 'webdataset': pass\n"
        "x = {'parquet': 1}\n"
        "y = isinstance(fmt, FilesLayout)\n"
        "z = layout == name\n"
    )
    found = _layout_name_tests([probe], {"files", "webdataset", "parquet"}, root=tmp_path)
    assert [f.split(" ", 1)[1] for f in found] == [
        "'files'", "FILES", "'webdataset'", "'parquet'", "FilesLayout"
    ]  # fmt: skip


def test_one_out_of_memory_loop():
    """Every `except ... OutOfMemoryError` of the source is in core/synthesis/oom_backoff.py:
    the try/shrink/free loop and the bench's report are written once."""
    catches = [
        f"{path.relative_to(REPO)}:{node.lineno}"
        for path in _modules().values()
        for node in ast.walk(ast.parse(path.read_text("utf-8")))
        if isinstance(node, ast.ExceptHandler) and node.type is not None
        and "OutOfMemoryError" in ast.unparse(node.type)
    ]  # fmt: skip
    assert catches and all(c.startswith("core/synthesis/oom_backoff.py") for c in catches), catches


BLOCK_TORCH = """
import importlib, pkgutil, sys
class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch.") or name in ("triton", "transformers"):
            raise ImportError(f"blocked: {name}")
sys.meta_path.insert(0, NoTorch())
"""


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK_TORCH + code], capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_the_jobs_layer_imports_without_torch():
    code = """
import qtts.core.jobs as jobs
names = [m.name for m in pkgutil.walk_packages(jobs.__path__, "qtts.core.jobs.")]
for name in names:
    importlib.import_module(name)
print(len(names), "torch" in sys.modules)
"""
    proc = _run(code)
    assert proc.returncode == 0, proc.stderr
    count, torch_loaded = proc.stdout.split()
    assert int(count) >= 10 and torch_loaded == "False"


def test_qtts_help_answers_without_torch():
    proc = _run("sys.argv = ['qtts', '--help']\nfrom qtts.cli.app import main\nmain()")
    assert proc.returncode == 0, proc.stderr
    assert "synth" in proc.stdout and "batch" in proc.stdout


def test_the_cli_never_imports_torch():
    """The CLI is thin: it parses options and prints; what touches tensors (a bench's size, the
    device --version names) lives in the core, even inside a function."""
    found = [
        f"{path.relative_to(REPO)}:{node.lineno}"
        for path in sorted((REPO / "cli").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text("utf-8")))
        if isinstance(node, ast.Import | ast.ImportFrom)
        and any(n.split(".")[0] in ("torch", "triton") for n in _imported_names(node))
    ]  # fmt: skip
    assert found == []


def _imported_names(node: ast.Import | ast.ImportFrom) -> list[str]:
    return [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]


def test_commands_hand_no_locals_to_the_core():
    """Options reach the job as typed groups (cli/job_options.py), never as a dict of locals()."""
    uses = [p.name for p in (REPO / "cli").rglob("*.py") if "locals()" in p.read_text("utf-8")]
    assert uses == []


def test_every_package_folder_is_installed():
    """pyproject lists packages by name (the folders install as subpackages of qtts): a folder
    missing there works in an editable install and breaks every wheel."""
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["tool"]["setuptools"]
                 ["packages"])  # fmt: skip
    folders = {package for folder, package in PACKAGES.items() if folder != "pkg"}
    for folder, package in PACKAGES.items():
        for init in (REPO / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(REPO / folder).parts
            folders.add(".".join([package, *parts]))
    assert folders - listed == set()
