"""Cockpit actions more than one screen offers (the Runs and Live screens both stop runs).

Screens import from here, never from each other.
"""

from __future__ import annotations

from pathlib import Path


def confirm_and_stop(app, path: Path, meta: dict) -> None:
    """Ask, then stop a run: the child this cockpit started, or a headless run's process on this host.

    Both are stopped the same way (`core.runs.stop_process`: SIGINT, then SIGTERM and SIGKILL after the
    grace time) in a thread worker, so the screen stays live while the trainer saves its checkpoint.
    """
    from core.errors import UserError
    from core.runs import local_pid, stop_process
    from devops_tui.screens.confirm import ConfirmScreen

    launched = getattr(app, "launched", {}).get(path)
    if launched is None and meta.get("status") != "running":
        app.notify(f"{path.name} is not running", severity="warning")
        return

    def decide(choice: str | None) -> None:
        if choice != "stop":
            app.notify(f"not stopped: {path.name} keeps running", timeout=3)
            return
        if launched is not None:
            started = f"stopping {path.name}..."

            def stop() -> str:
                return f"{path.name} stopped (exit code {launched.stop()})"
        else:
            try:
                pid = local_pid(meta)
            except UserError as exc:
                app.notify(str(exc), severity="error")
                return
            started = f"asked {path.name} to stop (SIGINT to pid {pid})"

            def stop() -> str:
                return f"{path.name} stopped" if stop_process(pid) else f"{path.name}: process {pid} did not stop"

        app.run_worker(lambda: app.call_from_thread(app.notify, stop()), thread=True, group="stop-run",
                       exit_on_error=False)
        app.notify(started)

    app.push_screen(ConfirmScreen(f"Stop run {path.name}? It saves a checkpoint and ends as 'stopped'.",
                                  choices=[("stop", "Stop run"), ("cancel", "Cancel")], default="stop"), decide)
