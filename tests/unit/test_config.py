"""replica.config: precedence file < env < flags, errors that name the key, secrets kept secret."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from replica import config as cfg
from replica.config import ConfigError, Secret, load_config, reference_markdown

MINIMAL_ENV = {"BINLAKE_REPLICA_SERVER_ID": "42"}
CONFIGURATION_DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "binlake.toml"
    path.write_text(text)
    return path


def test_defaults_need_only_a_server_id() -> None:
    config = load_config(env=MINIMAL_ENV)
    assert config.replica.server_id == 42
    assert config.server.host == "127.0.0.1"
    assert config.server.port == 3306
    assert config.server.password is None
    assert config.start.from_ == "latest"
    assert config.semi_sync.mode == "off"
    assert config.metrics.host == "127.0.0.1" and config.metrics.port == 9108
    assert config.source_file is None


def test_missing_server_id_is_a_clear_error() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(env={})
    assert info.value.key == "replica.server_id"
    assert "replica.server_id" in str(info.value)
    assert info.value.hint is not None and "BINLAKE_REPLICA_SERVER_ID" in info.value.hint


def test_precedence_file_then_env_then_flags(tmp_path: Path) -> None:
    path = write(tmp_path, """
[server]
host = "db.example"
port = 3307
user = "fromfile"

[replica]
server_id = 5
""")
    config = load_config(path, env={})
    assert (config.server.host, config.server.port, config.server.user) == ("db.example", 3307,
                                                                           "fromfile")
    assert config.source_file == str(path)

    env = {"BINLAKE_SERVER_PORT": "3308", "BINLAKE_SERVER_USER": "fromenv"}
    config = load_config(path, env=env)
    assert (config.server.host, config.server.port, config.server.user) == ("db.example", 3308,
                                                                           "fromenv")

    config = load_config(path, env=env, flags=[("server.user", "fromflag", "--user"),
                                               ("server.port", 3309, "--port")])
    assert (config.server.host, config.server.port, config.server.user) == ("db.example", 3309,
                                                                           "fromflag")
    assert config.replica.server_id == 5


def test_default_variables_lose_to_the_file_env_and_flags(tmp_path: Path) -> None:
    """BINLAKE_DEFAULT_<SECTION>_<KEY> (what the container image sets) replaces only the
    built-in default: a mounted file's metrics.address wins over it."""
    image = {"BINLAKE_DEFAULT_METRICS_ADDRESS": "0.0.0.0:9108", "BINLAKE_REPLICA_SERVER_ID": "5"}
    assert load_config(write(tmp_path, ""), env=image).metrics.address == "0.0.0.0:9108"
    path = write(tmp_path, '[metrics]\naddress = "127.0.0.1:9200"\n')
    assert load_config(path, env=image).metrics.address == "127.0.0.1:9200"
    assert load_config(path, env={**image, "BINLAKE_METRICS_ADDRESS": "127.0.0.1:9300"}
                       ).metrics.address == "127.0.0.1:9300"
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, ""), env={**image, "BINLAKE_DEFAULT_METRICS_PORT": "1"})
    assert str(info.value) == "unknown setting BINLAKE_DEFAULT_METRICS_PORT (from environment)"
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, ""), env={**image, "BINLAKE_DEFAULT_METRICS_ADDRESS": "x"})
    assert str(info.value) == ("metrics.address: 'x' is not host:port (from env "
                               "BINLAKE_DEFAULT_METRICS_ADDRESS (a default))")


def test_config_path_from_environment(tmp_path: Path) -> None:
    path = write(tmp_path, "[replica]\nserver_id = 9\n")
    assert load_config(env={"BINLAKE_CONFIG": str(path)}).replica.server_id == 9


def test_explicit_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml", env=MINIMAL_ENV)


