"""The house's two wings: the toolkit (nmt/ outside nmt/study/, and train.py, evaluate.py, translate.py) never
imports the study, and no module of nmt imports one that imports it back, at the top or inside a function."""

import ast
from pathlib import Path

from conftest import ROOT

COMMANDS = ("train.py", "evaluate.py", "translate.py")


def imported(path: Path) -> set[str]:
    """Every nmt module `path` imports, anywhere in it (`from nmt import x` counts as nmt.x where x is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("nmt")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("nmt") and not node.level:
            found.add(node.module)
            found |= {
                f"{node.module}.{alias.name}"
                for alias in node.names
                if (ROOT / node.module.replace(".", "/") / f"{alias.name}.py").is_file()
                or (ROOT / node.module.replace(".", "/") / alias.name).is_dir()
            }
    return found


def modules() -> dict[str, Path]:
    return {
        ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): path
        for path in (ROOT / "nmt").rglob("*.py")
    }


def test_the_toolkit_and_its_commands_never_import_the_study():
    toolkit = {name: path for name, path in modules().items() if not name.startswith("nmt.study")}
    toolkit |= {command: ROOT / command for command in COMMANDS}
    reaching = {name: sorted(m for m in imported(path) if m.startswith("nmt.study")) for name, path in toolkit.items()}
    assert not {name: found for name, found in reaching.items() if found}


def test_no_module_imports_one_that_imports_it_back():
    graph = {name: {m for m in imported(path) if m in modules() and m != name} for name, path in modules().items()}

    def reaches(start: str, goal: str) -> bool:
        seen, stack = set(), [start]
        while stack:
            node = stack.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                stack.extend(graph.get(node, ()))
        return False

    circles = sorted((a, b) for a, targets in graph.items() for b in targets if reaches(b, a) and a < b)
    assert not circles


def test_every_model_and_attention_says_what_it_is_where_help_finds_it():
    """A class's docstring must be its first statement (not after a class attribute, where it is a dead string)."""
    from nmt.build import buildable

    models, attentions = buildable()
    undocumented = [name for name, cls in {**models, **attentions}.items() if not cls.__dict__.get("__doc__")]
    assert not undocumented


def python_files() -> list[Path]:
    return [
        path
        for folder in ("nmt", "scripts", "tests")
        for path in (ROOT / folder).rglob("*.py")
        if "__pycache__" not in path.parts
    ] + [ROOT / command for command in COMMANDS]


def test_the_code_keeps_to_its_size_limits():
    """No function over 50 lines, no module over 500 (nmt/ and scripts/): hard limits a reader can trust, with no
    count of modules or functions near them to aim at (issue 85: counts made the caps targets, and files were cut in
    halves to meet them); the formatter switched off only for a few aligned tables."""
    code = [path for path in python_files() if "tests" not in path.relative_to(ROOT).parts]
    too_long = []
    for path in code:
        text = path.read_text(encoding="utf-8")
        if len(text.splitlines()) > 500:
            too_long.append(f"{path.relative_to(ROOT)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno + 1 > 50:
                too_long.append(f"{path.relative_to(ROOT)}:{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert not too_long, too_long
    switched_off = sum(path.read_text(encoding="utf-8").count("# fmt: skip") for path in python_files())
    assert switched_off < 40


def test_ruff_finds_nothing_to_lint_or_format():
    import shutil
    import subprocess
    import sys

    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    for command in ([ruff, "check", "--quiet", "."], [ruff, "format", "--check", "--quiet", "."]):
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-1000:]
