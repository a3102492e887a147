"""What ``docker compose up`` needs on a machine of this kind, set up from scratch.

* Debian's ``docker.io`` and ``debootstrap``, and ``chromium`` for the dashboard's page
  check (apt-get, as root), when missing.
* A Docker engine: ``dockerd`` started when none answers, and stopped again by the
  ``Engine`` that started it.
* Docker Compose v2 built from source through the Go module proxy when ``docker compose``
  is missing, installed as the user's CLI plugin.
* The public images the Dockerfiles and the compose file name: pulled when a registry
  answers; where none does (this machine), stand-ins built locally: a debootstrapped
  Debian bookworm with this machine's trusted certificates (``standins/base``), and on it
  ``standins/python``, ``standins/kafka`` and ``standins/apicurio``. A stand-in is rebuilt when what built it
  changed (a label, ``STANDIN_LABEL``, holds its hash); a real image is never replaced.
  ``docker image ls --filter label=io.iotpulse.standin`` lists the stand-ins, and
  removing them lets a later ``docker compose build`` pull the real images.

The image names come from the project's own files (the ``FROM`` lines of
``infra/docker/*.Dockerfile`` and the ``image:`` lines of ``docker-compose.yml``), so the
stand-ins follow a version bump there.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from common.paths import PROJECT_ROOT, state_dir

STANDINS = Path(__file__).resolve().parent / "standins"
COMPOSE_FILE = PROJECT_ROOT / "docker-compose.yml"
DOCKERFILES = sorted((PROJECT_ROOT / "infra" / "docker").glob("*.Dockerfile"))
BASE_IMAGE = "iot-pulse-standin/debian:bookworm"
STANDIN_LABEL = "io.iotpulse.standin"
COMPOSE_MODULE = "github.com/docker/compose/v2"
COMPOSE_VERSION = "v2.40.3"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
ENGINE_START_TIMEOUT_S = 60.0
# The build argument that carries the image's version into a stand-in's Dockerfile.
VERSION_ARGS = {"kafka": "KAFKA_VERSION", "apicurio": "APICURIO_VERSION"}

Say = Callable[[str], None]


class SetupError(RuntimeError):
    """A step of the set-up failed; the message says which and what to do."""


def _say(message: str) -> None:
    print(f"[compose-test] {message}", flush=True)


def run(
    cmd: list[str], *, timeout: float = 1800, cwd: Path | None = None, env: dict | None = None
) -> str:
    """Run ``cmd``; return its stdout, or raise ``SetupError`` with the output's tail."""
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env, check=False
    )
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        raise SetupError(f"{' '.join(cmd[:4])} ... failed (exit {proc.returncode}):\n{tail}")
    return proc.stdout


def _answers(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=30, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


# --------------------------------------------------------------------------- packages


PACKAGES = {  # Debian package: the program it installs
    "docker.io": "/usr/sbin/dockerd",
    "debootstrap": "/usr/sbin/debootstrap",
    "chromium": "/usr/bin/chromium",
}


def ensure_packages(say: Say = _say) -> None:
    """Install the Debian packages of ``PACKAGES`` that are missing (needs root)."""
    missing = [pkg for pkg, program in PACKAGES.items() if not Path(program).exists()]
    if not missing:
        return
    if os.geteuid() != 0:
        raise SetupError(f"{', '.join(missing)} missing: install them (apt-get, as root)")
    say(f"installing {' '.join(missing)} from Debian's packages ...")
    env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
    run(["apt-get", "update", "-qq"], env=env)
    run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], env=env)


# --------------------------------------------------------------------------- engine