def test_all_value_kinds_from_env() -> None:
    config = load_config(env={
        **MINIMAL_ENV,
        "BINLAKE_SERVER_GET_SERVER_PUBLIC_KEY": "yes",
        "BINLAKE_SERVER_CONNECT_TIMEOUT": "1500ms",
        "BINLAKE_SERVER_SOCKET": "/run/mysqld/mysqld.sock",
        "BINLAKE_FILTER_INCLUDE": "shop.*, crm",
        "BINLAKE_FILTER_SKIP_SERVER_IDS": "1,2",
        "BINLAKE_LAKE_FLUSH_BYTES": "8MiB",
        "BINLAKE_START_FROM": "gtid",
        "BINLAKE_START_GTID": "0-1-100",
        "BINLAKE_REPLICA_REPORT_HOST": "",
    })
    assert config.server.get_server_public_key is True
    assert config.server.connect_timeout == pytest.approx(1.5)
    assert config.server.socket == "/run/mysqld/mysqld.sock"
    assert config.filter.include == ("shop.*", "crm")
    assert config.filter.skip_server_ids == (1, 2)
    assert config.lake.flush_bytes == 8 * 1024 * 1024
    assert config.start.from_ == "gtid" and config.start.gtid == "0-1-100"
    assert config.replica.report_host is None


def test_toml_types_are_checked(tmp_path: Path) -> None:
    path = write(tmp_path, '[replica]\nserver_id = 1\n[server]\nport = "3306"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    message = str(info.value)
    assert "server.port" in message and str(path) in message and "integer" in message


@pytest.mark.parametrize(
    ("env", "key", "origin"),
    [
        ({"BINLAKE_SERVER_PORT": "abc"}, "server.port", "env BINLAKE_SERVER_PORT"),
        ({"BINLAKE_SERVER_PORT": "70000"}, "server.port", "env BINLAKE_SERVER_PORT"),
        ({"BINLAKE_SERVER_TLS_MODE": "maybe"}, "server.tls_mode", "env BINLAKE_SERVER_TLS_MODE"),
        ({"BINLAKE_SEMI_SYNC_MODE": "on"}, "semi_sync.mode", "env BINLAKE_SEMI_SYNC_MODE"),
        ({"BINLAKE_START_FROM": "gtid"}, "start.gtid", "the default"),
        ({"BINLAKE_START_FROM": "file"}, "start.file", "the default"),
        ({"BINLAKE_METRICS_ADDRESS": "nowhere"}, "metrics.address", "env BINLAKE_METRICS_ADDRESS"),
        ({"BINLAKE_RECONNECT_MAX_DELAY": "0.1"}, "reconnect.max_delay",
         "env BINLAKE_RECONNECT_MAX_DELAY"),
        ({"BINLAKE_SERVER_TLS_CERT": "/c.pem"}, "server.tls_key", "the default"),
        ({"BINLAKE_REPLICA_SERVER_ID": "4294967296"}, "replica.server_id",
         "env BINLAKE_REPLICA_SERVER_ID"),
        ({"BINLAKE_LOG_LEVEL": "loud"}, "log.level", "env BINLAKE_LOG_LEVEL"),
        ({"BINLAKE_FILTER_INCLUDE": "a.b.c"}, "filter.include", "env BINLAKE_FILTER_INCLUDE"),
    ],
)
def test_errors_name_the_key_and_origin(env: dict[str, str], key: str, origin: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(env={**MINIMAL_ENV, **env})
    assert info.value.key == key
    assert str(info.value).startswith(key)
    assert f"(from {origin})" in str(info.value)


def test_unknown_keys_are_rejected_with_a_suggestion(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, "[server]\nhots = 'x'\n"), env=MINIMAL_ENV)
    assert "server.hots" in str(info.value) and info.value.hint == "did you mean server.host?"

    with pytest.raises(ConfigError, match="unknown section"):
        load_config(write(tmp_path, "[serve]\nhost = 'x'\n"), env=MINIMAL_ENV)

    with pytest.raises(ConfigError) as info:
        load_config(env={**MINIMAL_ENV, "BINLAKE_SERVER_HOTS": "x"})
    assert "BINLAKE_SERVER_HOTS" in str(info.value)
    assert info.value.hint == "did you mean BINLAKE_SERVER_HOST?"

    # variables with our prefix that belong to no section are someone else's business
    load_config(env={**MINIMAL_ENV, "BINLAKE_TEST_SERVERS": "x"})

    with pytest.raises(ConfigError, match="unknown setting"):
        load_config(env=MINIMAL_ENV, flags=[("server.hots", "x", "--set")])


def test_invalid_toml_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "[server\n"), env=MINIMAL_ENV)


