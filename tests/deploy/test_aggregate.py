"""The cluster view without Ray: merged stats frames and merged /metrics over fake replica reports."""

from __future__ import annotations

from qtui.deploy.aggregate import ClusterView, merge_frames, merge_metrics, metric_total
from qtui.serve import events as ev
from qtui.serve.metrics import Metrics
from qtui.serve.stats import StatsFeed


def replica_frame(replica: str, rids: list[str], slots: list[int], steps_m: int, t0: float) -> dict:
    """A real StatsFeed frame of one replica with `rids` admitted to `slots` and one decode step of m."""
    feed = StatsFeed({"model": "tiny.gguf", "engine": "cpu", "device": "numpy", "max_slots": 4, "max_rows": 4,
                      "max_batch": 4, "replica": replica}, start_t=0.0)  # fmt: skip
    events: list[ev.Event] = []
    for rid, slot in zip(rids, slots):
        events += [
            ev.Arrived(t0, rid, [1, 2, 3], {}, 3),
            ev.Admitted(t0, rid, slot),
            ev.Prefilled(t0, rid, slot, 3, 1.0),
        ]
    events.append(ev.Step(t0 + 0.01, steps_m, 2.0, slots[:steps_m], [7] * steps_m, 0, len(slots)))
    feed.consume(events)
    return feed.frame(t0 + 0.02)


def test_merged_frame_adds_up_and_keeps_slots_distinct():
    a = replica_frame("a", ["r1", "r2"], [0, 1], 2, 1.0)
    b = replica_frame("b", ["r3"], [0], 1, 1.5)
    merged = merge_frames({"b": b, "a": a})
    assert merged["op"] == "stats" and merged["model"] == "tiny.gguf"
    assert merged["max_slots"] == 8 and merged["active"] == 3 and merged["queue"] == 0
    assert [(s["replica"], s["slot"], s["id"]) for s in merged["slots"]] == [("a", 0, "r1"), ("a", 1, "r2"),
                                                                              ("b", 4, "r3")]  # fmt: skip
    assert merged["batch_hist"] == {"1": 1, "2": 1}
    assert [s[1] for s in merged["steps"]] == [2, 1]  # by time
    assert merged["agg_tok_s"] == a["agg_tok_s"] + b["agg_tok_s"] > 0
    assert [r["replica"] for r in merged["replicas"]] == ["a", "b"] and merged["t"] == b["t"]


def test_a_silent_replica_drops_out():
    view = ClusterView(stale_s=3.0)
    view.report("a", replica_frame("a", ["r1"], [0], 1, 1.0), "", now=10.0)
    view.report("b", replica_frame("b", ["r2"], [0], 1, 1.0), "", now=12.0)
    assert [r["replica"] for r in view.frame(12.5)["replicas"]] == ["a", "b"]
    assert [r["replica"] for r in view.frame(14.0)["replicas"]] == ["b"]  # a: 4 s without a report
    assert view.frame(20.0)["replicas"] == [] and view.frame(20.0)["max_slots"] == 0


def test_merged_metrics_label_each_replica_and_sum_back():
    texts = {}
    for replica, n in (("a", 3), ("b", 5)):
        m = Metrics()
        m.consume([ev.Step(0.0, n, 1.0, list(range(n)), [7] * n, 0, n)])
        m.consume([ev.Done(0.0, f"{replica}{i}", i, "ab", [1, 2], "length", 4, 5.0, 10.0, n, None) for i in range(n)])
        texts[replica] = m.render(queue=0, active=0, max_slots=4, max_rows=4, is_draining=False)
    text = merge_metrics(texts)
    assert text.count("# TYPE qtui_requests counter") == 1
    assert 'qtui_requests_total{outcome="length",replica="a"} 3.0' in text
    assert metric_total(text, "qtui_requests_total", outcome="length") == 8
    assert metric_total(text, "qtui_requests_total", outcome="length", replica="b") == 5
    assert metric_total(text, "qtui_batch_size_count") == 2 and metric_total(text, "qtui_max_slots") == 8
    assert metric_total(text, "qtui_replicas") == 2
