"""`csctl completion bash|zsh|fish` and job-id completion, against a real coordinator: bash
runs the script csctl prints; an unreachable appliance completes nothing, quickly, silently."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from appliance.client import ApplianceClient
from tests.integration.client.conftest import hold_queue
from tests.integration.coordinator.harness import RunningCoordinator

CSCTL = Path(sys.executable).parent / "csctl"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "CSCTL_SERVER"}
    env["PATH"] = f"{CSCTL.parent}:{env.get('PATH', '')}"
    return env | extra


def _bash_complete(address: str, *words: str) -> list[str]:
    """What bash offers after `csctl --server ADDRESS WORDS...` with the script of
    `csctl completion bash` loaded."""
    line = " ".join(["csctl", "--server", address, *words])
    script = (
        'eval "$(csctl completion bash)"\n'
        f"COMP_WORDS=({line}); COMP_CWORD={len(words) + 2}\n"
        '_csctl_completion csctl\nprintf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", script],
        capture_output=True, text=True, timeout=30, env=_env(),
    )  # fmt: skip
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return [line for line in done.stdout.splitlines() if line]


def test_bash_completes_commands_and_the_users_job_ids(
    coordinator: RunningCoordinator, observer: ApplianceClient, params_file: Path
) -> None:
    hold_queue(coordinator)
    first = observer.submit(params=params_file, num_csx=1, num_steps=5).id
    second = observer.submit(params=params_file, num_csx=1, num_steps=5).id
    observer.cancel_job(first)

    assert _bash_complete(coordinator.address, "get", "jo") == ["job", "jobs"]
    assert set(_bash_complete(coordinator.address, "get", "job", "''")) == {first, second}
    assert _bash_complete(coordinator.address, "cancel", "job", second[:-1]) == [second]
    assert set(_bash_complete(coordinator.address, "logs", "wsjob-")) == {first, second}
    observer.cancel_job(second)


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_get_the_ids_with_their_phase(
    coordinator: RunningCoordinator, observer: ApplianceClient, params_file: Path, shell: str
) -> None:
    hold_queue(coordinator)
    job_id = observer.submit(params=params_file, num_csx=1, num_steps=5).id
    script = subprocess.run(
        [CSCTL, "completion", shell], capture_output=True, text=True, timeout=30, env=_env()
    )
    assert script.returncode == 0 and f"_CSCTL_COMPLETE={shell}_complete" in script.stdout

    # What the script runs on a tab press: csctl in completion mode (zsh passes the index of
    # the word completed, fish the word itself).
    words = f"csctl --server {coordinator.address} get job wsjob-"
    cword = "5" if shell == "zsh" else "wsjob-"
    offered = subprocess.run(
        [CSCTL], capture_output=True, text=True, timeout=30,
        env=_env(_CSCTL_COMPLETE=f"{shell}_complete", COMP_WORDS=words, COMP_CWORD=cword),
    )  # fmt: skip
    assert job_id in offered.stdout and "QUEUED train" in offered.stdout
    observer.cancel_job(job_id)


def test_an_unreachable_appliance_completes_nothing_quickly_and_silently() -> None:
    started = time.monotonic()
    assert _bash_complete("127.0.0.1:1", "get", "job", "wsjob-") == []
    assert time.monotonic() - started < 10
    assert _bash_complete("127.0.0.1:99999", "get", "job", "''") == []


def test_an_unknown_shell_is_a_usage_error() -> None:
    done = subprocess.run(
        [CSCTL, "completion", "tcsh"], capture_output=True, text=True, timeout=30, env=_env()
    )
    assert done.returncode == 2
    assert "'tcsh' is not one of 'bash', 'zsh', 'fish'" in done.stderr
