"""The recorder writes record by record: one record that cannot be written loses nothing else."""

from __future__ import annotations

import json

from qtui.serve import events as ev
from qtui.serve.recorder import Recorder


def test_a_failing_record_loses_only_itself(tmp_path):
    rec = Recorder(tmp_path, {"model": "m"}, start_t=0.0)
    rec.events([
        ev.Arrived(1.0, "c1:a", [3], {"max_tokens": 2}, 1),
        ev.Arrived(1.1, "c1:b", [4], {"max_tokens": object()}, 1),  # not JSON: this record alone is lost
        ev.Error(1.2, "c1:\udc00", "bad_request", "lone \udc00"),  # unencodable text: written escaped
        ev.Admitted(1.3, "c1:a", 0),
    ])  # fmt: skip
    rec.close()
    lines = [json.loads(line) for line in rec.path.read_text(encoding="utf-8").splitlines()]
    assert [(r["ev"], r.get("id")) for r in lines[1:]] == [
        ("arrival", "c1:a"),
        ("error", "c1:\udc00"),
        ("admit", "c1:a"),
    ]


def test_the_commit_named_by_qtui_commit_wins_over_the_checkouts_head(monkeypatch):
    """A copied tree whose .git is not its own (the GPU runner's) names its commit through QTUI_COMMIT; without it
    the commit is this checkout's HEAD (or None without git)."""
    import secrets

    from qtui.serve.recorder import git_commit

    monkeypatch.delenv("QTUI_COMMIT", raising=False)
    head = git_commit()
    named = secrets.token_hex(20)
    monkeypatch.setenv("QTUI_COMMIT", named)
    assert git_commit() == named != head
