"""infra.spark_cluster without a JVM: the code zip for --py-files, and the CLI's answers."""

from __future__ import annotations

import subprocess
import sys
import zipfile

from infra import spark_cluster
from tests.integration.proc import ROOT


def test_the_package_zip_holds_the_code_and_its_data_files(tmp_path):
    zip_path = spark_cluster.package(tmp_path)
    assert zip_path == tmp_path / "iot_pulse.zip"
    names = set(zipfile.ZipFile(zip_path).namelist())
    assert {"common/contract.toml", "processor/fairscheduler.xml", "processor/log4j2.xml"} <= names
    assert {"common/__init__.py", "processor/detector.py", "processor/__main__.py"} <= names
    assert not [n for n in names if "__pycache__" in n or n.startswith("processor/jvm")]


def test_code_run_from_the_zip_finds_its_data_files_on_disk(tmp_path):
    zip_path = spark_cluster.package(tmp_path / "app.zip")
    probe = (
        "import common.contract as c, processor.session as s; "
        f"assert c.__file__.startswith({str(zip_path)!r}), c.__file__; "
        "print(c.DEFAULT_CONTRACT.is_file(), s.SCHEDULER_POOLS.is_file(), s.LOG4J2_CONFIG.is_file())"
    )
    # From another folder, with the zip first on the path: as spark-submit's driver does.
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env={"PYTHONPATH": str(zip_path)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True True True"


def _cli(*args: str, cwd=ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "infra.spark_cluster", *args], cwd=cwd,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_status_and_url_of_a_cluster_that_is_not_running(tmp_path):
    done = _cli("status", "--data-dir", str(tmp_path))
    assert done.returncode == 3
    assert done.stdout == f"stopped (data dir {tmp_path})\n"
    done = _cli("url", "--data-dir", str(tmp_path))
    assert done.returncode == 1
    assert done.stderr == (
        "error: the cluster is not running: start it with 'python -m infra.spark_cluster start'\n"
    )
    assert _cli("stop", "--data-dir", str(tmp_path)).stdout == "not running\n"


def test_a_data_dir_that_is_a_file_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = _cli("start", "--data-dir", str(blocker / "cluster"))
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"error: the cluster's data dir {blocker / 'cluster'} cannot be")


def _fake_bundles(tmp_path, monkeypatch) -> dict[str, list]:
    """Jar folders as ``infra.jars`` leaves them; a shared jar sits in both."""
    names = {
        "spark": ["delta-spark_2.13-4.4.0.jar", "spark-sql-kafka-0-10_2.13-4.2.0.jar",
                  "spark-token-provider-kafka-0-10_2.13-4.2.0.jar", "kafka-clients-3.9.2.jar",
                  "spark-avro_2.13-4.2.0.jar", "shared-1.0.jar"],
        "s3": ["hadoop-aws-3.5.0.jar", "s3-transfer-manager-2.35.4.jar", "shared-1.0.jar"],
    }  # fmt: skip
    bundles = {}
    for bundle, jars in names.items():
        folder = tmp_path / bundle
        folder.mkdir()
        bundles[bundle] = [folder / name for name in jars]
        for jar in bundles[bundle]:
            jar.write_bytes(b"")
    monkeypatch.setattr("infra.jars.ensure_jars", lambda bundle, quiet=False: bundles[bundle])
    monkeypatch.setattr("infra.jars.bundle_dir", lambda bundle: tmp_path / bundle)
    return bundles


def test_jars_add_s3a_when_the_lake_is_on_s3_and_list_a_shared_jar_once(
    tmp_path, monkeypatch, capsys
):
    bundles = _fake_bundles(tmp_path, monkeypatch)
    spark, s3 = bundles["spark"], bundles["s3"]
    assert spark_cluster.connector_jars() == sorted(spark)
    assert spark_cluster.connector_jars(s3=True) == sorted(spark + s3[:2])

    monkeypatch.setenv("IOT_LAKE_ROOT", "s3a://lake/iot")
    assert spark_cluster.main(["jars"]) == 0
    assert capsys.readouterr().out == ",".join(str(j) for j in sorted(spark + s3[:2])) + "\n"
    monkeypatch.setenv("IOT_LAKE_ROOT", str(tmp_path / "lake"))
    assert spark_cluster.main(["jars"]) == 0
    assert capsys.readouterr().out == ",".join(str(j) for j in sorted(spark)) + "\n"
