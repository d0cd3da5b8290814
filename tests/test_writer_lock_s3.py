"""The writer lease on an object store: S3 served by moto on loopback, with delta-rs's
conditional put (``conditional_put: etag``). One of several racing processes gets the lease,
the others are refused naming it; it expires unless renewed; and the CLI refuses a second
writer of an ``s3://`` lake."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pipelines.lake.writer_lock import LeaseLock, LeaseLost, WriterLockHeld
from tests.test_writer_lock import FakeClock, race_for_lease

moto_server = pytest.importorskip("moto.server", reason="moto[server] is not installed")


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server on loopback with the bucket ``lake``; yields delta-rs storage options."""
    import boto3

    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                 region_name="us-east-1").create_bucket(Bucket="lake")
    yield {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
           "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true", "conditional_put": "etag"}
    server.stop()


def test_lease_on_s3_expires_unless_renewed(s3):
    clock = FakeClock()
    sink = f"s3://lake/expiry-{time.time_ns()}"
    a = LeaseLock(sink, "shop", "binlake stream", ttl=60, clock=clock, storage_options=s3, renew_in_background=False)
    b = LeaseLock(sink, "shop", "binlake run", ttl=60, clock=clock, storage_options=s3, renew_in_background=False)
    a.acquire()
    clock.advance(50)
    a.renew()
    clock.advance(50)
    with pytest.raises(WriterLockHeld, match="binlake stream"):
        b.acquire()
    clock.advance(11)
    b.acquire()
    with pytest.raises(LeaseLost):
        a.renew()
    b.release()
    assert a.holder() is None


@pytest.mark.parametrize("expired_first", [False, True], ids=["new table", "expired lease"])
def test_only_one_racer_gets_the_s3_lease(s3, tmp_path, expired_first):
    outcomes = race_for_lease(f"s3://lake/race-{time.time_ns()}", tmp_path / "go", s3, expired_first=expired_first)
    assert outcomes == ["refused", "refused", "refused", "won"]


def test_cli_refuses_a_second_writer_of_an_s3_lake(s3, mariadb, db, tmp_path):
    import yaml

    from tests.test_cli import run_cli, write_config
    from tests.test_writer_lock import _start_holder, _wait_for_holder

    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE items (id INT PRIMARY KEY)")
    path = write_config(tmp_path, mariadb, name, startup={"mode": "latest"})
    raw = yaml.safe_load(Path(path).read_text())
    raw["sink"] = {"path": f"s3://lake/cli-{time.time_ns()}", "storage_options": s3}
    Path(path).write_text(yaml.safe_dump(raw))
    holder = _start_holder(path, mariadb.password)
    try:
        _wait_for_holder(LeaseLock(raw["sink"]["path"], raw["pipeline"]["name"], "test", storage_options=s3),
                         holder.pid)
        r = run_cli("snapshot", "-c", path, password=mariadb.password)
        assert r.returncode == 2 and f"pid {holder.pid}" in r.stderr
    finally:
        holder.kill()
        holder.wait()