def test_password_from_env_file_and_never_from_flags(tmp_path: Path) -> None:
    config = load_config(env={**MINIMAL_ENV, "BINLAKE_SERVER_PASSWORD": "s3cr3t-env"})
    assert isinstance(config.server.password, Secret)
    assert config.server.password.reveal() == "s3cr3t-env"
    assert config.secrets() == ["s3cr3t-env"]

    secret_file = tmp_path / "password"
    secret_file.write_text("s3cr3t-file\n")
    config = load_config(env={**MINIMAL_ENV, "BINLAKE_SERVER_PASSWORD_FILE": str(secret_file)})
    assert config.server.password is not None
    assert config.server.password.reveal() == "s3cr3t-file"

    with pytest.raises(ConfigError) as info:
        load_config(env=MINIMAL_ENV, flags=[("server.password", "s3cr3t-flag", "--set")])
    assert "s3cr3t-flag" not in str(info.value)
    assert info.value.hint is not None and "BINLAKE_SERVER_PASSWORD" in info.value.hint

    with pytest.raises(ConfigError, match="both server.password and server.password_file"):
        load_config(env={**MINIMAL_ENV, "BINLAKE_SERVER_PASSWORD": "a",
                         "BINLAKE_SERVER_PASSWORD_FILE": str(secret_file)})

    with pytest.raises(ConfigError) as info:
        load_config(env={**MINIMAL_ENV, "BINLAKE_SERVER_PASSWORD_FILE": str(tmp_path / "no")})
    assert info.value.key == "server.password_file"


def test_password_never_in_repr_str_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    password = "pa55-Wörd-that-must-not-leak"
    config = load_config(env={**MINIMAL_ENV, "BINLAKE_SERVER_PASSWORD": password})
    assert password not in repr(config)
    assert password not in str(config)
    assert password not in f"{config.server.password}"
    assert password not in repr(config.server)
    with caplog.at_level(logging.INFO):
        logging.getLogger("test").info("config %s %r", config, config.server)
    assert password not in caplog.text
    assert "***" in caplog.text


