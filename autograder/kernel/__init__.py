"""What runs in or around the student's kernel: the check helpers (``checks.py``, copied beside every release
notebook), the sandbox and its fork server, and the static reading of the course's protected names."""
