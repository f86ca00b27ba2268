"""nbgrader configuration of the PyTorch Tensors course.

This folder is the nbgrader course directory: nbgrader's commands run here
(``python -m autograder`` runs them for you) and keep their state here:
submitted/, autograded/, feedback/ and gradebook.db (all git-ignored).
"""

c = get_config()  # noqa: F821 (provided by nbgrader when it loads this file)

c.CourseDirectory.course_id = "pytorch-tensors"

# Notebooks and helpers of an assignment; editor droppings never travel.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".DS_Store"]

# Grading: a cell may run for at most a minute; kernels are killed at once
# when a notebook is done (a graceful shutdown after `import torch` costs
# about 0.6 s per notebook and changes nothing in the results).
c.Execute.timeout = 60
c.Execute.shutdown_kernel = "immediate"

# Release notebooks: what replaces a solution.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
