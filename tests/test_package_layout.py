"""The package's shape: its modules import each other without a cycle, lazy (function-level) imports included
(a lazy import that closes a cycle hides a layering the next change trips over), and a long function says why
it is long."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "harness"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the harness modules it imports anywhere in its body (a `from pkg import sub` names `pkg.sub`)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        deps = set()
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name in modules}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                for alias in node.names:
                    target = f"{base}.{alias.name}"
                    deps.add(target if target in modules else base)
        graph[name] = {d for d in deps if d in modules and d != name}
    return graph


def test_import_graph_sees_lazy_imports():
    graph = import_graph()
    assert "harness.workloads" in graph["harness.scenario"]  # a function-level import, counted
    assert "harness.engine.config" in graph["harness.engine.scheduler"]


def test_no_import_cycles():
    try:
        tuple(graphlib.TopologicalSorter(import_graph()).static_order())
    except graphlib.CycleError as exc:
        raise AssertionError(f"import cycle: {' -> '.join(exc.args[1])}") from None



def test_long_functions_say_why():
    """No function over 60 lines in harness/ without a reason in its docstring ("Long: ...")."""
    unexplained = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60:
                if "Long:" not in (ast.get_docstring(node) or ""):
                    unexplained.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}")
    assert not unexplained, unexplained


def test_both_tiers_implement_the_step_loops_contract():
    """harness.trace.Tier: what run_steps drives; the mirrored driver and the engine driver both implement all of
    it (a method missing from one tier fails here, not in the middle of a replay)."""
    import inspect

    from harness.driver import Driver
    from harness.engine.scheduler import EngineDriver
    from harness.trace import Tier

    wanted = {n for n, v in vars(Tier).items() if inspect.isfunction(v) and not n.startswith("__")}
    for cls in (Driver, EngineDriver):
        assert wanted <= {n for n in dir(cls) if callable(getattr(cls, n))}, (cls, wanted - set(dir(cls)))


def test_configuration_and_judging_modules_leave_the_environment_alone():
    """Process set-up is one explicit call at each entry point (harness.vllm_env.prepare), never a side effect of
    importing the run configuration or the judging code (importing harness.run_config once set CUDA_VISIBLE_DEVICES
    through the engine package)."""
    import os
    import subprocess
    import sys

    watched = ("VLLM_TARGET_DEVICE", "CUDA_VISIBLE_DEVICES", "TRITON_INTERPRET")
    env = {k: v for k, v in os.environ.items() if k not in watched}
    probe = ("import os, sys; import harness.run_config, harness.verdict, harness.known_issues, harness.scenario, "
             "harness.sweep, harness.patching, harness.cli; "
             f"print(sorted(k for k in {watched!r} if k in os.environ), 'vllm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip().splitlines()[-1] == "[] False", out.stdout
    prepared = probe.replace("import os, sys;", "import os, sys; import harness.vllm_env as e; e.prepare();")
    out = subprocess.run([sys.executable, "-c", prepared], capture_output=True, text=True, check=True, env=env)
    if not os.path.exists("/proc/driver/nvidia/version"):
        assert out.stdout.strip().splitlines()[-1] == f"{sorted(watched)} False", out.stdout


def test_either_door_into_vllm_sets_its_environment_first():
    """vLLM resolves its platform once, at first use: a process that imports vLLM through the symbolic tier's door
    (`harness.vllm_adapter`) sees the same platform as one through the engine tier's (it once saw another, whose
    Mamba state dtype halved real models' block sizes in the shared model-geometry cache)."""
    import subprocess
    import sys

    import os

    probe = "import {}; from vllm.platforms import current_platform; print(type(current_platform).__name__)"
    # a fresh process's environment: this one's has them set (the test session imported the harness)
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_TARGET_DEVICE", "CUDA_VISIBLE_DEVICES",
                                                           "TRITON_INTERPRET")}
    seen = {door: subprocess.run([sys.executable, "-c", probe.format(door)], capture_output=True, text=True,
                                 check=True, env=env).stdout.strip().splitlines()[-1]
            for door in ("harness.vllm_adapter", "harness.engine")}
    assert seen["harness.vllm_adapter"] == seen["harness.engine"], seen


# the doors into vLLM (docs/architecture.md "The doors into vLLM"): only these modules import it
VLLM_DOORS = {"harness/vllm_adapter.py", "harness/release.py", "harness/vllm_style_split_grid.py",
              "harness/e2e/engine.py", "harness/e2e/connector.py", "harness/mutants/worker_v1.py",
              "harness/mutants/worker_v2.py", "harness/mutants/gdn.py"}
