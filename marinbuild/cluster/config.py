"""``--cluster``: from a Ray cluster launcher config (``infra/NAME.yaml``) to the head's dashboard address.

``find_config`` takes a YAML path, or a name looked up in the workspace's ``infra/`` as Marin's ``ray_run.py --cluster``
does. ``resolve_cluster`` finds the head as Ray's launcher does: ``provider.head_ip`` for a ``local`` provider, else
``ray.autoscaler.sdk.get_head_node_ip`` (``head_ip_of`` replaces that one call); the port is the head's
``--dashboard-port``, else 8265. Every failure is a one-line ``ClusterConfigError``."""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_DASHBOARD_PORT = 8265
NAME_PATTERNS = ("{}.yaml", "marinbuild-{}.yaml", "marin-{}.yaml", "{}.yml")


class ClusterConfigError(Exception):
    """A ``--cluster`` that names no config, a config that does not parse, or a head that cannot be found."""


@dataclass(frozen=True)
class ClusterAddress:
    name: str
    config_path: Path
    head_ip: str
    dashboard_port: int

    @property
    def dashboard_url(self) -> str:
        return f"http://{self.head_ip}:{self.dashboard_port}"


def find_config(cluster: str, search_dirs: list[Path]) -> Path:
    """The config file ``cluster`` names: a path, or a name in the ``infra/`` folder of one of ``search_dirs``."""
    given = Path(cluster).expanduser()
    if given.suffix in (".yaml", ".yml") or given.is_file():
        if given.is_file():
            return given
        raise ClusterConfigError(f"--cluster {cluster}: no such file")
    infra_dirs = [d / "infra" for d in dict.fromkeys(search_dirs) if (d / "infra").is_dir()]
    for infra in infra_dirs:
        for pattern in NAME_PATTERNS:
            candidate = infra / pattern.format(cluster)
            if candidate.is_file():
                return candidate
    configs = [p for infra in infra_dirs for p in sorted(infra.glob("*.y*ml"))]
    for path in configs:
        try:
            if load_config(path).get("cluster_name") == cluster:
                return path
        except ClusterConfigError:
            continue
    known = ", ".join(p.stem for p in configs) or "none"
    where = " or ".join(str(d) for d in infra_dirs) or "no infra/ folder here or in the workspace"
    raise ClusterConfigError(
        f"--cluster {cluster}: no cluster config of that name in {where} (configs: {known}); "
        "pass a path to a Ray cluster YAML"
    )


def load_config(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ClusterConfigError(f"cannot read the cluster config {path}: {_one_line(exc)}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("provider"), dict):
        raise ClusterConfigError(f"{path} is not a Ray cluster config (no provider: mapping)")
    return data


def dashboard_port(config: dict[str, Any]) -> int:
    for command in config.get("head_start_ray_commands") or []:
        found = re.search(r"--dashboard-port[= ](\d+)", str(command))
        if found:
            return int(found.group(1))
    return DEFAULT_DASHBOARD_PORT


def ray_head_ip(config_path: Path) -> str:
    """The head node's IP as Ray's cluster launcher sees it (``ray get-head-ip``), through Ray's SDK."""
    from ray.autoscaler.sdk import get_head_node_ip

    with contextlib.redirect_stdout(sys.stderr):  # what Ray's launcher prints is not this command's result
        return get_head_node_ip(str(config_path))


def resolve_cluster(
    cluster: str, search_dirs: list[Path], head_ip_of: Callable[[Path], str] = ray_head_ip
) -> ClusterAddress:
    """Where the cluster ``cluster`` names (a config path or name) has its head and dashboard."""
    path = _shown(find_config(cluster, search_dirs))
    config = load_config(path)
    name = str(config.get("cluster_name") or path.stem)
    provider = config["provider"]
    if provider.get("type") == "local":
        head_ip = provider.get("head_ip")
        if not head_ip:
            raise ClusterConfigError(f"{path}: a local provider needs provider.head_ip")
    else:
        try:
            head_ip = head_ip_of(path)
        except Exception as exc:
            raise ClusterConfigError(
                f"cannot find the head node of cluster {name} from {path} ({_one_line(exc)}); is it up "
                f"(`ray up {path}`) and are your cloud credentials set? Or pass --address"
            ) from exc
        if not head_ip:
            raise ClusterConfigError(f"cannot find the head node of cluster {name} from {path}; pass --address")
    return ClusterAddress(name, path, str(head_ip), dashboard_port(config))


def _shown(path: Path) -> Path:
    """``path`` relative to the current folder when it is under it (as the user would type it)."""
    try:
        return Path(os.path.relpath(path)) if path.resolve().is_relative_to(Path.cwd().resolve()) else path
    except (OSError, ValueError):
        return path


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."
