"""``[lake.s3]``: the nested table, its environment forms, credentials from the standard AWS
variables or ``*_file`` keys in a fixed precedence, validation, and no credential in a repr, an
error, or a log line."""

from __future__ import annotations

import functools
import io
import logging
import pickle
from pathlib import Path

import pytest

from replica.config import ConfigError, LogConfig, Secret, load_config
from replica.observe.logs import setup_logging
from sinks.objectstore.s3 import S3Settings, open_store

KEY_ID = "AKIAEXAMPLEKEYID0001"
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
TOKEN = "FwoGZXIvYXdzEXAMPLETOKEN"


def load(tmp_path: Path, toml: str = "", **env: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "binlake.toml"
    path.write_text("[replica]\nserver_id = 7\n" + toml)
    return load_config(path, env=env)


def test_nested_table_and_its_environment_forms(tmp_path: Path) -> None:
    config = load(tmp_path, '[lake]\npath = "s3://shop-lake/cdc"\n'
                            '[lake.s3]\nendpoint = "http://127.0.0.1:7480"\nregion = "eu-west-3"\n'
                            'connect_timeout = "2s"\n',
                  BINLAKE_LAKE_S3_REGION="us-east-2", BINLAKE_LAKE_S3_ADDRESSING="path")
    s3 = config.lake.s3
    assert config.lake.on_object_store
    assert (s3.endpoint, s3.region, s3.addressing, s3.connect_timeout) == (
        "http://127.0.0.1:7480", "us-east-2", "path", 2.0)
    settings = s3.settings()
    assert settings.path_style and settings.endpoint == "http://127.0.0.1:7480"
    assert not load(tmp_path).lake.on_object_store
    assert load(tmp_path).lake.s3.region == "us-east-1"


def test_credentials_precedence(tmp_path: Path) -> None:
    aws = {"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET,
           "AWS_SESSION_TOKEN": TOKEN}
    settings = load(tmp_path, **aws).lake.s3.settings()
    assert (settings.access_key_id, settings.secret_access_key, settings.session_token) == (
        KEY_ID, SECRET, TOKEN)
    (tmp_path / "secret").write_text("from-the-file\n")
    (tmp_path / "id").write_text("ID-FROM-FILE")
    toml = (f'[lake.s3]\naccess_key_id_file = "{tmp_path / "id"}"\n'
            f'secret_access_key_file = "{tmp_path / "secret"}"\n')
    settings = load(tmp_path, toml, **aws).lake.s3.settings()
    assert (settings.access_key_id, settings.secret_access_key) == ("ID-FROM-FILE",
                                                                    "from-the-file")
    settings = load(tmp_path, BINLAKE_LAKE_S3_ACCESS_KEY_ID="BINLAKE-ID",
                    BINLAKE_LAKE_S3_SECRET_ACCESS_KEY="binlake-secret", **aws).lake.s3.settings()
    assert (settings.access_key_id, settings.secret_access_key) == ("BINLAKE-ID",
                                                                    "binlake-secret")
    none = load(tmp_path).lake.s3.settings()
    assert (none.access_key_id, none.secret_access_key, none.session_token) == (None, None, None)
    with pytest.raises(ConfigError, match="both lake.s3.secret_access_key and "
                                          "lake.s3.secret_access_key_file are set"):
        load(tmp_path, toml, BINLAKE_LAKE_S3_SECRET_ACCESS_KEY="x")


def test_secrets_stay_hidden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = load(tmp_path, '[lake]\npath = "s3://b/p"\n', AWS_ACCESS_KEY_ID=KEY_ID,
                  AWS_SECRET_ACCESS_KEY=SECRET, AWS_SESSION_TOKEN=TOKEN)
    shown = repr(config) + str(config.lake) + repr(config.lake.s3.settings())
    for secret in (KEY_ID, SECRET, TOKEN):
        assert secret not in shown
        assert secret in config.secrets()
    with pytest.raises(ConfigError, match="secrets are not accepted on the command line"):
        load_config(tmp_path / "binlake.toml", env={},
                    flags=[("lake.s3.secret_access_key", SECRET, "--set")])
    with pytest.raises(ConfigError) as bad:
        load(tmp_path, "[lake.s3]\nsecret_access_key = 12345\n")
    assert "12345" not in str(bad.value) and "invalid value" in str(bad.value)
    stream = io.StringIO()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        setup_logging(LogConfig(), secrets=config.secrets(), stream=stream)
        logging.getLogger("binlake.test").warning("signed with %s / %s (%s)", KEY_ID, SECRET,
                                                  TOKEN)
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
    assert stream.getvalue().count("***") == 3
    for secret in (KEY_ID, SECRET, TOKEN):
        assert secret not in stream.getvalue()


@pytest.mark.parametrize(("toml", "env", "message"), [
    ('[lake]\npath = "s3://"\n', {}, "lake.path: 's3://' is not s3://BUCKET"),
    ('[lake]\npath = "gs://b/p"\n', {}, "lake.path: 'gs://b/p': only s3:// URLs"),
    ('[lake.s3]\nendpoint = "127.0.0.1:7480"\n', {}, "lake.s3.endpoint: must be http(s)://"),
    ('[lake.s3]\naddressing = "path"\n', {}, "lake.s3.addressing: path-style addressing needs"),
    ('[lake.s3]\naddressing = "dns"\n', {}, "lake.s3.addressing: expected one of auto, path"),
    ("", {"AWS_ACCESS_KEY_ID": KEY_ID}, "lake.s3.secret_access_key: the access key id and"),
    ("[lake.s3]\nmax_attempts = 0\n", {}, "lake.s3.max_attempts: must be at least 1"),
    ("[lake.s3]\nlease_duration = 0\n", {}, "lake.s3.lease_duration: must be greater than 0"),
])
def test_invalid_settings_name_the_key(tmp_path: Path, toml: str, env: dict[str, str],
                                       message: str) -> None:
    with pytest.raises(ConfigError) as bad:
        load(tmp_path, toml, **env)
    assert str(bad.value).startswith(message), str(bad.value)
    assert KEY_ID not in str(bad.value)


def test_secret_class_is_what_holds_them(tmp_path: Path) -> None:
    s3 = load(tmp_path, AWS_ACCESS_KEY_ID=KEY_ID, AWS_SECRET_ACCESS_KEY=SECRET).lake.s3
    assert s3.access_key_id == Secret(KEY_ID) and s3.secret_access_key == Secret(SECRET)


@pytest.mark.parametrize("combo", ["aws", "binlake", "files", "files-and-aws", "none"])
def test_a_reader_resolves_the_environment_as_the_daemon_does(tmp_path: Path,
                                                               combo: str) -> None:
    """A reader of the lake has no config file: ``S3Settings.from_environment`` reads the
    same variables by the same rule, and gets exactly the daemon's settings."""
    (tmp_path / "id").write_text("ID-FROM-FILE\n")
    (tmp_path / "secret").write_text("secret-from-file\r\n")
    env = {"BINLAKE_LAKE_S3_ENDPOINT": "http://127.0.0.1:7480",
           "BINLAKE_LAKE_S3_ADDRESSING": "path", "BINLAKE_LAKE_S3_TLS_CA": "/etc/ca.pem"}
    aws = {"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET,
           "AWS_SESSION_TOKEN": TOKEN}
    files = {"BINLAKE_LAKE_S3_ACCESS_KEY_ID_FILE": str(tmp_path / "id"),
             "BINLAKE_LAKE_S3_SECRET_ACCESS_KEY_FILE": str(tmp_path / "secret")}
    env |= {"aws": aws, "files": files, "files-and-aws": files | aws, "none": {},
            "binlake": {"BINLAKE_LAKE_S3_ACCESS_KEY_ID": "BINLAKE-ID",
                        "BINLAKE_LAKE_S3_SECRET_ACCESS_KEY": "binlake-secret"} | aws}[combo]
    daemon = load(tmp_path, **env).lake.s3.settings()
    reader = S3Settings.from_environment(env)
    assert reader == daemon
    assert reader.path_style and reader.region == "us-east-1" and reader.tls_ca == "/etc/ca.pem"
    expected = {"aws": (KEY_ID, SECRET, TOKEN), "binlake": ("BINLAKE-ID", "binlake-secret", TOKEN),
                "files": ("ID-FROM-FILE", "secret-from-file", None),
                "files-and-aws": ("ID-FROM-FILE", "secret-from-file", TOKEN),
                "none": (None, None, None)}[combo]
    assert (reader.access_key_id, reader.secret_access_key, reader.session_token) == expected
    shown = repr(reader) + repr(open_store("s3://b/p", reader))
    assert not any(value and value in shown for value in expected)
    opener = pickle.loads(pickle.dumps(functools.partial(open_store, "s3://b/p", reader)))
    assert opener().settings == reader  # what Spark's workers get


def test_a_reader_refuses_what_the_daemon_refuses(tmp_path: Path) -> None:
    (tmp_path / "id").write_text("ID-FROM-FILE")
    for env, message in (
            ({"BINLAKE_LAKE_S3_ACCESS_KEY_ID": KEY_ID,
              "BINLAKE_LAKE_S3_ACCESS_KEY_ID_FILE": str(tmp_path / "id")}, "both access_key_id"),
            ({"AWS_ACCESS_KEY_ID": KEY_ID}, "go together"),
            ({"BINLAKE_LAKE_S3_ADDRESSING": "sideways"}, "ADDRESSING")):
        with pytest.raises(ValueError, match=message) as caught:
            S3Settings.from_environment(env)
        assert KEY_ID not in str(caught.value)
        with pytest.raises(ConfigError):
            load(tmp_path, **env)


def test_the_lease_duration_reaches_the_daemons_writer(tmp_path: Path) -> None:
    """``lake.s3.lease_duration`` (default 30 s) is the lease the daemon's sink takes."""
    from replica.core.daemon import open_sink

    assert load(tmp_path).lake.s3.lease_duration == 30.0
    config = load(tmp_path, '[lake]\npath = "s3://shop-lake/cdc"\n',
                  BINLAKE_LAKE_S3_LEASE_DURATION="4s", AWS_ACCESS_KEY_ID=KEY_ID,
                  AWS_SECRET_ACCESS_KEY=SECRET)
    assert config.lake.s3.lease_duration == 4.0
    sink = open_sink(config)  # makes no request: the store is reached by open()
    assert sink._workspace.mirror.lease.duration_s == 4.0  # type: ignore[attr-defined]
