"""The lake on S3: one set of settings for Spark and delta-rs, and S3A's jars."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pyspark
import pytest

from common.jars import ConnectorJarsMissingError, connector_jars
from common.lake import LOCAL_DISK_SPARK_CONF, lake_scheme
from common.lake_settings import LakeSettings
from common.settings import SettingsError, load_settings
from infra.jars import MAVEN_DIR
from processor import settings as processor_settings

SECRET = "s3-secret-value-never-shown"
POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


@pytest.mark.parametrize(
    ("root", "scheme"),
    [("s3a://b/iot", "s3a"), ("S3://b", "s3"), ("/data/lake", ""), ("C:/lake", ""),
     ("file:/data/lake", "file"), ("abfss://c@a.dfs.core.windows.net/x", "abfss"),
     (".local/lake", "")],
)  # fmt: skip
def test_lake_scheme(root: str, scheme: str) -> None:
    assert lake_scheme(root) == scheme


def test_a_local_lake_has_no_s3_settings(clean_env: Path) -> None:
    lake = LakeSettings(root=str(clean_env / "lake"), s3_region="eu-west-1")
    assert not lake.on_s3
    assert lake.spark_conf() == LOCAL_DISK_SPARK_CONF
    assert lake.storage_options() == {}


@pytest.mark.parametrize("root", ["/data/lake", "file:///data/lake", ".local/lake"])
def test_only_a_lake_on_local_disk_renames_through_hadoops_file_system(root: str) -> None:
    assert LakeSettings(root=root).spark_conf() == LOCAL_DISK_SPARK_CONF
    abfss = LakeSettings(root="abfss://lake@account.dfs.core.windows.net/iot")
    assert abfss.spark_conf() == {}


def test_one_set_of_settings_gives_spark_and_delta_rs_the_same_store(clean_env, monkeypatch):
    monkeypatch.setenv("IOT_LAKE_ROOT", "s3a://lake/iot")
    monkeypatch.setenv("IOT_LAKE_S3_ENDPOINT", "http://127.0.0.1:5000")
    monkeypatch.setenv("IOT_LAKE_S3_REGION", "us-east-1")
    monkeypatch.setenv("IOT_LAKE_S3_PATH_STYLE", "true")
    monkeypatch.setenv("IOT_LAKE_S3_ACCESS_KEY_ID", "AKIDEXAMPLE")
    (clean_env / ".env").write_text(f"IOT_LAKE_S3_SECRET_ACCESS_KEY={SECRET}\n")
    lake = load_settings(LakeSettings)
    assert lake.on_s3
    assert lake.table("silver/events") == "s3a://lake/iot/silver/events"
    assert lake.checkpoint("silver") == "s3a://lake/iot/_checkpoints/silver"
    assert lake.spark_conf() == {
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:5000",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.access.key": "AKIDEXAMPLE",
        "spark.hadoop.fs.s3a.secret.key": SECRET,
    }
    assert lake.storage_options() == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:5000",
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "us-east-1",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
        "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": SECRET,
    }
    assert SECRET not in repr(lake) and SECRET not in str(lake.model_dump())


def test_aws_itself_needs_only_the_root_and_the_region(clean_env):
    lake = LakeSettings(root="s3a://lake/iot", s3_region="eu-west-1")
    assert lake.spark_conf() == {
        "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1",
    }
    assert lake.storage_options() == {"AWS_REGION": "eu-west-1"}
    tls = LakeSettings(root="s3a://lake/iot", s3_endpoint="https://store.example:9000")
    assert tls.spark_conf()["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "true"
    assert tls.storage_options()["AWS_ALLOW_HTTP"] == "false"


def test_keys_come_in_pairs_and_the_error_never_shows_the_secret(clean_env, monkeypatch):
    monkeypatch.setenv("IOT_LAKE_ROOT", "s3a://lake/iot")
    monkeypatch.setenv("IOT_LAKE_S3_SECRET_ACCESS_KEY", SECRET)
    with pytest.raises(SettingsError) as caught:
        load_settings(LakeSettings)
    assert "IOT_LAKE_S3_ACCESS_KEY_ID" in str(caught.value)
    assert SECRET not in str(caught.value)


def test_env_vars_hand_a_child_the_same_lake(clean_env):
    lake = LakeSettings(
        root="s3a://lake/iot", s3_endpoint="http://127.0.0.1:5000", s3_path_style=True,
        s3_access_key_id="testing", s3_secret_access_key="testing",
    )  # fmt: skip
    env = LakeSettings.env_vars(**dict(lake))
    assert env["IOT_LAKE_S3_SECRET_ACCESS_KEY"] == "testing"
    assert LakeSettings(**dict(lake)).storage_options() == lake.storage_options()


# ---------------------------------------------------------------- S3A's jars


def _pom(bundle: str) -> tuple[dict[str, str], list[str], list[str]]:
    """(properties, coordinates with versions resolved, exclusions) of a bundle's POM."""
    root = ET.parse(MAVEN_DIR / bundle / "pom.xml").getroot()
    props = {p.tag.split("}")[1]: p.text or "" for p in root.find("m:properties", POM_NS)}
    coords, excluded = [], []
    for dep in root.findall("m:dependencies/m:dependency", POM_NS):
        group, artifact = (
            dep.findtext("m:groupId", "", POM_NS),
            dep.findtext("m:artifactId", "", POM_NS),
        )
        version = dep.findtext("m:version", "", POM_NS)
        for name, value in props.items():
            version = version.replace("${" + name + "}", value)
        coords.append(f"{group}:{artifact}:{version}")
        for ex in dep.findall("m:exclusions/m:exclusion", POM_NS):
            excluded.append(
                f"{ex.findtext('m:groupId', '', POM_NS)}:{ex.findtext('m:artifactId', '', POM_NS)}"
            )
    return props, coords, excluded


