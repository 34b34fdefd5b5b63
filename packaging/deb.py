"""Build the Debian/Ubuntu package from the bundle, and prove it installs, serves and uninstalls.

    python3 packaging/deb.py build [--fast]   # dist/sidelight -> dist/sidelight_VERSION_ARCH.deb
    python3 packaging/deb.py check    # apt install, serve + chat via /usr/bin/sidelight, dpkg -P

The package puts the bundle in ``/opt/sidelight``, a ``/usr/bin/sidelight`` wrapper (no
arguments: the tray app; a subcommand: the console executable), a desktop entry and the icon.
``Depends`` is computed from the system libraries the bundle links against (``ldd`` and
``dpkg -S``), so it lists exactly what the bundle does not carry. It is built with
``dpkg-deb --root-owner-group`` (no fakeroot needed); ``dpkg-dev`` is installed with apt-get
when missing and run as root. ``check`` needs root and refuses to touch an existing install.

Releases are compressed with xz (the smallest package, readable by every dpkg; about four
minutes on two cores). ``--fast`` uses zstd at a low level (seconds; dpkg 1.21.18+, Debian 12,
Ubuntu 21.10+), which is what the test command uses: the package content is the same.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import dev
import smoke

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "dist" / "sidelight"
STAGING = ROOT / "build" / "deb"
PREFIX = "/opt/sidelight"
PACKAGE = "sidelight"
MIN_GLIBC = "2.28"  # the OpenVINO and PySide6 wheels are manylinux_2_28
# Qt's Wayland plugins (bundled; Qt prefers them in a Wayland session): small, and missing on
# a build machine without a desktop.
WAYLAND_LIBRARIES = {
    "libwayland-client.so.0": "libwayland-client0",
    "libwayland-cursor.so.0": "libwayland-cursor0",
    "libwayland-egl.so.1": "libwayland-egl1",
}
# Loaded only for the GPU: the OpenCL loader comes with Intel's driver (Suggests).
OPTIONAL_LIBRARIES = {"libOpenCL.so.1"}
WRAPPER = f"""#!/bin/sh
# Sidelight: the tray app without arguments, the console executable for a subcommand.
if [ "$#" -eq 0 ]; then
    exec {PREFIX}/sidelight