VLLM_DOOR_FOLDERS = ("harness/engine/", "harness/fixes/")


def importers(engine: str) -> set[str]:
    """The modules with an import statement of `engine` (a test template's text does not count)."""
    out = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            if any(n.split(".")[0] == engine for n in names):
                out.add(path.relative_to(PACKAGE.parent).as_posix())
    return out


def test_only_the_sglang_wing_imports_sglang_and_it_never_imports_vllm():
    """The SGLang wing (harness/sglang/) is the only door to SGLang and no door to vLLM (issue 46's wall)."""
    wing = "harness/sglang/"
    sglang = importers("sglang")
    assert "harness/sglang/env.py" in sglang  # the check sees an import where there is one
    outside = sorted(m for m in sglang if not m.startswith(wing))
    assert not outside, f"modules importing sglang outside harness/sglang/: {outside}"
    inside = sorted(m for m in importers("vllm") if m.startswith(wing))
    assert not inside, f"harness/sglang/ modules importing vllm: {inside}"


def test_only_the_doors_import_vllm():
    """A module that imports vLLM outside the doors docs/architecture.md lists fails here (the wall a second
    engine's wing needs, issue 46): the rest reaches vLLM through them."""
    importers_ = importers("vllm")
    assert "harness/vllm_adapter.py" in importers_ and "harness/engine/config.py" in importers_
    outside = sorted(m for m in importers_ if m not in VLLM_DOORS and not m.startswith(VLLM_DOOR_FOLDERS))
    assert not outside, f"modules importing vLLM outside the doors: {outside}"
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    assert all(f"`{Path(m).name}`" in text or Path(m).stem in text for m in VLLM_DOORS)


def _private_uses(path: Path) -> list[str]:
    """`from harness.X import _name` and `alias._name` on an imported harness module, in one file."""
    tree = ast.parse(path.read_text(), str(path))
    found, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("harness"):
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private:
                    found.append(f"{node.module}.{alias.name}")
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("harness") and alias.asname:
                    aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            found.append(f"{aliases[node.value.id]}.{node.attr}")
    return found


def test_no_module_reaches_into_another_modules_private_names():
    """The package, its benches, tools and fuzz targets use what another module makes public, never its `_names`
    (issue 46's wall: a private name is free to change with its module). Tests may reach in: they test it."""
    root = PACKAGE.parent
    files = [p for d in ("harness", "bench", "tools", "fuzz") for p in (root / d).rglob("*.py")]
    assert (root / "harness" / "witness.py") in files  # the walk sees the package
    reached = {str(p.relative_to(root)): uses for p in files if (uses := _private_uses(p))}
    assert not reached, f"private names used outside their module: {reached}"



# the engine-free core (issue 46's wall): nothing it imports, anywhere in a body, imports an engine
CORE = ("harness.scenario", "harness.run_config", "harness.engine_options", "harness.trace", "harness.oracles",
        "harness.artifacts", "harness.errors", "harness.states", "harness.tokens", "harness.patches",
        "harness.sglang.geometry")
# shared by both wings, engine-free when imported; they still reach vLLM's doors in function bodies for
# release-dependent choices (the generator's drafters and budgets, known issues' fixes, verdict replays)
SHARED = ("harness.verdict", "harness.genome", "harness.generate", "harness.known_issues", "harness.sglang",
          "harness.sglang.sweep")


def test_the_core_reaches_no_engine_even_lazily():
    graph = import_graph()
    engines = {m.removesuffix(".py").replace("/", ".") for m in importers("vllm") | importers("sglang")}
    assert "harness.vllm_adapter" in engines and "harness.sglang.env" in engines
    for core in CORE:
        seen, todo = set(), [core]
        while todo:
            module = todo.pop()
            if module not in seen:
                seen.add(module)
                todo.extend(graph.get(module, ()))
        assert not seen & engines, f"{core} reaches modules that import an engine: {sorted(seen & engines)}"


def test_the_core_and_what_both_wings_share_import_without_any_engine():
    """In a process where importing vLLM or SGLang raises: each engine is reached only through its wing's doors,
    when a replay runs."""
    import subprocess
    import sys

    blocker = ("import sys\n"
               "class Block:\n"
               "    def find_spec(self, name, path=None, target=None):\n"
               "        if name.split('.')[0] in ('vllm', 'sglang'):\n"
               "            raise ImportError(f'engine import: {name}')\n"
               "sys.meta_path.insert(0, Block())\n"
               f"for m in {CORE + SHARED!r}:\n"
               "    __import__(m)\n")
    out = subprocess.run([sys.executable, "-c", blocker], cwd=PACKAGE.parent, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