def test_hadoop_aws_matches_the_hadoop_client_in_the_pyspark_wheel():
    jars = Path(pyspark.__file__).parent / "jars"
    clients = {p.name for p in jars.glob("hadoop-client-api-*.jar")}
    assert clients == {f"hadoop-client-api-{processor_settings.HADOOP_VERSION}.jar"}
    props, _, _ = _pom("s3")
    assert props["hadoop.version"] == processor_settings.HADOOP_VERSION
    assert props["awssdk.version"] == processor_settings.AWS_SDK_VERSION


def test_spark_jars_packages_name_what_the_s3_bundle_resolves():
    _, coords, excluded = _pom("s3")
    assert processor_settings.S3_PACKAGES.split(",") == coords
    assert processor_settings.S3_PACKAGES_EXCLUDES in excluded


def _jars(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True)
    for name in names:
        (folder / name).write_bytes(b"")
    return folder


SPARK_JARS = (
    "delta-spark_2.13-4.4.0.jar", "spark-sql-kafka-0-10_2.13-4.2.0.jar",
    "spark-token-provider-kafka-0-10_2.13-4.2.0.jar", "kafka-clients-3.9.2.jar",
    "spark-avro_2.13-4.2.0.jar", "reactive-streams-1.0.4.jar",
)  # fmt: skip


def test_connector_jars_from_two_folders_take_a_shared_jar_once(tmp_path):
    spark = _jars(tmp_path / "spark", *SPARK_JARS)
    s3 = _jars(
        tmp_path / "s3", "hadoop-aws-3.5.0.jar", "s3-transfer-manager-2.35.4.jar",
        "reactive-streams-1.0.4.jar",
    )  # fmt: skip
    jars = connector_jars(f"{spark},{s3}", s3=True)
    assert [Path(j).name for j in jars].count("reactive-streams-1.0.4.jar") == 1
    assert str(s3 / "hadoop-aws-3.5.0.jar") in jars
    assert len(jars) == len(SPARK_JARS) + 2


def test_a_lake_on_s3_without_s3a_says_how_to_get_it(tmp_path):
    spark = _jars(tmp_path / "spark", *SPARK_JARS)
    assert len(connector_jars(str(spark))) == len(SPARK_JARS)
    with pytest.raises(ConnectorJarsMissingError, match=r"python -m infra\.jars s3"):
        connector_jars(str(spark), s3=True)
