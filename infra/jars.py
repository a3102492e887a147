"""Resolve jar bundles from Maven Central into a local folder.

Each bundle is a ``pom.xml`` under ``infra/maven/<bundle>/``. Maven copies the
bundle's runtime dependencies into ``<state dir>/jars/<bundle>/``, with the jars of
the bundle's Maven modules built from source (``MODULES``); a stamp file holding the
POMs' and sources' hash makes later calls free until one of them changes.

Run ``python -m infra.jars spark kafka`` to fetch both bundles ahead of time, and
``python -m infra.jars s3`` for S3A (a lake on S3 or an S3-compatible store), which the
processor takes beside the spark bundle (``IOT_PROCESSOR_JARS_DIR=<spark>,<s3>``).
``python -m infra.jars schema-registry`` fetches Apicurio Registry (``infra.schema_registry``
runs it), an application tarball that Maven unpacks rather than a set of jars.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from common import cli
from infra.paths import PROJECT_ROOT, state_dir

MAVEN_DIR = PROJECT_ROOT / "infra" / "maven"
BUNDLES = ("spark", "kafka", "s3", "schema-registry")
# Bundles whose pom names an archive to unpack (``dependency:unpack``) into the folder.
UNPACKED_BUNDLES = ("schema-registry",)
# Bundles that go on Spark's classpath: the jars the PySpark wheel ships are left out.
SPARK_BUNDLES = ("spark", "s3")
# Bundles that ``python -m infra.jars`` fetches when it is given none (s3 is optional).
DEFAULT_BUNDLES = ("spark", "kafka")
# Maven modules built from source into a bundle's folder, with their runtime dependencies:
# the processor's Entra ID (OAUTHBEARER) login handler for Spark's Kafka client, which
# lives beside the processor, lands beside the connectors.
MODULES: dict[str, tuple[Path, ...]] = {
    "spark": (PROJECT_ROOT / "processor" / "jvm" / "eventhubs-oauth",),
}


class JarResolutionError(RuntimeError):
    """Maven could not resolve a bundle."""


def _pom_digest(bundle: str) -> str:
    data = (MAVEN_DIR / bundle / "pom.xml").read_bytes()
    data += (MAVEN_DIR / "settings.xml").read_bytes()
    for root in MODULES.get(bundle, ()):
        for path in sorted(p for p in root.rglob("*") if p.is_file() and "target" not in p.parts):
            data += path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes()
    return hashlib.sha256(data).hexdigest()


def _build_module(mvn: str, module: Path, staging: Path) -> None:
    """Build a module's jar and copy it, with its runtime dependencies, into ``staging``."""
    build_dir = state_dir() / "build" / module.name
    shutil.rmtree(build_dir, ignore_errors=True)
    cmd = [
        mvn, "-B", "-q",
        "-s", str(MAVEN_DIR / "settings.xml"),
        "-f", str(module / "pom.xml"),
        f"-Dbuild.dir={build_dir}",
        "package",
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={staging}",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    built = sorted(build_dir.glob("*.jar"))
    if proc.returncode != 0 or not built:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise JarResolutionError(f"Maven could not build the {module.name} module:\n{tail}")
    for jar in built:
        shutil.copy2(jar, staging / jar.name)


def _pyspark_shipped_artifacts() -> set[str]:
    """Artifact names (without version) of the jars inside the PySpark wheel."""
    try:
        import pyspark
    except ImportError:
        return set()
    jars = Path(pyspark.__file__).parent / "jars"
    return {_artifact_name(p.name) for p in jars.glob("*.jar")}


def _artifact_name(filename: str) -> str:
    """Strip the version from ``name-1.2.3.jar`` (names may contain dashes and digits)."""
    stem = filename.removesuffix(".jar")
    parts = stem.split("-")
    for i in range(len(parts) - 1, 0, -1):
        if parts[i][:1].isdigit():
            return "-".join(parts[:i])
    return stem


def bundle_dir(bundle: str) -> Path:
    """Folder that holds a bundle's jars once resolved."""
    return state_dir() / "jars" / bundle


def ensure_jars(bundle: str, *, quiet: bool = False) -> list[Path]:
    """Resolve a bundle's jars if they are missing or stale, and list them.

    Args:
        bundle: One of ``BUNDLES``.
        quiet: Do not print progress.

    Returns:
        The jar files, sorted by name.

    Raises:
        JarResolutionError: Maven is missing or could not resolve the bundle.
    """
    if bundle not in BUNDLES:
        raise ValueError(f"unknown jar bundle {bundle!r}; expected one of {BUNDLES}")
    dest = bundle_dir(bundle)
    stamp = dest / ".stamp"
    digest = _pom_digest(bundle)
    if stamp.exists() and stamp.read_text() == digest:
        return sorted(dest.glob("*.jar"))
    goal = "dependency:unpack" if bundle in UNPACKED_BUNDLES else "dependency:copy-dependencies"

    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarResolutionError(
            "Maven ('mvn') is not on PATH; install it (apt-get install maven) to fetch the jars"
        )
    if not quiet:
        cli.console.info("resolving the %s jars from Maven Central into %s ...", bundle, dest)
    staging = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    cmd = [
        mvn, "-B", "-q",
        "-s", str(MAVEN_DIR / "settings.xml"),
        "-f", str(MAVEN_DIR / bundle / "pom.xml"),
        goal,
        "-DincludeScope=runtime",
        f"-DoutputDirectory={staging}",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise JarResolutionError(f"Maven could not resolve the {bundle} jars:\n{tail}")
    for module in MODULES.get(bundle, ()):
        _build_module(mvn, module, staging)

    if bundle in SPARK_BUNDLES:
        shipped = _pyspark_shipped_artifacts()
        for jar in staging.glob("*.jar"):
            if _artifact_name(jar.name) in shipped:
                jar.unlink()
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    stamp.write_text(digest)
    jars = sorted(dest.glob("*.jar"))
    if not quiet:
        ready = "unpacked" if bundle in UNPACKED_BUNDLES else f"{len(jars)} jars ready"
        cli.console.info("  %s in %s", ready, dest)
    return jars


def ensure_jar_dir(bundle: str, *, quiet: bool = False) -> Path:
    """Resolve a bundle's jars if they are missing or stale, and return their folder.

    Args:
        bundle: One of ``BUNDLES``.
        quiet: Do not print progress.

    Returns:
        The folder that holds the bundle's jars (``bundle_dir``).

    Raises:
        JarResolutionError: Maven is missing or could not resolve the bundle.
    """
    ensure_jars(bundle, quiet=quiet)
    return bundle_dir(bundle)


def main(argv: list[str] | None = None) -> int:
    """Fetch the named bundles (spark and kafka by default)."""
    parser = cli.ArgumentParser(
        prog="python -m infra.jars",
        description="Resolve jar bundles from Maven Central into <state dir>/jars/<bundle>/.",
    )
    parser.add_argument(
        "bundles", nargs="*", metavar="BUNDLE",
        help=f"{', '.join(BUNDLES)} (default: {' '.join(DEFAULT_BUNDLES)}; s3 is for a lake on "
        "S3, schema-registry for Avro)",
    )  # fmt: skip
    names = parser.parse_args(argv).bundles or list(DEFAULT_BUNDLES)
    unknown = [name for name in names if name not in BUNDLES]
    if unknown:  # not argparse's choices: they refuse nargs="*"'s empty list in Python 3.11
        parser.error(f"unknown bundle {', '.join(unknown)}; choose from {', '.join(BUNDLES)}")
    try:
        for name in names:
            ensure_jars(name)
    except JarResolutionError as exc:
        return cli.error(str(exc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
