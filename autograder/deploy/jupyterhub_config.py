"""JupyterHub's configuration for the course's hub (``python -m autograder hub start`` runs JupyterHub with it).

Everything that varies (addresses, accounts, folders, limits) is read from the settings file that ``hub start``
writes in the hub's state folder (:mod:`autograder.deploy.hub`), named by ``PYTORCH_TENSORS_HUB_SETTINGS``.
"""

import json
import os

settings = json.loads(open(os.environ["PYTORCH_TENSORS_HUB_SETTINGS"], encoding="utf-8").read())
state = settings["state"]
c = get_config()  # noqa: F821 (provided by JupyterHub when it loads this file)

c.JupyterHub.ip = settings["ip"]
c.JupyterHub.port = settings["port"]
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = settings["hub_port"]
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{settings['proxy_api_port']}"
c.ConfigurableHTTPProxy.command = [settings["proxy"]]
c.ConfigurableHTTPProxy.pid_file = os.path.join(state, "proxy.pid")
c.JupyterHub.pid_file = os.path.join(state, "jupyterhub.pid")
c.JupyterHub.db_url = f"sqlite:///{os.path.join(state, 'jupyterhub.sqlite')}"
c.JupyterHub.cookie_secret_file = os.path.join(state, "jupyterhub_cookie_secret")
c.JupyterHub.cleanup_servers = True
c.JupyterHub.cleanup_proxy = True

# Real Unix accounts: PAM checks the password, each server runs as its user.
c.JupyterHub.authenticator_class = "pam"
c.Authenticator.allowed_users = set(settings["instructors"] + settings["graders"] + settings["students"])
c.Authenticator.admin_users = set(settings["instructors"])
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.default_url = "/lab"
c.Spawner.http_timeout = 120
c.Spawner.start_timeout = 120

# Each user's server, and every process it starts (kernels, terminals), runs under the limits prlimit sets before
# the server starts: address space per process, processes and threads per user.
c.Spawner.cmd = [
    "/usr/bin/prlimit",
    f"--as={settings['memory_limit']}",
    f"--nproc={settings['process_limit']}",
    "--",
    settings["python"],
    "-m",
    "jupyterhub.singleuser",
]


def _role(spawner):
    name = spawner.user.name
    if name in settings["instructors"]:
        return "instructor"
    return "grader" if name in settings["graders"] else "student"


# Per role, a Jupyter configuration folder (nbgrader's exchange and course; the server's root folder), and the mark
# by which `hub stop` finds every process the hub started.
c.Spawner.environment = {
    "JUPYTER_CONFIG_PATH": lambda spawner: os.path.join(state, "jupyter", _role(spawner)),
    "PYTORCH_TENSORS_HUB": state,
    "PATH": os.environ["PATH"],
    "PYTHONPATH": settings["package_root"],
}

# Formgrader for the instructors and graders: a hub-managed service named as the course (nbgrader's Course List links
# to /services/<course_id>/), a Jupyter server run as the first instructor in the course directory. Open its pages
# top-level (/services/<course_id>/formgrader/): JupyterHub's servers forbid being framed, so the Lab tab is blank.
staff = settings["instructors"] + settings["graders"]
course_id = settings["course_id"]
c.JupyterHub.services = [
    {
        "name": course_id,
        "url": f"http://127.0.0.1:{settings['formgrader_port']}",
        "user": settings["instructors"][0],
        "cwd": settings["course_root"],
        "command": [settings["python"], "-m", "jupyterhub.singleuser"],
        "environment": {
            "JUPYTER_CONFIG_PATH": os.path.join(state, "jupyter", "instructor"),
            "JUPYTERHUB_DEFAULT_URL": "/formgrader",
            "PYTORCH_TENSORS_HUB": state,
            "PATH": os.environ["PATH"],
            "PYTHONPATH": settings["package_root"],
        },
        "oauth_no_confirm": True,
    }
]
c.JupyterHub.load_roles = [
    {
        "name": "course-staff",
        "users": staff,
        "scopes": [f"access:services!service={course_id}", "list:services", f"read:services!service={course_id}"],
    }
]
