"""Test seam: hook, when set, is called with the name of each step of a
commit ("before-prepare", "after-prepare", "before-commit-point",
"after-commit-point", "before-commit-rpc", "after-commit-rpc"), as the Go
SDK's failpoints (compiled only with -tags failpoints). The tests set it in
a child process to kill that process at a step; nothing else sets it."""

from __future__ import annotations

from typing import Callable, Optional

hook: Optional[Callable[[str], None]] = None


def inject(name: str) -> None:
    h = hook
    if h is not None:
        h(name)
