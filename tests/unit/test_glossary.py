"""One name, one meaning (docs/architecture.md, "Glossary"): every identifier of the source that
holds one of the glossary's words (layout, settings, plan, record, tuning, job) is listed here
under the meaning it has, so a new one fails until someone decides it means what the glossary
says. Names are split into words (`MemoryPlan` -> memory, plan), so `planner` or
`settings_file` are read as what they are. The package's source is held to it; tools/ (scripts
beside it: the oracle's stop plans, the peers' run plans) is not."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCE = ("cli", "core", "kernels", "pkg")

# word -> every identifier holding it, all of the glossary's one meaning
KNOWN = {
    # an output layout: files, webdataset, parquet, shar (--output)
    "layout": {
        "FilesLayout", "Layout", "OutputLayout", "_output_layout",
        "default_layout", "layout", "layout_names", "layouts", "layouts_help",
        "_layout_of",
    },
    # the job settings a row's output depends on; their digest is its fingerprint
    "settings": {
        "settings", "settings_file", "old_settings", "same_settings", "_whole_by_settings",
    },
    # a memory plan: slots, KV lengths and bytes per length group on one device (qtts plan's)
    "plan": {
        "GroupPlan", "MemoryPlan", "MemoryPlanError", "PlanModel", "_first_chunk_plan",
        "bench_plan", "fitting_plan", "memory_plan", "plan", "plan_command", "plan_job",
        "plan_memory",
        "plan_model", "plan_rows", "plan_without_weights",
    },
    # one row's outcome, journalled and in the shard state (and its maker, the recorder); `record`
    # in cli/progress.py is logging's LogRecord, the name logging.Handler.emit gives it
    "record": {
        "FROM_RECORDS", "RECORD_COLUMNS", "RECORD_SCHEMA", "RecordContext", "RecordSource",
        "RowRecorder", "_record_work", "_records", "failed_record", "ok_record", "present_records",
        "pending_records", "record", "record_at", "record_source", "record_stamps", "recorder",
        "records",
    },
    # the engine's tuning on a device (never "settings")
    "tuning": {"EngineTuning", "tuning", "cpu_tuning", "gpu_tuning", "_tuning", "mode_tuning"},
    # a job: one input's rows made into one out dir with one set of options (qtts synth or
    # batch), over its job shards, rerun until done. Its spec, options and kind; its files in
    # the out dir (job.json, the job lock); its settings' fingerprint; what `qtts plan` and the
    # manifest bench say of it; its summary. Never one run of it (RunSetup, LockedRun) nor one
    # prompt in the engine (EngineRequest)
    "job": {
        "JOB_EPILOG", "JOB_LOCK_TIMEOUT_S", "JobFile", "JobFingerprint", "JobKind", "JobOptions",
        "JobSpec", "JobSummary", "LEGACY_JOB_FILE", "cpu_auto_for_job_file", "job",
        "job_command", "job_estimate", "job_file", "job_files", "job_fingerprint", "job_fit",
        "job_for", "job_lock", "job_options", "job_rows", "job_work", "plan_job", "prepare_job",
        "read_job_file", "require_job", "run_job", "write_job_file", "write_job_files",
    },
}  # fmt: skip
PLURALS = {
    "layouts": "layout", "plans": "plan", "records": "record", "recorder": "record",
    "jobs": "job",
}  # fmt: skip


def words(name: str) -> set[str]:
    split = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower().split("_")
    return {PLURALS.get(w, w) for w in split if w}


def identifiers(tree: ast.AST, module: str) -> set[str]:
    """The names a module defines: itself, its functions, classes, parameters and assigned names
    (attributes included)."""
    names = {module}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
    return names


def trees() -> dict[Path, ast.AST]:
    return {
        p: ast.parse(p.read_text("utf-8")) for root in SOURCE for p in (REPO / root).rglob("*.py")
    }


def unlisted(found: set[str], known: dict[str, set[str]]) -> list[str]:
    return sorted(f"{w}: {n}" for n in found for w in words(n) & known.keys() if n not in known[w])


def test_every_name_holding_a_glossary_word_has_its_one_meaning():
    found = set().union(*(identifiers(tree, path.stem) for path, tree in trees().items()))
    assert unlisted(found, KNOWN) == []


def test_a_name_with_a_second_meaning_is_seen():
    """The check can fail: a new name holding a glossary word is refused until listed."""
    probe = {"LayoutOfTensors", "settings_for_engine", "vocoder_plan", "EngineJob", "jobs"}
    assert unlisted(probe, KNOWN) == [
        "job: EngineJob", "job: jobs", "layout: LayoutOfTensors", "plan: vocoder_plan",
        "settings: settings_for_engine",
    ]  # fmt: skip


def misnamed_state_paths(tree: ast.AST) -> list[int]:
    """Lines where a StatePaths is held in a name other than `paths`: assigned (plainly, with an
    annotation, or to an attribute) or taken as a parameter typed StatePaths."""
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = {t.attr if isinstance(t, ast.Attribute) else ast.unparse(t) for t in targets}
            if ast.unparse(node.value.func) == "StatePaths" and names != {"paths"}:
                bad.append(node.lineno)
        elif isinstance(node, ast.arg) and node.annotation is not None:
            if ast.unparse(node.annotation) == "StatePaths" and node.arg != "paths":
                bad.append(node.lineno)
    return bad


def test_the_state_paths_are_held_in_paths_never_in_layout():
    """`layout` names an output layout only: a StatePaths is always held in `paths`."""
    bad = [f"{p.relative_to(REPO)}:{line}" for p, t in trees().items()
           for line in misnamed_state_paths(t)]  # fmt: skip
    assert bad == []


def test_a_misnamed_state_paths_is_seen():
    probe = """
layout = StatePaths(out)
self.layout = StatePaths(out)
where: StatePaths = StatePaths(out)
def f(layout: StatePaths): ...
paths = StatePaths(out)
self.paths = StatePaths(out)
"""
    assert misnamed_state_paths(ast.parse(probe)) == [2, 3, 4, 5]


def test_the_glossary_defines_each_word():
    text = (REPO / "docs" / "architecture.md").read_text("utf-8")
    glossary = text.split("## Glossary", 1)[1]
    rows = {line.split("|")[1].strip() for line in glossary.splitlines() if line.startswith("| ")}
    assert {"layout", "settings", "plan", "record", "tuning", "paths", "options", "job"} <= rows
