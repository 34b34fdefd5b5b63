"""Sidelight's headless core: engine worker, server, model store (never imports Qt)."""

from engine.telemetry import disable_openvino_telemetry

# First, before any module here imports OpenVINO, in every process (see engine.telemetry).
disable_openvino_telemetry()