def test_secret_is_never_echoed_in_type_errors(tmp_path: Path) -> None:
    path = write(tmp_path, "[replica]\nserver_id = 1\n[server]\npassword = 12345678\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert "12345678" not in str(info.value)
    assert info.value.key == "server.password"


def test_filter_patterns() -> None:
    config = load_config(env={**MINIMAL_ENV, "BINLAKE_FILTER_INCLUDE": "shop.*,crm,*.audit_?",
                              "BINLAKE_FILTER_EXCLUDE": "shop.tmp_*"})
    accepts = config.filter.accepts
    assert accepts("shop", "orders")
    assert not accepts("shop", "tmp_x")
    assert accepts("crm", "people")
    assert accepts("billing", "audit_1")
    assert not accepts("billing", "invoices")
    assert not accepts("Shop", "orders")  # case-sensitive like table names on Linux
    assert load_config(env=MINIMAL_ENV).filter.accepts("any", "thing")


@pytest.mark.parametrize("text", ['["shop.orders", "crm.*"]', "['shop.orders','crm.*']",
                                  " [ \"shop.orders\",\n \"crm.*\", ] ", "shop.orders,crm.*",
                                  "shop.orders , crm.*"])
def test_list_values_from_env_and_set_parse_like_the_file(tmp_path: Path, text: str) -> None:
    from_file = load_config(write(tmp_path, '[replica]\nserver_id = 1\n'
                                            '[filter]\ninclude = ["shop.orders", "crm.*"]\n'),
                            env={}).filter.include
    from_env = load_config(env={**MINIMAL_ENV, "BINLAKE_FILTER_INCLUDE": text}).filter.include
    from_flag = load_config(env=MINIMAL_ENV, flags=[("filter.include", text, "--set")]
                            ).filter.include
    assert from_file == from_env == from_flag == ("shop.orders", "crm.*")


def test_int_lists_from_text_take_toml_arrays_too() -> None:
    config = load_config(env={**MINIMAL_ENV, "BINLAKE_FILTER_SKIP_SERVER_IDS": "[7, 8]"},
                         flags=[("filter.skip_gtid_domains", "[9]", "--set")])
    assert config.filter.skip_server_ids == (7, 8) and config.filter.skip_gtid_domains == (9,)


@pytest.mark.parametrize(("text", "message"), [
    ('["shop.orders"', "is not a TOML list"),
    ('"shop.orders"', "contains quotes"),
    ("[shop.orders]", "is not a TOML list"),
    ("[1, 2]", "expected a list of non-empty strings"),
    ('["a.b.c"]', "must be database or database.table"),
])
def test_malformed_list_values_are_rejected(text: str, message: str) -> None:
    for kwargs, origin in (({"env": {**MINIMAL_ENV, "BINLAKE_FILTER_INCLUDE": text}},
                            "env BINLAKE_FILTER_INCLUDE"),
                           ({"env": MINIMAL_ENV, "flags": [("filter.include", text, "--set")]},
                            "flag --set")):
        with pytest.raises(ConfigError) as info:
            load_config(**kwargs)  # type: ignore[arg-type]
        assert message in str(info.value) and f"(from {origin})" in str(info.value)
        assert str(info.value).startswith("filter.include: ")


def test_filter_databases_and_unmatched_patterns() -> None:
    filters = cfg.FilterConfig(include=("shop.orders", "a*", "gone.*"),
                               exclude=("apps", "shop.tmp_*", "nothing.here"))
    assert [d for d in ("shop", "apps", "abc", "other", "gone") if filters.accepts_database(d)] \
        == ["shop", "abc", "gone"]
    assert filters.unmatched([("shop", "orders"), ("abc", "t"), ("shop", "tmp_1")]) == (
        ["gone.*"], ["apps", "nothing.here"])
    assert cfg.FilterConfig().accepts_database("any")


def test_config_is_frozen() -> None:
    config = load_config(env=MINIMAL_ENV)
    with pytest.raises(AttributeError):
        config.server.host = "elsewhere"  # type: ignore[misc]


def test_reference_lists_every_key_with_env_and_default() -> None:
    reference = reference_markdown()
    for spec in cfg.KEYS.values():
        assert f"| `{spec.dotted}` | `{spec.env}` |" in reference
    assert "*required*" in reference
    # every documented env name actually works
    for spec in cfg.KEYS.values():
        assert spec.env in cfg._ENV_KEYS


def test_configuration_document_is_generated() -> None:
    """docs/configuration.md is exactly what the generator prints from the fields: a key added
    or changed in replica/config.py fails here until the file is regenerated."""
    assert CONFIGURATION_DOC.exists(), (
        "docs/configuration.md is missing: python -m replica.config > docs/configuration.md")
    assert CONFIGURATION_DOC.read_text() == cfg.reference_document(), (
        "docs/configuration.md is stale; regenerate it with: "
        "python -m replica.config > docs/configuration.md")


def test_default_config_file_is_read_when_present(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "[replica]\nserver_id = 77\n")
    monkeypatch.setattr(cfg, "DEFAULT_CONFIG_PATH", os.fspath(path))
    assert load_config(env={}).replica.server_id == 77
    monkeypatch.setattr(cfg, "DEFAULT_CONFIG_PATH", os.fspath(tmp_path / "absent.toml"))
    assert load_config(env=MINIMAL_ENV).replica.server_id == 42


def test_full_toml_file(tmp_path: Path) -> None:
    path = write(tmp_path, """
[server]
socket = "/run/mysqld/mysqld.sock"
tls_mode = "verify-identity"
tls_ca = "/etc/ssl/ca.pem"
connect_timeout = "2s"

[replica]
server_id = 4001
report_host = "lake-1"
heartbeat_period = 1.5
stop_timeout = "500ms"

[start]
from = "file"
file = "mariadb-bin.000007"
pos = 1234

[semi_sync]
mode = "ack-after-land"

[filter]
include = ["shop.*", "crm.people"]
skip_server_ids = [7, 8]
skip_gtid_domains = [1]

[lake]
path = "/data/lake"
flush_bytes = "16MiB"
flush_interval = 5
compression = "snappy"

[reconnect]
max_delay = "2m"

[metrics]
address = "[::1]:9200"

[log]
format = "json"
level = "debug"
""")
    config = load_config(path, env={})
    assert config.server.socket == "/run/mysqld/mysqld.sock"
    assert config.server.tls_mode == "verify-identity"
    assert config.server.connect_timeout == 2.0
    assert config.replica.report_host == "lake-1" and config.replica.heartbeat_period == 1.5
    assert config.replica.stop_timeout == 0.5
    assert (config.start.from_, config.start.file, config.start.pos) == ("file",
                                                                         "mariadb-bin.000007", 1234)
    assert config.semi_sync.mode == "ack-after-land"
    assert config.filter.include == ("shop.*", "crm.people")
    assert config.filter.skip_server_ids == (7, 8) and config.filter.skip_gtid_domains == (1,)
    assert config.lake.flush_bytes == 16 * 1024 * 1024 and config.lake.flush_interval == 5.0
    assert config.reconnect.max_delay == 120.0
    assert (config.metrics.host, config.metrics.port) == ("::1", 9200)
    assert (config.log.format, config.log.level) == ("json", "debug")


def test_status_may_load_without_a_server_id() -> None:
    assert load_config(env={}, require_server_id=False).replica.server_id == 0


def test_flush_interval_sets_the_pipeline_ticker() -> None:
    """lake.flush_interval below the ticker's 0.5 s is honoured: the ticker follows it."""
    from dataclasses import replace

    from replica.config import Config, LakeConfig, ReplicaConfig
    from replica.core.daemon import pipeline_options

    config = Config(replica=ReplicaConfig(server_id=5))
    assert pipeline_options(config).tick == 0.5
    fast = replace(config, lake=LakeConfig(flush_interval=0.1))
    assert pipeline_options(fast).tick == 0.05


def test_lake_modes_default_to_0640_and_0750_through_one_umask() -> None:
    lake = load_config(env=MINIMAL_ENV).lake
    assert (lake.file_mode_bits, lake.dir_mode_bits, lake.umask) == (0o640, 0o750, 0o027)
    shared = load_config(env={**MINIMAL_ENV, "BINLAKE_LAKE_FILE_MODE": "0660",
                              "BINLAKE_LAKE_DIR_MODE": "770"}).lake
    assert (shared.file_mode_bits, shared.dir_mode_bits, shared.umask) == (0o660, 0o770, 0o007)


@pytest.mark.parametrize(("env", "key", "message"), [
    ({"BINLAKE_LAKE_FILE_MODE": "0644"}, "lake.file_mode", "without its execute bits (0640"),
    ({"BINLAKE_LAKE_FILE_MODE": "rw-r-----"}, "lake.file_mode", "octal mode"),
    ({"BINLAKE_LAKE_DIR_MODE": "0890"}, "lake.dir_mode", "octal mode"),
    ({"BINLAKE_LAKE_DIR_MODE": "0550", "BINLAKE_LAKE_FILE_MODE": "0440"}, "lake.dir_mode",
     "owner rwx"),
])
def test_lake_modes_that_one_umask_cannot_give_are_refused(env: dict[str, str], key: str,
                                                           message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(env={**MINIMAL_ENV, **env})
    assert info.value.key == key and message in str(info.value)
