"""Finding a pipeline from text: ``pipelines/taxi.py``, ``pipelines/taxi.py:taxi``, ``pkg.mod:name``."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import traceback
from pathlib import Path
from types import ModuleType

from ..errors import PipelineLoadError
from .pipeline import Pipeline

__all__ = ["load_pipeline", "load_module"]


def load_module(target: str) -> ModuleType:
    """Import a module given as a file path or a dotted name; errors name the file."""
    path = Path(target)
    if target.endswith(".py") or path.exists():
        if not path.is_file():
            raise PipelineLoadError(f"no pipeline module at {target!r} (looked for the file {path.resolve()})")
        # the same name for the same file in every process (hash() of a str changes per process)
        name = f"airflowless_user.{path.stem}_{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise PipelineLoadError(f"cannot load {target!r} as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        parent = str(path.resolve().parent.parent)
        if parent not in sys.path:  # so `from pipelines.x import y` works inside it; last, so that
            sys.path.append(parent)  # a file there named like a standard or installed module shadows none
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(name, None)
            raise PipelineLoadError(
                f"importing the pipeline module {target!r} failed: {type(exc).__name__}: {exc}\n"
                + "".join(traceback.format_exception(exc)[-3:])
            ) from exc
        return module
    try:
        return importlib.import_module(target)
    except Exception as exc:
        raise PipelineLoadError(
            f"importing the pipeline module {target!r} failed: {type(exc).__name__}: {exc}"
        ) from exc


def load_pipeline(target: str) -> Pipeline:
    """The pipeline named by ``target`` (``MODULE_OR_PATH[:NAME]``)."""
    module_part, _, name = target.partition(":") if not Path(target).exists() else (target, "", "")
    if ":" in target and not Path(target).exists():
        module_part, _, name = target.rpartition(":")
    module = load_module(module_part)
    found = {obj.name: obj for obj in vars(module).values() if isinstance(obj, Pipeline)}
    if name:
        attr = getattr(module, name, None)
        if isinstance(attr, Pipeline):
            return attr
        if name in found:
            return found[name]
        raise PipelineLoadError(
            f"{module_part!r} has no pipeline {name!r}; it defines {sorted(found) or 'no @pipeline functions'}"
        )
    if len(found) == 1:
        return next(iter(found.values()))
    if not found:
        raise PipelineLoadError(f"{module_part!r} defines no @pipeline function")
    raise PipelineLoadError(
        f"{module_part!r} defines several pipelines {sorted(found)}; choose one with {module_part}:NAME"
    )
