"""What README.md and docs/ tell a user to run exists: every script, module, study program and make target their
commands name."""

import re
import shlex

from conftest import ROOT

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# A command as the documents write it, in a code span or block: python X.py, python -m MODULE [PROGRAM [KIND]],
# bash scripts/X.sh, make TARGET (`.venv/bin/python` and `$(BIN)/python` count as python)
COMMAND = re.compile(
    r"(?:^|[\s`(;&|])(?:\S*/)?(?:python3?|bash)\s+(?P<script>[\w./-]+\.(?:py|sh))"
    r"|(?:^|[\s`(;&|])(?:\S*/)?python3?\s+-m\s+(?P<module>[\w.]+)(?:\s+(?P<program>[a-z_]+))?(?:\s+(?P<kind>[a-z_]+))?"
    r"|(?:^|[\s`(;&|])make\s+(?P<target>[a-z][\w-]*)",
)
CODE = re.compile(r"```.*?```|`[^`\n]+`", re.DOTALL)


def commands(text: str) -> list[re.Match]:
    """The commands in the code spans and blocks of a Markdown text (prose like "make up for" is not one)."""
    return [m for code in CODE.findall(text) for m in COMMAND.finditer(code)]


def missing(match: re.Match, targets: set[str]) -> str | None:
    """What a command names that does not exist, or None."""
    from nmt_study.__main__ import PROGRAMS
    from nmt_study.cli.measure import MEASURES

    if match["script"]:
        return None if (ROOT / match["script"]).is_file() else f"no file {match['script']}"
    if match["target"]:
        return None if match["target"] in targets else f"no make target {match['target']}"
    module = match["module"]
    path = ROOT / module.replace(".", "/")
    if not (path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()):
        return None if not module.startswith("nmt") else f"no module {module}"
    if module == "nmt_study" and match["program"]:
        if match["program"] not in PROGRAMS:
            return f"no study program {match['program']}"
        if match["program"] == "measure" and match["kind"] and match["kind"] not in MEASURES:
            return f"no measurement {match['kind']}"
    return None


def test_every_command_the_documents_give_names_something_that_exists():
    targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(encoding="utf-8"), re.MULTILINE))
    wrong = [
        f"{path.relative_to(ROOT)}: `{match.group(0).strip()}`: {problem}"
        for path in DOCUMENTS
        for match in commands(path.read_text(encoding="utf-8"))
        if (problem := missing(match, targets))
    ]
    assert not wrong, "\n".join(wrong)


def test_the_check_of_commands_finds_what_does_not_exist():
    found = commands("run `python scripts/benchmark.py --x` or `make nothing`; make up for it; `python -m nmt_study x`")
    targets = {"test"}
    problems = [missing(m, targets) for m in found]
    assert problems == ["no file scripts/benchmark.py", "no make target nothing", "no study program x"]
    assert [missing(m, targets) for m in commands("```\nmake test\npython -m nmt_study measure speed\n```")] == [
        None,
        None,
    ]


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_to_a_section_names_a_heading_that_exists():
    wrong = []
    for path in DOCUMENTS:
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(r"\]\(([\w./-]*\.md)?#([\w-]+)\)", text):
            target = (path.parent / match[1]) if match[1] else path
            headings = {slug(h) for h in re.findall(r"^#+\s+(.+)$", target.read_text(encoding="utf-8"), re.MULTILINE)}
            if match[2] not in headings:
                wrong.append(f"{path.relative_to(ROOT)}: {match[0]}")
    assert not wrong, "\n".join(wrong)
    assert (
        slug("Every variant at equal compute, early in training") == "every-variant-at-equal-compute-early-in-training"
    )


PROGRAMS = {"train.py": "train", "evaluate.py": "evaluate", "translate.py": "translate", "export.py": "export"}


def typed_commands(text: str) -> list[list[str]]:
    """Each `python train.py|evaluate.py|translate.py|export.py ...` line of a document's code blocks (a line
    continued with `\\` joined; what follows `#` dropped; after a pipe, the command it feeds), as its words."""
    found = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).split("|")[-1].strip()
            words = shlex.split(line) if line.startswith("python ") else []
            if len(words) > 1 and words[1] in PROGRAMS:
                found.append(words[1:])
    return found


def composes(program: str, options: list[str]) -> str | None:
    """None where `program options` composes with Hydra (a placeholder such as <time> filled in; a sweep's every
    value, the other options at their first; Hydra's own options left to Hydra); else why not."""
    from conftest import compose_config

    sweep = "-m" in options
    options = [re.sub(r"<[^>]+>", "x", o) for o in options if o != "-m" and not o.startswith("hydra")]
    first = [re.sub(r"=([^,]*),.*", r"=\1", o) if sweep else o for o in options]
    tries = [first] + [
        [*first[:i], f"{o.split('=', 1)[0]}={value}", *first[i + 1 :]]
        for i, o in enumerate(options)
        if sweep and "=" in o
        for value in o.split("=", 1)[1].split(",")[1:]
    ]
    for chosen in tries:
        try:
            compose_config(*chosen, config_name=PROGRAMS[program])
        except Exception as error:  # noqa: BLE001 (Hydra's and OmegaConf's errors share no base class)
            return str(error).splitlines()[0]
    return None


def test_every_command_in_the_documents_code_blocks_composes_as_typed():
    """What the docs' code blocks tell a user to type composes as typed: every option and config group exists."""
    typed = [(path, words) for path in DOCUMENTS for words in typed_commands(path.read_text(encoding="utf-8"))]
    wrong = [
        f"{path.relative_to(ROOT)}: {' '.join(words)}: {why}"
        for path, words in typed
        if (why := composes(*words[:1], words[1:]))
    ]
    assert not wrong, "\n".join(wrong)
    assert len(typed) >= 5
    made_up = typed_commands("```bash\npython train.py -m model=luong,nosuch \\\n  trainer.lr=0.1  # two\n```")
    assert made_up == [["train.py", "-m", "model=luong,nosuch", "trainer.lr=0.1"]]
    assert composes("train.py", made_up[0][1:]) and composes("train.py", ["trainer.max_step=5"])
    assert composes("train.py", ["-m", "model=luong,bahdanau", "seed=1,2"]) is None
