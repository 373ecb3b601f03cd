#!/usr/bin/env python3
"""Time the page's first draw (issue #45) in headless Chromium, in real time.

Usage: benches/page_first_draw.py URL [RUNS]

Chromium is driven over the DevTools protocol on a pipe (--remote-debugging-pipe; no virtual
time, which would not count the page's own work). For each run, a fresh profile: navigate to
URL, then read `document.body.dataset.firstDrawMs` (set by the page once its first overview is
drawn: the cluster, every job's row, the timeline and, with #job=<id>, the job's charts) until it
is there. Prints JSON: per run the page's own figure (ms from navigation start, by
performance.now()) and the wall clock from Page.navigate to the read, and the rows drawn.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    sys.exit("no chromium (apt-get install -y chromium)")


class Browser:
    def __init__(self, profile):
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()
        args = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--remote-debugging-pipe", f"--user-data-dir={profile}", "--window-size=1400,1000", "about:blank"]
        # The protocol's pipe is fds 3 (to Chromium) and 4 (from it): dup2 makes them inheritable,
        # every other descriptor of ours is closed on exec.
        def plumb():
            a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)  # neither is 3 or 4 now
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(args, close_fds=False, stderr=subprocess.DEVNULL, preexec_fn=plumb)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.buffer, self.next_id = b"", 0

    def call(self, method, params=None, session=None):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_chrome, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self.buffer:
                chunk = os.read(self.from_chrome, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed the pipe")
                self.buffer += chunk
            raw, self.buffer = self.buffer.split(b"\0", 1)
            answer = json.loads(raw)
            if answer.get("id") == self.next_id:
                if "error" in answer:
                    raise RuntimeError(answer["error"])
                return answer["result"]

    def close(self):
        self.proc.kill()
        self.proc.wait()


def one_run(url):
    profile = tempfile.mkdtemp(prefix="slaq-page-")
    browser = Browser(profile)
    try:
        target = next(t for t in browser.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
        session = browser.call("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})["sessionId"]
        started = time.monotonic()
        browser.call("Page.navigate", {"url": url}, session)
        probe = "[document.body && document.body.dataset.firstDrawMs, document.querySelectorAll('tr[data-job]').length]"
        while time.monotonic() - started < 30:
            value = browser.call("Runtime.evaluate", {"expression": probe, "returnByValue": True}, session)
            first, rows = value["result"].get("value") or [None, 0]
            if first is not None:
                return {"page_first_draw_ms": float(first), "wall_ms": (time.monotonic() - started) * 1e3, "rows": rows}
            time.sleep(0.01)
        return {"page_first_draw_ms": None, "wall_ms": None, "rows": 0}
    finally:
        browser.close()
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    url, runs = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3
    print(json.dumps({"url": url, "runs": [one_run(url) for _ in range(runs)]}))