class Engine:
    """The Docker engine: the one that answers, or a ``dockerd`` this object starts."""

    def __init__(self, say: Say = _say) -> None:
        self._say = say
        self._proc: subprocess.Popen[bytes] | None = None
        self.log = state_dir() / "compose" / "dockerd.log"

    @property
    def started_here(self) -> bool:
        """Whether ``start`` launched the daemon (and ``stop`` will stop it)."""
        return self._proc is not None

    def start(self) -> None:
        """Start ``dockerd`` unless an engine already answers; wait until it does."""
        if _answers(["docker", "info"]):
            return
        self.log.parent.mkdir(parents=True, exist_ok=True)
        dockerd = shutil.which("dockerd") or "/usr/sbin/dockerd"
        self._say(f"starting dockerd (log: {self.log}) ...")
        with self.log.open("ab") as log:
            self._proc = subprocess.Popen(
                [dockerd], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + ENGINE_START_TIMEOUT_S
        while not _answers(["docker", "info"]):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SetupError(f"dockerd did not start; see {self.log}")
            time.sleep(1)

    def stop(self) -> None:
        """Stop the daemon if this object started it (and, if it hangs, its whole group)."""
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)  # containerd and its shims too
            self._proc.wait()
        self._proc = None


# --------------------------------------------------------------------------- compose


def ensure_compose(say: Say = _say) -> None:
    """Build Docker Compose v2 from source and install it as a CLI plugin if missing."""
    if _answers(["docker", "compose", "version"]):
        return
    if shutil.which("go") is None:
        raise SetupError("docker compose is missing and Go is not installed to build it")
    say(f"building Docker Compose {COMPOSE_VERSION} from the Go module proxy (minutes) ...")
    info = json.loads(
        run(["go", "mod", "download", "-json", f"{COMPOSE_MODULE}@{COMPOSE_VERSION}"])
    )
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "compose"
        shutil.copytree(info["Dir"], src)
        for path in [src, *src.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)
        plugins = Path.home() / ".docker" / "cli-plugins"
        plugins.mkdir(parents=True, exist_ok=True)
        ldflags = f"-X {COMPOSE_MODULE}/internal.Version={COMPOSE_VERSION}"
        run(
            ["go", "build", "-ldflags", ldflags, "-o", str(plugins / "docker-compose"), "./cmd"],
            cwd=src,
        )
    if not _answers(["docker", "compose", "version"]):
        raise SetupError("docker compose was built but does not run")


# --------------------------------------------------------------------------- images


def public_images() -> dict[str, str]:
    """The public images the project's files name, by stand-in kind (python, kafka, apicurio)."""
    names = set()
    for dockerfile in DOCKERFILES:
        names |= set(re.findall(r"^FROM\s+(\S+)", dockerfile.read_text(), re.MULTILINE))
    names |= set(re.findall(r"^\s+image:\s*(\S+)", COMPOSE_FILE.read_text(), re.MULTILINE))
    found: dict[str, str] = {}
    for name in sorted(names):
        if name.startswith("python:"):
            found["python"] = name
        elif name.startswith("apache/kafka:"):
            found["kafka"] = name
        elif name.startswith("apicurio/apicurio-registry:"):
            found["apicurio"] = name
    return found


