"""A throw-away Redis Cluster on loopback: three masters with RedisBloom, no replicas.

Built from :class:`tests.servers.RedisServer` processes started with ``cluster-enabled yes``
and joined by ``redis-cli --cluster create``, the way an operator creates one, so the tests
and ``bench/cluster.py`` talk to a real cluster (slots, MOVED redirections, CROSSSLOT refusals).
"""

from __future__ import annotations

import shutil
import subprocess
import time

import redis

from tests.servers import RedisServer, Service, ServiceUnavailable, free_port

REDIS_CLI_FIX = "install it: `apt-get install redis-tools` (Debian/Ubuntu)"
SLOTS = 16384
READY_TIMEOUT = 20.0


class ClusterNodeServer(RedisServer):
    """A ``redis-server`` with cluster mode on; its cluster bus gets a free port of its own
    (``cluster-port``), since the default ``port + 10000`` may be taken or out of range."""

    def _command(self) -> list[str]:
        return [
            *super()._command(),
            "--cluster-enabled", "yes",
            "--cluster-config-file", str(self.dir / "nodes.conf"),
            "--cluster-port", str(free_port()),
            "--cluster-node-timeout", "5000",
        ]  # fmt: skip


class RedisClusterServers(Service):
    """``masters`` cluster nodes on 127.0.0.1 holding all 16384 slots between them."""

    def __init__(self, masters: int = 3, *, bloom: bool = True) -> None:
        self.nodes = [ClusterNodeServer(bloom=bloom) for _ in range(masters)]

    @property
    def url(self) -> str:
        """``redis+cluster://`` URL of the first node (the client discovers the others)."""
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}/0"

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes if node.port is not None]

    def start(self) -> RedisClusterServers:
        """Start the nodes, create the cluster and wait until every node says it is ok."""
        cli = shutil.which("redis-cli")
        if cli is None:
            raise ServiceUnavailable(f"redis-cli not found; {REDIS_CLI_FIX}")
        for node in self.nodes:
            node.start()
        addresses = [f"127.0.0.1:{port}" for port in self.ports]
        create = subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if create.returncode != 0:
            raise ServiceUnavailable(
                f"redis-cli --cluster create failed: {(create.stdout + create.stderr)[-2000:]}"
            )
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        """Every node: ``cluster_state:ok``, all slots assigned, all nodes known."""
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if all(self._node_ready(node) for node in self.nodes):
                return
            time.sleep(0.1)
        states = {node.port: self._cluster_info(node) for node in self.nodes}
        raise ServiceUnavailable(f"cluster did not become ready: {states}")

    def _node_ready(self, node: RedisServer) -> bool:
        info = self._cluster_info(node)
        return (
            info.get("cluster_state") == "ok"
            and info.get("cluster_slots_ok") == str(SLOTS)
            and info.get("cluster_known_nodes") == str(len(self.nodes))
        )

    @staticmethod
    def _cluster_info(node: RedisServer) -> dict[str, str]:
        with node.client(decode_responses=True, socket_timeout=2) as client:
            info = client.execute_command("CLUSTER INFO")
        return {name: str(value) for name, value in info.items()}

    def cluster_client(self, **kwargs: object) -> redis.RedisCluster:
        """A redis-py cluster client seeded with the first node."""
        return redis.RedisCluster(host="127.0.0.1", port=self.nodes[0].port, **kwargs)

    def node_holding(self, key: str) -> RedisServer:
        """The node that physically stores ``key``: asked of every node, not computed."""
        holders = []
        for node in self.nodes:
            with node.client(decode_responses=True) as client:
                slot = client.execute_command("CLUSTER KEYSLOT", key)
                if key in client.execute_command("CLUSTER GETKEYSINSLOT", slot, 1000):
                    holders.append(node)
        if len(holders) != 1:
            raise AssertionError(f"{key!r} is stored on {len(holders)} nodes, not one")
        return holders[0]

    def flushall(self) -> None:
        for node in self.nodes:
            with node.client() as client:
                client.flushall()

    def close(self) -> None:
        """Stop every node and delete their directories."""
        for node in self.nodes:
            node.close()
