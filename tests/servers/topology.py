"""A primary and a GTID replica of one flavor, linked by the servers' own replication.

What failover tests need from the test bed: two real servers where the second replicates the
first by GTID and logs what it applies (``log_slave_updates``), so that it can be promoted and
hold the same GTIDs in its own binlog (its own file names and offsets). MariaDB runs with
``gtid_strict_mode``; MySQL with ``gtid_mode=ON`` (the sandbox's default there).

Both servers share an account, ``failover``, created on the primary after the link so that it
replicates: a client configured once reaches either server with the same credentials. The
replica is ``read_only`` until promoted, as orchestrators run them.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

from protocol.gtid import GtidPosition

from .handle import ServerHandle, User
from .plugin import ServerFactory

__all__ = ["Topology", "start_topology"]

#: The servers' own options for a GTID topology (on top of the sandbox's log-bin and ROW).
MARIADB_ARGS = ("--gtid-strict-mode=1", "--log-slave-updates=1")
MYSQL_ARGS = ("--log-replica-updates=ON",)


@dataclass
class Topology:
    """``primary`` replicates to ``replica``; :meth:`switch_over` / :meth:`promote` swap them."""

    primary: ServerHandle
    replica: ServerHandle
    account: User

    @property
    def mariadb(self) -> bool:
        return self.primary.is_mariadb

    def link(self, source: ServerHandle, target: ServerHandle) -> None:
        """Make ``target`` replicate ``source`` by GTID, read-only."""
        repl = source.users["repl"]
        if self.mariadb:
            target.sql(
                f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={source.port}, "
                f"MASTER_USER='{repl.name}', MASTER_PASSWORD='{repl.password}', "
                "MASTER_USE_GTID=current_pos; START SLAVE; SET GLOBAL read_only=1")
        else:
            target.sql(
                f"CHANGE REPLICATION SOURCE TO SOURCE_HOST='127.0.0.1', "
                f"SOURCE_PORT={source.port}, SOURCE_USER='{repl.name}', "
                f"SOURCE_PASSWORD='{repl.password}', SOURCE_AUTO_POSITION=1, "
                "GET_SOURCE_PUBLIC_KEY=1; START REPLICA; SET GLOBAL read_only=1")

    def gtid_state(self, server: ServerHandle) -> str:
        """The server's binlog GTID state (MariaDB ``@@gtid_binlog_pos``, MySQL
        ``@@gtid_executed``), as text without newlines."""
        variable = "gtid_binlog_pos" if self.mariadb else "gtid_executed"
        (value,) = server.sql(f"SELECT @@GLOBAL.{variable}")[0]
        return (value or "").replace("\n", "")

    def wait_replica(self, timeout: float = 60.0) -> None:
        """Until the replica has applied everything the primary has logged."""
        state = self.gtid_state(self.primary)
        if self.mariadb:
            # Its binlog (log_slave_updates) holds what it applied; MASTER_GTID_WAIT would wait
            # on gtid_slave_pos, which lacks a domain the server wrote itself while primary.
            want, result = GtidPosition.parse(state), "-1"
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if want <= GtidPosition.parse(self.gtid_state(self.replica)):
                    result = "0"
                    break
                time.sleep(0.05)
        else:
            (result,) = self.replica.sql(
                f"SELECT WAIT_FOR_EXECUTED_GTID_SET('{state}', {timeout})")[0]
        if result != "0":
            status = self.replica.sql("SHOW SLAVE STATUS" if self.mariadb else
                                      "SHOW REPLICA STATUS")
            errors = [v for row in status for v in row if v and "rror" in str(v)]
            raise AssertionError(f"the replica did not reach {state} in {timeout} s: {result} "
                                 f"{errors or status}")

    def pause_replica(self) -> None:
        """Stop replicating (the replica falls behind from here on)."""
        self.replica.sql("STOP SLAVE" if self.mariadb else "STOP REPLICA")

    def promote(self) -> None:
        """The replica becomes a writable primary, linked to nothing; roles swap."""
        stop = "STOP SLAVE; RESET SLAVE ALL" if self.mariadb else \
            "STOP REPLICA; RESET REPLICA ALL"
        self.replica.sql(f"{stop}; SET GLOBAL read_only=0")
        self.primary, self.replica = self.replica, self.primary

    def switch_over(self, *, shut_down: bool = True) -> None:
        """A planned switchover: the primary read-only, the replica caught up, the primary
        shut down (or left up, read-only and replicating nothing), the replica promoted (the
        caller has paused its writes)."""
        self.primary.sql("SET GLOBAL read_only=1")
        self.wait_replica()
        if shut_down:
            self.primary.stop()
        self.promote()

    def crash_primary(self) -> None:
        """The primary is killed (no clean shutdown); the replica is promoted as it is."""
        self.primary.sandbox.kill()
        self.promote()

    def close(self) -> None:
        for server in (self.primary, self.replica):
            server.sandbox.cleanup()


def start_topology(factory: ServerFactory, flavor: str) -> Topology:
    """A new primary and replica of ``flavor``, linked, with the shared ``failover`` account."""
    extra = MARIADB_ARGS if flavor.startswith("mariadb") else MYSQL_ARGS
    primary = factory.start(flavor, extra)
    replica = factory.start(flavor, extra)
    topology = Topology(primary, replica, User("failover", secrets.token_urlsafe(12), ""))
    topology.link(primary, replica)
    password = topology.account.password
    if primary.is_mariadb:
        primary.sql(f"CREATE USER 'failover'@'%' IDENTIFIED BY '{password}'; GRANT REPLICATION "
                    "SLAVE, BINLOG MONITOR, SELECT ON *.* TO 'failover'@'%'")
    else:
        primary.sql(f"CREATE USER 'failover'@'%' IDENTIFIED WITH caching_sha2_password BY "
                    f"'{password}'; GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* "
                    "TO 'failover'@'%'")
    deadline = time.monotonic() + 60
    while True:
        try:
            topology.wait_replica(timeout=30)
            break
        except AssertionError:
            if time.monotonic() > deadline:
                raise
    return topology
