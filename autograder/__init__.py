"""The PyTorch Tensors course's autograder: build, check and grade with nbgrader (see README)."""
