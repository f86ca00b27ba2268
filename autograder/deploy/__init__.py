"""Deployment: the course on a multi-user JupyterHub with nbgrader's exchange (``hub``)."""
