"""The import contracts in pyproject.toml hold, and break when someone imports upward.

Each case copies the three packages into a scratch tree, adds one import that goes
the wrong way, and runs `lint-imports` there: the contract that forbids it must fail.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _copy(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    for package in ("connectors", "gateway", "memory", "migrations"):
        shutil.copytree(
            ROOT / package, tree / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def test_the_tree_keeps_every_contract(tmp_path: Path) -> None:
    result = _lint(_copy(tmp_path))

    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "upward_import", "contract"),
    [
        ("memory/storage/models.py", "import memory.archive.archive", "storage at the bottom"),
        ("memory/context.py", "import gateway.settings", "connectors -> gateway -> memory"),
        ("gateway/llm/base.py", "import memory.storage.models", "knows nothing of storage"),
        ("gateway/turns/runner.py", "import gateway.inbox.core", "the edge over the core"),
        # The runner asks the commands through its own port: they sit above the turns.
        ("gateway/turns/runner.py", "import gateway.commands.registry", "the edge over the core"),
        # The lease keeper sits below every holder of a lease (turns, lanes, jobs).
        ("gateway/replicas/lease_keeper.py", "import gateway.turns.leases", "the edge over"),
        ("connectors/telegram/normalize.py", "import memory.storage.models", "never storage"),
        ("connectors/webchat/socket.py", "import gateway.inbox.core", "never storage"),
        # What comes in knows nothing of what operators do with it.
        ("gateway/inbox/core.py", "import gateway.operations.overview", "the edge over"),
        ("connectors/whatsapp/graph.py", "import connectors.telegram.errors", "independent"),
        ("connectors/discord/client.py", "import connectors.webchat.tokens", "independent"),
        # Events are told what happened; they never reach back into a turn.
        ("gateway/events/hub.py", "import gateway.turns.runner", "the edge over the core"),
        ("gateway/channels/split.py", "import gateway.channels.delivery", "no import cycles"),
        # A connector reaches the gateway through its SDK alone, even for what the SDK
        # itself re-exports.
        ("connectors/telegram/connector.py", "import gateway.settings", "only gateway.sdk"),
        ("connectors/webchat/socket.py", "import gateway.events.hub", "only gateway.sdk"),
        ("connectors/discord/client.py", "import gateway.channels.port", "only gateway.sdk"),
        ("connectors/whatsapp/graph.py", "import gateway.wiring", "only gateway.sdk"),
        # The SDK is the connectors' view: nothing in the gateway leans on it.
        ("gateway/channels/port.py", "import gateway.sdk", "the edge over the core"),
        # Routes ask application services (gateway.operations), never repositories...
        ("gateway/http/paging.py", "import memory.storage.repositories", "never the repositories"),
        # ...and only those they declare: the whole `Services` is gateway.http.deps' alone.
        ("gateway/http/api/people.py", "import gateway.services", "never the whole Services"),
    ],
)
def test_an_import_the_wrong_way_breaks_a_contract(
    tmp_path: Path, module: str, upward_import: str, contract: str
) -> None:
    tree = _copy(tmp_path)
    path = tree / module
    path.write_text(path.read_text() + f"\n{upward_import}  # the wrong way\n")

    result = _lint(tree)

    assert result.returncode != 0
    broken = result.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken, result.stdout


def test_connectors_are_forbidden_every_gateway_module_but_the_sdk() -> None:
    """The forbidden contract lists modules one by one (import-linter has no "all but"),
    so a gateway module added without a line there would be open to connectors."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = (c for c in contracts["contracts"] if "only gateway.sdk" in c["name"])
    gateway = ROOT / "gateway"
    children = {
        f"gateway.{child.stem}"
        for child in gateway.iterdir()
        if (child.suffix == ".py" and child.name != "__init__.py")
        or (child / "__init__.py").exists()
    }

    assert sorted(children - set(contract["forbidden_modules"])) == ["gateway.sdk"]


def test_the_documented_layout_names_every_folder_and_module() -> None:
    """The layout in the docs maps the tree as it is: every package of the three, and
    every module directly in gateway/ and memory/, is named there (a folder moved or
    added without a line is a map that lies)."""
    page = (ROOT / "docs" / "development.md").read_text()
    layout = page.split("## Layout", 1)[1].split("```", 2)[1]
    named = set(re.findall(r"[a-z_]+(?:\.py|/)?", layout))
    packages = {
        init.parent.name + "/"
        for root in ("connectors", "gateway", "memory")
        for init in (ROOT / root).rglob("__init__.py")
        if init.parent.name not in ("connectors", "gateway", "memory")
    }
    modules = {
        module.name
        for root in ("gateway", "memory")
        for module in (ROOT / root).glob("*.py")
        if module.name not in ("__init__.py", "__main__.py")
    }
    # A connector's package is named by its channel, in the connectors/ line.
    channels = {f"{name}/" for name in ("telegram", "discord", "whatsapp", "webchat")}
    names = named | {f"{name}/" for name in named if f"{name}/" in channels}

    assert sorted((packages | modules) - names) == []
