"""A virtual microphone and speaker for the dictation and *Read aloud* tests: a private
PulseAudio server with a null sink (``feed``) and a virtual source on its monitor (``vmic``),
the default input and output.

What a test plays into ``feed`` (:meth:`VirtualAudio.play`, ``paplay``) is what the app's
microphone hears; what the app plays goes to ``feed`` too, and :meth:`VirtualAudio.record`
(``parec`` on ``feed.monitor``) hears it. Qt lists only real sources as inputs, not monitors,
so the virtual source stands in for a microphone.

This is real audio through the system's sound server, not a mock; it needs ``pulseaudio``
and ``pulseaudio-utils`` (``packaging/dev.py test`` installs them on Linux).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

TOOLS = ("pulseaudio", "pactl", "paplay", "parec")


def missing_tools() -> list[str]:
    return [tool for tool in TOOLS if shutil.which(tool) is None]


class VirtualAudio:
    """The running server: ``play`` a file into the microphone, ``record`` the speakers."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def play(self, clip: Path) -> subprocess.Popen[bytes]:
        """Start playing ``clip`` into the virtual microphone (wait for the process to end
        with the event loop running: Qt reads the microphone on it)."""
        return subprocess.Popen(["paplay", "-d", "feed", str(clip)], env=self.env)

    @contextmanager
    def record(self) -> Iterator[list[np.ndarray]]:
        """What reaches the speakers while the block runs, as 16 kHz mono float samples
        (in the yielded list once the block ends)."""
        process = subprocess.Popen(
            [
                "parec",
                "-d",
                "feed.monitor",
                "--raw",
                "--format=s16le",
                "--rate=16000",
                "--channels=1",
            ],
            env=self.env,
            stdout=subprocess.PIPE,
        )
        heard: list[np.ndarray] = []
        try:
            yield heard
        finally:
            process.terminate()
            data, _ = process.communicate(timeout=10)
            heard.append(
                np.frombuffer(data[: len(data) // 2 * 2], "<i2").astype(np.float32) / 32768
            )


@contextmanager
def virtual_audio(folder: Path) -> Iterator[VirtualAudio]:
    """Start a private PulseAudio server under ``folder`` and point this process at it."""
    runtime = folder / "runtime"
    runtime.mkdir(mode=0o700, parents=True)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "HOME": str(folder)}
    env.pop("PULSE_SERVER", None)
    log = (folder / "pulseaudio.log").open("wb")
    server = subprocess.Popen(
        [
            "pulseaudio",
            "--daemonize=no",
            "--exit-idle-time=-1",
            "-n",
            "--use-pid-file=no",
            "--load=module-native-protocol-unix",
            "--load=module-null-sink sink_name=feed",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    try:
        deadline = time.monotonic() + 20
        while (
            subprocess.run(["pactl", "info"], check=False, env=env, capture_output=True).returncode
            != 0
        ):
            if server.poll() is not None or time.monotonic() > deadline:
                error = (folder / "pulseaudio.log").read_text(errors="replace")
                raise RuntimeError(f"pulseaudio did not start: {error[-2000:]}")
            time.sleep(0.1)
        for command in (
            ["load-module", "module-virtual-source", "source_name=vmic", "master=feed.monitor"],
            ["set-default-source", "vmic"],
            ["set-default-sink", "feed"],
        ):
            subprocess.run(["pactl", *command], env=env, check=True, capture_output=True)
        saved = os.environ.get("PULSE_SERVER")
        # Qt's PulseAudio backend (libpulse) connects to the server this names.
        os.environ["PULSE_SERVER"] = f"unix:{runtime / 'pulse' / 'native'}"
        try:
            yield VirtualAudio(env)
        finally:
            if saved is None:
                os.environ.pop("PULSE_SERVER", None)
            else:
                os.environ["PULSE_SERVER"] = saved
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
