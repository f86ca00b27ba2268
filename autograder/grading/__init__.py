"""One grading run (nbgrader's passes over a batch), and the ``grade`` command."""
