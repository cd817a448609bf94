"""`qtui serve --replicas`: flag wiring, the checks made before any Ray cluster starts, and the application
the builder makes (no cluster is started here)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

import qtui.deploy
from qtui.cli import build_parser
from qtui.deploy.main import run_cluster, wants_cluster
from qtui.errors import BadRequest

# ray 2.60 declares pydantic fields the v1 way: its import warns (not ours to fix)
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray")


def parse(*argv: str):
    return build_parser().parse_args(["serve", "m.gguf", *argv])


def test_replicas_flag_is_off_by_default_and_parses():
    assert parse().replicas is None and parse().ray_address is None  # one process, no Ray
    args = parse("--replicas", "4", "--ray-address", "auto", "--engine", "cuda")
    assert (args.replicas, args.ray_address, args.engine) == (4, "auto", "cuda")


def test_replicas_without_ray_installed_names_the_extra(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    assert not wants_cluster(parse()) and not wants_cluster(parse("--replicas", "1"))  # one process, as today
    assert "serving in this process" in capsys.readouterr().err
    assert wants_cluster(parse("--replicas", "2"))
    with pytest.raises(BadRequest, match=r"qtui\[cluster\]"):
        run_cluster(parse("--replicas", "2"))


def test_bad_flags_fail_before_a_cluster_starts():
    pytest.importorskip("ray", reason="the cluster extra is not installed")
    with pytest.raises(BadRequest, match="--replicas must be >= 1"):
        run_cluster(parse("--replicas", "0"))
    with pytest.raises(BadRequest, match="requires --api-key"):
        run_cluster(parse("--replicas", "2", "--host", "0.0.0.0"))


def test_builder_types_serve_run_args_and_asks_one_gpu_per_cuda_replica():
    pytest.importorskip("ray", reason="the cluster extra is not installed")
    from qtui.deploy.app import build_app

    app = build_app({"model": "x.gguf", "replicas": "3", "engine": "cuda", "max_slots": "8", "window_ms": "20"})
    replica = app._bound_deployment  # Ray Serve keeps the bound deployment here
    assert replica.num_replicas == 3 and replica.ray_actor_options["num_gpus"] == 1
    assert replica.init_args[:2] == ("x.gguf", {"engine": "cuda", "max_slots": 8, "window_ms": 20.0})
    cpu = build_app({"model": "x.gguf", "replicas": 2, "engine": "cpu"})._bound_deployment
    assert cpu.num_replicas == 2 and cpu.ray_actor_options["num_gpus"] == 0


def test_kuberay_manifest_names_a_builder_that_builds():
    yaml = pytest.importorskip("yaml")
    pytest.importorskip("ray", reason="the cluster extra is not installed")
    manifest = yaml.safe_load((Path(qtui.deploy.__file__).parent / "kuberay.yaml").read_text())
    assert manifest["kind"] == "RayService" and manifest["spec"]["rayClusterConfig"]["rayVersion"] == "2.60.0"
    (app,) = yaml.safe_load(manifest["spec"]["serveConfigV2"])["applications"]
    module, name = app["import_path"].split(":")
    replica = getattr(importlib.import_module(module), name)(app["args"])._bound_deployment
    workers = manifest["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
    assert replica.num_replicas == workers["replicas"] and replica.ray_actor_options["num_gpus"] == 1
