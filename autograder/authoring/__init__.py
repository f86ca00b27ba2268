"""The authors' commands: ``build``, ``check``, ``validate``, the sample submissions and the mutants."""