fi
exec {PREFIX}/sidelight-cli "$@"
"""
DESKTOP_ENTRY = """[Desktop Entry]
Type=Application
Name=Sidelight
GenericName=Local LLM server
Comment=Local LLMs on Intel CPUs, GPUs and NPUs with an OpenAI-compatible API
Exec=sidelight
Icon=sidelight
Terminal=false
Categories=Development;Utility;
Keywords=LLM;AI;OpenVINO;OpenAI;Ollama;
StartupNotify=false
"""


def say(message: str) -> None:
    sys.stderr.write(f"[deb] {message}\n")
    sys.stderr.flush()


def architecture() -> str:
    return subprocess.run(
        ["dpkg", "--print-architecture"], capture_output=True, text=True, check=True
    ).stdout.strip()


def deb_path() -> Path:
    return ROOT / "dist" / f"{PACKAGE}_{dev.version()}_{architecture()}.deb"


def _shared_objects(folder: Path) -> list[Path]:
    return [
        path
        for path in folder.rglob("*")
        if path.is_file() and (path.name.endswith(".so") or ".so." in path.name)
    ]


def system_depends(bundle: Path) -> list[str]:
    """Debian packages of the system libraries the bundle's libraries load.

    Those found here map to their packages with ``dpkg -S``; the ones Qt's X11 plugin needs
    (``desktop/platform_libs.py``) and its Wayland plugins are listed whether this machine has
    them or not (a build machine without a desktop lacks most, and ``ldd`` only says "not
    found"). Any other library not found is a warning.
    """
    internal = bundle / "_internal"
    folders = {str(p.parent) for p in _shared_objects(internal)}
    env = {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(sorted(folders))}
    known = {**dev.qt_system_libraries(), **WAYLAND_LIBRARIES}
    outside: set[str] = set()
    unknown: dict[str, set[str]] = {}
    for library in _shared_objects(internal):
        result = subprocess.run(
            ["ldd", str(library)], env=env, capture_output=True, text=True, check=False
        )
        for line in result.stdout.splitlines():
            name, _, found = (part.strip() for part in line.partition("=>"))
            if found.startswith("/") and not found.startswith(str(bundle)):
                outside.add(found.split()[0])
            elif found == "not found" and name not in known and name not in OPTIONAL_LIBRARIES:
                unknown.setdefault(name, set()).add(library.name)
    for name, users in sorted(unknown.items()):
        example = sorted(users)[0]
        say(f"warning: {name} not found (needed by {len(users)}, e.g. {example}): not in Depends")
    packages: set[str] = set()
    for path in sorted(outside):
        for candidate in (path, os.path.realpath(path)):
            result = subprocess.run(
                ["dpkg", "-S", candidate], capture_output=True, text=True, check=False
            )
            if result.returncode == 0:
                packages.add(result.stdout.split(":")[0].strip())
                break
        else:
            say(f"warning: no package owns {path}")
    packages.discard("libc6")
    packages.update(known.values())
    return [f"libc6 (>= {MIN_GLIBC})", *sorted(packages)]


def build(*, fast: bool = False) -> Path:
    if not (BUNDLE / "sidelight-cli").is_file():
        sys.exit(f"[deb] no bundle in {BUNDLE}: run packaging/build.py first")
    tools_missing = shutil.which("dpkg-deb") is None or shutil.which("dpkg-architecture") is None
    if tools_missing and not dev.apt_install(["dpkg-dev"], say):
        sys.exit("[deb] needs dpkg-dev: apt-get install -y dpkg-dev")
    shutil.rmtree(STAGING, ignore_errors=True)
    root = STAGING / "root"
    opt = root / PREFIX.lstrip("/")
    say(f"staging {BUNDLE.relative_to(ROOT)} as {PREFIX}")
    shutil.copytree(BUNDLE, opt, symlinks=True)
    wrapper = root / "usr" / "bin" / "sidelight"
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text(WRAPPER)
    wrapper.chmod(0o755)
    applications = root / "usr" / "share" / "applications"
    applications.mkdir(parents=True)
    (applications / "sidelight.desktop").write_text(DESKTOP_ENTRY)
    icons = root / "usr" / "share" / "icons" / "hicolor" / "scalable" / "apps"
    icons.mkdir(parents=True)
    shutil.copy(ROOT / "resources" / "icons" / "sidelight.svg", icons / "sidelight.svg")
    doc = root / "usr" / "share" / "doc" / PACKAGE
    doc.mkdir(parents=True)
    (doc / "copyright").write_text(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
        "Upstream-Name: Sidelight\n\nFiles: *\nLicense: Apache-2.0\n"
        " On Debian systems, the full text is in /usr/share/common-licenses/Apache-2.0.\n"
    )
    for path in root.rglob("*"):  # dpkg-deb wants sane permissions, whatever the umask
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644)
    depends = system_depends(BUNDLE)
    size_kb = sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) // 1024
    control = root / "DEBIAN" / "control"
    control.parent.mkdir()
    control.write_text(
        f"Package: {PACKAGE}\n"
        f"Version: {dev.version()}\n"
        f"Architecture: {architecture()}\n"
        "Maintainer: Sidelight developers <sidelight@users.noreply.github.com>\n"
        f"Installed-Size: {size_kb}\n"
        f"Depends: {', '.join(depends)}\n"
        "Suggests: intel-opencl-icd, intel-level-zero-npu\n"
        "Section: devel\n"
        "Priority: optional\n"
        "Homepage: https://github.com/sidelight/sidelight\n"
        "Description: local LLM endpoint for Intel laptops (tray app)\n"
        " Sidelight serves local language models on Intel CPUs, integrated GPUs and\n"
        " NPUs through OpenVINO GenAI with OpenAI- and Ollama-compatible APIs on\n"
        " 127.0.0.1, from a tray app with a small chat window.\n"
    )
    target = deb_path()
    say(f"dpkg-deb --build -> {target.relative_to(ROOT)} (Depends: {', '.join(depends)})")
    subprocess.run(
        [
            *("dpkg-deb", "--root-owner-group", *(("-Zzstd", "-z3") if fast else ("-Zxz", "-z6"))),
            *("--build", str(root), str(target)),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    shutil.rmtree(STAGING)
    say(f"built {target.name}: {target.stat().st_size / 1e6:.0f} MB")
    return target


def _installed() -> bool:
    result = subprocess.run(
        ["dpkg-query", "-W", "-f=${db:Status-Status}", PACKAGE],
        capture_output=True,
        text=True,
        check=False,
    )
    return result.returncode == 0 and result.stdout.strip() not in {"", "not-installed"}


def check(package: Path) -> None:
    """Install, serve and chat through the installed command, purge, and look for leftovers.

    What the package depended on stays installed after the purge, as on a user's machine.
    """
    if os.geteuid() != 0:
        sys.exit("[deb] check installs a package: run it as root")
    if _installed():
        sys.exit(f"[deb] {PACKAGE} is already installed here; not touching it")
    listing = subprocess.run(
        ["dpkg-deb", "--fsys-tarfile", str(package)], capture_output=True, check=True
    ).stdout
    with tempfile.TemporaryFile() as tar:
        tar.write(listing)
        tar.seek(0)
        names = subprocess.run(
            ["tar", "-t"], stdin=tar, capture_output=True, text=True, check=True
        ).stdout.split()
    owned = [Path("/") / n.lstrip("./") for n in names if not n.endswith("/")]
    # As the README installs it: apt-get also installs what it depends on, which proves the
    # Depends names exist in the archive; dpkg -i (no apt) needs them present already.
    if not dev.apt_install([str(package)], say, f"apt-get install {package.name}"):
        say(f"dpkg -i {package.name}")
        subprocess.run(["dpkg", "-i", str(package)], check=True, stdout=subprocess.DEVNULL)
    try:
        desktop = Path("/usr/share/applications/sidelight.desktop")
        if not desktop.is_file() or not Path(PREFIX, "sidelight").is_file():
            raise smoke.SmokeError("the package did not install its files")
        smoke.headless(["/usr/bin/sidelight"], also=_curl_chat if shutil.which("curl") else None)
    finally:
        say(f"dpkg -P {PACKAGE}")
        subprocess.run(["dpkg", "-P", PACKAGE], check=True, stdout=subprocess.DEVNULL)
    left = [str(p) for p in [*owned, Path(PREFIX)] if p.exists() and not _shared_dir(p)]
    if _installed() or left:
        raise smoke.SmokeError(f"uninstalling left {left[:10] or 'the package registered'}")
    say(f"dpkg -P removed all {len(owned)} files; nothing left in {PREFIX} or /usr")


def _shared_dir(path: Path) -> bool:
    """Folders such as /usr/share/applications belong to everyone and stay."""
    return path.is_dir() and not str(path).startswith(PREFIX)


def _curl_chat(port: int) -> None:
    body = json.dumps(
        {"model": "sidelight-demo", "messages": [{"role": "user", "content": "Hello"}]}
    )
    result = subprocess.run(
        [
            *("curl", "-sS", "--fail", f"http://127.0.0.1:{port}/v1/chat/completions"),
            *("-H", "content-type: application/json", "-d", body),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    reply = json.loads(result.stdout or "{}")
    content = reply.get("choices", [{}])[0].get("message", {}).get("content")
    if content != smoke.hello_reply():
        raise smoke.SmokeError(f"curl got {result.stdout[:300]!r} {result.stderr[:300]}")
    say(f"curl: {content!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["build", "check"])
    parser.add_argument("--fast", action="store_true", help="zstd instead of xz (build)")
    parser.add_argument("--deb", type=Path, help="the package to check (default: the built one)")
    args = parser.parse_args()
    if args.command == "build":
        build(fast=args.fast)
        return 0
    try:
        check((args.deb or deb_path()).resolve())
    except smoke.SmokeError as exc:
        say(f"FAILED: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
