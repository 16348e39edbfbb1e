"""A module that starts a thread when imported: the zygote must not fork after importing it."""

import os
import threading

IMPORTED_IN = os.getpid()
_stop = threading.Event()
threading.Thread(target=_stop.wait, name="zygote-test-thread", daemon=True).start()
