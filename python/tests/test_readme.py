"""The README's Python path, run as it is written.

Getting started tells a Debian user to install python3-pika and to run
the example worker with `PYTHONPATH=python /usr/bin/python3 ...`, without
PyPI. This test reads those lines from README.md and runs them: the
package it names is the one that gives /usr/bin/python3 its pika, and the
worker line, run by a shell from the repository's root, serves a job of a
real server.
"""

import os
import re
import shlex
import signal
import subprocess
import tempfile
import time
import unittest

from tests.harness import AMQP_URL, REPO, TIERS, WarrenTestCase

MARKER = "<!-- python/tests/test_readme.py runs these two lines as they are written -->"


def readme_lines():
    """The commands of the fenced block after MARKER, without comments."""
    with open(os.path.join(REPO, "README.md")) as f:
        text = f.read()
    at = text.index(MARKER)
    block = re.search(r"```sh\n(.*?)```", text[at:], re.S).group(1)
    lines = []
    for line in block.splitlines():
        line = re.sub(r"\s+#.*$", "", line.strip())
        if line:
            lines.append(line)
    return lines


class ReadmePythonPath(WarrenTestCase):
    def test_the_lines_are_the_two_expected(self):
        install, run = readme_lines()
        self.assertRegex(install, r"apt-get install .*\bpython3-pika\b")
        self.assertTrue(run.startswith("PYTHONPATH=python /usr/bin/python3 "), run)
        self.assertTrue(run.endswith(" &"), run)

    def test_the_package_gives_the_system_python_its_pika(self):
        install, _ = readme_lines()
        package = [w for w in shlex.split(install) if w.startswith("python3-")][0]
        where = subprocess.run(["/usr/bin/python3", "-c", "import pika; print(pika.__file__)"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=True).stdout.decode().strip()
        owner = subprocess.run(["dpkg", "-S", where], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.assertEqual(owner.returncode, 0, owner.stdout)
        self.assertEqual(owner.stdout.decode().split(":")[0], package,
                         "/usr/bin/python3's pika (%s) comes from another package" % where)

    def test_the_worker_line_serves_a_job(self):
        _, run = readme_lines()
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the line's own, nothing inherited
        env.update({"WARREN_AMQP_URL": AMQP_URL, "WARREN_PREFIX": self.prefix, "WARREN_RETRY_TIERS": TIERS})
        log = tempfile.NamedTemporaryFile(prefix="warren-readme-worker-", suffix=".log")
        self.addCleanup(log.close)
        # The shell runs the line as written, "&" included, says the
        # worker's pid, and exits with the worker's status once it ends
        # (stopped below with SIGTERM, as a user would; its process group
        # is killed if the test fails first).
        proc = subprocess.Popen(["/bin/sh", "-c", run + "\necho worker pid $!\nwait $!"], cwd=REPO, env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self.wait_consuming(proc, log.name)
            job_id = self.server.submit({"type": "wordcount", "reduce": "merge",
                                         "tasks": [{"text": "the cat"}, {"text": "the hat"}]})
            job = self.server.wait_closed(job_id, timeout=60)
            self.assertEqual(job["state"], "completed", job)
            self.assertEqual(self.server.result(job_id), {"cat": 1, "hat": 1, "the": 2})
            pid = int(re.search(r"^worker pid (\d+)$", read(log.name), re.M).group(1))
            os.kill(pid, signal.SIGTERM)
            self.assertEqual(proc.wait(30), 0, read(log.name))
            self.assertIn("warren worker: stopped", read(log.name))
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def wait_consuming(self, proc, log):
        """Wait for the worker's "consuming" line (another process: no
        signal to wait on but its log); fail with its log if it exits."""
        deadline = time.monotonic() + 30
        while "warren worker: consuming" not in read(log):
            if proc.poll() is not None:
                self.fail("the README's worker line exited %d:\n%s" % (proc.returncode, read(log)))
            if time.monotonic() > deadline:
                self.fail("the README's worker line did not start consuming in 30 s:\n" + read(log))
            time.sleep(0.05)


def read(path):
    with open(path, "rb") as f:
        return f.read().decode(errors="replace")


if __name__ == "__main__":
    unittest.main()