def _image_label(name: str) -> str | None:
    """The stand-in label of image ``name``: None if absent, "" if it is not a stand-in."""
    proc = subprocess.run(
        ["docker", "image", "inspect", name, "--format", "{{json .Config.Labels}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        return None
    labels = json.loads(proc.stdout.strip() or "null") or {}
    return labels.get(STANDIN_LABEL, "")


def _inputs_hash(*paths: Path, extra: str = "") -> str:
    digest = hashlib.sha256(extra.encode())
    for root in paths:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in files:
            name = path.name if path == root else str(path.relative_to(root))
            digest.update(f"{name}:{path.stat().st_mode & 0o777:o}:".encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def _pulled(name: str, say: Say) -> bool:
    """Whether ``docker pull`` fetched ``name`` (False at once where no registry answers)."""
    proc = subprocess.run(
        ["docker", "pull", "--quiet", name], capture_output=True, text=True, timeout=900,
        check=False,
    )  # fmt: skip
    if proc.returncode == 0:
        say(f"pulled {name}")
    return proc.returncode == 0


def _split_certificates(bundle: Path, folder: Path) -> int:
    """Write each certificate of a PEM bundle to its own ``.crt`` file; return how many."""
    pems = re.findall(
        r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", bundle.read_text(), re.DOTALL
    )
    folder.mkdir(parents=True, exist_ok=True)
    for i, pem in enumerate(pems):
        (folder / f"host-{i:03d}.crt").write_text(pem + "\n")
    return len(pems)


def ensure_base(say: Say = _say) -> str:
    """The debootstrapped Debian bookworm base with this machine's certificates."""
    digest = _inputs_hash(STANDINS / "base", HOST_CA_BUNDLE)
    if _image_label(BASE_IMAGE) == digest:
        return BASE_IMAGE
    rootfs_image = f"{BASE_IMAGE}-rootfs"
    work = state_dir() / "compose"
    work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        if _image_label(rootfs_image) is None:
            say("debootstrapping Debian bookworm (about a minute) ...")
            rootfs = Path(tmp) / "rootfs"
            run(
                ["debootstrap", "--variant=minbase", "--include=ca-certificates", "bookworm",
                 str(rootfs), DEBIAN_MIRROR],
                timeout=1200,
            )  # fmt: skip
            for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
                for path in (rootfs / cache).glob("*"):
                    if path.is_file():
                        path.unlink()
            archive = Path(tmp) / "rootfs.tar"
            run(["tar", "-C", str(rootfs), "-cf", str(archive), "."], timeout=600)
            shutil.rmtree(rootfs, ignore_errors=True)
            run(["docker", "import", str(archive), rootfs_image], timeout=600)
            archive.unlink()
        context = Path(tmp) / "context"
        count = _split_certificates(HOST_CA_BUNDLE, context / "certs")
        shutil.copy(STANDINS / "base" / "Dockerfile", context / "Dockerfile")
        say(f"building {BASE_IMAGE} (with this machine's {count} trusted certificates) ...")
        _build(BASE_IMAGE, context, context / "Dockerfile", digest, {"BASE": rootfs_image})
    return BASE_IMAGE


def _build(name: str, context: Path, dockerfile: Path, digest: str, args: dict) -> None:
    cmd = ["docker", "build", "--quiet", "-t", name, "-f", str(dockerfile)]
    cmd += ["--label", f"{STANDIN_LABEL}={digest}"]
    for key, value in args.items():
        cmd += ["--build-arg", f"{key}={value}"]
    # The classic builder: the CLI needs the buildx plugin for BuildKit, and nothing here needs it.
    run([*cmd, str(context)], env=os.environ | {"DOCKER_BUILDKIT": "0"})


def ensure_standins(say: Say = _say) -> dict[str, str]:
    """Pull the public images the project names, or build stand-ins; return them by kind."""
    images = public_images()
    wanted = {kind: name for kind, name in images.items() if _image_label(name) != ""}
    if not wanted or all(_pulled(name, say) for name in wanted.values()):
        return images
    base = ensure_base(say)
    base_id = run(["docker", "image", "inspect", base, "--format", "{{.Id}}"]).strip()
    for kind, name in wanted.items():
        context = STANDINS / kind
        version = name.rsplit(":", 1)[1]
        versioned = VERSION_ARGS.get(kind)
        args = {"BASE": base} | ({versioned: version} if versioned else {})
        digest = _inputs_hash(context, extra=base_id + version)
        if _image_label(name) == digest:
            continue
        say(f"building the stand-in {name} ...")
        started = time.monotonic()
        _build(name, context, context / "Dockerfile", digest, args)
        say(f"built {name} in {time.monotonic() - started:.0f} s")
    return images


def prepare(say: Say = _say) -> Engine:
    """Everything ``docker compose up`` needs here; the returned engine stops what it started."""
    ensure_packages(say)
    engine = Engine(say)
    engine.start()
    try:
        ensure_compose(say)
        ensure_standins(say)
    except BaseException:
        engine.stop()
        raise
    return engine
