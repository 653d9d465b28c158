"""A stand-in for the system browser, for BROWSER=...: it returns at once, as a browser that
opens a tab does, and in a child process follows the address to the loopback redirect."""

from __future__ import annotations

import os
import sys

import httpx

if os.fork() == 0:
    httpx.get(sys.argv[1], follow_redirects=True, timeout=30)
    os._exit(0)
