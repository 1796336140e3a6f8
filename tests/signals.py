"""Send a real signal to the test's own process, once the code under test handles it."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable


def signal_when_handled(
    signum: signal.Signals, ready: Callable[[], bool] = lambda: True, *, timeout: float = 120
) -> threading.Thread:
    """Start a thread that sends ``signum`` to this process once a handler of it is
    installed (the default action would end the test run) and ``ready()`` is true.

    Join the thread after the call that should receive the signal.
    """

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if signal.getsignal(signum) not in (signal.SIG_DFL, None) and ready():
                os.kill(os.getpid(), signum)
                return
            time.sleep(0.005)
        raise TimeoutError(f"no handler of {signum.name} came, or ready() stayed false")

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread
